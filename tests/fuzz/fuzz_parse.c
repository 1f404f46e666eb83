/* libFuzzer driver: the parsers of flag and configuration values (mv_util_parse_u64,
 * mv_util_parse_size, mv_util_parse_number, mv_util_parse_listen) and of the memory settings the
 * collector reports (mv_util_parse_tunable, mv_util_parse_bracketed) on arbitrary text. The first
 * byte picks the parser
 * ('u', 's', 'l', 'n', 't', 'b'; any other byte by its value), the second its bounds (low bits:
 * min, next two: max), its MV_LISTEN_* flags (low three bits) or its output's size (low four
 * bits); the rest, cut at the first NUL, is the text. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every refusal says why and what is accepted. */
static void check_refusal(int rc, const char *err)
{
    if (rc != -EINVAL && rc != -ERANGE)
        abort();
    if (!strstr(err, "want"))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char *text = malloc(size - 1);
    if (!text)
        return 0;
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    char err[MV_ERR_MAX] = "";
    unsigned which = data[0] == 'u'   ? 0
                     : data[0] == 's' ? 1
                     : data[0] == 'l' ? 2
                     : data[0] == 'n' ? 3
                     : data[0] == 't' ? 4
                     : data[0] == 'b' ? 5
                                      : data[0] % 6;
    unsigned sel = data[1];
    /* Bounds from the selector: both ends of the range matter. */
    static const uint64_t mins[] = {0, 1, 4096, 1ull << 30};
    static const uint64_t maxs[] = {UINT64_MAX, 65535, 1ull << 30, 1ull << 32};
    uint64_t min = mins[sel & 3], max = maxs[(sel >> 2) & 3], v = 7;
    if (which == 0) {
        int rc = mv_util_parse_u64(text, min, max, &v, err, sizeof err);
        if (rc == 0 && (v < min || v > max))
            abort();
        if (rc != 0)
            check_refusal(rc, err);
    } else if (which == 1) {
        int rc = mv_util_parse_size(text, min, max, &v, err, sizeof err);
        if (rc == 0 && (v < min || v > max))
            abort();
        if (rc != 0)
            check_refusal(rc, err);
    } else if (which == 3) {
        static const double dmins[] = {0, 0.0001, 1, 1e9};
        static const double dmaxs[] = {1e300, 0.5, 3600, 1e12};
        double d = 7, dmin = dmins[sel & 3], dmax = dmaxs[(sel >> 2) & 3];
        int rc = mv_util_parse_number(text, dmin, dmax, &d, err, sizeof err);
        if (rc == 0 && !(d >= dmin && d <= dmax))
            abort();
        if (rc != 0)
            check_refusal(rc, err);
    } else if (which == 4 || which == 5) {
        /* The output's size from the selector (0 too); a guard byte past it stays. */
        size_t cap = sel & 15;
        char out[17];
        memset(out, 'x', sizeof out);
        int rc = which == 4 ? mv_util_parse_tunable(text, "glibc.malloc.hugetlb", out, cap)
                            : mv_util_parse_bracketed(text, out, cap);
        if (out[cap] != 'x')
            abort();
        if (which == 4 && !(rc == 0 || rc == 1 || rc == -ERANGE))
            abort();
        if (which == 5 && !(rc == 0 || rc == -EINVAL || rc == -ERANGE))
            abort();
        if ((which == 4 ? rc == 1 : rc == 0) && strnlen(out, cap) == cap)
            abort(); /* a result is always terminated within the output */
        if (which == 5 && rc == 0 && (out[0] == '\0' || !strchr(text, '[')))
            abort();
    } else {
        char host[16];
        uint16_t port = 7471;
        memset(host, 'x', sizeof host);
        int rc = mv_util_parse_listen(text, sel & 7, host, sizeof host, &port, err, sizeof err);
        if (rc == 0) {
            /* The host fits, holds no bracket, and is empty only where allowed; port 0 and a
             * missing port only where allowed. */
            size_t hl = strnlen(host, sizeof host);
            if (hl == sizeof host || strpbrk(host, "[] \t"))
                abort();
            if (hl == 0 && !(sel & MV_LISTEN_ANY_HOST))
                abort();
            if (port == 0 && !(sel & MV_LISTEN_PORT_ZERO))
                abort();
            if (!strchr(text, ':') && !(sel & MV_LISTEN_PORT_OPTIONAL))
                abort();
        } else {
            check_refusal(rc, err);
        }
    }
    free(text);
    return 0;
}
