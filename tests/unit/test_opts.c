/* Unit tests: mv_opts, the option table: ranges and kinds, repeatable options, exact names,
 * callbacks, the environment, --help wrapping and defaults, the Markdown table. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mv_opts.h"
#include "mv_test.h"
#include "mv_util.h"

static uint64_t g_ticks, g_body;
static double g_alpha;
static const char *g_listen, *g_name;
static int g_poll, g_align;
static const char *g_agent_items[3];
static mv_opts_list g_agents;
static unsigned g_calls;
static const char *const g_align_words[] = {"segment", "wall", NULL};

static int count_call(void *arg, const char *value, char *err, size_t errlen)
{
    (void)arg;
    if (value && strcmp(value, "bad") == 0) {
        snprintf(err, errlen, "'%s' is refused by the callback", value);
        return -EINVAL;
    }
    if (value && strcmp(value, "oom") == 0)
        return -ENOMEM;
    g_calls++;
    return 0;
}

static mv_opts_opt g_table[] = {
    {.kind = MV_OPTS_SECTION, .help = "Reading:"},
    {.name = "tick-ms",
     .kind = MV_OPTS_U64,
     .meta = "N",
     .lo = 1,
     .hi = 60000,
     .dest = &g_ticks,
     .help = "fast read interval: the tick, in ms"},
    {.name = "max-body-bytes",
     .kind = MV_OPTS_SIZE,
     .meta = "SIZE",
     .lo = 4096,
     .hi = 1ull << 32,
     .dest = &g_body,
     .key = "max_body_bytes",
     .env = "MV_TEST_OPTS_BODY",
     .help = "cap on a /metrics body: bytes, or with Ki, Mi, Gi; a very long help text that "
             "must be wrapped over several lines so that no line of the usage goes past the "
             "eightieth column of the terminal"},
    {.name = "sketch-alpha",
     .kind = MV_OPTS_NUMBER,
     .meta = "A",
     .dlo = 1e-4,
     .dhi = 0.5,
     .dest = &g_alpha,
     .help = "relative accuracy"},
    {.name = "listen",
     .kind = MV_OPTS_LISTEN,
     .meta = "[HOST]:PORT",
     .lo = MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO,
     .dest = &g_listen,
     .help = "HTTP address"},
    {.name = "tick-poll",
     .short_name = 'p',
     .kind = MV_OPTS_FLAG,
     .dest = &g_poll,
     .help = "poll | spin"},
    {.name = "window-align",
     .kind = MV_OPTS_ENUM,
     .meta = "MODE",
     .words = g_align_words,
     .dest = &g_align,
     .help = "where windows start"},
    {.name = "agent",
     .short_name = 'a',
     .kind = MV_OPTS_STRING,
     .meta = "TARGET",
     .max = 3,
     .dest = &g_agents,
     .help = "an agent"},
    {.name = "name",
     .kind = MV_OPTS_STRING,
     .meta = "NAME",
     .dest = &g_name,
     .def = "",
     .help = "a name"},
    {.name = "tick_ms",
     .kind = MV_OPTS_U64,
     .meta = "N",
     .lo = 1,
     .hi = 60000,
     .dest = &g_ticks,
     .hidden = 1},
    {.name = "call",
     .kind = MV_OPTS_STRING,
     .meta = "X",
     .fn = count_call,
     .help = "handed to a callback"},
    {0},
};
static const mv_opts_spec g_spec = {.prog = "prog", .synopsis = "[options]", .opts = g_table};

static void reset(void)
{
    g_ticks = 10;
    g_body = 64u << 20;
    g_alpha = 0.01;
    g_listen = "127.0.0.1:9469";
    g_name = NULL;
    g_poll = 0;
    g_align = 0;
    g_agents = (mv_opts_list){.items = g_agent_items};
    g_calls = 0;
    unsetenv("MV_TEST_OPTS_BODY");
}

/* Parses the words (NULL-terminated) with stderr captured into `msg`. */
static int parse(char *msg, size_t msglen, int *first, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "prog";
    va_list ap;
    va_start(ap, first);
    for (char *a; argc < 31 && (a = va_arg(ap, char *));)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    CU_ASSERT_FATAL(saved >= 0 && tmp);
    dup2(fileno(tmp), 2);
    int rc = mv_opts_parse(&g_spec, argc, argv, first);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t got = fread(msg, 1, msglen - 1, tmp);
    msg[got] = '\0';
    fclose(tmp);
    return rc;
}

/* Runs `fn(spec, f)` into a string. */
static char *capture(void (*fn)(const mv_opts_spec *, FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_FATAL(f != NULL);
    fn(&g_spec, f);
    fclose(f);
    return buf;
}

static void test_values(void)
{
    char msg[4096];
    int first = -1;
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, &first, "--tick-ms", "5", "--max-body-bytes=1Mi",
                          "--sketch-alpha", "0.5", "--listen", "[::1]:0", "--tick-poll",
                          "--window-align", "wall", "--name", "--tick-ms", "x", "y", NULL),
                    0);
    CU_ASSERT_EQUAL(g_ticks, 5);
    CU_ASSERT_EQUAL(g_body, 1u << 20);
    CU_ASSERT_DOUBLE_EQUAL(g_alpha, 0.5, 1e-12);
    CU_ASSERT_STRING_EQUAL(g_listen, "[::1]:0");
    CU_ASSERT_EQUAL(g_poll, 1);
    CU_ASSERT_EQUAL(g_align, 1);
    CU_ASSERT_STRING_EQUAL(g_name, "--tick-ms"); /* a value is the next word, whatever it is */
    CU_ASSERT_EQUAL(first, 13);                  /* x and y, moved to the end */
    CU_ASSERT_STRING_EQUAL(msg, "");
}

static void test_ranges(void)
{
    char msg[4096];
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick-ms", "60001", NULL), MV_OPTS_BAD);
    CU_ASSERT_STRING_EQUAL(
        msg, "prog: --tick-ms: '60001' is out of range: want a whole number from 1 to 60000\n");
    CU_ASSERT_EQUAL(g_ticks, 10); /* nothing stored */
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick-ms", "0", NULL), MV_OPTS_BAD);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick-ms", "1", NULL), 0);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick-ms", "60000", NULL), 0);
    CU_ASSERT_EQUAL(g_ticks, 60000);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--max-body-bytes", "4k", NULL), MV_OPTS_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "prog: --max-body-bytes: '4k' is not a size"));
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--max-body-bytes", "4095", NULL), MV_OPTS_BAD);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--sketch-alpha", "0.7", NULL), MV_OPTS_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "--sketch-alpha: '0.7' is out of range"));
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--listen", "::1:9469", NULL), MV_OPTS_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "an IPv6 address goes in brackets"));
    CU_ASSERT_STRING_EQUAL(g_listen, "127.0.0.1:9469");
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--window-align", "diagonal", NULL), MV_OPTS_BAD);
    CU_ASSERT_STRING_EQUAL(msg, "prog: --window-align: 'diagonal' is not segment or wall\n");
    CU_ASSERT_EQUAL(mv_opts_status(MV_OPTS_BAD), 2);
    CU_ASSERT_EQUAL(mv_opts_status(MV_OPTS_HELP), 0);
    CU_ASSERT_EQUAL(mv_opts_status(-ENOMEM), 1);
}

static void test_repeatable(void)
{
    char msg[4096];
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--agent", "a", "--agent=b", "--agent", "c", NULL),
                    0);
    CU_ASSERT_EQUAL(g_agents.n, 3);
    CU_ASSERT_STRING_EQUAL(g_agents.items[0], "a");
    CU_ASSERT_STRING_EQUAL(g_agents.items[2], "c");
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--agent", "a", "--agent", "b", "--agent", "c",
                          "--agent", "d", NULL),
                    MV_OPTS_BAD);
    CU_ASSERT_STRING_EQUAL(msg, "prog: at most 3 --agent\n");
    CU_ASSERT_EQUAL(g_agents.n, 3);
}

static void test_exact_names(void)
{
    char msg[4096];
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick", "5", NULL), MV_OPTS_BAD);
    CU_ASSERT_STRING_EQUAL(msg, "prog: unknown option --tick (did you mean --tick-ms?)\n");
    CU_ASSERT_EQUAL(g_ticks, 10);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--nope", NULL), MV_OPTS_BAD);
    CU_ASSERT_STRING_EQUAL(msg, "prog: unknown option --nope (see --help)\n");
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick-ms", NULL), MV_OPTS_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "prog: option needs a value or is unknown: --tick-ms\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "usage: prog [options]"));
    /* After "--" nothing is an option. */
    int first = 0;
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, &first, "--", "--tick", NULL), 0);
    CU_ASSERT_EQUAL(first, 2);
}

static void test_short_names(void)
{
    char msg[4096];
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "-a", "x", "-p", "-ay", "-a", "--help", NULL), 0);
    CU_ASSERT_EQUAL(g_agents.n, 3);
    CU_ASSERT_STRING_EQUAL(g_agents.items[1], "y");
    CU_ASSERT_STRING_EQUAL(g_agents.items[2], "--help"); /* a value, not --help */
    CU_ASSERT_EQUAL(g_poll, 1);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "-x", NULL), MV_OPTS_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "prog: option needs a value or is unknown: -x\n"));
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "-a", NULL), MV_OPTS_BAD);
}

static void test_hidden(void)
{
    char msg[4096];
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--tick_ms", "7", NULL), 0);
    CU_ASSERT_EQUAL(g_ticks, 7);
    char *u = capture(mv_opts_usage), *m = capture(mv_opts_markdown);
    CU_ASSERT_PTR_NULL(strstr(u, "tick_ms"));
    CU_ASSERT_PTR_NULL(strstr(m, "tick_ms"));
    free(u);
    free(m);
}

static void test_callback(void)
{
    char msg[4096];
    reset();
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--call", "a", "--call", "b", NULL), 0);
    CU_ASSERT_EQUAL(g_calls, 2);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--call", "bad", NULL), MV_OPTS_BAD);
    CU_ASSERT_STRING_EQUAL(msg, "prog: --call: 'bad' is refused by the callback\n");
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--call", "oom", NULL), -ENOMEM);
    CU_ASSERT_STRING_EQUAL(msg, "prog: out of memory\n");
}

static void test_env(void)
{
    char msg[4096];
    reset();
    setenv("MV_TEST_OPTS_BODY", "2Mi", 1);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, NULL), 0);
    CU_ASSERT_EQUAL(g_body, 2u << 20);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, "--max-body-bytes", "8Ki", NULL), 0);
    CU_ASSERT_EQUAL(g_body, 8192); /* the flag wins */
    setenv("MV_TEST_OPTS_BODY", "4k", 1);
    CU_ASSERT_EQUAL(parse(msg, sizeof msg, NULL, NULL), MV_OPTS_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "prog: MV_TEST_OPTS_BODY: '4k' is not a size"));
    unsetenv("MV_TEST_OPTS_BODY");
}

static void test_usage(void)
{
    reset();
    char *u = capture(mv_opts_usage);
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "usage: prog [options]\nReading:\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "  --tick-ms N               fast read interval: the tick, in "
                                     "ms (1..60000;\n                            default 10)\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "default 64Mi)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "(0.0001..0.5; default 0.01)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "(default segment)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "an agent (repeatable, at most 3)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "  --name NAME               a name\n")); /* def "": none */
    /* Every line within 80 columns; the long help spans lines indented to the help column. */
    unsigned lines = 0, long_help = 0;
    for (char *l = u, *nl; *l; l = nl + 1) {
        nl = strchr(l, '\n');
        CU_ASSERT_FATAL(nl != NULL);
        CU_ASSERT((size_t)(nl - l) <= 80);
        lines++;
        if (strncmp(l, "                            ", 28) == 0 && l[28] != ' ')
            long_help++;
    }
    CU_ASSERT(long_help >= 2);
    CU_ASSERT(lines > 10);
    free(u);
    /* The default shown is the one the binary holds at the start. */
    g_ticks = 25;
    u = capture(mv_opts_usage);
    CU_ASSERT_PTR_NOT_NULL(strstr(u, "default 25)"));
    free(u);
}

static void test_help_flags(void)
{
    char msg[4096];
    reset();
    fflush(stdout);
    int saved = dup(1);
    FILE *tmp = tmpfile();
    CU_ASSERT_FATAL(saved >= 0 && tmp);
    dup2(fileno(tmp), 1);
    int a = parse(msg, sizeof msg, NULL, "--tick-ms", "99999", "--help", NULL);
    int b = parse(msg, sizeof msg, NULL, "--name", "--help", NULL); /* a value, not --help */
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(tmp);
    CU_ASSERT_EQUAL(a, MV_OPTS_HELP);
    CU_ASSERT_EQUAL(b, 0);
    CU_ASSERT_STRING_EQUAL(g_name, "--help");
}

static void test_markdown(void)
{
    reset();
    char *m = capture(mv_opts_markdown);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, "**Reading:**\n\n| Flag | Default | Config key | "
                                     "Environment | Description |\n|---|---|---|---|---|\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(m, "| `--tick-ms N` | `10` |  |  | fast read interval: the "
                                     "tick, in ms (1..60000) |\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(m, "| `--max-body-bytes SIZE` | `64Mi` | `max_body_bytes` | "
                                     "`MV_TEST_OPTS_BODY` | cap on"));
    CU_ASSERT_PTR_NOT_NULL(strstr(m, "poll \\| spin |\n")); /* a pipe is escaped */
    CU_ASSERT_PTR_NOT_NULL(
        strstr(m, "| `-a, --agent TARGET` |  |  |  | an agent (repeatable, at most 3) |\n"));
    free(m);
}

int main(void)
{
    static const mv_test tests[] = {
        {"values of every kind reach their destination", test_values},
        {"ranges: refused with the range, nothing stored", test_ranges},
        {"repeatable: values in order, at most max", test_repeatable},
        {"exact names: a prefix is refused with a guess", test_exact_names},
        {"one-letter aliases: -a VALUE, -aVALUE, -p", test_short_names},
        {"hidden rows: parsed, not shown", test_hidden},
        {"callbacks: values, their refusals, out of memory", test_callback},
        {"environment: read first, flags win", test_env},
        {"usage: wrapped within 80 columns, defaults shown", test_usage},
        {"--help wins over values; a value --help is a value", test_help_flags},
        {"markdown: columns, escaping, repeatable", test_markdown},
    };
    return MV_TEST_RUN("opts", tests);
}
