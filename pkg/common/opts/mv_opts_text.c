/* mv_opts_text: what a table says in words: the defaults, the --help text with its wrapping,
 * and the Markdown tables of the docs. The base of the module: it calls nothing above it. */
#include <inttypes.h>
#include <string.h>

#include "mv_opts.h"

#define WIDTH    80 /* no line of --help goes past this column (but for one long word) */
#define HELP_COL 28 /* where the help text starts */

static const char *size_text(uint64_t v, char *buf, size_t len)
{
    static const char *const suffix[] = {"Gi", "Mi", "Ki"};
    static const unsigned shift[] = {30, 20, 10};
    for (size_t i = 0; i < 3 && v; i++)
        if (v % (1ull << shift[i]) == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", v >> shift[i], suffix[i]);
            return buf;
        }
    snprintf(buf, len, "%" PRIu64, v);
    return buf;
}

const char *mv_opts_default_text(const mv_opts_opt *o, char *buf, size_t len)
{
    if (len)
        buf[0] = '\0';
    if (o->def) {
        snprintf(buf, len, "%s", o->def);
        return buf;
    }
    if (!o->dest || o->max > 1)
        return buf;
    switch (o->kind) {
    case MV_OPTS_STRING:
    case MV_OPTS_LISTEN:
        if (*(const char *const *)o->dest)
            snprintf(buf, len, "%s", *(const char *const *)o->dest);
        break;
    case MV_OPTS_U64:
        snprintf(buf, len, "%" PRIu64, *(const uint64_t *)o->dest);
        break;
    case MV_OPTS_SIZE:
        size_text(*(const uint64_t *)o->dest, buf, len);
        break;
    case MV_OPTS_NUMBER:
        snprintf(buf, len, "%g", *(const double *)o->dest);
        break;
    case MV_OPTS_ENUM: {
        int i = *(const int *)o->dest;
        size_t n = 0;
        while (o->words && o->words[n])
            n++;
        if (i >= 0 && (size_t)i < n)
            snprintf(buf, len, "%s", o->words[i]);
        break;
    }
    case MV_OPTS_MODE:
        snprintf(buf, len, "%04" PRIo32, *(const uint32_t *)o->dest);
        break;
    case MV_OPTS_GROUP:
        snprintf(buf, len, "%" PRIu32, *(const uint32_t *)o->dest);
        break;
    default:
        break;
    }
    return buf;
}

/* The accepted range of a number or size ("1..60000", "at least 4Ki"), "" when any value of
 * its kind is taken. */
static const char *range_text(const mv_opts_opt *o, char *buf, size_t len)
{
    char lo[32], hi[32];
    buf[0] = '\0';
    if (o->kind == MV_OPTS_U64) {
        snprintf(lo, sizeof lo, "%" PRIu64, o->lo);
        snprintf(hi, sizeof hi, "%" PRIu64, o->hi);
    } else if (o->kind == MV_OPTS_SIZE) {
        size_text(o->lo, lo, sizeof lo);
        size_text(o->hi, hi, sizeof hi);
    } else if (o->kind == MV_OPTS_NUMBER) {
        snprintf(buf, len, "%g..%g", o->dlo, o->dhi);
        return buf;
    } else {
        return buf;
    }
    if (o->hi != UINT64_MAX)
        snprintf(buf, len, "%s..%s", lo, hi);
    else if (o->lo > 0)
        snprintf(buf, len, "at least %s", lo);
    return buf;
}

/* What follows a row's help in parentheses: its range, its default (with_default), whether it
 * repeats; "" when nothing. */
static void notes(const mv_opts_opt *o, int with_default, char *buf, size_t len)
{
    char range[80], def[160], rep[48] = "";
    range_text(o, range, sizeof range);
    if (with_default)
        mv_opts_default_text(o, def, sizeof def);
    else
        def[0] = '\0';
    if (o->max > 1)
        snprintf(rep, sizeof rep, "repeatable, at most %u", o->max);
    snprintf(buf, len, "%s%s%s%s%s%s%s%s", range[0] || def[0] || rep[0] ? " (" : "", range,
             range[0] && (def[0] || rep[0]) ? "; " : "", def[0] ? "default " : "", def,
             def[0] && rep[0] ? "; " : "", rep, range[0] || def[0] || rep[0] ? ")" : "");
}

/* Writes `text` (words separated by spaces; newlines are spaces) from column `col` (the cursor
 * is there) to WIDTH, later lines indented to `indent`. */
static void wrap(FILE *f, const char *text, size_t col, size_t indent)
{
    size_t at = col;
    int first = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ' || *p == '\n')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, " \n");
        if (!first && at + 1 + n > WIDTH) {
            fprintf(f, "\n%*s", (int)indent, "");
            at = indent;
        } else if (!first) {
            fputc(' ', f);
            at++;
        }
        fprintf(f, "%.*s", (int)n, p);
        at += n;
        first = 0;
        p += n;
    }
    fputc('\n', f);
}

/* "--name META", "-n, --name META" with a one-letter alias, into buf. */
static void flag_text(const mv_opts_opt *o, char *buf, size_t len)
{
    char alias[8] = "";
    if (o->short_name)
        snprintf(alias, sizeof alias, "-%c, ", o->short_name);
    snprintf(buf, len, "%s--%s%s%s", alias, o->name, o->meta ? " " : "", o->meta ? o->meta : "");
}

void mv_opts_usage(const mv_opts_spec *spec, FILE *f)
{
    fprintf(f, "usage: %s %s\n", spec->prog, spec->synopsis ? spec->synopsis : "[options]");
    if (spec->intro)
        wrap(f, spec->intro, 0, 0);
    for (const mv_opts_opt *o = spec->opts; o->kind != MV_OPTS_END; o++) {
        if (o->kind == MV_OPTS_SECTION) {
            wrap(f, o->help, 0, 0);
            continue;
        }
        if (o->hidden)
            continue;
        char flag[128], note[320], help[2048];
        flag_text(o, flag, sizeof flag);
        notes(o, 1, note, sizeof note);
        snprintf(help, sizeof help, "%s%s", o->help ? o->help : "", note);
        fprintf(f, "  %s", flag);
        size_t at = 2 + strlen(flag);
        if (at + 2 > HELP_COL) {
            fprintf(f, "\n%*s", HELP_COL, "");
        } else {
            fprintf(f, "%*s", (int)(HELP_COL - at), "");
        }
        wrap(f, help, HELP_COL, HELP_COL);
    }
    if (spec->outro)
        wrap(f, spec->outro, 0, 0);
}

/* A table cell: '|' escaped, newlines as spaces. */
static void cell(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s == '\n' ? ' ' : *s, f);
    }
}

static void table_head(FILE *f, int keys, int envs)
{
    fprintf(f, "| Flag | Default |%s%s Description |\n", keys ? " Config key |" : "",
            envs ? " Environment |" : "");
    fprintf(f, "|---|---|%s%s---|\n", keys ? "---|" : "", envs ? "---|" : "");
}

void mv_opts_markdown(const mv_opts_spec *spec, FILE *f)
{
    int keys = 0, envs = 0, open = 0;
    for (const mv_opts_opt *o = spec->opts; o->kind != MV_OPTS_END; o++) {
        keys |= o->key != NULL;
        envs |= o->env != NULL;
    }
    for (const mv_opts_opt *o = spec->opts; o->kind != MV_OPTS_END; o++) {
        if (o->hidden)
            continue;
        if (o->kind == MV_OPTS_SECTION) {
            fprintf(f, "%s**", open ? "\n" : "");
            cell(f, o->help);
            fprintf(f, "**\n\n");
            open = 0;
            continue;
        }
        if (!open)
            table_head(f, keys, envs);
        open = 1;
        char flag[128], def[128];
        flag_text(o, flag, sizeof flag);
        mv_opts_default_text(o, def, sizeof def);
        fputs("| `", f);
        cell(f, flag);
        fputs("` | ", f);
        if (def[0]) { /* a value in code quotes, a default in words as it is */
            int code = !strchr(def, ' ');
            fputs(code ? "`" : "", f);
            cell(f, def);
            fputs(code ? "`" : "", f);
        }
        fputs(" |", f);
        if (keys) {
            fputs(o->key ? " `" : " ", f);
            cell(f, o->key);
            fputs(o->key ? "` |" : " |", f);
        }
        if (envs) {
            fputs(o->env ? " `" : " ", f);
            cell(f, o->env);
            fputs(o->env ? "` |" : " |", f);
        }
        char note[320];
        notes(o, 0, note, sizeof note);
        fputc(' ', f);
        cell(f, o->help);
        cell(f, note);
        fputs(" |\n", f);
    }
}
