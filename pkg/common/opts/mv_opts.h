/* mv_opts: one declarative option table per binary.
 *
 * A binary describes each of its flags once, in a table of mv_opts_opt rows: the name, the
 * value's metavariable, the help text, the kind of value and its range, the configuration key
 * and environment variable where the option has one, and where the parsed value goes. From that
 * table this module produces
 *   - the getopt_long options, with mv_util_opts_exact's rule (names spelled out in full),
 *   - the parse, with the parsers of pkg/common/util (mv_util_parse_*), and one error format:
 *     "PROG: --flag: <why, quoting the value>" and exit status 2,
 *   - the --help text (each help paragraph wrapped beside its flag, the default appended),
 *   - a Markdown table (--help-markdown) from which the flag tables in docs/ are generated
 *     (scripts/flag-docs.py checks that they are equal).
 *
 * A row looks like this (designated initialisers; unused fields stay zero):
 *
 *     {.name = "tick-ms", .kind = MV_OPTS_U64, .meta = "N", .lo = 1, .hi = 60000,
 *      .dest = &tick_ms, .help = "fast read interval: the tick, in ms"},
 *
 * --help and the Markdown append what the row declares: its range ("1..60000"), its default,
 * "repeatable, at most N"; help texts need not repeat them. The default shown is taken from what
 * `dest` holds when mv_opts_parse() starts (so it is the default the binary really uses), unless
 * `def` says it in words. Two files, in a stack: mv_opts_text.c (usage text and Markdown) and
 * mv_opts.c (the parse, above it). */
#ifndef MV_OPTS_H
#define MV_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MV_OPTS_END = 0, /* ends a table (a row of zeros) */
    MV_OPTS_SECTION, /* not an option: `help` is a heading in --help and the Markdown */
    MV_OPTS_FLAG,    /* no value: *(int *)dest = 1 */
    MV_OPTS_STRING,  /* *(const char **)dest = the value, as given */
    MV_OPTS_U64,     /* *(uint64_t *)dest: a whole number in [lo, hi] (mv_util_parse_u64) */
    MV_OPTS_SIZE,    /* *(uint64_t *)dest: bytes or Ki/Mi/Gi in [lo, hi] (mv_util_parse_size) */
    MV_OPTS_NUMBER,  /* *(double *)dest: a decimal number in [dlo, dhi] (mv_util_parse_number) */
    MV_OPTS_LISTEN,  /* *(const char **)dest, checked by mv_util_parse_listen with flags `lo` */
    MV_OPTS_ENUM,    /* *(int *)dest = the index of the value in `words` (NULL-terminated) */
    MV_OPTS_MODE,    /* *(uint32_t *)dest: octal permission bits (mv_util_parse_mode) */
    MV_OPTS_GROUP,   /* *(uint32_t *)dest: a group name or gid (mv_util_parse_group) */
} mv_opts_kind;

/* A value handed to `fn` instead of being stored in `dest` (after the kind's own check: for
 * STRING and FLAG nothing is checked; FLAG passes NULL). Returns 0; -ENOMEM (the parse stops
 * with "PROG: out of memory", exit status 1); or another negative value: refused, with
 * "PROG: --flag: <err>" printed when the callback wrote `err`, nothing when it left it empty
 * (it printed its own message). */
typedef int (*mv_opts_fn)(void *arg, const char *value, char *err, size_t errlen);

/* Where a repeatable STRING option (max > 1) collects its values, in the order given. `items`
 * has room for `max` values; a value past them is refused ("PROG: at most MAX --flag"). */
typedef struct {
    const char **items;
    size_t n;
} mv_opts_list;

typedef struct {
    const char *name;         /* the long option without dashes, "tick-ms" */
    char short_name;          /* a one-letter alias ('a' for -a), or 0 (most flags have none) */
    mv_opts_kind kind;        /* what the value is and where it goes */
    const char *meta;         /* the value's metavariable in --help, "N", "SIZE"; NULL for FLAG */
    const char *help;         /* one paragraph, wrapped by the module; SECTION: the heading */
    const char *def;          /* the default in words; NULL: from *dest at parse start; "": none */
    const char *key;          /* the configuration file key this flag matches, or NULL */
    const char *env;          /* MICROVIEW_<FLAG>, read before argv (flags win), or NULL */
    void *dest;               /* where the value goes (see the kinds); NULL with `fn` */
    uint64_t lo, hi;          /* U64, SIZE: the range; LISTEN: MV_LISTEN_* flags in `lo` */
    double dlo, dhi;          /* NUMBER: the range */
    const char *const *words; /* ENUM: the accepted words, NULL-terminated */
    unsigned max;             /* STRING: > 1 makes it repeatable into an mv_opts_list */
    mv_opts_fn fn;            /* when set, called with each value instead of storing it */
    void *arg;                /* its first argument */
    int hidden;               /* 1: parsed but not shown (another spelling of a shown row) */
} mv_opts_opt;

typedef struct {
    const char *prog;     /* "microview-collector": the first word of every message */
    const char *synopsis; /* after "usage: PROG ", e.g. "[options]" */
    const char *intro;    /* a paragraph after the usage line, or NULL */
    const char *outro;    /* a paragraph after the flags, or NULL */
    mv_opts_opt *opts;    /* the table, ended by a row of zeros */
    int value_in_errors;  /* 1: refusals read "PROG: --flag VALUE: why" (the webhook's form) */
    const char *hint;     /* a line printed after every refusal, or NULL */
} mv_opts_spec;

#define MV_OPTS_HELP 1 /* --help / --help-markdown printed on stdout: exit status 0 */
#define MV_OPTS_BAD  2 /* a refusal printed on stderr: exit status 2 */

/* Parses argv (GNU getopt_long order: options and arguments mixed, "--" ends options) with
 * `spec`: first the environment variables of the table, then every --flag in full
 * (mv_util_opts_exact), each value checked and stored as its row says. --help (or -h) prints
 * mv_opts_usage() and --help-markdown mv_opts_markdown() on stdout, before any value is read.
 * Returns 0 with `*first_arg` (may be NULL) the index of the first argument that is not an
 * option (argc when none), MV_OPTS_HELP, MV_OPTS_BAD, or -ENOMEM. */
int mv_opts_parse(const mv_opts_spec *spec, int argc, char **argv, int *first_arg);

/* The exit status for a non-zero mv_opts_parse() result: 0, 2, or 1 for -ENOMEM. */
int mv_opts_status(int rc);

/* The --help text: the usage line, the intro, each flag with its metavariable and its wrapped
 * help (default appended), sections as headings, the outro. Lines stay within 80 columns except
 * where a single word is longer. */
void mv_opts_usage(const mv_opts_spec *spec, FILE *f);

/* The flags as Markdown tables (Flag, Default, then Config key and Environment when a row has
 * one, Description); each SECTION starts a new table under its heading in bold. */
void mv_opts_markdown(const mv_opts_spec *spec, FILE *f);

/* The default of `o` as --help shows it ("" when none) into buf. Returns buf. */
const char *mv_opts_default_text(const mv_opts_opt *o, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
