/* mv_export: render collector snapshots as Prometheus text / OpenMetrics, and as JSON. */
#ifndef MV_EXPORT_H
#define MV_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"

/*
 * Series rendered (docs/analytics.md lists every derived series):
 *   - raw values of every valid segment, with the segment's identity labels
 *     followed by the metric's own labels (a clash is renamed exported_<k>);
 *   - when the snapshot carries analytics (mv_coll_opts.analytics), the
 *     derived series of the last complete window (those the selection
 *     picks, see mv_export_sel): B_rate, B_rate_max, B_rate_short,
 *     B_resets_total for counters (B = name without "_total"); G_window
 *     (summary), G_window_min/_max/_mean/_last for gauges; H_window (summary)
 *     for histograms; microview_changes_total{metric=...} per metric;
 *     microview_anomaly_score, microview_segment_read_interval_seconds,
 *     microview_segment_reads_total, microview_segment_window_read_interval_
 *     max_seconds, microview_sketch_collapses_total and
 *     microview_analytics_memory_bytes per segment. A derived family whose names
 *     collide with a raw family's is skipped and counted;
 *   - the collector's own microview_* series, FIRST, so that they survive a
 *     truncated body.
 * Families are ordered by name (raw and derived together), series by
 * identity labels then segment id then catalog order.
 */

/*
 * Choice of derived series. Every metric gets the series of its type's mask
 * unless its family (raw metric name) has a mask of its own. Items that do
 * not apply to a type are ignored (rate on a gauge). A summary family
 * (G_window, H_window) is rendered when any quantile is chosen, with those
 * quantiles, its _sum and _count.
 */
enum {
    MV_DERIVED_RATE = 1u << 0,       /* counters: B_rate (window) */
    MV_DERIVED_RATE_MAX = 1u << 1,   /* counters: B_rate_max */
    MV_DERIVED_RATE_SHORT = 1u << 2, /* counters: B_rate_short (last ~1 s of reads) */
    MV_DERIVED_RESETS = 1u << 3,     /* counters: B_resets_total */
    MV_DERIVED_P50 = 1u << 4,        /* gauges, histograms: _window{quantile="0.5"} */
    MV_DERIVED_P90 = 1u << 5,
    MV_DERIVED_P99 = 1u << 6,
    MV_DERIVED_P999 = 1u << 7,
    MV_DERIVED_MIN = 1u << 8, /* gauges: _window_min/_max/_mean/_last */
    MV_DERIVED_MAX = 1u << 9,
    MV_DERIVED_MEAN = 1u << 10,
    MV_DERIVED_LAST = 1u << 11,
    MV_DERIVED_CHANGES = 1u << 12, /* microview_changes_total{metric=...} */
    MV_DERIVED_ALL = (1u << 13) - 1,
};

/* Collector default: counters rate + rate_short, gauges max + mean,
 * histograms p50 + p99 (a summary of 4 samples); 2 samples per counter or
 * gauge and 4 per histogram instead of 5 / 11 / 7 with every series. */
#define MV_EXPORT_DEFAULT_COUNTER   (MV_DERIVED_RATE | MV_DERIVED_RATE_SHORT)
#define MV_EXPORT_DEFAULT_GAUGE     (MV_DERIVED_MAX | MV_DERIVED_MEAN)
#define MV_EXPORT_DEFAULT_HISTOGRAM (MV_DERIVED_P50 | MV_DERIVED_P99)

typedef struct mv_export_sel mv_export_sel;

/* A selection holding the collector defaults. NULL on ENOMEM. Free with
 * mv_export_sel_destroy. Not thread-safe while being changed; read-only use
 * from several threads is safe. */
mv_export_sel *mv_export_sel_create(void);
void mv_export_sel_destroy(mv_export_sel *sel);
/* Applies one "KEY=ITEMS" spec: KEY is counter, gauge, histogram (the type's
 * mask) or a family name (that family's mask); ITEMS is a comma list of
 * rate, rate_max, rate_short, resets, p50, p90, p99, p999, quantiles (the
 * four), min, max, mean, last, changes, all, none. Later specs replace
 * earlier ones for the same KEY. Returns 0, -EINVAL (err says why) or -ENOMEM. */
int mv_export_sel_add(mv_export_sel *sel, const char *spec, char *err, size_t errlen);
/* The mask for a metric of `type` (MV_SEG_*) named `name`; sel NULL = all. */
uint32_t mv_export_sel_mask(const mv_export_sel *sel, uint8_t type, const char *name);

typedef struct mv_export_stats {
    uint64_t series;            /* samples written by the last render */
    uint64_t dropped_type;      /* series dropped: same name, other type than the first pod's */
    uint64_t dropped_collision; /* series dropped: their names collide with another family's */
    uint64_t renamed_labels;    /* metric labels renamed exported_<name> (clash with identity) */
    uint64_t truncated;         /* renders that hit the body cap */
    uint64_t dropped_invalid;   /* series the formats cannot express (e.g. no free label name) */
    /* Log rate limiting (internal): hashes of families already reported. */
#define MV_EXPORT_LOGGED 64
    uint64_t logged[MV_EXPORT_LOGGED];
    size_t nlogged;
    int logged_invalid;
} mv_export_stats;

/* Renders the snapshot (see above). `cumulative` carries counts across calls
 * (dropped/truncated counters); may be NULL. The truncation counter shown is
 * the count before this render. Returns 0, -ENOMEM, or -ENOSPC if the body
 * cap was hit (the body then holds complete families only; the caller should
 * log it). */
int mv_export_render(mv_expo *e, const mv_coll_snap *snap, mv_export_stats *cumulative);
/* The same with a choice of derived series (NULL = every derived series, as
 * mv_export_render). */
int mv_export_render_sel(mv_expo *e, const mv_coll_snap *snap, const mv_export_sel *sel,
                         mv_export_stats *cumulative);

/* The same for an array of segment views built by the caller (tests, benchmarks):
 * `cs` gives the collector-wide figures. */
int mv_export_render_views(mv_expo *e, const mv_coll_seg_view *const *views, size_t nviews,
                           const mv_coll_stats *cs, mv_export_stats *cumulative);
int mv_export_render_views_sel(mv_expo *e, const mv_coll_seg_view *const *views, size_t nviews,
                               const mv_coll_stats *cs, const mv_export_sel *sel,
                               mv_export_stats *cumulative);

/*
 * Exposition cache: a scrape of an unchanged table formats values only. The cache keeps,
 * between scrapes, every family's header and every sample's rendered name and label set
 * (escaped, per format, built on the first scrape in that format), and drops them when a
 * segment is added or removed, its identity labels change (an agent's label update comes as
 * a remove and an add), its catalog is re-read (cat_serial), its analytics start or stop
 * matching its catalog, a histogram is omitted or comes back, or the --derived selection
 * changes. What a derived series shows (and whether it is shown at all) is read from each
 * snapshot. In the protobuf format the plan holds each family's header fields and each
 * series' Metric pre-encoded (protobuf-c, through the renderer): a counter's or gauge's value
 * is patched in place, a histogram's or summary's value message is packed again per scrape
 * with the renderer's native-histogram settings, lengths are recomputed. The body is byte for byte
 * that of mv_export_render_views_sel for the same snapshot. Views without catalog serials
 * (cat_serial 0) are rendered without the cache. Thread-safe: renders through one cache take turns
 * on its mutex (mv_export_cache.c).
 */
typedef struct mv_export_cache mv_export_cache;
typedef struct mv_export_cache_stats {
    uint64_t builds;           /* plans built (first scrape of a format after a change) */
    uint64_t hits;             /* renders from a plan already built */
    uint64_t invalidations;    /* key changes: the plans were dropped */
    uint64_t uncached;         /* renders without the cache (no catalog serial, mixed types, or
                                  the plan past the limit) */
    uint64_t over_limit;       /* plan builds given up at the limit */
    size_t last_refused_bytes; /* what the last one held when it was given up */
    size_t bytes;              /* memory the plans hold now */
} mv_export_cache_stats;

mv_export_cache *mv_export_cache_create(void); /* NULL on ENOMEM */
/* The most memory the plans may hold together (all formats; 0, the default: no limit). A
 * plan that would pass it is given up while being built and its memory released; until the
 * table changes, scrapes in that format render without the cache: the same bytes, at the
 * uncached cost. */
void mv_export_cache_set_limit(mv_export_cache *c, size_t max_bytes);
void mv_export_cache_destroy(mv_export_cache *c);
void mv_export_cache_get_stats(mv_export_cache *c, mv_export_cache_stats *out);
/* mv_export_render_sel / mv_export_render_views_sel through the cache; the format is e's. */
int mv_export_render_cached(mv_export_cache *c, mv_expo *e, const mv_coll_snap *snap,
                            const mv_export_sel *sel, mv_export_stats *cumulative);
int mv_export_render_views_cached(mv_export_cache *c, mv_expo *e,
                                  const mv_coll_seg_view *const *views, size_t nviews,
                                  const mv_coll_stats *cs, const mv_export_sel *sel,
                                  mv_export_stats *cumulative);

/*
 * Visiting the series (remote write): every sample of the snapshot's families in exposition
 * order (mv_export__walk_snap; derived series chosen by `sel`, NULL = all; the collector's own
 * microview_* families are not included), each with the time it stands for: a raw value (and
 * a short rate, and the per-segment read figures) the time its segment was read, a window
 * summary (rates, quantiles, min/max/mean/last, the anomaly score) the end of its window.
 * `family` returns 0 to receive the family's samples, 1 to skip them, <0 to stop; `sample`
 * gets the sample's name parts as mv_expo_sample does, its value (exact integers as u with
 * is_u set) and ts_ms, and returns 0 or <0 to stop. Returns 0, -ENOMEM or the first <0.
 */
typedef struct mv_export_visitor {
    int (*family)(void *arg, const char *name, mv_expo_type t, const char *help, const char *unit);
    int (*sample)(void *arg, const char *segment_id, const char *suffix, const mv_expo_label *a,
                  size_t na, const mv_expo_label *b, size_t nb, const char *xname, double xval,
                  double v, uint64_t u, int is_u, int64_t ts_ms);
    void *arg;
} mv_export_visitor;
int mv_export_visit(const mv_coll_snap *snap, const mv_export_sel *sel,
                    const mv_export_visitor *vis);

/*
 * Visiting through the exposition cache: a consumer that visits the table again and again
 * (remote write, every interval) describes each series once and then receives values only.
 * The cache numbers the series every sample of the table could be (the plan, kept while the
 * cache's key holds; see mv_export_cache above) and, at each visit, gives the value and time
 * of those shown now (conditions, torn histograms: as mv_export_visit), in plan order:
 *   - `begin` (nseries 0) when a new plan is being built: every series number given before
 *     is void from then on;
 *   - `describe` once per series of the new plan, numbered 0, 1, ... in exposition order, with
 *     its family (name, type) and name parts as mv_export_visitor.sample gets them; it returns
 *     0 to receive the series' values, 1 never to receive them, <0 to stop;
 *   - `value` per series shown at this visit: its number, value (exact integers as u with
 *     is_u set) and the time it stands for (as mv_export_visit), 0 or <0 to stop.
 * A table the cache cannot plan (a segment without a catalog serial, derived families of mixed
 * types) is visited with a plan of this visit alone: begin, then describe and value per series.
 * One cache per consumer (its key is replaced by every table it sees). Returns 0, -ENOMEM or
 * the first <0 of a callback.
 */
typedef struct mv_export_plan_visitor {
    int (*begin)(void *arg);
    int (*describe)(void *arg, uint32_t series, const char *family, mv_expo_type t,
                    const char *suffix, const mv_expo_label *a, size_t na, const mv_expo_label *b,
                    size_t nb, const char *xname, double xval);
    int (*value)(void *arg, uint32_t series, double v, uint64_t u, int is_u, int64_t ts_ms);
    /* Optional: the gauge histograms of --native-gauge-histograms (<name>_window_distribution)
     * are visited too, described with type MV_EXPO_GAUGE_HISTOGRAM and valued here with their
     * window's native histogram (its buckets valid during the call) and the window's end.
     * NULL: they are not visited. One cache serves one visitor: set it always or never. */
    int (*native)(void *arg, uint32_t series, const mv_expo_native_in *in, int64_t ts_ms);
    void *arg;
} mv_export_plan_visitor;
int mv_export_visit_cached(mv_export_cache *c, const mv_coll_snap *snap, const mv_export_sel *sel,
                           const mv_export_plan_visitor *vis);
/* Both visits for an array of segment views built by the caller (tests, benchmarks). */
int mv_export_visit_views(const mv_coll_seg_view *const *views, size_t n, const mv_export_sel *sel,
                          const mv_export_visitor *vis);
int mv_export_visit_views_cached(mv_export_cache *c, const mv_coll_seg_view *const *views, size_t n,
                                 const mv_export_sel *sel, const mv_export_plan_visitor *vis);

/* Returns a JSON document describing every segment (identity, state, reason,
 * reads, errors, last read, read interval, anomaly score; with `metrics` set
 * also every metric's current value and window figures). Free with free(). */
char *mv_export_segments_json(const mv_coll_snap *snap, int metrics);

/* The current value(s) of the series named `metric` (a raw or derived sample
 * name, e.g. "http_requests_total", "http_requests_rate", every derived
 * series whatever the selection of the exposition,
 * "latency_seconds_window" with a quantile filter) whose labels match every
 * filter (key=value, identity or own labels, e.g. namespace, pod, quantile).
 * `agg` is "sum" (default), "avg", "max" or "min" and gives "value".
 * Response: {"metric":..., "aggregation":..., "value": x, "count": n,
 *            "series":[{"labels":{...}, "value": y}, ...]}.
 * Returns 0 and *out (free()), -ENOENT (no series matched; *out still holds
 * a JSON error document), -EINVAL (bad agg) or -ENOMEM. */
int mv_export_value_json(const mv_coll_snap *snap, const char *metric, const mv_seg_label *filters,
                         size_t nfilters, const char *agg, char **out);

/* Decides whether a segment's series belong to the query (1) or not (0), from the segment
 * (its identity and pod labels) alone. */
typedef int (*mv_export_seg_match_fn)(void *arg, const mv_coll_seg_view *seg);

typedef struct mv_export_value_req {
    const char *metric;
    const mv_seg_label *filters;
    size_t nfilters;
    const char *agg;              /* NULL = sum */
    mv_export_seg_match_fn match; /* NULL = every segment */
    void *match_arg;
    /* A workload query: no matching series is a well-formed empty answer (return 0, "count":0,
     * "value":0, "series":[]) rather than -ENOENT, because a node without the workload's pods
     * is a normal answer when every node's collector is asked (KEDA's
     * aggregateFromKubeServiceEndpoints). */
    int empty_ok;
} mv_export_value_req;

/* mv_export_value_json with a segment predicate and the empty answer above. */
int mv_export_value_json_req(const mv_coll_snap *snap, const mv_export_value_req *r, char **out);

#endif
