/* mv_export_visit: the family walk for consumers other than the exposition (remote write): every
 * sample with the time it stands for. See mv_export.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "mv_export_int.h"

typedef struct {
    mv_export__sink k;
    const mv_export_visitor *vis;
} visit_sink;

static int v_family(mv_export__sink *k, const char *name, mv_expo_type t, const char *help,
                    const char *unit)
{
    const visit_sink *s = (const visit_sink *)k;
    return s->vis->family ? s->vis->family(s->vis->arg, name, t, help, unit) : 0;
}

/* Window summaries stand for the end of their window; everything else for the read. */
static int windowed(unsigned src)
{
    switch (src & 0xffu) {
    case VS_RATE:
    case VS_RATE_MAX:
    case VS_GMIN:
    case VS_GMAX:
    case VS_GMEAN:
    case VS_GLAST:
    case VS_Q:
    case VS_PSUM:
    case VS_PCOUNT:
    case VS_ANOM:
    case VS_GAP:
        return 1;
    default:
        return 0;
    }
}

int64_t mv_export__sample_ts_ms(const mv_export__vctx *c, unsigned src)
{
    uint64_t ns = c && c->v ? c->v->read_ns : 0;
    if (c && c->p && c->p->window_end_ns && windowed(src))
        ns = c->p->window_end_ns;
    return (int64_t)(ns / 1000000u);
}

static int v_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                    const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                    uint64_t u, int is_u, unsigned src)
{
    const visit_sink *s = (const visit_sink *)k;
    const mv_export__vctx *c = k->ctx;
    return s->vis->sample(s->vis->arg, c && c->v ? c->v->id : "", suffix, a, na, b, nb, xname, xval,
                          v, u, is_u, mv_export__sample_ts_ms(c, src));
}

int mv_export_visit(const mv_coll_snap *snap, const mv_export_sel *sel,
                    const mv_export_visitor *vis)
{
    visit_sink s = {.k = {.family = v_family, .sample = v_sample}, .vis = vis};
    return mv_export__walk_snap(snap, sel, &s.k);
}

int mv_export_visit_views(const mv_coll_seg_view *const *views, size_t n, const mv_export_sel *sel,
                          const mv_export_visitor *vis)
{
    visit_sink s = {.k = {.family = v_family, .sample = v_sample}, .vis = vis};
    return mv_export__walk_views(views, n, sel, 0, &s.k);
}

/* ---- A visit without a plan --------------------------------------------------------------- */

typedef struct {
    mv_export__sink k;
    const mv_export_plan_visitor *vis;
    const char *family;
    mv_expo_type type;
    uint32_t next;
    mv_expo_nh_bkt *nb; /* a gauge histogram's buckets */
    size_t nb_cap;
} unplanned_sink;

static int u_family(mv_export__sink *k, const char *name, mv_expo_type t, const char *help,
                    const char *unit)
{
    (void)help;
    (void)unit;
    unplanned_sink *s = (unplanned_sink *)k;
    s->family = name;
    s->type = t;
    return 0;
}

static int u_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                    const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                    uint64_t u, int is_u, unsigned src)
{
    unplanned_sink *s = (unplanned_sink *)k;
    uint32_t id = s->next++;
    int rc =
        s->vis->describe(s->vis->arg, id, s->family, s->type, suffix, a, na, b, nb, xname, xval);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    return s->vis->value(s->vis->arg, id, v, u, is_u, mv_export__sample_ts_ms(k->ctx, src));
}

static int u_native(mv_export__sink *k, const mv_export__vctx *c, const mv_expo_label *a, size_t na,
                    const mv_expo_label *b, size_t nb)
{
    unplanned_sink *s = (unplanned_sink *)k;
    uint32_t id = s->next++;
    int rc = s->vis->describe(s->vis->arg, id, s->family, s->type, NULL, a, na, b, nb, NULL, 0);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    mv_expo_native_in in;
    if (mv_export__native_in(c->p, c->metric, &in, &s->nb, &s->nb_cap) != 0)
        return -ENOMEM;
    return s->vis->native(s->vis->arg, id, &in, mv_export__sample_ts_ms(c, VS_GMEAN));
}

int mv_export__visit_unplanned(const mv_coll_seg_view *const *views, size_t n,
                               const mv_export_sel *sel, const mv_export_plan_visitor *vis)
{
    int rc = vis->begin(vis->arg);
    if (rc < 0)
        return rc;
    unplanned_sink s = {.k = {.family = u_family, .sample = u_sample, .native = u_native},
                        .vis = vis};
    rc = mv_export__walk_views(views, n, sel, vis->native ? MV_EXPORT__WALK_NATIVE : 0, &s.k);
    free(s.nb);
    return rc;
}
