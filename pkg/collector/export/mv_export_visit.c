/* mv_export_visit: the family walk for consumers other than the exposition (remote write): every
 * sample with the time it stands for. See mv_export.h. */
#include <math.h>

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

static int v_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                    const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                    uint64_t u, int is_u, unsigned src)
{
    const visit_sink *s = (const visit_sink *)k;
    const mv_export__vctx *c = k->ctx;
    uint64_t ns = c && c->v ? c->v->read_ns : 0;
    if (c && c->p && c->p->window_end_ns && windowed(src))
        ns = c->p->window_end_ns;
    return s->vis->sample(s->vis->arg, c && c->v ? c->v->id : "", suffix, a, na, b, nb, xname, xval,
                          v, u, is_u, (int64_t)(ns / 1000000u));
}

int mv_export_visit(const mv_coll_snap *snap, const mv_export_sel *sel,
                    const mv_export_visitor *vis)
{
    visit_sink s = {.k = {.family = v_family, .sample = v_sample}, .vis = vis};
    return mv_export__walk_snap(snap, sel, &s.k);
}
