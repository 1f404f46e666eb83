/* mv_live_query: the /api/v1/stream query parser (no HTTP, no collector: fuzzed alone). */
#include "mv_live.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

enum { SEEN_SEG = 1u, SEEN_WIDTH = 2u, SEEN_WINDOW = 4u };

void mv_live_query_init(mv_live_query *q)
{
    memset(q, 0, sizeof *q);
    q->width = 800;
    q->window_ms = 10000;
}

static int fail(char *err, size_t errlen, const char *msg, const char *key)
{
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", key, msg);
    return -EINVAL;
}

/* A whole number of at most 12 decimal digits within [min, max]. */
static int parse_uint(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    size_t n = strlen(v);
    if (n == 0 || n > 12)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

int mv_live_query_add(mv_live_query *q, const char *key, const char *value, uint64_t max_window_ms,
                      char *err, size_t errlen)
{
    uint64_t x;
    if (!key || !value)
        return fail(err, errlen, "missing", "parameter");
    if (!strcmp(key, "seg")) {
        if (q->seen & SEEN_SEG)
            return fail(err, errlen, "given twice", key);
        size_t n = strlen(value);
        if (n == 0 || n > MV_LIVE_ID_MAX)
            return fail(err, errlen, "a segment id of 1 to 256 bytes is required", key);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)value[i] < 0x21 || (unsigned char)value[i] > 0x7e)
                return fail(err, errlen, "a segment id is printable ASCII without spaces", key);
        memcpy(q->seg, value, n + 1);
        q->seen |= SEEN_SEG;
        return 0;
    }
    if (!strcmp(key, "m")) {
        if (parse_uint(value, 0, 65535, &x) != 0)
            return fail(err, errlen, "a metric index is a whole number 0..65535", key);
        for (size_t i = 0; i < q->n; i++)
            if (q->idx[i] == x)
                return fail(err, errlen, "the same metric index is given twice", key);
        if (q->n == MV_LIVE_SERIES_MAX)
            return fail(err, errlen, "at most 16 metrics per stream", key);
        q->idx[q->n++] = (uint32_t)x;
        return 0;
    }
    if (!strcmp(key, "width")) {
        if (q->seen & SEEN_WIDTH)
            return fail(err, errlen, "given twice", key);
        if (parse_uint(value, MV_LIVE_WIDTH_MIN, MV_LIVE_WIDTH_MAX, &x) != 0)
            return fail(err, errlen, "a width in pixels 16..4096 is required", key);
        q->width = (unsigned)x;
        q->seen |= SEEN_WIDTH;
        return 0;
    }
    if (!strcmp(key, "window_ms")) {
        if (q->seen & SEEN_WINDOW)
            return fail(err, errlen, "given twice", key);
        if (max_window_ms < MV_LIVE_WINDOW_MIN)
            max_window_ms = MV_LIVE_WINDOW_MIN;
        if (parse_uint(value, MV_LIVE_WINDOW_MIN, max_window_ms, &x) != 0) {
            char msg[96];
            snprintf(msg, sizeof msg, "a window of 1000..%llu ms (the history kept) is required",
                     (unsigned long long)max_window_ms);
            return fail(err, errlen, msg, key);
        }
        q->window_ms = x;
        q->seen |= SEEN_WINDOW;
        return 0;
    }
    return fail(err, errlen, "unknown parameter (seg, m, width, window_ms)", "query");
}

int mv_live_query_finish(const mv_live_query *q, char *err, size_t errlen)
{
    if (!(q->seen & SEEN_SEG))
        return fail(err, errlen, "required", "seg");
    if (q->n == 0)
        return fail(err, errlen, "at least one metric index is required", "m");
    return 0;
}

size_t mv_live_json_str(const char *s, char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t need = 2;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        need += *p < 0x20 ? 6 : (*p == '"' || *p == '\\') ? 2 : 1;
    if (need + 1 > len)
        return need;
    char *o = buf;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20) {
            *o++ = '\\';
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        } else if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else {
            *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = '\0';
    return need;
}
