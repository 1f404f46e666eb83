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
 *     derived series of the last complete window: B_rate, B_rate_max,
 *     B_resets_total for counters (B = name without "_total"); G_window
 *     (summary), G_window_min/_max/_mean/_last for gauges; H_window (summary)
 *     for histograms; microview_changes_total{metric=...} per metric;
 *     microview_anomaly_score, microview_segment_read_interval_seconds and
 *     microview_segment_reads_total per segment. A derived family whose names
 *     collide with a raw family's is skipped and counted;
 *   - the collector's own microview_* series, FIRST, so that they survive a
 *     truncated body.
 * Families are ordered by name (raw and derived together), series by
 * identity labels then segment id then catalog order.
 */

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

/* The same for an array of segment views built by the caller (tests, benchmarks):
 * `cs` gives the collector-wide figures. */
int mv_export_render_views(mv_expo *e, const mv_coll_seg_view *const *views, size_t nviews,
                           const mv_coll_stats *cs, mv_export_stats *cumulative);

/* Returns a JSON document describing every segment (identity, state, reason,
 * reads, errors, last read, read interval, anomaly score; with `metrics` set
 * also every metric's current value and window figures). Free with free(). */
char *mv_export_segments_json(const mv_coll_snap *snap, int metrics);

/* The current value(s) of the series named `metric` (a raw or derived sample
 * name, e.g. "http_requests_total", "http_requests_rate",
 * "latency_seconds_window" with a quantile filter) whose labels match every
 * filter (key=value, identity or own labels, e.g. namespace, pod, quantile).
 * `agg` is "sum" (default), "avg", "max" or "min" and gives "value".
 * Response: {"metric":..., "aggregation":..., "value": x, "count": n,
 *            "series":[{"labels":{...}, "value": y}, ...]}.
 * Returns 0 and *out (free()), -ENOENT (no series matched; *out still holds
 * a JSON error document), -EINVAL (bad agg) or -ENOMEM. */
int mv_export_value_json(const mv_coll_snap *snap, const char *metric, const mv_seg_label *filters,
                         size_t nfilters, const char *agg, char **out);

#endif
