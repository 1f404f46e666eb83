/* mv_pipeline: window summaries, sketches, change detection and anomaly scores per segment.
 *
 * Layout (see docs/analytics.md, "Layout, cost and memory"): every read touches one small HOT
 * record per metric - the detector's statistics and the few fields a read must update -
 * packed per type in contiguous arrays (counters, gauges, histograms, each in catalog
 * order), so a tick streams through a few KiB per segment; counters keep their detectors
 * in an array of their own, all that a read of unchanged values touches of them. Everything else is
 * COLD and touched only when something happens: a counter's reset offset, window base and change
 * counts; a gauge's sketch, allocated the first time its window holds two distinct values
 * (a gauge that keeps one value through a window has no sketch: its summary is exact
 * from the hot record); a histogram's previous and window bucket counts, touched only when
 * its count or sum moved.
 *
 * Batching: a gauge read equal to the previous one only counts a repeat (`run`); the
 * repeats go into the sketch as one weighted add when the value changes or the window
 * closes - the same multiset, so the same quantiles; and the runs that end wait in small
rows (GPEND of them per gauge, mv_pipeline_int.h) until a group goes to the sketch at once,
in order (mv_sketch_add_runs): the sketch's cold lines are touched once per group. Counter
increments are not summed
 * per read at all: a counter keeps its raw value and a reset offset, so its cumulative
 * increase (total) is prev + off, and the window rate, the short rate and the scorer's
 * increase are differences of totals taken at the window start, at each short-rate slot
 * and at each scorer step.
 *
 * Window close: the first read after a boundary snapshots what the closing window needs
 * (counters: total and rate_max; gauges: the pending run) into a closing array; the
 * summaries are computed over the following reads within cfg.close_spread_ns (a share per
 * read), then swapped in at once - so 1,000 segments closing at the same boundary do not
 * all pay in one tick. A gauge or histogram that needs its sketch or bucket counts for
 * the new window before its turn is closed on the spot.
 */
#include "mv_pipeline_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mv_pipe_config_default(mv_pipe_config *cfg)
{
    cfg->window_ns = 15000000000ull;
    cfg->alpha = 0.01;
    cfg->sketch_buckets = 1536;
    cfg->detect = 1;
    cfg->fd = 1;
    cfg->fd_period_ns = 1000000000ull;
    cfg->fd_max_dims = 64;
    cfg->short_ns = 1000000000ull;
    cfg->close_spread_ns = 0;
    cfg->phase_ns = 0;
    cfg->window_phase_ns = 0;
    cfg->same_batch = 0;
    cfg->detect_period_ns = 0;
    cfg->native_schema = MV_PIPE_NATIVE_OFF;
}

const char *mv_pipe_config_check(const mv_pipe_config *cfg)
{
    if (cfg->window_ns < 1000000ull)
        return "the window must be at least 1 ms";
    if (cfg->window_phase_ns >= cfg->window_ns)
        return "the window's phase must be less than the window";
    if (cfg->same_batch > 65535)
        return "at most 65535 reads of unchanged values may wait for their updates";
    if (cfg->detect_period_ns > 3600000000000ull)
        return "the detection period must be at most one hour";
    if (cfg->native_schema != MV_PIPE_NATIVE_OFF &&
        (cfg->native_schema < -4 || cfg->native_schema > 8))
        return "the native histograms' schema must be within [-4, 8]";
    if (cfg->short_ns < 1000000ull)
        return "the short rate horizon must be at least 1 ms";
    mv_sketch_config sc = {.alpha = cfg->alpha, .max_buckets = cfg->sketch_buckets};
    const char *why = mv_sketch_config_check(&sc);
    if (why)
        return why;
    if (cfg->fd &&
        (cfg->fd_period_ns < 1000000ull || cfg->fd_max_dims < 1 || cfg->fd_max_dims > 4096))
        return "the scorer period must be at least 1 ms and its dimensions within [1, 4096]";
    return NULL;
}

static size_t sketch_bytes(const mv_pipe_config *cfg)
{
    mv_sketch_config sc = {.alpha = cfg->alpha, .max_buckets = cfg->sketch_buckets};
    return mv_sketch_memory_bytes(&sc);
}

/* Fixed bytes per metric of each type: hot and cold records, catalog map, published
 * summary; counters their short-rate column and offset. */
size_t mv_pipe__fixed_bytes(uint8_t type)
{
    size_t b = sizeof(uint32_t) + sizeof(mv_pipe_out);
    if (type == MV_SEG_COUNTER)
        return b + sizeof(mv_detect_series) + sizeof(hctr) + sizeof(cctr) + sizeof(cdet) +
               (SHORT_SLOTS + 1) * sizeof(uint64_t);
    if (type == MV_SEG_GAUGE)
        return b + sizeof(hgauge) + sizeof(cgauge) + GPEND * (sizeof(double) + sizeof(uint32_t)) +
               1;
    return b + sizeof(hhist) + sizeof(chist);
}

size_t mv_pipe_metric_bytes(const mv_pipe_config *cfg, uint8_t type, uint32_t nbuckets)
{
    mv_pipe_config def;
    if (!cfg) {
        mv_pipe_config_default(&def);
        cfg = &def;
    }
    size_t b = mv_pipe__fixed_bytes(type);
    if (type == MV_SEG_GAUGE)
        b += sketch_bytes(cfg);
    if (type == MV_SEG_HISTOGRAM) /* previous and window counts; the deltas' scratch */
        b += 24u * ((size_t)nbuckets + 1);
    return b;
}

/* Weights of the histogram checksum (mv_seg_hist_weight), computed once. */
static uint64_t g_hist_w[MV_SEG_HIST_WORDS(MV_SEG_BUCKETS_MAX)];
static pthread_once_t g_hist_w_once = PTHREAD_ONCE_INIT;

/* The detectors' parameters: the defaults, one copy for every pipeline (it stays in cache). */
static mv_detect_params g_dp;

static void hist_w_init(void)
{
    for (uint32_t i = 0; i < MV_SEG_HIST_WORDS(MV_SEG_BUCKETS_MAX); i++)
        g_hist_w[i] = mv_seg_hist_weight(i);
    mv_detect_params_init(&g_dp, NULL);
}

const mv_detect_params *mv_pipe__init(void)
{
    pthread_once(&g_hist_w_once, hist_w_init);
    return &g_dp;
}

/* ---- Feeding -----------------------------------------------------------------------------------
 */

static void fd_step(mv_pipe_seg *s, uint64_t now_ns)
{
    double secs =
        s->fd_last_ns && now_ns > s->fd_last_ns ? (double)(now_ns - s->fd_last_ns) / 1e9 : 0.0;
    s->fd_last_ns = now_ns;
    for (uint32_t k = 0; k < s->fd_d; k++) {
        uint32_t l = s->fd_loc[k];
        double f;
        if (LOC_T(l) == T_GAUGE) {
            f = s->hg[LOC_J(l)].last;
        } else {
            uint64_t t = pipe_total_of(s, l);
            f = secs > 0 ? (double)(t - s->fd_base[k]) / secs : 0.0;
            s->fd_base[k] = t;
        }
        if (secs <= 0)
            continue;
        if (!isfinite(f))
            f = 0;
        double a = fabs(f);
        double *sc = &s->fd_scale[k];
        *sc = *sc == 0 ? a : *sc + FD_SCALE_LAMBDA * (a - *sc);
        s->fd_x[k] = f / (*sc + FD_EPS);
    }
    if (secs <= 0)
        return;
    mv_fd_result r;
    if (mv_fd_observe(s->fd, s->fd_x, &r) == 0 && !r.warming) {
        s->fd_steps++;
        if (!(r.score <= s->fd_wmax))
            s->fd_wmax = r.score;
    }
}

/* A new short-rate slot begins with this read: every counter's total as of the previous
 * read starts it. */
static void slot_begin(mv_pipe_seg *s, uint64_t slot)
{
    size_t k = slot % SHORT_SLOTS;
    uint64_t *t = s->slot_tot + k * s->nc;
    s->slot_id[k] = slot;
    s->slot_e[k] = s->e;
    for (size_t j = 0; j < s->nc; j++)
        t[j] = s->hc[j].prev + s->coff[j];
}

/* One detector update; MV_PIPE_WARMUP while the detector learns its first baseline. */
MV_DETECT_INLINE unsigned detect_floor(mv_pipe_seg *s, mv_detect_series *d, uint64_t *changes,
                                       double x, double min_sigma)
{
    unsigned f = mv_detect_series_update_floor(s->dp, d, x, min_sigma);
    if (__builtin_expect(f & MV_DETECT_CHANGED, 0)) {
        (*changes)++;
        return MV_PIPE_CHANGED | MV_PIPE_MOVING;
    }
    return (f & MV_DETECT_MOVING ? MV_PIPE_MOVING : 0) |
           (f & MV_DETECT_WARMUP ? MV_PIPE_WARMUP : 0);
}

MV_DETECT_INLINE unsigned detect(mv_pipe_seg *s, mv_detect_series *d, uint64_t *changes, double x)
{
    return detect_floor(s, d, changes, x, 0.0);
}

/* k detector updates with the same sample (mv_detect_series_update_run: the same as k calls of
 * detect, stopping at a fixed point); *still: whether further ones would change nothing. */
MV_DETECT_INLINE unsigned detect_run(mv_pipe_seg *s, mv_detect_series *d, uint64_t *changes,
                                     double x, uint32_t k, int *still)
{
    unsigned f = mv_detect_series_update_run(s->dp, d, x, 0.0, k, changes, still);
    return (f & MV_DETECT_CHANGED ? MV_PIPE_CHANGED | MV_PIPE_MOVING : 0) |
           (f & MV_DETECT_MOVING ? MV_PIPE_MOVING : 0) |
           (f & MV_DETECT_WARMUP ? MV_PIPE_WARMUP : 0);
}

/* k updates of every gauge's detector with its last value, passing over the gauges whose
 * detectors are at a fixed point for it: s->gstill's bit set and the value still the mean,
 * to the bit (see mv_pipe_seg.gstill). */
MV_DETECT_INLINE unsigned detect_gauges_last(mv_pipe_seg *s, uint32_t k)
{
    unsigned flags = 0;
    hgauge *hg = s->hg;
    cgauge *cg = s->cg;
    const mv_detect_params *dp = s->dp;
    size_t ng = s->ng;
    for (size_t w = 0; w * 64 < ng; w++) {
        uint64_t still = s->gstill[w];
        size_t end = ng - w * 64 < 64 ? ng - w * 64 : 64;
        for (unsigned b = 0; b < end; b++) {
            hgauge *h = &hg[w * 64 + b];
            uint64_t lb, mb;
            memcpy(&lb, &h->last, 8);
            memcpy(&mb, &h->det.mean, 8);
            if (lb == mb && (still >> b & 1))
                continue;
            int st;
            flags |= mv_detect_series_update_run(dp, &h->det, h->last, 0.0, k,
                                                 &cg[w * 64 + b].changes, &st);
            if (__builtin_expect(st, 0))
                still |= 1ull << b;
            else if (__builtin_expect(still >> b & 1, 0))
                still &= ~(1ull << b);
        }
        s->gstill[w] = still;
    }
    return (flags & MV_DETECT_CHANGED ? MV_PIPE_CHANGED | MV_PIPE_MOVING : 0) |
           (flags & MV_DETECT_MOVING ? MV_PIPE_MOVING : 0) |
           (flags & MV_DETECT_WARMUP ? MV_PIPE_WARMUP : 0);
}

/* The detectors run at every read (no detection period). */
static inline int detect_each_read(const mv_pipe_seg *s)
{
    return s->cfg.detect && !s->cfg.detect_period_ns;
}

MV_DETECT_INLINE unsigned feed_counters(mv_pipe_seg *s, const char *vals, int forward, double dt)
{
    unsigned flags = 0;
    int det = detect_each_read(s);
    for (size_t j = 0; j < s->nc; j++) {
        hctr *h = &s->hc[j];
        uint64_t v;
        if (__builtin_expect(h->frac, 0))
            v = pipe_frac_value(vals + h->off);
        else
            memcpy(&v, vals + h->off, 8);
        if (__builtin_expect(!h->primed, 0)) {
            /* First read: the cumulative increase starts at 0 here. */
            h->primed = 2;
            s->coff[j] = (uint64_t)0 - v;
            s->cc[j].prime_e = s->e;
            s->cd[j].det_e = s->e;
            h->prev = h->det_raw = v;
            continue;
        }
        if (__builtin_expect(!forward, 0)) {
            s->coff[j] += h->prev - v; /* no interval: the total does not move */
            h->det_raw -= h->prev - v;
            h->prev = v;
            continue;
        }
        uint64_t d;
        if (__builtin_expect(v >= h->prev, 1)) {
            d = v - h->prev;
        } else { /* a reset: the new value is the increase */
            d = v;
            s->coff[j] += h->prev;
            h->det_raw -= h->prev;
            s->cc[j].resets++;
        }
        h->prev = v;
        double x = d ? (double)d * pipe_ctr_scale(h) / dt : 0.0; /* 0 / dt is +0 (dt > 0) */
        h->rate_max = x > h->rate_max ? x : h->rate_max;
        if (det)
            flags |= detect(s, &s->dc[j], &s->cc[j].changes, x);
    }
    return flags;
}

#define FLUSH_BATCH 64 /* gauges whose runs go to their sketches in one mv_sketch_add_runs */

MV_DETECT_INLINE unsigned feed_gauges(mv_pipe_seg *s, const char *vals)
{
    unsigned flags = 0;
    int det = detect_each_read(s);
    size_t ng = s->ng;
    /* Gauges whose waiting runs fill up with this read: their sketches take them together. */
    mv_sketch_runs fl[FLUSH_BATCH];
    double fv[FLUSH_BATCH][GPEND];
    uint32_t fn[FLUSH_BATCH][GPEND];
    size_t nf = 0;
    uint32_t g0 = s->greads++; /* this read counts a repeat of every gauge's `last` */
    for (size_t j = 0; j < ng; j++) {
        hgauge *h = &s->hg[j];
        double x;
        memcpy(&x, vals + h->off, 8);
        if (__builtin_expect(x != h->last, 0)) {
            uint32_t run = h->last == h->last ? g0 - h->run0 : 0; /* before this read */
            if (run) {
                /* The window now holds two distinct values: the run waits for the sketch. If
                 * the previous window's summary is still to come, the runs waiting are its:
                 * it is made now. */
                if (__builtin_expect(s->cl != NULL, 0) && s->cl_pending[s->cg[j].idx])
                    mv_pipe__close_one(s, s->cg[j].idx);
                uint32_t k = s->pl[j];
                s->pv[k * ng + j] = h->last;
                s->pn[k * ng + j] = run;
                s->pl[j] = (uint8_t)(k + 1);
                if (k + 1 == GPEND) {
                    mv_sketch *sk = h->sk ? h->sk : mv_pipe__gauge_sketch(s, j);
                    uint32_t np = gauge_take(s, j, fv[nf], fn[nf]);
                    if (sk) { /* else no memory for a sketch: the window keeps its last value */
                        fl[nf] =
                            (mv_sketch_runs){.sk = sk, .value = fv[nf], .count = fn[nf], .n = np};
                        if (++nf == FLUSH_BATCH) {
                            s->sk_mem += mv_sketch_add_runs(fl, nf);
                            nf = 0;
                        }
                    }
                }
            }
            h->last = x;
            h->run0 = isfinite(x) ? g0 : g0 + 1; /* run 1; NaN/Inf are left out (run 0) */
        }
        if (det)
            flags |= detect(s, &h->det, &s->cg[j].changes, x);
    }
    if (nf)
        s->sk_mem += mv_sketch_add_runs(fl, nf);
    if (det) /* every gauge's detector was fed outside the fold (x, not `last`) */
        memset(s->gstill, 0, (ng / 64 + 1) * sizeof *s->gstill);
    return flags;
}

static unsigned feed_hists(mv_pipe_seg *s, const char *vals, int same)
{
    unsigned flags = 0;
    uint64_t *d = s->scratch;
    for (size_t j = 0; j < s->nh; j++) {
        hhist *h = &s->hh[j];
        if (same && h->primed)
            continue; /* count and sum as at the previous feed: skipped below too */
        const uint64_t *w = (const uint64_t *)(const void *)(vals + h->off);
        uint64_t count = w[0];
        double sum;
        memcpy(&sum, &w[1], 8);
        /* Unchanged count and sum: no observation since the previous read. */
        if (h->primed && count == h->prev_count && memcmp(&sum, &h->prev_sum, 8) == 0)
            continue;
        chist *c = &s->ch[j];
        uint32_t nb = c->nb;
        uint64_t *prev_b = c->b, *wb = c->b + nb;
        int primed = h->primed;
        if (primed && s->cl && s->cl_pending[c->idx])
            mv_pipe__close_one(s, c->idx); /* its window counts are about to move */
        /* One pass: the torn-copy checks of mv_seg_read_histogram (weighted checksum,
         * bucket total), the deltas added to the window, whether a bucket went down
         * (a reset). Undone below in the rare cases (torn, reset, first read). */
        uint64_t check = w[0] * g_hist_w[0] + w[1] * g_hist_w[1], total = 0, down = 0;
        for (uint32_t b = 0; b < nb; b++) {
            uint64_t v = w[2 + b], p = prev_b[b];
            check += v * g_hist_w[2 + b];
            total += v;
            down |= v < p;
            d[b] = v - p;
            wb[b] += v - p;
            prev_b[b] = v;
        }
        int torn = check != w[nb + 2] || total != count;
        int reset = primed && !torn && (count < h->prev_count || down);
        if (__builtin_expect(torn || reset || !primed, 0)) {
            for (uint32_t b = 0; b < nb; b++) {
                wb[b] -= d[b];
                if (torn)
                    prev_b[b] -= d[b];
                else if (reset)
                    wb[b] += prev_b[b]; /* a reset: the new counts are the increase */
            }
        }
        if (torn)
            continue; /* caught mid-update: the next read sees it */
        double x = NAN;
        if (primed) {
            uint64_t dc;
            double ds;
            if (reset) {
                dc = count;
                ds = sum;
                c->resets++;
                c->off += h->prev_count;
                memcpy(d, w + 2, nb * sizeof *d);
            } else {
                dc = count - h->prev_count;
                ds = sum - h->prev_sum;
            }
            if (dc) {
                if (!isfinite(ds)) { /* no usable sum: the representatives stand in */
                    const mv_seg_metric *m = mv_pipe__cat_m(s, c->idx);
                    double rs = 0;
                    for (uint32_t b = 0; b < nb; b++)
                        if (d[b])
                            rs += mv_pipe__bucket_rep(m->bounds, m->bucket_count, b) * (double)d[b];
                    c->win_sum += rs;
                } else {
                    c->win_sum += ds;
                }
                c->win_count += dc;
                if (s->cfg.detect_period_ns) { /* for the next detection step */
                    c->det_count += dc;
                    c->det_sum += ds;
                }
                x = ds / (double)dc;
            }
        } else {
            c->off = (uint64_t)0 - count; /* the cumulative count starts at 0 here */
        }
        h->prev_count = count;
        h->prev_sum = sum;
        h->primed = 1;
        if (detect_each_read(s) && !isnan(x))
            flags |= detect(s, &h->det, &c->changes, x);
    }
    return flags;
}

/* Runs what feed_same reads left (same_g and same_c of them; several when cfg.same_batch let
 * them wait): each gauge's repeats of its last value and every detector's updates, each
 * series' updates in the order the reads would have run them (the series are independent:
 * series by series gives what read by read did), a run of equal samples at once
 * (detect_run). */
unsigned mv_pipe__run_same(mv_pipe_seg *s)
{
    unsigned flags = 0;
    uint32_t nc = s->same_c, ng = s->same_g;
    s->same_c = s->same_g = 0;
    s->greads += ng; /* a repeat of every gauge's last value per read (see gauge_run) */
    if (!detect_each_read(s))
        return 0; /* steps take the values as they are then (detect_step) */
    if (nc)
        for (size_t j = 0; j < s->nc; j++)
            flags |= detect_run(s, &s->dc[j], &s->cc[j].changes, 0.0, nc, NULL);
    if (ng)
        flags |= detect_gauges_last(s, ng);
    return flags;
}

/* A detection step (cfg.detect_period_ns): every detector scores what changed since the
 * previous step - a counter its rate over the span since its last sample (see cdet: at a step
 * where it rose, or where it has not risen for 4 of its usual gaps between rises), a gauge its
 * value, a histogram the mean of the observations since the previous step (when there was
 * one). `gap`: this read's interval, the resolution of a rise's time. MV_PIPE_WARMUP comes
 * from a detector that learns its first baseline at the pace of the steps (gauges, and
 * counters that rose at the previous step too): holding the fast tick then speeds it up. A
 * counter that rises once a second learns at that pace whatever the tick. */
static unsigned detect_step(mv_pipe_seg *s, uint64_t gap)
{
    unsigned flags = 0;
    uint64_t e = s->e;
    double g = (double)gap * 1e-9;
    for (size_t j = 0; j < s->nc; j++) {
        hctr *h = &s->hc[j];
        if (!h->primed)
            continue;
        h->primed = 1;
        cdet *c = &s->cd[j];
        uint64_t span = e - c->det_e, d = h->prev - h->det_raw;
        if (d && span) {
            double sc = pipe_ctr_scale(h), sp = (double)span * 1e-9, x = (double)d * sc / sp;
            /* What the same steady rate can differ by over this span: one increment (one
             * unit of a counter_f), or the read interval the last rise fell in (a rise is
             * placed within one read). */
            double res = (double)d * g / sp, one = 1.0 / sc;
            res = (res < one ? res : one) * sc / sp;
            unsigned f = detect_floor(s, &s->dc[j], &s->cc[j].changes, x, res);
            if (c->det_e != s->det_e)
                f &= ~(unsigned)MV_PIPE_WARMUP; /* sparse: not at the steps' pace */
            flags |= f;
            uint64_t us = span / 1000u;
            uint32_t u = us < UINT32_MAX ? (uint32_t)us : UINT32_MAX;
            if (!c->gap_us || !c->rose)
                c->gap_us = c->gap_us ? c->gap_us : (u ? u : 1);
            else
                c->gap_us = (uint32_t)(((uint64_t)c->gap_us * 3u + u) / 4u);
            c->rose = 1;
            c->det_e = e;
            h->det_raw = h->prev;
        } else if (c->gap_us) {
            uint64_t idle = 4000ull * c->gap_us;
            if (idle < s->cfg.detect_period_ns)
                idle = s->cfg.detect_period_ns;
            if (span >= idle) { /* stopped, or slowed to a quarter: a rate of 0 */
                flags |= detect(s, &s->dc[j], &s->cc[j].changes, 0.0) & ~(unsigned)MV_PIPE_WARMUP;
                c->rose = 0;
                c->det_e = e;
            }
        }
    }
    flags |= detect_gauges_last(s, 1);
    for (size_t j = 0; j < s->nh; j++) {
        chist *c = &s->ch[j];
        if (c->det_count)
            flags |= detect(s, &s->hh[j].det, &c->changes, c->det_sum / (double)c->det_count);
        c->det_count = 0;
        c->det_sum = 0;
    }
    s->det_e = e;
    return flags;
}

/* Whether the read at now_ns, gap after the previous one, is a detection step. */
static int detect_due(mv_pipe_seg *s, uint64_t now_ns, uint64_t gap)
{
    uint64_t p = s->cfg.detect_period_ns;
    if (!s->det_started) {
        /* The first read is a step; the next ones count from it less this segment's
         * phase. */
        uint64_t ph = s->cfg.phase_ns % p;
        s->det_started = 1;
        s->det_force = 0;
        s->det_last_ns = now_ns > ph ? now_ns - ph : 0;
        return 1;
    }
    /* A clock that went back starts the count again. */
    uint64_t need = p - (gap < p ? gap / 2 : p);
    int due = s->det_force || now_ns < s->det_last_ns || now_ns - s->det_last_ns >= need;
    s->det_force = 0;
    if (due)
        s->det_last_ns = now_ns;
    /* For mv_pipe_seg_prefetch: whether the next read, as far after this one, steps. */
    s->det_soon = now_ns - s->det_last_ns + gap >= need;
    return due;
}

MV_DETECT_INLINE unsigned feed(mv_pipe_seg *s, const void *hot, uint64_t now_ns, int same)
{
    unsigned flags = 0;
    /* The window and the short-rate slot of now_ns: two divisions only when it left the
     * ranges of the previous read's (once a slot, not once a read). */
    uint64_t w = s->cur_w, slot = s->last_slot;
    if (!(now_ns >= s->w_lo_ns && now_ns < s->w_hi_ns)) {
        uint64_t ph = s->cfg.window_phase_ns;
        w = (now_ns <= UINT64_MAX - ph ? now_ns + ph : UINT64_MAX) / s->cfg.window_ns;
        mv_pipe__window_span(&s->cfg, w, &s->w_lo_ns, &s->w_hi_ns);
    }
    if (!(now_ns >= s->slot_lo_ns && now_ns < s->slot_hi_ns)) {
        uint64_t len = s->cfg.short_ns / SHORT_SLOTS;
        slot = now_ns / len + 1;
        s->slot_lo_ns = (slot - 1) * len;
        s->slot_hi_ns = s->slot_lo_ns + len > s->slot_lo_ns ? s->slot_lo_ns + len : UINT64_MAX;
    }
    const mv_seg_header *hdr = hot;
    const char *vals = (const char *)hot + hdr->values_offset;
    int forward = s->last_read_ns && now_ns > s->last_read_ns;
    uint64_t gap = forward ? now_ns - s->last_read_ns : 0;

    /* The short-rate ring and the closing window are read by mv_pipe_seg_view: one
     * uncontended lock per read. */
    pthread_mutex_lock(&s->mu);
    /* A read of unchanged values within the window, with no summary pending, may leave its
     * updates to a later read; anything else runs those that wait first. */
    int wait =
        same && s->cfg.same_batch && !s->cl && w == s->cur_w && s->same_g + 1u < s->cfg.same_batch;
    if (!wait && s->same_g)
        flags |= mv_pipe__run_same(s);
    if (s->cur_w == UINT64_MAX) {
        s->cur_w = w;
        s->fd_wmax = NAN;
    } else if (w > s->cur_w) {
        mv_pipe__close_all(s); /* the window before, if its summaries are still pending */
        mv_pipe__close_begin(s, s->cur_w, now_ns);
        s->cur_w = w;
        flags |= MV_PIPE_WINDOW;
    }
    if (slot != s->last_slot) {
        slot_begin(s, slot);
        s->last_slot = slot;
    }
    s->win_reads++;
    if (gap > s->win_gap_max)
        s->win_gap_max = gap;
    double dt = (double)gap * 1e-9;
    if (forward)
        s->e += gap;
    s->last_read_ns = now_ns;
    /* This read's share of the pending summaries, before it changes any state: with
     * close_spread_ns 0 the window is summarised exactly as of its last read. */
    if (s->cl)
        mv_pipe__close_step(s, now_ns, gap);
    if (same) {
        /* Its updates wait, or run now with those waiting (none: run_same ran above). */
        s->same_g++;
        s->same_c += forward;
        if (!wait)
            flags |= mv_pipe__run_same(s);
    } else {
        flags |= feed_counters(s, vals, forward, dt);
        flags |= feed_gauges(s, vals);
    }
    if (s->nh)
        flags |= feed_hists(s, vals, same);
    if (detect_each_read(s))
        flags |= MV_PIPE_STEP;
    else if (s->cfg.detect && detect_due(s, now_ns, gap))
        flags |= MV_PIPE_STEP | detect_step(s, gap);
    s->fed = 1;
    pthread_mutex_unlock(&s->mu);
    if (s->fd) {
        uint64_t step = (now_ns + s->cfg.phase_ns) / s->cfg.fd_period_ns;
        if (step != s->fd_step) {
            s->fd_step = step;
            fd_step(s, now_ns);
        }
    }
    return flags;
}

void mv_pipe_seg_step_next(mv_pipe_seg *s)
{
    if (s)
        s->det_force = 1;
}

unsigned mv_pipe_seg_feed(mv_pipe_seg *s, const void *hot, uint64_t now_ns)
{
    return feed(s, hot, now_ns, 0);
}

/* Asks for the lines of n records of `size` bytes from p. */
static void prefetch_lines(const void *p, size_t n, size_t size)
{
    const char *b = p;
    size_t bytes = n * size;
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(b + o, 1);
    if (bytes != 0) /* the last line, when the records do not start on one */
        __builtin_prefetch(b + bytes - 1, 1);
}

void mv_pipe_seg_prefetch(const mv_pipe_seg *s, int what)
{
    if (!s)
        return;
    if (what == MV_PIPE_PF_STATE) {
        for (size_t b = 0; b < PIPE_HOT_END; b += 64)
            __builtin_prefetch((const char *)s + b, 1);
        return;
    }
    /* A feed_same that will likely wait (cfg.same_batch) touches no record but the
     * histograms'; one that does not wait touches the gauges' and counters' detectors only
     * when they run at every read (the gauges' repeats are folded: see hgauge.run0). */
    int wait = what == MV_PIPE_PF_SAME && s->fed && s->cfg.same_batch && !s->cl &&
               s->same_g + 1u < s->cfg.same_batch;
    /* With a detection period the counters' detectors are touched only at a step (which
     * also reads the gauges' and counters' hot records), and at a step whatever waits. */
    int each = !s->cfg.detect_period_ns;
    int step = !each && s->cfg.detect && (!s->fed || s->det_soon);
    if (what != MV_PIPE_PF_SAME || !s->fed || step || (each && s->cfg.detect && !wait))
        prefetch_lines(s->hg, s->ng, sizeof *s->hg);
    if ((each && !wait) || step)
        prefetch_lines(s->dc, s->nc, sizeof *s->dc);
    if (step)
        prefetch_lines(s->cd, s->nc, sizeof *s->cd);
    prefetch_lines(s->hh, s->nh, sizeof *s->hh); /* feed_same reads whether they are primed */
    if (what != MV_PIPE_PF_SAME || !s->fed || step)
        prefetch_lines(s->hc, s->nc, sizeof *s->hc);
    if (what != MV_PIPE_PF_SAME) /* a gauge that changes appends a run */
        prefetch_lines(s->pl, s->ng, sizeof *s->pl);
}

unsigned mv_pipe_seg_feed_same(mv_pipe_seg *s, const void *hot, uint64_t now_ns)
{
    if (!s->fed) /* feed_same takes the values from the records: none yet */
        return mv_pipe_seg_feed(s, hot, now_ns);
    return feed(s, hot, now_ns, 1);
}

mv_pipe_view *mv_pipe_seg_view(mv_pipe_seg *s)
{
    /* The native buckets published may grow between the size read and the copy (a window
     * closed): then again, with the new size. */
    size_t nn;
    mv_pipe_view *v;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        nn = s->nat_len[s->nat_pub];
        pthread_mutex_unlock(&s->mu);
        v = malloc(sizeof *v + s->n * sizeof(mv_pipe_out) + nn * sizeof(mv_sketch_nbucket));
        if (!v)
            return NULL;
        pthread_mutex_lock(&s->mu);
        if (s->nat_len[s->nat_pub] <= nn)
            break;
        free(v);
    }
    v->cat = s->cat;
    v->n = s->n;
    mv_sketch_nbucket *nat = (mv_sketch_nbucket *)(void *)(v->m + s->n);
    v->native_on = s->cfg.native_schema != MV_PIPE_NATIVE_OFF;
    v->nnative = s->nat_len[s->nat_pub];
    v->native = nat;
    if (v->nnative)
        memcpy(nat, s->nat[s->nat_pub], v->nnative * sizeof *nat);
    v->window_start_ns = s->pub_start;
    v->window_end_ns = s->pub_end;
    v->anomaly_score = s->pub_score;
    v->fd_steps = s->pub_steps;
    v->mem_bytes = s->mem_fixed + s->sk_mem + s->nat_mem;
    v->collapses = s->pub_collapses;
    v->window_reads = s->pub_reads;
    v->window_max_interval_ns = s->pub_gap_max;
    memcpy(v->m, s->pub, s->n * sizeof(mv_pipe_out));
    /* Short counter rates, as of the latest read: the difference of totals since the
     * read before the oldest slot of the horizon. */
    uint64_t base_e = UINT64_MAX;
    size_t base_k = 0;
    for (size_t k = 0; k < SHORT_SLOTS; k++) {
        if (s->slot_id[k] && s->slot_id[k] + SHORT_SLOTS > s->last_slot &&
            (base_e == UINT64_MAX || s->slot_id[k] < s->slot_id[base_k])) {
            base_k = k;
            base_e = s->slot_e[k];
        }
    }
    for (size_t j = 0; j < s->nc; j++) {
        mv_pipe_out *o = &v->m[s->cc[j].idx];
        o->rate_short = NAN;
        if (base_e == UINT64_MAX || !s->hc[j].primed)
            continue;
        uint64_t from = base_e > s->cc[j].prime_e ? base_e : s->cc[j].prime_e;
        if (s->e <= from)
            continue;
        uint64_t inc = s->hc[j].prev + s->coff[j] - s->slot_tot[base_k * s->nc + j];
        o->rate_short = (double)inc * pipe_ctr_scale(&s->hc[j]) / ((double)(s->e - from) * 1e-9);
    }
    pthread_mutex_unlock(&s->mu);
    return v;
}
