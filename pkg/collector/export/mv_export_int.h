/* mv_export internals shared by the module's files, not part of its interface: the consumer
 * a family walk feeds and the segment checks every output applies. */
#ifndef MV_EXPORT_INT_H
#define MV_EXPORT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_export.h"

/* A consumer of families and samples: the exposition renderer or the value finder. */
typedef struct mv_export__sink mv_export__sink;
struct mv_export__sink {
    /* Returns 0 to receive the family's samples, 1 to skip them, <0 to stop. */
    int (*family)(mv_export__sink *k, const char *name, mv_expo_type t, const char *help,
                  const char *unit);
    int (*sample)(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                  const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                  uint64_t u, int is_u);
};

/* Walks every family of the snapshot in order (mv_export.h; derived series chosen by `sel`,
 * NULL = all), feeding `k`. Returns 0, -ENOMEM, or k's first negative return. */
int mv_export__walk_snap(const mv_coll_snap *snap, const mv_export_sel *sel, mv_export__sink *k);

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
