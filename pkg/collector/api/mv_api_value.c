/* mv_api_value: the /api/v1/value query parser (no HTTP, no collector: fuzzed on its own). */
#include "mv_api.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const value_keys[MV_API_VALUE_KEYS] = {
    "namespace", "pod", "container", "quantile", "le", "service", "instance", "node", "job"};

int mv_api_value_known_key(const char *key)
{
    if (strcmp(key, "metric") == 0 || strcmp(key, "agg") == 0 || strcmp(key, "label") == 0 ||
        strcmp(key, "selector") == 0)
        return 1;
    for (size_t i = 0; i < MV_API_VALUE_KEYS; i++)
        if (strcmp(key, value_keys[i]) == 0)
            return 1;
    return 0;
}

int mv_api_value_parse(mv_api_query_fn get, void *ctx, mv_api_value_query *q, const char **err_json)
{
    memset(q, 0, sizeof *q);
    q->metric = get(ctx, "metric");
    if (!q->metric || !*q->metric) {
        *err_json = "{\"error\":\"give ?metric=NAME (and label filters)\"}";
        return -EINVAL;
    }
    q->agg = get(ctx, "agg");
    for (size_t i = 0; i < MV_API_VALUE_KEYS; i++) {
        const char *v = get(ctx, value_keys[i]);
        if (v)
            q->filters[q->nfilters++] = (mv_seg_label){value_keys[i], v};
    }
    /* Any other label: ?label=KEY=VALUE (the query accessor returns one value
     * per key, so one extra filter). */
    const char *extra = get(ctx, "label");
    if (extra) {
        const char *eq = strchr(extra, '=');
        if (!eq || eq == extra || (size_t)(eq - extra) > MV_SEG_LABEL_KEY_MAX) {
            *err_json = "{\"error\":\"label wants KEY=VALUE\"}";
            return -EINVAL;
        }
        memcpy(q->extra_key, extra, (size_t)(eq - extra));
        q->extra_key[eq - extra] = '\0';
        q->filters[q->nfilters++] = (mv_seg_label){q->extra_key, eq + 1};
    }
    const char *sel = get(ctx, "selector");
    if (sel) {
        char why[256];
        if (mv_lsel_parse(sel, strlen(sel), &q->selector, why, sizeof why) < 0) {
            /* The reason quotes selector text only as the grammar's own characters, but for
             * one unexpected printable byte: keep the document JSON whatever it is. */
            for (char *p = why; *p; p++)
                if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                    *p = '?';
            snprintf(q->err_buf, sizeof q->err_buf, "{\"error\":\"selector: %s\"}", why);
            *err_json = q->err_buf;
            return -EINVAL;
        }
        q->has_selector = 1;
    }
    return 0;
}
