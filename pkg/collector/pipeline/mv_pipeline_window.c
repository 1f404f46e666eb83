/* mv_pipeline_window: the window summaries of a segment's pipeline. At the first read after
 * a boundary, what the closing window needs is snapshotted (close_begin); the summaries are
 * computed over the following reads within cfg.close_spread_ns (close_step) and published
 * at once. The bottom of the module: calls no other file of it (mv_pipeline.c, the feeds, and
 * mv_pipeline_create.c sit above). See mv_pipeline.c for the records. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mv_pipeline_int.h"

/* The quantiles every window summary reports (mv_pipeline.h). */
const double mv_pipe_quantiles[MV_PIPE_QUANTILES] = {0.5, 0.9, 0.99, 0.999};

/* Frees a segment's closing-window state (also when the segment is destroyed). */
void mv_pipe__cl_free(mv_pipe_seg *s)
{
    free(s->cl);
    free(s->cl_out);
    free(s->cl_pending);
    s->cl = NULL;
    s->cl_out = NULL;
    s->cl_pending = NULL;
    s->cl_left = 0;
}

/* ---- Window summaries ----------------------------------------------------------------------- */

/* Representative of pod bucket b (of nb = nbounds + 1): the value every observation in it
 * is taken to be (as mv_sketch_add_buckets does). */
double mv_pipe__bucket_rep(const double *bounds, uint32_t nbounds, uint32_t b)
{
    double rep;
    if (b == 0) {
        rep = bounds[0];
    } else if (b == nbounds) {
        rep = bounds[nbounds - 1];
    } else {
        double lo = bounds[b - 1], hi = bounds[b];
        if (lo >= 0.0 || hi <= 0.0)
            rep = 2.0 * lo * (hi / (lo + hi)); /* same sign: lo + hi != 0 */
        else
            rep = 0.5 * (lo + hi);
    }
    if (!isfinite(rep))
        rep = b == 0 ? bounds[0] : bounds[b - 1];
    return rep;
}

static void summarise_counter(mv_pipe_seg *s, size_t j, const wsnap *w, mv_pipe_out *o)
{
    cctr *c = &s->cc[j];
    uint64_t base_e = s->cl_win_e > c->prime_e ? s->cl_win_e : c->prime_e;
    uint64_t dt_ns = s->cl_e > base_e ? s->cl_e - base_e : 0;
    double dt = (double)dt_ns * 1e-9;
    memset(o, 0, sizeof *o);
    o->type = MV_SEG_COUNTER;
    o->changes = c->changes;
    o->resets = c->resets;
    o->has_window = dt_ns > 0;
    o->rate = dt_ns ? (double)(w->u - c->win_base) * pipe_ctr_scale(&s->hc[j]) / dt : NAN;
    o->rate_max = dt_ns ? w->d : NAN;
    o->rate_short = NAN;
    c->win_base = w->u;
}

mv_sketch *mv_pipe__gauge_sketch(mv_pipe_seg *s, size_t j)
{
    if (!s->hg[j].sk) {
        mv_sketch_config sc = {.alpha = s->cfg.alpha, .max_buckets = s->cfg.sketch_buckets};
        /* NULL on ENOMEM: the window keeps its last value */
        if (mv_sketch_create(&sc, &s->hg[j].sk) == 0)
            s->sk_mem += mv_sketch_memory_used(s->hg[j].sk);
    }
    return s->hg[j].sk;
}

/* Room for n more native buckets in the closing window's buffer; 0 or -1 (no memory: the
 * gauge's window has no native histogram). Grows only past the largest window so far. */
static int native_room(mv_pipe_seg *s, size_t n)
{
    int c = !s->nat_pub;
    size_t need = s->nat_len[c] + n;
    if (need <= s->nat_cap[c])
        return 0;
    if (need > UINT32_MAX - 1)
        return -1;
    size_t cap = s->nat_cap[c] ? s->nat_cap[c] : 64;
    while (cap < need)
        cap *= 2;
    mv_sketch_nbucket *p = realloc(s->nat[c], cap * sizeof *p);
    if (!p)
        return -1;
    s->nat_mem += (cap - s->nat_cap[c]) * sizeof *p;
    s->nat[c] = p;
    s->nat_cap[c] = cap;
    return 0;
}

/* Publishes gauge o's window as native buckets: the sketch's (sk), or `run` reads of one
 * value `last` (sk NULL). */
static void native_put(mv_pipe_seg *s, mv_pipe_out *o, const mv_sketch *sk, double last,
                       uint64_t run)
{
    int c = !s->nat_pub;
    int32_t schema = s->cfg.native_schema;
    size_t head = s->nat_len[c];
    mv_sketch_nbucket h = {.index = schema};
    size_t nb;
    if (sk) {
        size_t room = s->nat_cap[c] > head + 1 ? s->nat_cap[c] - head - 1 : 0;
        nb = mv_sketch_to_native(sk, schema, room ? s->nat[c] + head + 1 : NULL, room, &h.count);
        if (nb > room) {
            if (native_room(s, nb + 1) != 0)
                return;
            mv_sketch_to_native(sk, schema, s->nat[c] + head + 1, nb, &h.count);
        }
    } else {
        if (native_room(s, 2) != 0)
            return;
        nb = 0;
        if (fabs(last) <= MV_SKETCH_NATIVE_ZERO) {
            h.count = run;
        } else {
            s->nat[c][head + 1] =
                (mv_sketch_nbucket){mv_sketch_native_index(fabs(last), schema), last < 0, run};
            nb = 1;
        }
    }
    if (native_room(s, nb + 1) != 0)
        return;
    h.negative = (uint32_t)nb;
    s->nat[c][head] = h;
    s->nat_len[c] = head + 1 + nb;
    o->native = (uint32_t)(head + 1);
}

/* Summary of gauge j: its sketch (if its window held several values), with the runs still
 * waiting for it and the pending run. */
static void summarise_gauge(mv_pipe_seg *s, size_t j, const wsnap *w, mv_pipe_out *o)
{
    cgauge *g = &s->cg[j];
    mv_sketch **skp = &s->hg[j].sk;
    uint64_t run = w->u;
    double last = w->d;
    double pv[GPEND];
    uint32_t pn[GPEND];
    uint32_t np = gauge_take(s, j, pv, pn);
    if (np) {
        mv_sketch *sk = mv_pipe__gauge_sketch(s, j);
        if (sk) {
            mv_sketch_runs r = {.sk = sk, .value = pv, .count = pn, .n = np};
            s->sk_mem += mv_sketch_add_runs(&r, 1);
        }
    }
    memset(o, 0, sizeof *o);
    o->type = MV_SEG_GAUGE;
    o->changes = g->changes;
    o->last = last;
    o->rate = o->rate_max = o->rate_short = NAN;
    if (*skp && mv_sketch_count(*skp)) {
        mv_sketch *sk = *skp;
        if (run) {
            size_t m0 = mv_sketch_memory_used(sk);
            mv_sketch_add_n(sk, last, run);
            s->sk_mem += mv_sketch_memory_used(sk) - m0;
        }
        uint64_t cnt = mv_sketch_count(sk);
        o->count = cnt;
        o->sum = mv_sketch_sum(sk);
        o->has_window = 1;
        mv_sketch_quantiles(sk, mv_pipe_quantiles, MV_PIPE_QUANTILES, o->q);
        o->min = mv_sketch_min(sk);
        o->max = mv_sketch_max(sk);
        o->mean = o->sum / (double)cnt;
        o->collapses = g->collapses + mv_sketch_collapses(sk);
        if (s->cfg.native_schema != MV_PIPE_NATIVE_OFF)
            native_put(s, o, sk, last, 0);
        mv_sketch_reset(sk);
    } else {
        if (*skp) {
            /* A whole window on one value: the sketch is not needed any more. */
            g->collapses += mv_sketch_collapses(*skp);
            s->sk_mem -= mv_sketch_memory_used(*skp);
            mv_sketch_destroy(*skp);
            *skp = NULL;
        }
        o->collapses = g->collapses;
        o->count = run;
        o->has_window = run > 0;
        if (run) {
            /* One distinct value: every figure is that value, exactly. */
            o->sum = last * (double)run;
            o->min = o->max = o->mean = last;
            for (int q = 0; q < MV_PIPE_QUANTILES; q++)
                o->q[q] = last;
            if (s->cfg.native_schema != MV_PIPE_NATIVE_OFF)
                native_put(s, o, NULL, last, run);
        } else {
            o->min = o->max = o->mean = NAN;
            for (int q = 0; q < MV_PIPE_QUANTILES; q++)
                o->q[q] = NAN;
        }
    }
    s->cl_collapses += o->collapses;
}

/* Summary of histogram j from its window bucket counts: quantile = the representative of
 * the bucket holding the rank (within the bucket's width of the truth). */
static void summarise_hist(mv_pipe_seg *s, size_t j, const wsnap *w, mv_pipe_out *o)
{
    chist *h = &s->ch[j];
    const mv_seg_metric *m = mv_pipe__cat_m(s, h->idx);
    uint64_t *wb = h->b + h->nb, cnt = h->win_count;
    memset(o, 0, sizeof *o);
    o->type = MV_SEG_HISTOGRAM;
    o->changes = h->changes;
    o->resets = h->resets;
    o->rate = o->rate_max = o->rate_short = NAN;
    o->has_window = w->u != 0; /* primed at the close */
    o->count = cnt;
    o->sum = h->win_sum;
    o->last = NAN;
    o->min = o->max = o->mean = NAN;
    for (int q = 0; q < MV_PIPE_QUANTILES; q++)
        o->q[q] = NAN;
    if (cnt) {
        o->mean = o->sum / (double)cnt;
        uint64_t seen = 0;
        int q = 0;
        uint64_t rank = (uint64_t)floor(mv_pipe_quantiles[0] * (double)(cnt - 1));
        for (uint32_t b = 0; b < h->nb; b++) {
            if (!wb[b])
                continue;
            double rep = mv_pipe__bucket_rep(m->bounds, m->bucket_count, b);
            if (isnan(o->min))
                o->min = rep;
            o->max = rep;
            seen += wb[b];
            while (q < MV_PIPE_QUANTILES && seen > rank) {
                o->q[q++] = rep;
                if (q < MV_PIPE_QUANTILES)
                    rank = (uint64_t)floor(mv_pipe_quantiles[q] * (double)(cnt - 1));
            }
        }
        memset(wb, 0, h->nb * sizeof *wb);
    }
    h->win_count = 0;
    h->win_sum = 0;
}

/* Summarises catalog metric i of the closing window. */
void mv_pipe__close_one(mv_pipe_seg *s, size_t i)
{
    if (!s->cl_pending[i])
        return;
    s->cl_pending[i] = 0;
    s->cl_left--;
    uint32_t l = s->loc[i];
    if (LOC_T(l) == T_CTR)
        summarise_counter(s, LOC_J(l), &s->cl[i], &s->cl_out[i]);
    else if (LOC_T(l) == T_GAUGE)
        summarise_gauge(s, LOC_J(l), &s->cl[i], &s->cl_out[i]);
    else
        summarise_hist(s, LOC_J(l), &s->cl[i], &s->cl_out[i]);
}

void mv_pipe__window_span(const mv_pipe_config *cfg, uint64_t w, uint64_t *lo, uint64_t *hi)
{
    /* [w W - phase, (w + 1) W - phase), clamped to [0, UINT64_MAX]. */
    uint64_t W = cfg->window_ns, ph = cfg->window_phase_ns;
    uint64_t a = w <= UINT64_MAX / W ? w * W : UINT64_MAX;
    uint64_t b = a <= UINT64_MAX - W ? a + W : UINT64_MAX;
    *lo = a > ph ? a - ph : 0;
    *hi = b == UINT64_MAX ? UINT64_MAX : b - ph;
}

/* Called with mu held: publishes the closing window once every summary is in. */
static void close_publish(mv_pipe_seg *s)
{
    mv_pipe_out *old = s->pub;
    s->pub = s->cl_out;
    s->cl_out = old; /* freed below */
    mv_pipe__window_span(&s->cfg, s->cl_w, &s->pub_start, &s->pub_end);
    s->pub_score = s->cl_score;
    s->pub_steps = s->cl_steps;
    s->pub_collapses = s->cl_collapses;
    s->pub_reads = s->cl_reads;
    s->pub_gap_max = s->cl_gap_max;
    s->nat_pub = !s->nat_pub; /* the closing window's native buckets */
    mv_pipe__cl_free(s);
}

/* Called with mu held: finishes a closing window at once. */
void mv_pipe__close_all(mv_pipe_seg *s)
{
    if (!s->cl)
        return;
    for (size_t i = 0; i < s->n && s->cl_left; i++)
        mv_pipe__close_one(s, i);
    close_publish(s);
}

/* Called with mu held, at the first read after a boundary (before it is processed):
 * snapshots what window w needs; summaries follow within close_spread_ns. */
void mv_pipe__close_begin(mv_pipe_seg *s, uint64_t w, uint64_t now_ns)
{
    size_t n1 = s->n ? s->n : 1;
    s->cl = malloc(n1 * sizeof *s->cl);
    s->cl_out = malloc(n1 * sizeof *s->cl_out);
    s->cl_pending = malloc(n1);
    s->cl_w = w;
    s->cl_e = s->e;
    s->cl_win_e = s->win_e;
    s->cl_score = s->fd_wmax;
    s->cl_steps = s->fd_steps;
    s->cl_reads = s->win_reads;
    s->cl_gap_max = s->win_gap_max;
    s->cl_collapses = 0;
    s->cl_deadline = now_ns + s->cfg.close_spread_ns;
    s->nat_len[!s->nat_pub] = 0; /* the closing window's native buckets start empty */
    s->win_e = s->e;
    s->fd_wmax = NAN;
    s->win_reads = s->win_gap_max = 0;
    int ok = s->cl && s->cl_out && s->cl_pending;
    for (size_t j = 0; j < s->nc; j++) {
        hctr *h = &s->hc[j];
        wsnap sn = {.u = h->prev + s->coff[j], .d = h->rate_max};
        h->rate_max = 0;
        if (ok) {
            s->cl[s->cc[j].idx] = sn;
        } else { /* no memory to defer: the counter's window is lost, its base moves on */
            s->cc[j].win_base = sn.u;
        }
    }
    for (size_t j = 0; j < s->ng; j++) {
        hgauge *h = &s->hg[j];
        uint32_t run = gauge_run(s, h);
        if (ok) {
            s->cl[s->cg[j].idx] = (wsnap){.u = run, .d = h->last};
        } else {
            /* The window's runs go to the sketch, which is reset below. */
            double pv[GPEND];
            uint32_t pn[GPEND];
            uint32_t np = gauge_take(s, j, pv, pn);
            if (np && h->sk) {
                mv_sketch_runs r = {.sk = h->sk, .value = pv, .count = pn, .n = np};
                s->sk_mem += mv_sketch_add_runs(&r, 1);
            }
            if (run && h->sk) {
                size_t m0 = mv_sketch_memory_used(h->sk);
                mv_sketch_add_n(h->sk, h->last, run);
                s->sk_mem += mv_sketch_memory_used(h->sk) - m0;
            }
        }
        h->run0 = s->greads; /* run 0 */
    }
    for (size_t j = 0; j < s->nh && ok; j++)
        s->cl[s->ch[j].idx] = (wsnap){.u = s->hh[j].primed};
    if (!ok) {
        /* Out of memory: this window's summary is skipped (the published one stays). */
        mv_pipe__cl_free(s);
        for (size_t j = 0; j < s->ng; j++)
            if (s->hg[j].sk)
                mv_sketch_reset(s->hg[j].sk);
        for (size_t j = 0; j < s->nh; j++) {
            memset(s->ch[j].b + s->ch[j].nb, 0, s->ch[j].nb * sizeof(uint64_t));
            s->ch[j].win_count = 0;
            s->ch[j].win_sum = 0;
        }
        return;
    }
    memset(s->cl_pending, 1, n1);
    s->cl_left = s->n;
    s->cl_next = 0;
    if (!s->n)
        close_publish(s);
}

/* Called with mu held after a read: this read's share of the pending summaries. */
void mv_pipe__close_step(mv_pipe_seg *s, uint64_t now_ns, uint64_t gap)
{
    size_t share = s->cl_left;
    if (now_ns < s->cl_deadline && gap > 0 && gap < s->cl_deadline - now_ns) {
        uint64_t reads_left = (s->cl_deadline - now_ns) / gap + 1;
        share = (size_t)((s->cl_left + reads_left - 1) / reads_left);
    }
    for (; share && s->cl_next < s->n; s->cl_next++) {
        if (s->cl_pending[s->cl_next]) {
            mv_pipe__close_one(s, s->cl_next);
            share--;
        }
    }
    if (!s->cl_left)
        close_publish(s);
}
