/* mv_opts: the parse of a command line (and the environment) from one option table: the
 * getopt_long options, exact names, each value through the project's parsers into its
 * destination, one error format. Sits above mv_opts_text.c (--help, --help-markdown). */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "mv_opts.h"
#include "mv_util.h"

#define O_HELP_MD  1 /* getopt values: 1 = --help-markdown, 'h' = --help, 256 + row index */
#define O_ROW_BASE 256

/* "PROG: SRC[ VALUE]: why", then the spec's hint. */
static void refuse(const mv_opts_spec *spec, const char *src, const char *val, const char *why)
{
    if (spec->value_in_errors)
        fprintf(stderr, "%s: %s %s: %s\n", spec->prog, src, val ? val : "", why);
    else
        fprintf(stderr, "%s: %s: %s\n", spec->prog, src, why);
    if (spec->hint)
        fprintf(stderr, "%s\n", spec->hint);
}

int mv_opts_status(int rc)
{
    if (rc == MV_OPTS_HELP)
        return 0;
    if (rc == MV_OPTS_BAD)
        return 2;
    return rc < 0 ? 1 : rc;
}

/* The value of row `o` (given as `src`: "--flag" or an environment variable's name) into its
 * destination. `count` counts the row's values so far. Returns 0, MV_OPTS_BAD (printed) or
 * -ENOMEM (printed). */
static int apply(const mv_opts_spec *spec, const mv_opts_opt *o, const char *src, const char *val,
                 unsigned *count)
{
    char err[MV_ERR_MAX] = "";
    int rc = 0;
    uint64_t u = 0;
    double d = 0;
    uint32_t u32 = 0;
    int idx = 0;
    if (o->max > 1 && *count >= o->max) {
        fprintf(stderr, "%s: at most %u %s\n", spec->prog, o->max, src);
        if (spec->hint)
            fprintf(stderr, "%s\n", spec->hint);
        return MV_OPTS_BAD;
    }
    switch (o->kind) {
    case MV_OPTS_U64:
        rc = mv_util_parse_u64(val, o->lo, o->hi, &u, err, sizeof err);
        break;
    case MV_OPTS_SIZE:
        rc = mv_util_parse_size(val, o->lo, o->hi, &u, err, sizeof err);
        break;
    case MV_OPTS_NUMBER:
        rc = mv_util_parse_number(val, o->dlo, o->dhi, &d, err, sizeof err);
        break;
    case MV_OPTS_LISTEN: {
        char host[256];
        uint16_t port = 0;
        rc = mv_util_parse_listen(val, (unsigned)o->lo, host, sizeof host, &port, err, sizeof err);
        break;
    }
    case MV_OPTS_MODE:
        rc = mv_util_parse_mode(val, &u32, err, sizeof err);
        break;
    case MV_OPTS_GROUP:
        rc = mv_util_parse_group(val, &u32, err, sizeof err);
        break;
    case MV_OPTS_ENUM: {
        size_t n = 0;
        while (o->words[n] && strcmp(o->words[n], val) != 0)
            n++;
        if (!o->words[n]) { /* "'x' is not a, b or c" */
            size_t at = 0;
            mv_util_fmt(err, sizeof err, "'%s' is not ", val);
            at = strlen(err);
            for (size_t i = 0; o->words[i] && at < sizeof err; i++) {
                const char *sep = i == 0 ? "" : o->words[i + 1] ? ", " : " or ";
                snprintf(err + at, sizeof err - at, "%s%s", sep, o->words[i]);
                at = strlen(err);
            }
            rc = -EINVAL;
        }
        idx = (int)n;
        break;
    }
    default:
        break;
    }
    if (rc < 0) {
        refuse(spec, src, val, err);
        return MV_OPTS_BAD;
    }
    (*count)++;
    if (o->fn) {
        rc = o->fn(o->arg, val, err, sizeof err);
        if (rc == -ENOMEM) {
            fprintf(stderr, "%s: out of memory\n", spec->prog);
            return -ENOMEM;
        }
        if (rc < 0) {
            if (err[0])
                refuse(spec, src, val, err);
            return MV_OPTS_BAD;
        }
        return 0;
    }
    if (!o->dest)
        return 0;
    switch (o->kind) {
    case MV_OPTS_FLAG:
        *(int *)o->dest = 1;
        break;
    case MV_OPTS_STRING:
        if (o->max > 1) {
            mv_opts_list *l = o->dest;
            l->items[l->n++] = val;
        } else {
            *(const char **)o->dest = val;
        }
        break;
    case MV_OPTS_LISTEN:
        *(const char **)o->dest = val;
        break;
    case MV_OPTS_U64:
    case MV_OPTS_SIZE:
        *(uint64_t *)o->dest = u;
        break;
    case MV_OPTS_NUMBER:
        *(double *)o->dest = d;
        break;
    case MV_OPTS_MODE:
    case MV_OPTS_GROUP:
        *(uint32_t *)o->dest = u32;
        break;
    case MV_OPTS_ENUM:
        *(int *)o->dest = idx;
        break;
    default:
        break;
    }
    return 0;
}

/* --help, -h or --help-markdown among the options (not as a flag's value): 'h', O_HELP_MD or 0. */
static int wants_help(const mv_opts_spec *spec, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            return 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 'h';
        if (strcmp(a, "--help-markdown") == 0)
            return O_HELP_MD;
        if (a[0] == '-' && a[1] && a[1] != '-' && !a[2]) { /* "-a": its value follows */
            for (const mv_opts_opt *o = spec->opts; o->kind != MV_OPTS_END; o++)
                if (o->short_name == a[1] && o->kind != MV_OPTS_FLAG) {
                    i++;
                    break;
                }
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || strchr(a, '='))
            continue;
        for (const mv_opts_opt *o = spec->opts; o->kind != MV_OPTS_END; o++)
            if (o->kind != MV_OPTS_SECTION && o->kind != MV_OPTS_FLAG &&
                strcmp(o->name, a + 2) == 0) {
                i++; /* its value is the next word, whatever it looks like */
                break;
            }
    }
    return 0;
}

int mv_opts_parse(const mv_opts_spec *spec, int argc, char **argv, int *first_arg)
{
    size_t n = 0;
    while (spec->opts[n].kind != MV_OPTS_END)
        n++;
    int help = wants_help(spec, argc, argv);
    if (help == 'h') {
        mv_opts_usage(spec, stdout);
        return MV_OPTS_HELP;
    }
    if (help == O_HELP_MD) {
        mv_opts_markdown(spec, stdout);
        return MV_OPTS_HELP;
    }
    struct option *lo = calloc(n + 3, sizeof *lo);
    unsigned *count = calloc(n + 1, sizeof *count);
    int rc = 0;
    if (!lo || !count) {
        fprintf(stderr, "%s: out of memory\n", spec->prog);
        rc = -ENOMEM;
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const mv_opts_opt *o = &spec->opts[i];
        if (o->kind == MV_OPTS_SECTION)
            continue;
        lo[k++] =
            (struct option){o->name, o->kind == MV_OPTS_FLAG ? no_argument : required_argument,
                            NULL, O_ROW_BASE + (int)i};
    }
    lo[k++] = (struct option){"help", no_argument, NULL, 'h'};
    lo[k++] = (struct option){"help-markdown", no_argument, NULL, O_HELP_MD};
    /* "h" and each row's one-letter alias, with ':' when it takes a value. */
    char shorts[2 * 64 + 2] = "h";
    size_t ns = 1;
    for (size_t i = 0; i < n; i++) {
        const mv_opts_opt *o = &spec->opts[i];
        if (!o->short_name || ns + 3 > sizeof shorts)
            continue;
        shorts[ns++] = o->short_name;
        if (o->kind != MV_OPTS_FLAG)
            shorts[ns++] = ':';
    }
    shorts[ns] = '\0';

    /* The environment first, so that a flag given on the command line wins. */
    for (size_t i = 0; i < n && rc == 0; i++) {
        const mv_opts_opt *o = &spec->opts[i];
        const char *v = o->env ? getenv(o->env) : NULL;
        if (!v || !v[0])
            continue;
        if (o->kind == MV_OPTS_FLAG && strcmp(v, "1") != 0 && strcmp(v, "true") != 0)
            continue; /* a flag is set by 1 or true, left alone by anything else */
        rc = apply(spec, o, o->env, v, &count[i]);
    }
    if (rc)
        goto out;
    if (mv_util_opts_exact(spec->prog, argc, argv, lo) < 0) {
        rc = MV_OPTS_BAD;
        goto out;
    }
    opterr = 0;
    optind = 0; /* 0: glibc starts afresh, so that a process may parse more than once */
    int opt;
    while (rc == 0 && (opt = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        for (size_t i = 0; opt != 'h' && opt != '?' && opt < O_ROW_BASE && i < n; i++)
            if (spec->opts[i].short_name && spec->opts[i].short_name == opt)
                opt = O_ROW_BASE + (int)i; /* -a: as --agent */
        if (opt >= O_ROW_BASE && opt < O_ROW_BASE + (int)n) {
            const mv_opts_opt *o = &spec->opts[opt - O_ROW_BASE];
            char src[128];
            snprintf(src, sizeof src, "--%s", o->name);
            rc = apply(spec, o, src, optarg, &count[opt - O_ROW_BASE]);
        } else if (opt == 'h' || opt == O_HELP_MD) { /* after "--help" was a value */
            if (opt == 'h')
                mv_opts_usage(spec, stdout);
            else
                mv_opts_markdown(spec, stdout);
            rc = MV_OPTS_HELP;
        } else {
            const char *a = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
            fprintf(stderr, "%s: option needs a value or is unknown: %s\n", spec->prog, a);
            mv_opts_usage(spec, stderr);
            rc = MV_OPTS_BAD;
        }
    }
    if (rc == 0 && first_arg)
        *first_arg = optind;
out:
    free(count);
    free(lo);
    return rc;
}
