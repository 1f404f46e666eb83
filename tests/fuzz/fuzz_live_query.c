/* libFuzzer driver: the live view's /api/v1/stream query parser (mv_live_query_add/finish) on
 * arbitrary query strings, and the JSON string writer on arbitrary bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_live.h"
#include "query_kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    /* The JSON writer: quoted, no raw control byte, within the length it reports. */
    char js[512];
    size_t need = mv_live_json_str(s, js, sizeof js);
    if (need + 1 <= sizeof js) {
        if (strlen(js) != need || js[0] != '"' || js[need - 1] != '"')
            abort();
        for (size_t i = 0; i < need; i++)
            if ((unsigned char)js[i] < 0x20)
                abort();
    }
    query_kv kv;
    query_kv_split(&kv, s);
    mv_live_query q;
    mv_live_query_init(&q);
    char err[200] = "";
    int rc = 0;
    for (size_t i = 0; i < kv.n && rc == 0; i++)
        rc = mv_live_query_add(&q, kv.key[i], kv.value[i], 600000, err, sizeof err);
    if (rc == 0)
        rc = mv_live_query_finish(&q, err, sizeof err);
    if (rc == 0) {
        /* An accepted query is within every limit. */
        size_t n = strlen(q.seg);
        if (n == 0 || n > MV_LIVE_ID_MAX || q.n == 0 || q.n > MV_LIVE_SERIES_MAX ||
            q.width < MV_LIVE_WIDTH_MIN || q.width > MV_LIVE_WIDTH_MAX ||
            q.window_ms < MV_LIVE_WINDOW_MIN || q.window_ms > 600000)
            abort();
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)q.seg[i] < 0x21 || (unsigned char)q.seg[i] > 0x7e)
                abort();
        for (size_t i = 0; i < q.n; i++) {
            if (q.idx[i] > 65535)
                abort();
            for (size_t j = 0; j < i; j++)
                if (q.idx[i] == q.idx[j])
                    abort();
        }
    } else if (rc != -22 || !err[0]) {
        abort(); /* refusals are -EINVAL with a reason */
    }
    free(s);
    return 0;
}
