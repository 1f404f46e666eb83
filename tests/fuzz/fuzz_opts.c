/* libFuzzer driver: mv_opts_parse on an arbitrary command line. The input, cut at each NUL, is
 * argv[1..] (at most 31 words) for a table that has a row of every kind (a repeatable one, a
 * callback, one-letter aliases, a section). Whatever the words, the parse returns 0,
 * MV_OPTS_HELP or MV_OPTS_BAD, stores only values its row accepts, and never reads past argv.
 * Output (refusals, --help) goes to /dev/null. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_opts.h"
#include "mv_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count_fn(void *arg, const char *value, char *err, size_t errlen)
{
    (void)value, (void)err, (void)errlen;
    (*(unsigned *)arg)++;
    return value && value[0] == '!' ? -22 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        quiet = 1;
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            return 0;
    }
    static const char *const words[] = {"a", "bb", "ccc", NULL};
    uint64_t u = 5, sz = 4096;
    double d = 0.5;
    const char *s = NULL, *listen = "127.0.0.1:1", *items[4];
    int flag = 0, e = 0;
    uint32_t mode = 0, grp = 0;
    unsigned calls = 0;
    mv_opts_list list = {.items = items};
    mv_opts_opt opts[] = {
        {.kind = MV_OPTS_SECTION, .help = "All:"},
        {.name = "u",
         .short_name = 'u',
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 9,
         .dest = &u,
         .help = "u"},
        {.name = "size",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 4096,
         .hi = 1u << 20,
         .dest = &sz,
         .help = "size"},
        {.name = "num",
         .kind = MV_OPTS_NUMBER,
         .meta = "X",
         .dlo = 0.1,
         .dhi = 1,
         .dest = &d,
         .help = "num"},
        {.name = "s", .kind = MV_OPTS_STRING, .meta = "S", .dest = &s, .help = "s"},
        {.name = "listen",
         .kind = MV_OPTS_LISTEN,
         .meta = "A",
         .lo = MV_LISTEN_ANY_HOST,
         .dest = &listen,
         .help = "listen"},
        {.name = "flag", .short_name = 'f', .kind = MV_OPTS_FLAG, .dest = &flag, .help = "f"},
        {.name = "enum",
         .kind = MV_OPTS_ENUM,
         .meta = "W",
         .words = words,
         .dest = &e,
         .help = "e"},
        {.name = "mode", .kind = MV_OPTS_MODE, .meta = "M", .dest = &mode, .help = "m"},
        {.name = "group", .kind = MV_OPTS_GROUP, .meta = "G", .dest = &grp, .help = "g"},
        {.name = "list",
         .short_name = 'l',
         .kind = MV_OPTS_STRING,
         .meta = "V",
         .max = 4,
         .dest = &list,
         .help = "l"},
        {.name = "call",
         .kind = MV_OPTS_STRING,
         .meta = "V",
         .fn = count_fn,
         .arg = &calls,
         .help = "c"},
        {0},
    };
    const mv_opts_spec spec = {.prog = "fuzz", .synopsis = "[options]", .opts = opts};

    char *buf = malloc(size + 1), *argv[33];
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    int argc = 0;
    argv[argc++] = "fuzz";
    for (char *p = buf; argc < 32 && p <= buf + size; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;
    int first = -1, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc != 0 && rc != MV_OPTS_HELP && rc != MV_OPTS_BAD && rc != -12)
        abort();
    if (rc == 0 && (first < 1 || first > argc))
        abort();
    if (u < 1 || u > 9 || sz < 4096 || sz > (1u << 20) || d < 0.1 || d > 1 || e < 0 || e > 2 ||
        mode > 0777 || list.n > 4)
        abort();
    free(buf);
    return 0;
}
