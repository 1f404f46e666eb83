/* mv_segment internals shared by its source files: the parsed catalog and the error helper. */
#ifndef MV_SEGMENT_INT_H
#define MV_SEGMENT_INT_H

#include "mv_segment.h"

struct mv_seg_catalog {
    uint64_t generation, instance, segment_size;
    uint32_t metric_count, values_offset, values_used, catalog_used, hot_size, fold_size;
    size_t count, nsharded;
    size_t nall, ntomb; /* records listed in metrics (live first, then deleted); tombstones */
    uint32_t *sharded;  /* indices of the sharded records */
    mv_seg_metric *metrics;
    mv_seg_label *labels;
    double *bounds;
    char *bytes; /* copy of the catalog area */
};

/* Fills `err` (may be NULL) with `r` and a printf-style detail; returns `r`. */
__attribute__((format(printf, 3, 4))) mv_seg_reason mv_seg__fail(mv_seg_error *err, mv_seg_reason r,
                                                                 const char *fmt, ...);

#endif
