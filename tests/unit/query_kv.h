/* query_kv: a "k=v&k=v" string split in place into pairs, looked up like decoded query
 * arguments (no percent-decoding; the first '=' splits). For tests and fuzz drivers. */
#ifndef MV_QUERY_KV_H
#define MV_QUERY_KV_H

#include <stddef.h>
#include <string.h>

#define QUERY_KV_MAX 32

typedef struct query_kv {
    const char *key[QUERY_KV_MAX];
    const char *value[QUERY_KV_MAX];
    size_t n;
} query_kv;

/* Splits `s` (modified). A pair without '=' has an empty value, like a bare ?key. */
static inline void query_kv_split(query_kv *q, char *s)
{
    q->n = 0;
    for (char *save = NULL, *p = strtok_r(s, "&", &save); p && q->n < QUERY_KV_MAX;
         p = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        q->key[q->n] = p;
        q->value[q->n++] = eq ? eq + 1 : "";
    }
}

/* The first value of `key`, or NULL (an mv_api_query_fn). */
static inline const char *query_kv_get(void *ctx, const char *key)
{
    const query_kv *q = ctx;
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->key[i], key) == 0)
            return q->value[i];
    return NULL;
}

#endif
