/* mv_pipeline: window summaries, sketches, change detection and anomaly scores per segment. */
#include "mv_pipeline.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mv_detect.h"
#include "mv_fd.h"
#include "mv_sketch.h"

const double mv_pipe_quantiles[MV_PIPE_QUANTILES] = {0.5, 0.9, 0.99, 0.999};

#define FD_SCALE_LAMBDA 0.05
#define FD_EPS          1e-12

#define SHORT_SLOTS 8

/* Short-horizon accumulators of a counter: read intervals by the slot (of
 * short_ns / SHORT_SLOTS) their end fell in. */
typedef struct shortwin {
    double inc[SHORT_SLOTS], dt[SHORT_SLOTS];
    uint64_t id[SHORT_SLOTS]; /* slot number + 1; 0 = empty */
} shortwin;

typedef struct mstate {
    const mv_seg_metric *m;
    uint8_t type;
    uint8_t primed; /* a previous read exists */
    uint64_t prev_u;
    double prev_sum;
    uint64_t prev_ns;
    uint64_t *prev_b; /* histograms: bucket_count + 1 previous counts */
    /* Window accumulators. */
    double inc, dt, rate_max, last;
    uint64_t resets, changes;
    mv_sketch *sk;
    shortwin *sw; /* counters */
    /* Scorer accumulator (counter increase / histogram count since the last step). */
    double fd_inc;
} mstate;

struct mv_pipe_seg {
    mv_pipe_config cfg;
    const mv_seg_catalog *cat;
    size_t n;
    mstate *ms;
    mv_detect *det;
    uint64_t *scratch; /* histogram deltas, max buckets + 1 */
    uint64_t cur_w;    /* window index being accumulated; UINT64_MAX = none */
    /* Scorer. */
    mv_fd *fd;
    uint32_t fd_d;
    uint32_t *fd_idx; /* metric index of each dimension */
    double *fd_x, *fd_scale;
    uint64_t fd_step, fd_last_ns, fd_steps;
    double fd_wmax;
    /* Published output: pub is readable under mu; back is the tick's. */
    pthread_mutex_t mu;
    mv_pipe_out *pub, *back;
    uint64_t pub_start, pub_end;
    double pub_score;
    uint64_t pub_steps;
    uint64_t pub_mem, pub_collapses;
    uint64_t last_slot; /* short-rate slot of the latest read (under mu) */
    uint64_t last_read_ns, win_reads, win_gap_max;
    uint64_t pub_reads, pub_gap_max;
};

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
}

const char *mv_pipe_config_check(const mv_pipe_config *cfg)
{
    if (cfg->window_ns < 1000000ull)
        return "the window must be at least 1 ms";
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

size_t mv_pipe_metric_bytes(const mv_pipe_config *cfg, uint8_t type, uint32_t nbuckets)
{
    mv_pipe_config def;
    if (!cfg) {
        mv_pipe_config_default(&def);
        cfg = &def;
    }
    size_t b = sizeof(mstate) + 2 * sizeof(mv_pipe_out) + mv_detect_memory_bytes(1) -
               mv_detect_memory_bytes(0);
    if (type == MV_SEG_GAUGE || type == MV_SEG_HISTOGRAM)
        b += sketch_bytes(cfg);
    if (type == MV_SEG_HISTOGRAM)
        b += 8u * ((size_t)nbuckets + 1);
    if (type == MV_SEG_COUNTER)
        b += sizeof(shortwin);
    return b;
}

/* ---- Identity map for rebuilds ---------------------------------------------------------- */

static uint64_t metric_hash(const mv_seg_metric *m)
{
    uint64_t h = mv_seg_fnv1a64(m->name, m->name_len) ^ ((uint64_t)m->type << 56);
    for (uint16_t i = 0; i < m->label_count; i++) {
        h = h * 0x100000001b3ull ^ mv_seg_fnv1a64(m->labels[i].key, strlen(m->labels[i].key));
        h = h * 0x100000001b3ull ^ mv_seg_fnv1a64(m->labels[i].value, strlen(m->labels[i].value));
    }
    return h;
}

static int metric_same(const mv_seg_metric *a, const mv_seg_metric *b)
{
    if (a->type != b->type || a->label_count != b->label_count ||
        a->bucket_count != b->bucket_count || strcmp(a->name, b->name) != 0)
        return 0;
    for (uint16_t i = 0; i < a->label_count; i++)
        if (strcmp(a->labels[i].key, b->labels[i].key) != 0 ||
            strcmp(a->labels[i].value, b->labels[i].value) != 0)
            return 0;
    for (uint16_t i = 0; i < a->bucket_count; i++)
        if (a->bounds[i] != b->bounds[i])
            return 0;
    return 1;
}

/* Index in prev of the metric with m's identity, or SIZE_MAX. `table` is an
 * open-addressing map of prev's indexes + 1 (0 = empty), `mask` its size - 1. */
static size_t find_prev(const mv_pipe_seg *prev, const uint32_t *table, size_t mask,
                        const mv_seg_metric *m, size_t hint)
{
    if (hint < prev->n && metric_same(prev->ms[hint].m, m))
        return hint;
    for (size_t h = metric_hash(m) & mask;; h = (h + 1) & mask) {
        uint32_t v = table[h];
        if (!v)
            return SIZE_MAX;
        if (metric_same(prev->ms[v - 1].m, m))
            return v - 1;
    }
}

/* ---- Create / destroy -------------------------------------------------------------------- */

static void free_state(mv_pipe_seg *s)
{
    for (size_t i = 0; s->ms && i < s->n; i++) {
        mv_sketch_destroy(s->ms[i].sk);
        free(s->ms[i].prev_b);
        free(s->ms[i].sw);
    }
    free(s->ms);
    mv_detect_destroy(s->det);
    mv_fd_destroy(s->fd);
    free(s->fd_idx);
    free(s->fd_x);
    free(s->fd_scale);
    free(s->scratch);
    free(s->pub);
    free(s->back);
}

void mv_pipe_seg_destroy(mv_pipe_seg *s)
{
    if (!s)
        return;
    free_state(s);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int setup_fd(mv_pipe_seg *s, mv_pipe_seg *prev)
{
    size_t d = s->n < s->cfg.fd_max_dims ? s->n : s->cfg.fd_max_dims;
    if (!s->cfg.fd || d == 0)
        return 0;
    s->fd_d = (uint32_t)d;
    s->fd_idx = calloc(d, sizeof *s->fd_idx);
    s->fd_x = calloc(d, sizeof *s->fd_x);
    s->fd_scale = calloc(d, sizeof *s->fd_scale);
    if (!s->fd_idx || !s->fd_x || !s->fd_scale)
        return -ENOMEM;
    for (size_t i = 0; i < d; i++)
        s->fd_idx[i] = (uint32_t)i;
    /* Keep the learnt subspace when the scored metrics are the same ones. */
    if (prev && prev->fd && prev->fd_d == s->fd_d) {
        int same = 1;
        for (size_t i = 0; i < d && same; i++)
            same = metric_same(prev->ms[prev->fd_idx[i]].m, s->ms[i].m);
        if (same) {
            s->fd = prev->fd;
            prev->fd = NULL;
            memcpy(s->fd_scale, prev->fd_scale, d * sizeof *s->fd_scale);
            s->fd_steps = prev->fd_steps;
            return 0;
        }
    }
    mv_fd_config fc;
    mv_fd_config_default(&fc, (uint32_t)d);
    fc.eta = 0.1; /* a lasting new behaviour is learnt, slowly */
    return mv_fd_create(&fc, &s->fd);
}

int mv_pipe_seg_create(const mv_pipe_config *cfg, const mv_seg_catalog *cat, mv_pipe_seg *prev,
                       mv_pipe_seg **out)
{
    uint32_t *table = NULL;
    size_t mask = 0;
    int rc = -ENOMEM;

    *out = NULL;
    mv_pipe_seg *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    if (cfg)
        s->cfg = *cfg;
    else
        mv_pipe_config_default(&s->cfg);
    if (mv_pipe_config_check(&s->cfg)) {
        free(s);
        return -EINVAL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->cat = cat;
    s->n = mv_seg_catalog_count(cat);
    s->cur_w = UINT64_MAX;
    s->pub_score = NAN;
    size_t n1 = s->n ? s->n : 1;
    uint32_t maxb = 0;
    s->ms = calloc(n1, sizeof *s->ms);
    s->pub = calloc(n1, sizeof *s->pub);
    s->back = calloc(n1, sizeof *s->back);
    if (!s->ms || !s->pub || !s->back)
        goto fail_state;
    if (s->cfg.detect) {
        mv_detect_config dc;
        mv_detect_config_default(&dc);
        if (mv_detect_create(&dc, n1, &s->det) != 0)
            goto fail_state;
    }
    if (prev && prev->n) {
        size_t cap = 1;
        while (cap < 2 * prev->n)
            cap <<= 1;
        mask = cap - 1;
        table = calloc(cap, sizeof *table);
        if (!table)
            goto fail_state;
        for (size_t i = 0; i < prev->n; i++) {
            size_t h = metric_hash(prev->ms[i].m) & mask;
            while (table[h])
                h = (h + 1) & mask;
            table[h] = (uint32_t)(i + 1);
        }
        s->cur_w = prev->cur_w;
        s->pub_start = prev->pub_start;
        s->pub_end = prev->pub_end;
        s->pub_score = prev->pub_score;
        s->pub_steps = prev->pub_steps;
        s->pub_mem = prev->pub_mem;
        s->pub_collapses = prev->pub_collapses;
        s->last_slot = prev->last_slot;
        s->last_read_ns = prev->last_read_ns;
        s->win_reads = prev->win_reads;
        s->win_gap_max = prev->win_gap_max;
        s->pub_reads = prev->pub_reads;
        s->pub_gap_max = prev->pub_gap_max;
        s->fd_step = prev->fd_step;
        s->fd_last_ns = prev->fd_last_ns;
        s->fd_wmax = prev->fd_wmax;
    }
    mv_sketch_config sc = {.alpha = s->cfg.alpha, .max_buckets = s->cfg.sketch_buckets};
    for (size_t i = 0; i < s->n; i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        mstate *st = &s->ms[i];
        size_t j = table ? find_prev(prev, table, mask, m, i) : SIZE_MAX;
        if (j != SIZE_MAX) {
            /* prev may be viewed meanwhile (its short-rate slots): move under its lock. */
            pthread_mutex_lock(&prev->mu);
            *st = prev->ms[j];
            prev->ms[j].sk = NULL;
            prev->ms[j].prev_b = NULL;
            prev->ms[j].sw = NULL;
            pthread_mutex_unlock(&prev->mu);
            if (s->det)
                mv_detect_copy(s->det, i, prev->det, j);
            s->pub[i] = prev->pub[j];
        } else {
            memset(st, 0, sizeof *st);
            st->type = m->type;
            s->pub[i].type = m->type;
            s->pub[i].has_window = 0;
        }
        st->m = m;
        if (m->bucket_count > maxb)
            maxb = m->bucket_count;
        if ((m->type == MV_SEG_GAUGE || m->type == MV_SEG_HISTOGRAM) && !st->sk &&
            mv_sketch_create(&sc, &st->sk) != 0)
            goto fail_state;
        if (m->type == MV_SEG_COUNTER && !st->sw && !(st->sw = calloc(1, sizeof *st->sw)))
            goto fail_state;
        if (m->type == MV_SEG_HISTOGRAM && !st->prev_b) {
            st->prev_b = calloc((size_t)m->bucket_count + 1, sizeof *st->prev_b);
            st->primed = 0;
            if (!st->prev_b)
                goto fail_state;
        }
    }
    s->scratch = calloc((size_t)maxb + 1, sizeof *s->scratch);
    if (!s->scratch)
        goto fail_state;
    if ((rc = setup_fd(s, prev)) != 0)
        goto fail_state;
    free(table);
    *out = s;
    return 0;

fail_state:
    free(table);
    mv_pipe_seg_destroy(s);
    return rc;
}

/* ---- Feeding -----------------------------------------------------------------------------------
 */

/* Bytes of state held now (mv_pipe_metric_bytes bounds each metric's share). */
static uint64_t mem_used(const mv_pipe_seg *s)
{
    uint64_t b = sizeof *s + (uint64_t)s->n * (sizeof(mstate) + 2 * sizeof(mv_pipe_out)) +
                 (s->det ? mv_detect_memory_bytes(s->n ? s->n : 1) : 0);
    for (size_t i = 0; i < s->n; i++) {
        if (s->ms[i].sk)
            b += mv_sketch_memory_used(s->ms[i].sk);
        if (s->ms[i].prev_b)
            b += 8u * ((uint64_t)s->ms[i].m->bucket_count + 1);
        if (s->ms[i].sw)
            b += sizeof(shortwin);
    }
    if (s->fd) {
        mv_fd_config fc;
        mv_fd_config_default(&fc, s->fd_d);
        b += mv_fd_memory_bytes(&fc) + s->fd_d * (4u + 16u);
    }
    return b;
}

static void close_window(mv_pipe_seg *s, uint64_t w)
{
    uint64_t collapses = 0, mem = mem_used(s);
    for (size_t i = 0; i < s->n; i++) {
        mstate *st = &s->ms[i];
        mv_pipe_out *o = &s->back[i];
        memset(o, 0, sizeof *o);
        o->type = st->type;
        o->changes = st->changes;
        o->resets = st->resets;
        if (st->type == MV_SEG_COUNTER) {
            o->has_window = st->dt > 0;
            o->rate = st->dt > 0 ? st->inc / st->dt : NAN;
            o->rate_max = st->dt > 0 ? st->rate_max : NAN;
            st->inc = st->dt = st->rate_max = 0;
            continue;
        }
        uint64_t cnt = mv_sketch_count(st->sk);
        o->collapses = mv_sketch_collapses(st->sk);
        collapses += o->collapses;
        o->count = cnt;
        o->sum = mv_sketch_sum(st->sk);
        o->last = st->last;
        o->has_window = cnt > 0 || st->type == MV_SEG_HISTOGRAM;
        for (int q = 0; q < MV_PIPE_QUANTILES; q++)
            o->q[q] = cnt ? mv_sketch_quantile(st->sk, mv_pipe_quantiles[q]) : NAN;
        o->min = cnt ? mv_sketch_min(st->sk) : NAN;
        o->max = cnt ? mv_sketch_max(st->sk) : NAN;
        o->mean = cnt ? o->sum / (double)cnt : NAN;
        if (st->type == MV_SEG_HISTOGRAM && !st->primed)
            o->has_window = 0;
        mv_sketch_reset(st->sk);
    }
    pthread_mutex_lock(&s->mu);
    mv_pipe_out *t = s->pub;
    s->pub = s->back;
    s->back = t;
    s->pub_start = w * s->cfg.window_ns;
    s->pub_end = s->pub_start + s->cfg.window_ns;
    s->pub_score = s->fd_wmax;
    s->pub_steps = s->fd_steps;
    s->pub_mem = mem;
    s->pub_collapses = collapses;
    s->pub_reads = s->win_reads;
    s->pub_gap_max = s->win_gap_max;
    pthread_mutex_unlock(&s->mu);
    s->fd_wmax = NAN;
    s->win_reads = s->win_gap_max = 0;
}

static void fd_step(mv_pipe_seg *s, uint64_t now_ns)
{
    double secs =
        s->fd_last_ns && now_ns > s->fd_last_ns ? (double)(now_ns - s->fd_last_ns) / 1e9 : 0.0;
    s->fd_last_ns = now_ns;
    if (secs <= 0) {
        for (uint32_t k = 0; k < s->fd_d; k++)
            s->ms[s->fd_idx[k]].fd_inc = 0;
        return;
    }
    for (uint32_t k = 0; k < s->fd_d; k++) {
        mstate *st = &s->ms[s->fd_idx[k]];
        double f = st->type == MV_SEG_GAUGE ? st->last : st->fd_inc / secs;
        st->fd_inc = 0;
        if (!isfinite(f))
            f = 0;
        double a = fabs(f);
        double *sc = &s->fd_scale[k];
        *sc = *sc == 0 ? a : *sc + FD_SCALE_LAMBDA * (a - *sc);
        s->fd_x[k] = f / (*sc + FD_EPS);
    }
    mv_fd_result r;
    if (mv_fd_observe(s->fd, s->fd_x, &r) == 0 && !r.warming) {
        s->fd_steps++;
        if (!(r.score <= s->fd_wmax))
            s->fd_wmax = r.score;
    }
}

unsigned mv_pipe_seg_feed(mv_pipe_seg *s, const void *hot, uint64_t now_ns)
{
    unsigned flags = 0;
    uint64_t w = now_ns / s->cfg.window_ns;
    if (s->cur_w == UINT64_MAX) {
        s->cur_w = w;
        s->fd_wmax = NAN;
    } else if (w > s->cur_w) {
        close_window(s, s->cur_w);
        s->cur_w = w;
        flags |= MV_PIPE_WINDOW;
    }
    s->win_reads++;
    if (s->last_read_ns && now_ns > s->last_read_ns && now_ns - s->last_read_ns > s->win_gap_max)
        s->win_gap_max = now_ns - s->last_read_ns;
    s->last_read_ns = now_ns;
    uint64_t slot = now_ns / (s->cfg.short_ns / SHORT_SLOTS) + 1, si = slot % SHORT_SLOTS;
    /* The short-rate slots are read by mv_pipe_seg_view: one uncontended lock per read. */
    pthread_mutex_lock(&s->mu);
    s->last_slot = slot;
    for (size_t i = 0; i < s->n; i++) {
        mstate *st = &s->ms[i];
        const mv_seg_metric *m = st->m;
        double x = NAN;
        if (st->type == MV_SEG_COUNTER) {
            uint64_t v = mv_seg_read_counter(hot, m);
            if (st->primed && now_ns > st->prev_ns) {
                double dt = (double)(now_ns - st->prev_ns) * 1e-9;
                uint64_t d;
                if (v >= st->prev_u) {
                    d = v - st->prev_u;
                } else {
                    d = v;
                    st->resets++;
                }
                st->inc += (double)d;
                st->dt += dt;
                st->fd_inc += (double)d;
                x = (double)d / dt;
                if (x > st->rate_max)
                    st->rate_max = x;
                shortwin *sw = st->sw;
                if (sw->id[si] != slot) {
                    sw->id[si] = slot;
                    sw->inc[si] = sw->dt[si] = 0;
                }
                sw->inc[si] += (double)d;
                sw->dt[si] += dt;
            }
            st->prev_u = v;
            st->prev_ns = now_ns;
            st->primed = 1;
        } else if (st->type == MV_SEG_GAUGE) {
            x = mv_seg_read_gauge(hot, m);
            st->last = x;
            mv_sketch_add(st->sk, x); /* -EDOM for NaN/Inf: left out */
        } else {
            mv_seg_hist_view hv;
            if (mv_seg_read_histogram(hot, m, &hv) != MV_SEG_OK)
                continue;
            uint32_t nb = (uint32_t)m->bucket_count + 1;
            if (st->primed) {
                int reset = hv.count < st->prev_u;
                for (uint32_t b = 0; b < nb && !reset; b++) {
                    if (hv.buckets[b] < st->prev_b[b])
                        reset = 1;
                    else
                        s->scratch[b] = hv.buckets[b] - st->prev_b[b];
                }
                uint64_t dc;
                double ds;
                if (reset) {
                    memcpy(s->scratch, hv.buckets, nb * sizeof *s->scratch);
                    dc = hv.count;
                    ds = hv.sum;
                    st->resets++;
                } else {
                    dc = hv.count - st->prev_u;
                    ds = hv.sum - st->prev_sum;
                }
                if (dc) {
                    mv_sketch_add_buckets(st->sk, m->bounds, m->bucket_count, s->scratch, ds);
                    st->fd_inc += (double)dc;
                    x = ds / (double)dc;
                }
            }
            memcpy(st->prev_b, hv.buckets, nb * sizeof *st->prev_b);
            st->prev_u = hv.count;
            st->prev_sum = hv.sum;
            st->primed = 1;
        }
        if (s->det && !isnan(x)) {
            unsigned f = mv_detect_update(s->det, i, x);
            if (f & MV_DETECT_CHANGED) {
                st->changes++;
                flags |= MV_PIPE_CHANGED;
            }
            if (f & MV_DETECT_MOVING)
                flags |= MV_PIPE_MOVING;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (s->fd) {
        uint64_t step = now_ns / s->cfg.fd_period_ns;
        if (step != s->fd_step) {
            s->fd_step = step;
            fd_step(s, now_ns);
        }
    }
    return flags;
}

mv_pipe_view *mv_pipe_seg_view(mv_pipe_seg *s)
{
    mv_pipe_view *v = malloc(sizeof *v + s->n * sizeof(mv_pipe_out));
    if (!v)
        return NULL;
    v->cat = s->cat;
    v->n = s->n;
    pthread_mutex_lock(&s->mu);
    v->window_start_ns = s->pub_start;
    v->window_end_ns = s->pub_end;
    v->anomaly_score = s->pub_score;
    v->fd_steps = s->pub_steps;
    v->mem_bytes = s->pub_mem;
    v->collapses = s->pub_collapses;
    v->window_reads = s->pub_reads;
    v->window_max_interval_ns = s->pub_gap_max;
    memcpy(v->m, s->pub, s->n * sizeof(mv_pipe_out));
    /* Short counter rates, as of the latest read. */
    for (size_t i = 0; i < s->n; i++) {
        const shortwin *sw = s->ms[i].sw;
        v->m[i].rate_short = NAN;
        if (!sw)
            continue;
        double inc = 0, dt = 0;
        for (int k = 0; k < SHORT_SLOTS; k++) {
            if (sw->id[k] && sw->id[k] + SHORT_SLOTS > s->last_slot) {
                inc += sw->inc[k];
                dt += sw->dt[k];
            }
        }
        v->m[i].rate_short = dt > 0 ? inc / dt : NAN;
    }
    pthread_mutex_unlock(&s->mu);
    return v;
}
