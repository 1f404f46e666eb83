/* mv_segment values: the checks and accessors of a hot copy (header + value area) against a
 * parsed catalog, sharded records' sums and their fold (docs/segment-format.md 5.2, 11.2). */
#include "mv_segment_int.h"

#include <string.h>

mv_seg_reason mv_seg_hot_check(const mv_seg_catalog *c, const void *buf, size_t len,
                               uint64_t *heartbeat_ns, mv_seg_error *err)
{
    const mv_seg_header *h = buf;
    uint64_t magic;

    if (len < c->hot_size || len < MV_SEG_HEADER_SIZE)
        return mv_seg__fail(err, MV_SEG_E_TRUNCATED, "hot copy of %zu bytes, need %u", len,
                            c->hot_size);
    memcpy(&magic, MV_SEG_MAGIC, 8);
    if (memcmp(h->magic, &magic, 8) != 0)
        return mv_seg__fail(err, MV_SEG_E_MAGIC, "magic changed under a parsed catalog");
    if (h->instance != c->instance)
        return mv_seg__fail(err, MV_SEG_E_CHANGED, "segment was re-formatted (instance changed)");
    if (h->generation != c->generation || h->metric_count != c->metric_count ||
        h->values_used != c->values_used || h->catalog_used != c->catalog_used ||
        h->values_offset != c->values_offset)
        return mv_seg__fail(err, MV_SEG_E_CHANGED, "catalog generation %llu -> %llu",
                            (unsigned long long)c->generation, (unsigned long long)h->generation);
    if (heartbeat_ns)
        *heartbeat_ns = h->heartbeat_ns;
    return MV_SEG_OK;
}

static inline const uint64_t *slot(const void *hot, const mv_seg_metric *m)
{
    const mv_seg_header *h = hot;
    return (const uint64_t *)(const void *)((const char *)hot + h->values_offset + m->value_offset);
}

uint64_t mv_seg_read_counter(const void *hot, const mv_seg_metric *m)
{
    const uint64_t *w = slot(hot, m);
    if (m->shards < 2)
        return *w;
    uint64_t sum = 0;
    for (uint32_t k = 0; k < m->shards; k++)
        sum += w[k * (m->shard_stride / 8)];
    return sum;
}

double mv_seg_read_counter_f(const void *hot, const mv_seg_metric *m)
{
    if (m->type != MV_SEG_COUNTER_F)
        return (double)mv_seg_read_counter(hot, m);
    const uint64_t *w = slot(hot, m);
    uint64_t whole = 0;
    double frac = 0, d;
    for (uint32_t k = 0; k < m->shards; k++) {
        const uint64_t *sw = w + k * (m->shard_stride / 8);
        whole += sw[0];
        memcpy(&d, &sw[1], 8);
        frac += d;
    }
    return (double)whole + frac;
}

double mv_seg_read_gauge(const void *hot, const mv_seg_metric *m)
{
    const uint64_t *w = slot(hot, m);
    double d, sum;
    memcpy(&sum, w, 8);
    for (uint32_t k = 1; k < m->shards; k++) {
        memcpy(&d, &w[k * (m->shard_stride / 8)], 8);
        sum += d;
    }
    return sum;
}

/* Whether one histogram's words (count, sum, buckets, checksum) are consistent. */
static int hist_consistent(const uint64_t *w, uint16_t bucket_count)
{
    uint32_t nwords = MV_SEG_HIST_WORDS(bucket_count), nb = bucket_count + 1u;
    uint64_t check = 0, total = 0;
    for (uint32_t i = 0; i + 1 < nwords; i++)
        check += w[i] * mv_seg_hist_weight(i);
    if (check != w[nwords - 1])
        return 0;
    for (uint32_t i = 0; i < nb; i++)
        total += w[2 + i];
    return total == w[0];
}

mv_seg_reason mv_seg_read_histogram(const void *hot, const mv_seg_metric *m, mv_seg_hist_view *out)
{
    const uint64_t *w = slot(hot, m);
    uint32_t nb = m->bucket_count + 1u;

    if (m->shards < 2) {
        if (!hist_consistent(w, m->bucket_count))
            return MV_SEG_E_TORN;
        out->count = w[0];
        memcpy(&out->sum, &w[1], 8);
        out->buckets = w + 2;
        return MV_SEG_OK;
    }
    uint64_t count = 0;
    double sum = 0;
    memset(out->summed, 0, nb * sizeof *out->summed);
    for (uint32_t k = 0; k < m->shards; k++) {
        const uint64_t *sw = w + k * (m->shard_stride / 8);
        if (!hist_consistent(sw, m->bucket_count))
            return MV_SEG_E_TORN;
        double d;
        memcpy(&d, &sw[1], 8);
        count += sw[0];
        sum = k ? sum + d : d;
        for (uint32_t i = 0; i < nb; i++)
            out->summed[i] += sw[2 + i];
    }
    out->count = count;
    out->sum = sum;
    out->buckets = out->summed;
    return MV_SEG_OK;
}

size_t mv_seg_fold(const mv_seg_catalog *c, void *buf)
{
    size_t torn = 0;
    char *vals = (char *)buf + c->values_offset;
    for (size_t j = 0; j < c->nsharded; j++) {
        const mv_seg_metric *m = &c->metrics[c->sharded[j]];
        uint64_t *to = (uint64_t *)(void *)(vals + m->fold_offset);
        if (m->type == MV_SEG_COUNTER) {
            *to = mv_seg_read_counter(buf, m);
            continue;
        }
        if (m->type == MV_SEG_COUNTER_F) { /* both words summed, so it reads as one slot */
            const uint64_t *w = slot(buf, m);
            uint64_t whole = 0;
            double frac = 0, d;
            for (uint32_t k = 0; k < m->shards; k++) {
                whole += w[k * (m->shard_stride / 8)];
                memcpy(&d, &w[k * (m->shard_stride / 8) + 1], 8);
                frac += d;
            }
            to[0] = whole;
            memcpy(&to[1], &frac, 8);
            continue;
        }
        if (m->type == MV_SEG_GAUGE) {
            double d = mv_seg_read_gauge(buf, m);
            memcpy(to, &d, 8);
            continue;
        }
        /* A histogram: the shards' sums (as read), then the checksum over them. A torn shard
         * leaves zeros and a checksum made wrong on purpose, so the fold reads as torn. */
        mv_seg_hist_view hv;
        uint32_t nwords = MV_SEG_HIST_WORDS(m->bucket_count);
        int ok = mv_seg_read_histogram(buf, m, &hv) == MV_SEG_OK;
        memset(to, 0, 8u * nwords);
        if (ok) {
            to[0] = hv.count;
            memcpy(&to[1], &hv.sum, 8);
            memcpy(&to[2], hv.buckets, 8u * (m->bucket_count + 1u));
        }
        uint64_t check = 0;
        for (uint32_t i = 0; i + 1 < nwords; i++)
            check += to[i] * mv_seg_hist_weight(i);
        to[nwords - 1] = ok ? check : check + 1;
        torn += !ok;
    }
    return torn;
}
