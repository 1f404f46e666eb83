/* mv_export internals shared by the module's files, not part of its interface: the consumer
 * a family walk feeds and the segment checks every output applies. */
#ifndef MV_EXPORT_INT_H
#define MV_EXPORT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_export.h"

/* Where a sample's value comes from: what emit() reads for it, and what the exposition cache
 * (mv_export_cache.c) keeps per cached line to read the value again at each scrape, through
 * the same mv_export__value(). A source and its sub-index (bucket, quantile) are packed as
 * MV_EXPORT_SRC(vs, sub). */
enum mv_export__vs {
    VS_NONE = 0,
    VS_COUNTER, /* raw counter (u64) */
    VS_GAUGE,   /* raw gauge */
    VS_HBUCKET, /* raw histogram: cumulative count up to bucket `sub` (u64) */
    VS_HSUM,
    VS_HCOUNT, /* (u64) */
    VS_RATE,
    VS_RATE_MAX,
    VS_RATE_SHORT,
    VS_RESETS, /* (u64) */
    VS_GMIN,
    VS_GMAX,
    VS_GMEAN,
    VS_GLAST,
    VS_Q, /* window quantile `sub` */
    VS_PSUM,
    VS_PCOUNT,  /* (u64) */
    VS_CHANGES, /* (u64) */
    VS_ANOM,
    VS_COLL, /* (u64) */
    VS_GAP,
    VS_MEM, /* (u64) */
    VS_IVAL,
    VS_BUSY,
    VS_FULL,      /* (double) used fraction of the larger-used area, from the copied header */
    VS_STALE,     /* (u64) */
    VS_OMIT,      /* (u64) */
    VS_READS,     /* (u64) */
    VS_COUNTER_F, /* raw fractional counter (record type 4) */
};
#define MV_EXPORT_SRC(vs, sub) ((unsigned)(vs) | (unsigned)(sub) << 8)

/* What a value is read from: the segment's view, its analytics, the metric (NULL for
 * per-segment series) and, for a histogram, its consistent copy and the running bucket sum
 * (VS_HBUCKET lines come in bucket order). */
typedef struct mv_export__vctx {
    const mv_coll_seg_view *v;
    const mv_pipe_view *p;
    const mv_seg_metric *m;
    uint32_t metric;
    uint64_t cum;
    mv_seg_hist_view hv;
} mv_export__vctx;

/* The value of source `src` (MV_EXPORT_SRC): returns 1 with *u set for an integer, 0 with
 * *d set for a double. */
int mv_export__value(mv_export__vctx *c, unsigned src, double *d, uint64_t *u);

/* A consumer of families and samples: the exposition renderer or the value finder. */
typedef struct mv_export__sink mv_export__sink;
struct mv_export__sink {
    /* Returns 0 to receive the family's samples, 1 to skip them, <0 to stop. */
    int (*family)(mv_export__sink *k, const char *name, mv_expo_type t, const char *help,
                  const char *unit);
    /* `src` tells where the value came from (MV_EXPORT_SRC). */
    int (*sample)(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                  const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                  uint64_t u, int is_u, unsigned src);
    /* A gauge histogram's series (the walk's native entries: protobuf renders only): labels,
     * and the native histogram read from c (mv_export__native_in). NULL: skipped. */
    int (*native)(mv_export__sink *k, const struct mv_export__vctx *c, const mv_expo_label *a,
                  size_t na, const mv_expo_label *b, size_t nb);
    /* Set by the walk before each sample: what the value was read from (its segment and
     * analytics, for the sample's time). */
    const mv_export__vctx *ctx;
    /* The segment whose samples are being fed (set by mv_export__emit before them). */
    const mv_coll_seg_view *seg;
};

/* ---- The family walk ------------------------------------------------------------------------- */

#define MV_EXPORT_NO_METRIC UINT32_MAX

/* When an entry is rendered: always, or only while the segment's analytics say so (the
 * exposition cache keeps these entries and tests the condition at each scrape). */
enum mv_export__cond {
    COND_ALWAYS = 0,
    COND_WINDOW,     /* p->m[metric].has_window */
    COND_RATE_SHORT, /* !isnan(p->m[metric].rate_short) */
    COND_ANOM,       /* !isnan(p->anomaly_score) */
    COND_GAP,        /* p->window_end_ns != 0 */
    COND_NATIVE,     /* p->m[metric].native != 0 */
};

typedef struct mv_export__entry {
    const char *name;
    uint32_t seg;    /* index into the sorted segment order */
    uint32_t metric; /* index in the segment's catalog, MV_EXPORT_NO_METRIC for per-segment */
    uint8_t kind;    /* what it renders (mv_export.c's kinds) */
    uint8_t drop;    /* 1 type conflict, 2 name collision */
    uint16_t mask;   /* summaries: the MV_DERIVED_P* chosen */
    uint8_t cond;    /* mv_export__cond */
} mv_export__entry;

typedef struct mv_export__walk {
    const mv_coll_seg_view **segs; /* sorted */
    size_t nseg;
    mv_export__entry *ents; /* sorted: by name (families), raw first, then segment, metric */
    size_t n;
    char *arena;
    char *drop_buf;
    uint8_t *dup; /* per sorted segment: its identity labels equal another's */
    uint64_t dropped_type, dropped_collision, renamed, unrenderable;
    const char *collided_name; /* a family dropped for a name collision, for the log */
    /* Set by mv_export__walk_build: a derived-only family whose entries' types differ, so
     * that which of them are dropped depends on which are present. */
    int mixed_derived;
    int every;                     /* built with `every` (below) */
    int native;                    /* built with MV_EXPORT__WALK_NATIVE */
    const char *raw_collided_name; /* a raw family dropped for a name collision */
} mv_export__walk;

/* Builds the sorted entries and marks drops. With `every` (MV_EXPORT__WALK_EVERY) set,
 * derived entries whose condition (cond) does not hold now are kept as well (for the
 * exposition cache: drops then count them too, and the caller tests cond). With
 * MV_EXPORT__WALK_NATIVE (protobuf renders), gauges whose analytics publish native buckets
 * get their <name>_window_distribution gauge histogram entry. Free with
 * mv_export__walk_free, also on error. Returns 0 or -ENOMEM. */
#define MV_EXPORT__WALK_EVERY  1
#define MV_EXPORT__WALK_NATIVE 2
int mv_export__walk_build(mv_export__walk *w, const mv_coll_seg_view *const *views, size_t nviews,
                          const mv_export_sel *sel, int flags);
/* The native histogram of gauge `metric` in p's window (empty when it has none), its buckets
 * converted into *buf (grown as needed, kept by the caller). 0 or -ENOMEM. */
int mv_export__native_in(const mv_pipe_view *p, uint32_t metric, mv_expo_native_in *in,
                         mv_expo_nh_bkt **buf, size_t *cap);
void mv_export__walk_free(mv_export__walk *w);
/* Feeds entry `en`'s samples to k (counting renamed and unrenderable series in w). */
int mv_export__emit(mv_export__sink *k, mv_export__walk *w, const mv_export__entry *en);
/* The family header an entry gives when it is the first of its family shown. */
void mv_export__family_info(const mv_export__walk *w, const mv_export__entry *en, mv_expo_type *t,
                            const char **help, const char **unit);
/* Does the entry's condition hold for the segment's analytics p (NULL: none)? */
int mv_export__cond_holds(const mv_export__entry *en, const mv_pipe_view *p);
/* The order of segments in a walk (identity labels, then id). */
int mv_export__seg_cmp(const void *x, const void *y);
/* The collector's own microview_* families, rendered first. */
int mv_export__render_self(mv_expo *e, const mv_coll_seg_view *const *views, size_t n,
                           const mv_coll_stats *cs, const mv_export_stats *st);
/* Logs (once) the reasons series were dropped. */
void mv_export__note_drops(mv_export_stats *st, const char *collided_name, uint64_t invalid);
/* The selection's serial: changes whenever the selection does, never reused (NULL: 0). */
uint64_t mv_export__sel_serial(const mv_export_sel *sel);

/* The time (ms) a sample from `src` of c's segment stands for: its window's end for a window
 * summary, else the segment's read. */
int64_t mv_export__sample_ts_ms(const mv_export__vctx *c, unsigned src);
/* mv_export_visit_cached's visit of a table it cannot plan: begin, then describe and value per
 * sample of an uncached walk. */
int mv_export__visit_unplanned(const mv_coll_seg_view *const *views, size_t n,
                               const mv_export_sel *sel, const mv_export_plan_visitor *vis);

/* Walks every family of the snapshot in order (mv_export.h; derived series chosen by `sel`,
 * NULL = all), feeding `k`. Returns 0, -ENOMEM, or k's first negative return. */
int mv_export__walk_snap(const mv_coll_snap *snap, const mv_export_sel *sel, mv_export__sink *k);
/* The same for an array of views, with mv_export__walk_build's flags (MV_EXPORT__WALK_*). */
int mv_export__walk_views(const mv_coll_seg_view *const *views, size_t n, const mv_export_sel *sel,
                          int flags, mv_export__sink *k);

/* A segment whose values are served: catalog and hot copy published, state OK. */
static inline int mv_export__seg_valid(const mv_coll_seg_view *v)
{
    return v->cat && v->hot && v->state == MV_COLL_OK;
}

/* The segment's analytics, when they were computed for the catalog published with it. */
static inline const mv_pipe_view *mv_export__seg_pipe(const mv_coll_seg_view *v)
{
    const mv_pipe_view *p = v->pipe;
    return p && p->cat == (const void *)v->cat && p->n == mv_seg_catalog_count(v->cat) ? p : NULL;
}

#endif
