/* mv_export_src: where a sample's value comes from (mv_export_int.h's value sources), read the
 * same way by the family walk (mv_export.c) and by the exposition cache at each scrape
 * (mv_export_cache.c), and when a derived entry is shown. */
#include <errno.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "mv_export_int.h"

/* The used fraction of the fuller of the segment's two areas, from the header of the copy the
 * tick read (the counts it holds are the writers' at the copy; a size of 0 or a count over its
 * size, which a validated catalog cannot have, reads as full). NaN without a copy. */
static double fullness(const mv_coll_seg_view *v)
{
    if (!v->hot || v->hot_len < sizeof(mv_seg_header))
        return NAN;
    mv_seg_header h;
    memcpy(&h, v->hot, sizeof h);
    double fv =
        h.values_size && h.values_used <= h.values_size ? (double)h.values_used / h.values_size : 1;
    double fc = h.catalog_size && h.catalog_used <= h.catalog_size
                    ? (double)h.catalog_used / h.catalog_size
                    : 1;
    return fv > fc ? fv : fc;
}

int mv_export__value(mv_export__vctx *c, unsigned src, double *d, uint64_t *u)
{
    unsigned sub = src >> 8;
    const mv_pipe_out *o = c->p && c->metric != MV_EXPORT_NO_METRIC ? &c->p->m[c->metric] : NULL;
    switch (src & 0xff) {
    case VS_COUNTER:
        *u = mv_seg_read_counter(c->v->hot, c->m);
        return 1;
    case VS_COUNTER_F:
        *d = mv_seg_read_counter_f(c->v->hot, c->m);
        return 0;
    case VS_GAUGE:
        *d = mv_seg_read_gauge(c->v->hot, c->m);
        return 0;
    case VS_HBUCKET:
        c->cum += c->hv.buckets[sub];
        *u = c->cum;
        return 1;
    case VS_HSUM:
        *d = c->hv.sum;
        return 0;
    case VS_HCOUNT:
        *u = c->hv.count;
        return 1;
    case VS_RATE:
        *d = o->rate;
        return 0;
    case VS_RATE_MAX:
        *d = o->rate_max;
        return 0;
    case VS_RATE_SHORT:
        *d = o->rate_short;
        return 0;
    case VS_RESETS:
        *u = o->resets;
        return 1;
    case VS_GMIN:
        *d = o->min;
        return 0;
    case VS_GMAX:
        *d = o->max;
        return 0;
    case VS_GMEAN:
        *d = o->mean;
        return 0;
    case VS_GLAST:
        *d = o->last;
        return 0;
    case VS_Q:
        *d = o->q[sub];
        return 0;
    case VS_PSUM:
        *d = o->sum;
        return 0;
    case VS_PCOUNT:
        *u = o->count;
        return 1;
    case VS_CHANGES:
        *u = o->changes;
        return 1;
    case VS_ANOM:
        *d = c->p->anomaly_score;
        return 0;
    case VS_COLL:
        *u = c->p->collapses;
        return 1;
    case VS_GAP:
        *d = (double)c->p->window_max_interval_ns / 1e9;
        return 0;
    case VS_MEM:
        *u = c->p->mem_bytes;
        return 1;
    case VS_IVAL:
        *d = (double)c->v->read_interval_ns / 1e9;
        return 0;
    case VS_BUSY: {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        *d = c->v->busy_since_ns && now > c->v->busy_since_ns
                 ? (double)(now - c->v->busy_since_ns) / 1e9
                 : 0;
        return 0;
    }
    case VS_FULL:
        *d = fullness(c->v);
        return 0;
    case VS_STALE:
        *u = c->v->stale_histograms;
        return 1;
    case VS_OMIT:
        *u = c->v->omitted_histograms;
        return 1;
    case VS_READS:
        *u = c->v->reads;
        return 1;
    default:
        *d = NAN;
        return 0;
    }
}

int mv_export__cond_holds(const mv_export__entry *en, const mv_pipe_view *p)
{
    switch (en->cond) {
    case COND_WINDOW:
        return p->m[en->metric].has_window != 0;
    case COND_RATE_SHORT:
        return !isnan(p->m[en->metric].rate_short);
    case COND_ANOM:
        return !isnan(p->anomaly_score);
    case COND_GAP:
        return p->window_end_ns != 0;
    case COND_NATIVE:
        return p->m[en->metric].native != 0;
    default:
        return 1;
    }
}

int mv_export__native_in(const mv_pipe_view *p, uint32_t metric, mv_expo_native_in *in,
                         mv_expo_nh_bkt **buf, size_t *cap)
{
    const mv_pipe_out *o = &p->m[metric];
    memset(in, 0, sizeof *in);
    if (!o->native || o->native > p->nnative)
        return 0;
    const mv_sketch_nbucket *h = &p->native[o->native - 1];
    size_t n = h->negative;
    if (n > p->nnative - o->native || h->index < MV_EXPO_NH_SCHEMA_MIN ||
        h->index > MV_EXPO_NH_SCHEMA_MAX)
        return 0;
    if (n > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < n)
            c *= 2;
        mv_expo_nh_bkt *q = realloc(*buf, c * sizeof *q);
        if (!q)
            return -ENOMEM;
        *buf = q;
        *cap = c;
    }
    for (size_t i = 0; i < n; i++)
        (*buf)[i] = (mv_expo_nh_bkt){h[1 + i].index, h[1 + i].negative, h[1 + i].count};
    in->schema = h->index;
    in->zero_count = h->count;
    in->b = *buf;
    in->nb = n;
    in->count = o->count;
    in->sum = o->sum;
    return 0;
}
