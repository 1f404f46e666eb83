/* libFuzzer driver: the collector's /api/v1/value query parser on arbitrary query strings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_api.h"
#include "query_kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    query_kv kv;
    query_kv_split(&kv, s);
    mv_api_value_query q;
    const char *err = NULL;
    int rc = mv_api_value_parse(query_kv_get, &kv, &q, &err);
    if (rc == 0) {
        /* A parsed query names a metric and holds bounded, NUL-terminated filters. */
        if (!q.metric || !q.metric[0] || q.nfilters > MV_API_FILTERS_MAX)
            abort();
        for (size_t i = 0; i < q.nfilters; i++)
            if (!q.filters[i].key[0] || strlen(q.filters[i].key) > MV_SEG_LABEL_KEY_MAX)
                abort();
    } else if (!err || err[0] != '{') {
        abort();
    }
    free(s);
    return 0;
}
