/* mv_collect torn histograms: the last consistent copy of every histogram record, how long
 * each has been torn, and whether it is served stale or omitted. */
#include "mv_collect_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TORN_RETRIES 3

/* Sizes the per-metric torn-histogram state for `n` metrics and forgets it
 * when the segment was re-formatted (new instance). */
static int torn_state(seg *s, size_t n, uint32_t hot_len, size_t tombs)
{
    const mv_seg_header *h = s->work;
    if (n > s->nmet_cap) {
        uint8_t *hg = realloc(s->have_good, n);
        if (hg)
            s->have_good = hg;
        uint8_t *ow = realloc(s->omit_work, n);
        if (ow)
            s->omit_work = ow;
        uint64_t *ts = realloc(s->torn_since, n * sizeof *ts);
        if (ts)
            s->torn_since = ts;
        if (!hg || !ow || !ts)
            return -ENOMEM;
        memset(s->have_good + s->nmet_cap, 0, n - s->nmet_cap);
        memset(s->torn_since + s->nmet_cap, 0, (n - s->nmet_cap) * sizeof *ts);
        s->nmet_cap = n;
    }
    if (!s->good || s->good_cap < hot_len) { /* grow, keeping the words we have */
        void *g = aligned_alloc(64, ((size_t)hot_len + 63) & ~(size_t)63);
        if (!g)
            return -ENOMEM;
        if (s->good)
            memcpy(g, s->good, s->good_cap);
        free(s->good);
        s->good = g;
        s->good_cap = hot_len;
    }
    /* A tombstone (spec section 6.6) moves the live records after the one it deletes down
     * one index: the state per index no longer fits, forget it as for a new instance. */
    if (h->instance != s->good_instance || tombs != s->good_tombs) {
        if (s->nmet_cap) {
            memset(s->have_good, 0, s->nmet_cap);
            memset(s->torn_since, 0, s->nmet_cap * sizeof *s->torn_since);
        }
        s->good_instance = h->instance;
        s->good_tombs = tombs;
    }
    if (n)
        memset(s->omit_work, 0, n);
    return 0;
}

/* Re-reads torn histogram records. A record still torn after TORN_RETRIES
 * copies is served from its last consistent words for at most
 * torn_stale_ms, then omitted (omit_work) until a consistent copy arrives;
 * one never copied consistently is omitted at once. Never zeros: a
 * histogram that drops to zero reads as a counter reset downstream. */
uint64_t mv_coll__fix_torn(mv_coll *c, seg *s, const mv_seg_catalog *cat, uint64_t now,
                           uint32_t *stale, uint32_t *omitted)
{
    uint64_t torn = 0;
    const mv_seg_header *h = s->work;
    size_t n = mv_seg_catalog_count(cat);
    *stale = *omitted = 0;
    if (s->nhist_cat != cat) {
        s->nhist = 0;
        for (size_t i = 0; i < n; i++)
            s->nhist += mv_seg_catalog_metric(cat, i)->type == MV_SEG_HISTOGRAM;
        s->nhist_cat = cat;
    }
    if (!s->nhist)
        return 0; /* nothing can be torn; publish omits nothing */
    if (torn_state(s, n, mv_seg_catalog_hot_size(cat), mv_seg_catalog_tombstones(cat)) != 0)
        return 0; /* out of memory: keep the copy as validated by hot_check */
    for (size_t i = 0; i < n; i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        if (m->type != MV_SEG_HISTOGRAM)
            continue;
        uint64_t off = (uint64_t)h->values_offset + m->value_offset;
        mv_seg_hist_view hv;
        int ok = mv_seg_read_histogram(s->work, m, &hv) == MV_SEG_OK;
        if (!ok)
            torn++;
        for (int k = 0; k < TORN_RETRIES && !ok; k++) {
            mv_coll_read rq = {
                .src = s->src, .off = off, .len = m->value_size, .dst = (char *)s->work + off};
            mv_coll__seg_read(c, s, &rq, 1);
            ok = rq.status == 0 && mv_seg_read_histogram(s->work, m, &hv) == MV_SEG_OK;
        }
        if (ok) {
            memcpy((char *)s->good + off, (char *)s->work + off, m->value_size);
            s->have_good[i] = 1;
            s->torn_since[i] = 0;
            continue;
        }
        if (!s->torn_since[i])
            s->torn_since[i] = now;
        /* The pipeline sees the last consistent words (or zeros if none). */
        if (s->have_good[i])
            memcpy((char *)s->work + off, (char *)s->good + off, m->value_size);
        else
            memset((char *)s->work + off, 0, m->value_size);
        if (s->have_good[i] &&
            now - s->torn_since[i] <= (uint64_t)c->o.torn_stale_ms * 1000000ull) {
            (*stale)++;
        } else {
            s->omit_work[i] = 1;
            (*omitted)++;
        }
    }
    return torn;
}
