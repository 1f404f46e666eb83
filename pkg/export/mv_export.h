/* mv_export: render collector snapshots as Prometheus text / OpenMetrics, and as JSON. */
#ifndef MV_EXPORT_H
#define MV_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"

typedef struct mv_export_stats {
    uint64_t series;         /* samples written */
    uint64_t dropped_type;   /* series dropped: same name, other type than the first pod's */
    uint64_t renamed_labels; /* metric labels renamed exported_<name> (clash with identity) */
} mv_export_stats;

/* Renders every valid segment's metrics, grouped into families by name across
 * segments (deterministic order: name, then identity labels, then catalog
 * order), followed by the collector's own microview_* series. `cumulative`
 * carries counts across calls (for microview_series_dropped_total); may be NULL.
 * Returns 0, or -ENOSPC if the body cap was hit (the body is then truncated
 * at a line boundary and the caller should say so). */
int mv_export_render(mv_expo *e, const mv_coll_snap *snap, mv_export_stats *cumulative);

/* Returns a JSON document describing every segment (identity, state, reason,
 * reads, errors, last read, metrics count). Free with free(). */
char *mv_export_segments_json(const mv_coll_snap *snap);

#endif
