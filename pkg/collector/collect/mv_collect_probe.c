/* mv_collect's probe: the words of a segment that move when it does, compared through the
 * transport with the published copy, so a tick can tell without a copy whether a backed-off
 * segment changed and whether a due one is unchanged (a `same` read). */
#include "mv_collect_int.h"

#include <stdlib.h>
#include <string.h>

/* Takes the probe's words (probe_words) from the published copy. */
void mv_coll__probe_take(seg *s)
{
    for (size_t i = 0; i < s->nprobe; i++)
        memcpy(&s->probe_want[i], (const char *)s->pub_hot + s->probe_offs[i], 8);
    s->probe_copy_at = s->pub_copies;
}

/* The words a probe compares (transport->probe), for the published copy of the current
 * catalog: every word of the header (magic, sizes, instance, catalog generation and counts,
 * lock, heartbeat, writer pid: all that a copy's validation checks, and more), then each
 * metric's first value word (a counter's or gauge's value, a histogram's count; each shard's,
 * for a sharded record); packed, with
 * their values in that copy, so a probe touches one line of the segment per metric and a
 * few of its own. Returns how many words there are, 0 when there is no probe, no published
 * copy of the current catalog, or no memory for the list. */
static size_t probe_words(const mv_coll *c, seg *s)
{
    if (!s->t->probe || c->o.no_probe || !s->cat || s->pub_cat != s->cat || !s->pub_hot)
        return 0;
    if (s->probe_serial != s->cat->serial) {
        const mv_seg_catalog *cat = s->cat->cat;
        size_t nh = MV_SEG_HEADER_SIZE / 8, nm = mv_seg_catalog_count(cat), n = nh;
        for (size_t i = 0; i < nm; i++)
            n += mv_seg_catalog_metric(cat, i)->shards;
        if (n > s->probe_cap) {
            uint32_t *p = realloc(s->probe_offs, n * sizeof *p);
            if (p)
                s->probe_offs = p;
            uint64_t *q = p ? realloc(s->probe_want, n * sizeof *q) : NULL;
            if (!q)
                return 0;
            s->probe_want = q;
            s->probe_cap = n;
        }
        for (size_t i = 0; i < nh; i++)
            s->probe_offs[i] = (uint32_t)(8 * i);
        uint32_t vo = mv_seg_catalog_values_offset(cat);
        size_t at = nh;
        for (size_t i = 0; i < nm; i++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
            for (uint32_t k = 0; k < m->shards; k++) /* every shard's first word */
                s->probe_offs[at++] = vo + m->value_offset + k * m->shard_stride;
        }
        s->nprobe = n;
        s->probe_serial = s->cat->serial;
        s->probe_copy_at = s->pub_copies - 1; /* take the words below */
    }
    if (s->probe_copy_at != s->pub_copies)
        mv_coll__probe_take(s);
    return s->nprobe;
}

/* Whether a segment that is not due has changed since its published copy, by the
 * transport's probe (probe_words). 1 also when the probe fails (the read says what is wrong)
 * and when a catalog change it saw is to be loaded (the catalog was dropped); 0 without a
 * probe or without a published copy of the current catalog. */
int mv_coll__probe_changed(const mv_coll *c, seg *s)
{
    if (!s->t->probe || c->o.no_probe)
        return 0;
    if (!s->cat)
        return 1;
    size_t n = probe_words(c, s);
    if (!n)
        return 0;
    mv_coll__count(&s->probes);
    if (s->t->probe(s->t->ctx, s->src, s->probe_offs, s->probe_want, n) == 0)
        return 0;
    mv_coll__count(&s->probe_reads);
    return 1;
}

/* Whether a due segment can be served without a copy: its last read of the current
 * catalog was published whole (and fed to the pipeline), and the probe finds every word it
 * compares as in that copy. The values are then those already published, and so is all that
 * a copy's validation would check (the header is compared whole). A histogram record whose
 * count has not moved is taken as unchanged: a writer half-way through an observation is
 * seen by the next tick, whose probe sees the new count, as a torn copy would be re-read. */
int mv_coll__probe_same(const mv_coll *c, seg *s)
{
    if (!s->same_serial || !s->cat || s->same_serial != s->cat->serial)
        return 0;
    size_t n = probe_words(c, s);
    return n && s->t->probe(s->t->ctx, s->src, s->probe_offs, s->probe_want, n) == 0;
}
