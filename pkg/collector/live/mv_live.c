/* mv_live: rings of subscribed series filled by the read hook, SSE streams that drain them
 * downsampled to the client's width, and the pump that wakes them. */
#include "mv_live.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_segment.h"
#include "mv_util.h"

#define OUT_BUDGET    (64u * 1024)  /* bytes of events one read of a stream prepares */
#define STALE_NS      2000000000ull /* no read for this long: the segment is stale */
#define PUMP_NICE     10            /* the pump thread's nice value */
#define EVENT_STREAMS 16            /* streams served an event every pump round */
#define STATE_MS      1000u
#define NQ            3 /* p50, p90, p99 */
#define F_CHANGED     1u
#define F_RESET       2u
#define NH            8   /* heatmap bins of a histogram: its buckets in 8 groups */
#define DRAIN_CHUNK   256 /* samples copied out of a ring per lock */

static const double qs[NQ] = {0.5, 0.9, 0.99};

typedef struct sample {
    uint64_t t; /* CLOCK_REALTIME ns */
    double v;
    float q[NQ];
    uint32_t flags;
    uint16_t h[NH]; /* histograms: observations per bin since the previous read (saturated) */
} sample;
_Static_assert(sizeof(sample) == 48, "docs/ui.md and mv_live.h state 48 bytes per read");

struct wseg;

typedef struct series {
    struct wseg *ws;
    uint32_t idx;
    int refs; /* streams, under l->rw (write) */
    pthread_mutex_t mu;
    sample *ring;
    uint32_t cap;
    uint64_t head; /* next sequence number; written under mu, read atomically by the pump */
    /* What the hook keeps between reads (under mu). */
    uint64_t inst, gen;
    uint8_t type;
    int have_prev;
    uint64_t prev_t, prev_c;
    uint64_t *prev_b;
    uint32_t nb;
} series;

typedef struct wseg {
    char *id;
    series **s;
    size_t n, cap;
    /* The segment's state, under l->state_mu. */
    char state[160];
    uint64_t state_seq;
    int gone;
} wseg;

typedef struct stream {
    struct stream *next;
    mv_live *l;
    mv_httpd_stream *hs; /* atomic pointer: set once the response is made */
    wseg *ws;
    series *s[MV_LIVE_SERIES_MAX];
    uint64_t cur[MV_LIVE_SERIES_MAX]; /* next sequence to send (atomic: the pump reads it) */
    size_t n, rr;                     /* series; the next to drain first */
    uint64_t bw_ns, window_ns;
    char client[64];
    char *hello;
    char *out;
    size_t len, off, cap;
    uint64_t last_out_ms; /* atomic */
    uint64_t state_seq;   /* atomic */
    uint64_t end_ms;
    int closed;          /* atomic: the HTTP layer is done with it */
    pthread_mutex_t omu; /* out, len, off, ended: the pump writes, the HTTP layer reads */
    uint64_t prep_ms;    /* pump: when it last prepared events */
    int ended;           /* the end event is queued */
    int started;
} stream;

struct mv_live {
    mv_live_opts o;
    pthread_rwlock_t rw; /* wsegs, series lists, streams */
    wseg **ws;
    size_t nws, wscap;
    stream *streams;
    size_t nstreams, nseries;
    pthread_mutex_t state_mu;
    pthread_mutex_t smu; /* stats */
    mv_live_stats st;
    pthread_t pump;
    int pumping;
    pthread_mutex_t pmu;
    pthread_cond_t pcond;
    int stop;                     /* under pmu; read atomically by streams */
    uint64_t hook_ns, hook_calls; /* atomic */
    uint64_t ring_ms;             /* what a ring holds at the tick: ring_len ticks */
};

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mv_live_opts_default(mv_live_opts *o)
{
    memset(o, 0, sizeof *o);
    o->tick_us = 10000;
    o->ring_len = 8192;
    o->max_streams = 64;
    o->max_streams_per_client = 8;
    o->max_series = 256;
    o->max_ring_bytes = 64ull << 20;
    o->heartbeat_ms = 2000;
    o->pump_ms = 25;
    o->max_lifetime_s = 3600;
}

static uint64_t history_ms(const mv_live *l)
{
    uint64_t ms = (uint64_t)l->o.ring_len * l->o.tick_us / 1000u;
    return ms < MV_LIVE_WINDOW_MIN ? MV_LIVE_WINDOW_MIN : ms;
}

static uint64_t ring_bytes(const mv_live *l)
{
    return (uint64_t)l->o.ring_len * sizeof(sample);
}

/* ---- The read hook (tick workers) ------------------------------------------------------ */

static wseg *find_ws(mv_live *l, const char *id)
{
    for (size_t i = 0; i < l->nws; i++)
        if (!strcmp(l->ws[i]->id, id))
            return l->ws[i];
    return NULL;
}

/* Linear interpolation of quantile q within the delta buckets (counts d, total n). */
static float hist_quantile(const mv_seg_metric *m, const uint64_t *d, uint64_t n, double q)
{
    double rank = q * (double)n, acc = 0;
    for (uint32_t i = 0; i <= m->bucket_count; i++) {
        if (!d[i])
            continue;
        if (acc + (double)d[i] >= rank) {
            if (i == m->bucket_count) /* +Inf bucket: its lower bound */
                return (float)(m->bucket_count ? m->bounds[m->bucket_count - 1] : 0);
            double lo = i ? m->bounds[i - 1] : (m->bounds[0] > 0 ? 0 : m->bounds[0]);
            double hi = m->bounds[i];
            double f = ((rank - acc) / (double)d[i]);
            return (float)(lo + (hi - lo) * (f < 0 ? 0 : f > 1 ? 1 : f));
        }
        acc += (double)d[i];
    }
    return NAN;
}

static void push(series *s, const sample *x)
{
    s->ring[s->head % s->cap] = *x;
    __atomic_store_n(&s->head, s->head + 1, __ATOMIC_RELEASE);
}

/* One read of one series: a sample into its ring (none for a first read of a counter or
 * histogram, which has no interval yet). Under s->mu. */
static void take(series *s, const mv_seg_catalog *cat, const void *hot, uint64_t now, unsigned pf)
{
    uint64_t inst = mv_seg_catalog_instance(cat);
    if (s->idx >= mv_seg_catalog_count(cat))
        return; /* not (yet) in this catalog */
    const mv_seg_metric *m = mv_seg_catalog_metric(cat, s->idx);
    if (inst != s->inst || m->type != s->type) {
        s->inst = inst;
        s->type = m->type;
        s->have_prev = 0;
    }
    sample x = {.t = now, .q = {NAN, NAN, NAN}};
    x.flags = (pf & 1u) ? F_CHANGED : 0; /* MV_PIPE_CHANGED */
    double dt = s->have_prev && now > s->prev_t ? (double)(now - s->prev_t) / 1e9 : 0;
    if (m->type == MV_SEG_COUNTER) {
        uint64_t c = mv_seg_read_counter(hot, m);
        if (dt > 0) {
            if (c >= s->prev_c) {
                x.v = (double)(c - s->prev_c) / dt;
            } else {
                x.v = (double)c / dt;
                x.flags |= F_RESET;
            }
        }
        s->prev_c = c;
    } else if (m->type == MV_SEG_GAUGE) {
        x.v = mv_seg_read_gauge(hot, m);
    } else {
        mv_seg_hist_view hv;
        if (mv_seg_read_histogram(hot, m, &hv) != MV_SEG_OK)
            return; /* torn: this read is skipped */
        uint32_t nb = m->bucket_count + 1u;
        if (s->nb != nb) {
            uint64_t *b = realloc(s->prev_b, nb * sizeof *b);
            if (!b)
                return;
            s->prev_b = b;
            s->nb = nb;
            s->have_prev = 0;
        }
        if (dt > 0) {
            uint64_t d[MV_SEG_BUCKETS_MAX + 1], n = 0;
            int reset = 0;
            for (uint32_t i = 0; i < nb; i++) {
                if (hv.buckets[i] < s->prev_b[i])
                    reset = 1;
                d[i] = hv.buckets[i] - s->prev_b[i];
            }
            if (reset) {
                memcpy(d, hv.buckets, nb * sizeof *d);
                x.flags |= F_RESET;
            }
            for (uint32_t i = 0; i < nb; i++)
                n += d[i];
            x.v = (double)n / dt;
            for (int k = 0; k < NQ && n; k++)
                x.q[k] = hist_quantile(m, d, n, qs[k]);
            uint64_t hb[NH] = {0};
            for (uint32_t i = 0; i < nb; i++)
                hb[i * NH / nb] += d[i];
            for (int k = 0; k < NH; k++)
                x.h[k] = hb[k] > 65535 ? 65535 : (uint16_t)hb[k];
        }
        memcpy(s->prev_b, hv.buckets, nb * sizeof *s->prev_b);
    }
    int first = !(s->have_prev && dt > 0);
    s->have_prev = 1;
    s->prev_t = now;
    if (first && m->type != MV_SEG_GAUGE)
        return;
    push(s, &x);
}

static void on_read(void *arg, const char *id, const mv_seg_catalog *cat, const void *hot,
                    uint64_t now_ns, unsigned pipe_flags)
{
    mv_live *l = arg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_rwlock_rdlock(&l->rw);
    wseg *ws = find_ws(l, id);
    for (size_t i = 0; ws && i < ws->n; i++) {
        series *s = ws->s[i];
        pthread_mutex_lock(&s->mu);
        take(s, cat, hot, now_ns, pipe_flags);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_rwlock_unlock(&l->rw);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    __atomic_add_fetch(
        &l->hook_ns, (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec)),
        __ATOMIC_RELAXED);
    __atomic_add_fetch(&l->hook_calls, 1, __ATOMIC_RELAXED);
}

/* ---- Output buffer ------------------------------------------------------------------------ */

static int out_put(stream *st, const char *p, size_t n)
{
    if (st->len + n + 1 > st->cap) {
        size_t cap = st->cap ? st->cap : 4096;
        while (cap < st->len + n + 1)
            cap *= 2;
        char *o = realloc(st->out, cap);
        if (!o)
            return -ENOMEM;
        st->out = o;
        st->cap = cap;
    }
    memcpy(st->out + st->len, p, n);
    st->len += n;
    st->out[st->len] = '\0';
    return 0;
}

static int out_fmt(stream *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int out_fmt(stream *st, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    return out_put(st, buf, (size_t)n);
}

static int out_num(stream *st, double v)
{
    if (!isfinite(v))
        return out_put(st, "null", 4);
    return out_fmt(st, "%.7g", v);
}

/* ---- Streams --------------------------------------------------------------------------------- */

static void count(mv_live *l, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&l->smu);
    *field += n;
    pthread_mutex_unlock(&l->smu);
}

static void end_event(stream *st, const char *reason)
{
    out_fmt(st, "event: end\ndata: {\"reason\":\"%s\"}\n\n", reason);
    st->ended = 1;
}

typedef struct bucket {
    uint64_t k;
    double lo, hi;
    float qlo[NQ], qhi[NQ];
    uint32_t flags;
    uint64_t h[NH];
} bucket;

static void bucket_emit(stream *st, const bucket *b, int hist, int *first)
{
    out_put(st, *first ? "[" : ",[", *first ? 1 : 2);
    *first = 0;
    out_fmt(st, "%llu,", (unsigned long long)b->k);
    out_num(st, b->lo);
    out_put(st, ",", 1);
    out_num(st, b->hi);
    out_fmt(st, ",%u", b->flags);
    for (int q = 0; hist && q < NQ; q++) {
        out_put(st, ",", 1);
        out_num(st, b->qlo[q]);
        out_put(st, ",", 1);
        out_num(st, b->qhi[q]);
    }
    for (int k = 0; hist && k < NH; k++)
        out_fmt(st, ",%llu", (unsigned long long)b->h[k]);
    out_put(st, "]", 1);
}

static void fmin_into(float *a, float v)
{
    if (!isnan(v) && (isnan(*a) || v < *a))
        *a = v;
}

static void fmax_into(float *a, float v)
{
    if (!isnan(v) && (isnan(*a) || v > *a))
        *a = v;
}

/* Drains series i of the stream into buckets, up to the output budget. Returns 1 when it
 * wrote a series entry. Sets *lost to the reads overwritten before they were sent. */
static int drain(stream *st, size_t i, uint64_t now, uint64_t *lost, int *first_series)
{
    series *s = st->s[i];
    sample chunk[DRAIN_CHUNK];
    uint64_t cur = st->cur[i];
    int hist = s->type == MV_SEG_HISTOGRAM, wrote = 0, first = 1, have = 0, full = 0;
    bucket b = {0};
    *lost = 0;
    while (!full) {
        /* A chunk of the ring is copied under the series' lock, so the read hook never
         * waits for the formatting below. */
        pthread_mutex_lock(&s->mu);
        uint64_t head = s->head;
        if (head - cur > s->cap) {
            if (st->started)
                *lost += head - cur - s->cap;
            cur = head - s->cap;
        }
        if (!st->started) { /* the first send covers the window only: the first sample in it */
            uint64_t lo = cur, hi = head;
            while (lo < hi) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (s->ring[mid % s->cap].t + st->window_ns < now)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            cur = lo;
        }
        size_t n = head - cur < DRAIN_CHUNK ? (size_t)(head - cur) : DRAIN_CHUNK;
        for (size_t j = 0; j < n; j++)
            chunk[j] = s->ring[(cur + j) % s->cap];
        pthread_mutex_unlock(&s->mu);
        if (n == 0)
            break;
        if (!wrote) {
            out_fmt(st, "%s{\"i\":%u,\"b\":[", *first_series ? "" : ",", s->idx);
            *first_series = 0;
            wrote = 1;
        }
        size_t j = 0;
        for (; j < n; j++) {
            const sample *x = &chunk[j];
            uint64_t k = x->t / st->bw_ns;
            if (have && k != b.k) {
                bucket_emit(st, &b, hist, &first);
                have = 0;
                if (st->len >= OUT_BUDGET) {
                    full = 1; /* the rest at the next read */
                    break;
                }
            }
            if (!have) {
                b.k = k;
                b.lo = b.hi = x->v;
                for (int q = 0; q < NQ; q++)
                    b.qlo[q] = b.qhi[q] = x->q[q];
                b.flags = 0;
                memset(b.h, 0, sizeof b.h);
                have = 1;
            }
            if (x->v < b.lo)
                b.lo = x->v;
            if (x->v > b.hi)
                b.hi = x->v;
            for (int q = 0; q < NQ; q++) {
                fmin_into(&b.qlo[q], x->q[q]);
                fmax_into(&b.qhi[q], x->q[q]);
            }
            b.flags |= x->flags & F_CHANGED;
            for (int hk = 0; hk < NH; hk++)
                b.h[hk] += x->h[hk];
        }
        cur += j;
        if (n < DRAIN_CHUNK)
            break;
    }
    if (have)
        bucket_emit(st, &b, hist, &first);
    if (wrote)
        out_put(st, "]}", 2);
    __atomic_store_n(&st->cur[i], cur, __ATOMIC_RELAXED);
    return wrote;
}

/* Prepares the next events of a stream into its buffer. */
static void prepare(stream *st)
{
    mv_live *l = st->l;
    uint64_t now = wall_ns(), now_ms = mv_util_mono_ms();
    st->len = st->off = 0;
    if (st->hello) {
        out_put(st, st->hello, strlen(st->hello));
        free(st->hello);
        st->hello = NULL;
    }
    pthread_mutex_lock(&l->pmu);
    int stopping = l->stop;
    pthread_mutex_unlock(&l->pmu);
    if (stopping) {
        end_event(st, "shutdown");
        return;
    }
    /* Data: series round-robin, so a budget cut does not starve the last ones. */
    size_t before = st->len;
    out_fmt(st, "event: data\ndata: {\"bw\":%llu,\"s\":[", (unsigned long long)st->bw_ns);
    size_t mark = st->len;
    int first_series = 1, any = 0;
    uint64_t lost[MV_LIVE_SERIES_MAX] = {0}, slow = 0;
    for (size_t j = 0; j < st->n && st->len < OUT_BUDGET; j++) {
        size_t i = (st->rr + j) % st->n;
        any |= drain(st, i, now, &lost[i], &first_series);
    }
    st->rr = (st->rr + 1) % (st->n ? st->n : 1);
    st->started = 1;
    if (any)
        out_put(st, "]}\n\n", 4);
    else
        st->len = before;
    (void)mark;
    for (size_t i = 0; i < st->n; i++) {
        if (!lost[i])
            continue;
        count(l, &l->st.lost_reads, lost[i]);
        out_fmt(st, "event: drop\ndata: {\"i\":%u,\"lost\":%llu,\"reason\":\"slow_reader\"}\n\n",
                st->s[i]->idx, (unsigned long long)lost[i]);
        if (lost[i] >= st->s[i]->cap)
            slow = lost[i];
    }
    if (slow) { /* a whole ring lost at once: this client cannot keep up */
        count(l, &l->st.ended_slow, 1);
        MV_INFO("ui.stream_dropped", "client=%s reason=slow_reader lost=%llu", mv_log_q(st->client),
                (unsigned long long)slow);
        end_event(st, "slow_reader");
    }
    if (st->ended)
        return;
    /* The segment's state. */
    pthread_mutex_lock(&l->state_mu);
    int gone = st->ws->gone;
    if (st->ws->state_seq != st->state_seq && st->ws->state[0]) {
        out_fmt(st, "event: state\ndata: %s\n\n", st->ws->state);
        __atomic_store_n(&st->state_seq, st->ws->state_seq, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&l->state_mu);
    if (gone) {
        count(l, &l->st.ended_gone, 1);
        end_event(st, "segment_gone");
        return;
    }
    if (now_ms + 1000 >= st->end_ms) {
        count(l, &l->st.ended_lifetime, 1);
        end_event(st, "max_lifetime");
        return;
    }
    if (st->len == 0 &&
        now_ms - __atomic_load_n(&st->last_out_ms, __ATOMIC_RELAXED) >= l->o.heartbeat_ms)
        out_put(st, ": hb\n\n", 6);
}

/* The HTTP layer's read: what the pump prepared, nothing else (so a fast client does not
 * make the server format an event per read of the segment). */
static long stream_read(void *arg, char *buf, size_t max)
{
    stream *st = arg;
    pthread_mutex_lock(&st->omu);
    if (st->off == st->len) {
        int ended = st->ended;
        pthread_mutex_unlock(&st->omu);
        return ended ? -1 : 0;
    }
    size_t n = st->len - st->off;
    if (n > max)
        n = max;
    memcpy(buf, st->out + st->off, n);
    st->off += n;
    pthread_mutex_unlock(&st->omu);
    __atomic_store_n(&st->last_out_ms, mv_util_mono_ms(), __ATOMIC_RELAXED);
    return (long)n;
}

static void stream_fin(void *arg)
{
    stream *st = arg;
    __atomic_store_n(&st->closed, 1, __ATOMIC_RELEASE);
}

/* Drops a stream's series (l->rw written): rings nobody watches any more are freed. */
static void unsubscribe(mv_live *l, stream *st)
{
    for (size_t i = 0; i < st->n; i++) {
        series *s = st->s[i];
        if (--s->refs > 0)
            continue;
        wseg *ws = s->ws;
        for (size_t j = 0; j < ws->n; j++)
            if (ws->s[j] == s) {
                ws->s[j] = ws->s[--ws->n];
                break;
            }
        pthread_mutex_destroy(&s->mu);
        free(s->ring);
        free(s->prev_b);
        free(s);
        l->nseries--;
    }
    st->n = 0;
    wseg *ws = st->ws;
    if (ws && ws->n == 0) {
        mv_coll_watch(l->o.coll, ws->id, -1);
        for (size_t j = 0; j < l->nws; j++)
            if (l->ws[j] == ws) {
                l->ws[j] = l->ws[--l->nws];
                break;
            }
        free(ws->s);
        free(ws->id);
        free(ws);
    }
    st->ws = NULL;
}

static void stream_free(stream *st)
{
    pthread_mutex_destroy(&st->omu);
    mv_httpd_stream_release(st->hs);
    free(st->hello);
    free(st->out);
    free(st);
}

/* Frees the streams the HTTP layer is done with. */
static void gc(mv_live *l)
{
    pthread_rwlock_wrlock(&l->rw);
    for (stream **pp = &l->streams; *pp;) {
        stream *st = *pp;
        if (!__atomic_load_n(&st->closed, __ATOMIC_ACQUIRE)) {
            pp = &st->next;
            continue;
        }
        *pp = st->next;
        unsubscribe(l, st);
        l->nstreams--;
        stream_free(st);
    }
    pthread_rwlock_unlock(&l->rw);
}

/* ---- The segments' state (pump, once a second) ----------------------------------------------- */

static void update_states(mv_live *l)
{
    mv_coll_snap *snap = mv_coll_snapshot(l->o.coll);
    if (!snap)
        return;
    uint64_t now = wall_ns();
    size_t nseg = mv_coll_snap_count(snap);
    pthread_rwlock_rdlock(&l->rw);
    for (size_t i = 0; i < l->nws; i++) {
        wseg *ws = l->ws[i];
        const mv_coll_seg_view *v = NULL;
        for (size_t j = 0; j < nseg && !v; j++)
            if (!strcmp(mv_coll_snap_seg(snap, j)->id, ws->id))
                v = mv_coll_snap_seg(snap, j);
        char buf[sizeof ws->state];
        int gone = !v;
        if (v) {
            const char *state = v->state == MV_COLL_QUARANTINED ? "quarantined"
                                : v->state == MV_COLL_PENDING   ? "pending"
                                : v->busy_since_ns              ? "busy"
                                : v->read_ns + STALE_NS < now   ? "stale"
                                                                : "ok";
            double score =
                v->pipe && v->pipe->cat == (const void *)v->cat ? v->pipe->anomaly_score : NAN;
            char sc[32] = "null";
            if (isfinite(score))
                snprintf(sc, sizeof sc, "%.4g", score);
            snprintf(buf, sizeof buf,
                     "{\"t\":%llu,\"state\":\"%s\",\"anomaly\":%s,\"reads\":%llu,"
                     "\"interval_ms\":%.3f}",
                     (unsigned long long)(now / 1000000u), state, sc, (unsigned long long)v->reads,
                     (double)v->read_interval_ns / 1e6);
        } else {
            snprintf(buf, sizeof buf, "{\"t\":%llu,\"state\":\"gone\",\"anomaly\":null}",
                     (unsigned long long)(now / 1000000u));
        }
        pthread_mutex_lock(&l->state_mu);
        memcpy(ws->state, buf, sizeof buf);
        ws->state_seq++;
        ws->gone = gone;
        pthread_mutex_unlock(&l->state_mu);
    }
    pthread_rwlock_unlock(&l->rw);
    mv_coll_snap_free(snap);
}

/* ---- The pump ----------------------------------------------------------------------------- */

static int wants(mv_live *l, stream *st, uint64_t now_ms, int stopping)
{
    if (stopping || now_ms + 1000 >= st->end_ms || st->hello)
        return 1;
    /* Data at most once per pixel's time and per pump round; with more than EVENT_STREAMS
     * streams, the rounds between two events of one stream grow with their number, so the
     * events of all streams together stay about EVENT_STREAMS per round (the CPU they take
     * is bounded; each stream's latency grows instead). */
    uint64_t every = (uint64_t)l->o.pump_ms * ((l->nstreams + EVENT_STREAMS - 1) / EVENT_STREAMS);
    if (every < st->bw_ns / 1000000u)
        every = st->bw_ns / 1000000u;
    if (every > l->ring_ms / 2) /* never so rare that a ring overflows between two events */
        every = l->ring_ms / 2 > l->o.pump_ms ? l->ring_ms / 2 : l->o.pump_ms;
    int data_due = now_ms - st->prep_ms >= every;
    for (size_t i = 0; data_due && i < st->n; i++)
        if (__atomic_load_n(&st->s[i]->head, __ATOMIC_ACQUIRE) !=
            __atomic_load_n(&st->cur[i], __ATOMIC_RELAXED))
            return 1;
    pthread_mutex_lock(&l->state_mu);
    int st_new = st->ws->state_seq != __atomic_load_n(&st->state_seq, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&l->state_mu);
    if (st_new)
        return 1;
    return now_ms - __atomic_load_n(&st->last_out_ms, __ATOMIC_RELAXED) >= l->o.heartbeat_ms;
}

static void *pump_main(void *arg)
{
    mv_live *l = arg;
    mv_util_thread_name("mv-live-pump");
    /* Formatting events is best effort: the tick must not wait for it. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PUMP_NICE) != 0)
        MV_DEBUG("ui.pump_nice", "err=%s", mv_log_q(strerror(errno)));
    uint64_t last_state = 0;
    pthread_mutex_lock(&l->pmu);
    for (;;) {
        int stopping = l->stop;
        pthread_mutex_unlock(&l->pmu);
        uint64_t now_ms = mv_util_mono_ms();
        int closed = 0;
        size_t n;
        pthread_rwlock_rdlock(&l->rw);
        for (stream *st = l->streams; st; st = st->next) {
            if (__atomic_load_n(&st->closed, __ATOMIC_ACQUIRE)) {
                closed = 1;
                continue;
            }
            mv_httpd_stream *hs = __atomic_load_n(&st->hs, __ATOMIC_ACQUIRE);
            if (!hs)
                continue;
            /* The next events are prepared here, on this low-priority thread, once the
             * client took the previous ones: a stream that is not read falls behind in
             * its rings (and learns it), it does not queue output. */
            pthread_mutex_lock(&st->omu);
            int send = 0;
            if (st->off == st->len && !st->ended && wants(l, st, now_ms, stopping)) {
                prepare(st);
                st->prep_ms = now_ms;
                send = st->len > 0;
            }
            pthread_mutex_unlock(&st->omu);
            if (send)
                mv_httpd_stream_wake(hs);
        }
        n = l->nstreams;
        pthread_rwlock_unlock(&l->rw);
        if (closed)
            gc(l);
        if (n && now_ms - last_state >= STATE_MS) {
            update_states(l);
            last_state = now_ms;
        }
        pthread_mutex_lock(&l->pmu);
        if (l->stop == 2)
            break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)l->o.pump_ms * 1000000L;
        while (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&l->pcond, &l->pmu, &until);
        if (l->stop == 2)
            break;
    }
    pthread_mutex_unlock(&l->pmu);
    return NULL;
}

/* ---- Create / destroy --------------------------------------------------------------------- */

int mv_live_create(const mv_live_opts *o, mv_live **out)
{
    *out = NULL;
    if (!o || !o->coll || o->ring_len < 16 || o->ring_len > (1u << 24) || !o->max_streams ||
        !o->max_streams_per_client || !o->max_series || !o->pump_ms || !o->heartbeat_ms ||
        !o->max_lifetime_s || o->max_lifetime_s > 86400 || !o->tick_us)
        return -EINVAL;
    mv_live *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->o = *o;
    l->ring_ms = (uint64_t)o->ring_len * o->tick_us / 1000u;
    pthread_rwlock_init(&l->rw, NULL);
    pthread_mutex_init(&l->state_mu, NULL);
    pthread_mutex_init(&l->smu, NULL);
    pthread_mutex_init(&l->pmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->pcond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&l->pump, NULL, pump_main, l) != 0) {
        mv_live_destroy(l);
        return -ENOMEM;
    }
    l->pumping = 1;
    mv_coll_set_read_hook(o->coll, on_read, l);
    *out = l;
    return 0;
}

void mv_live_destroy(mv_live *l)
{
    if (!l)
        return;
    mv_coll_set_read_hook(l->o.coll, NULL, NULL); /* returns once no call is in flight */
    if (l->pumping) {
        pthread_mutex_lock(&l->pmu);
        l->stop = 2;
        pthread_cond_signal(&l->pcond);
        pthread_mutex_unlock(&l->pmu);
        pthread_join(l->pump, NULL);
    }
    /* Every stream is closed by now (the HTTP server is gone): free them all. */
    pthread_rwlock_wrlock(&l->rw);
    while (l->streams) {
        stream *st = l->streams;
        l->streams = st->next;
        unsubscribe(l, st);
        stream_free(st);
    }
    pthread_rwlock_unlock(&l->rw);
    pthread_rwlock_destroy(&l->rw);
    pthread_mutex_destroy(&l->state_mu);
    pthread_mutex_destroy(&l->smu);
    pthread_mutex_destroy(&l->pmu);
    pthread_cond_destroy(&l->pcond);
    free(l->ws);
    free(l);
}

/* ---- Handlers ----------------------------------------------------------------------------- */

static int reply_json(mv_httpd_response *resp, unsigned status, const char *json)
{
    mv_httpd_set_status(resp, status);
    int rc = mv_httpd_set_content_type(resp, "application/json");
    if (rc)
        return rc;
    mv_httpd_add_header(resp, "Cache-Control", "no-store");
    return mv_httpd_copy_body(resp, json, strlen(json));
}

static int reply_error(mv_live *l, mv_httpd_response *resp, unsigned status, const char *reason,
                       const char *msg)
{
    char q[700], body[800];
    mv_live_json_str(msg, q, sizeof q);
    snprintf(body, sizeof body, "{\"error\":%s,\"reason\":\"%s\"}\n", q, reason);
    (void)l;
    return reply_json(resp, status, body);
}

typedef struct qctx {
    mv_live_query *q;
    uint64_t max_window;
    char err[200];
} qctx;

static int take_param(void *arg, const char *key, const char *value)
{
    qctx *c = arg;
    return mv_live_query_add(c->q, key, value, c->max_window, c->err, sizeof c->err) ? 1 : 0;
}

static const char *type_name(uint8_t t)
{
    return t == MV_SEG_COUNTER ? "counter" : t == MV_SEG_GAUGE ? "gauge" : "histogram";
}

/* Appends `"labels":{...}` of a metric or segment. */
static int put_labels(mv_util_buf *b, const mv_seg_label *lb, size_t n)
{
    mv_util_buf_append(b, "\"labels\":{", 10);
    for (size_t i = 0; i < n; i++) {
        char k[600], v[2400];
        if (mv_live_json_str(lb[i].key, k, sizeof k) >= sizeof k ||
            mv_live_json_str(lb[i].value, v, sizeof v) >= sizeof v)
            continue;
        if (i)
            mv_util_buf_append(b, ",", 1);
        mv_util_buf_append(b, k, strlen(k));
        mv_util_buf_append(b, ":", 1);
        mv_util_buf_append(b, v, strlen(v));
    }
    return mv_util_buf_append(b, "}", 1);
}

static int put_str(mv_util_buf *b, const char *s)
{
    size_t need = mv_live_json_str(s, NULL, 0);
    char *t = malloc(need + 1);
    if (!t)
        return -ENOMEM;
    mv_live_json_str(s, t, need + 1);
    int rc = mv_util_buf_append(b, t, need);
    free(t);
    return rc;
}

static int put_fmt(mv_util_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put_fmt(mv_util_buf *b, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        return -EINVAL;
    return mv_util_buf_append(b, buf, (size_t)n);
}

/* The hello event: the series' identities from the segment's catalog. Returns NULL and a
 * reason in err when the segment or an index is unknown. */
static char *make_hello(mv_live *l, const mv_live_query *q, uint64_t bw_ns, char *err,
                        size_t errlen, int *notfound)
{
    *notfound = 0;
    mv_coll_snap *snap = mv_coll_snapshot(l->o.coll);
    if (!snap) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    const mv_coll_seg_view *v = NULL;
    for (size_t j = 0; j < mv_coll_snap_count(snap) && !v; j++)
        if (!strcmp(mv_coll_snap_seg(snap, j)->id, q->seg))
            v = mv_coll_snap_seg(snap, j);
    mv_util_buf b = {.cap = 1u << 20};
    if (!v || !v->cat) {
        snprintf(err, errlen, v ? "segment %.200s has no valid catalog yet" : "no segment %.200s",
                 q->seg);
        *notfound = 1;
        goto fail;
    }
    put_fmt(&b, "retry: 3000\nevent: hello\ndata: {\"seg\":");
    put_str(&b, q->seg);
    put_fmt(&b, ",\"bw\":%llu,\"window_ms\":%llu,\"width\":%u,\"history_ms\":%llu,",
            (unsigned long long)bw_ns, (unsigned long long)q->window_ms, q->width,
            (unsigned long long)history_ms(l));
    put_labels(&b, v->labels, v->nlabels);
    put_fmt(&b, ",\"series\":[");
    for (size_t i = 0; i < q->n; i++) {
        if (q->idx[i] >= mv_seg_catalog_count(v->cat)) {
            snprintf(err, errlen, "segment %.200s has no metric %u", q->seg, q->idx[i]);
            *notfound = 1;
            goto fail;
        }
        const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, q->idx[i]);
        put_fmt(&b, "%s{\"i\":%u,\"name\":", i ? "," : "", q->idx[i]);
        put_str(&b, m->name);
        put_fmt(&b, ",\"type\":\"%s\",", type_name(m->type));
        put_labels(&b, m->labels, m->label_count);
        if (m->type == MV_SEG_HISTOGRAM) { /* the heatmap bins' upper bounds (null: +Inf) */
            uint32_t nb = m->bucket_count + 1u;
            put_fmt(&b, ",\"bins\":[");
            for (uint32_t k = 0; k < NH; k++) {
                int32_t top = -1; /* the last pod bucket in bin k */
                for (uint32_t pi = 0; pi < nb; pi++)
                    if (pi * NH / nb == k)
                        top = (int32_t)pi;
                if (top < 0 || (uint32_t)top >= m->bucket_count)
                    put_fmt(&b, "%snull", k ? "," : "");
                else
                    put_fmt(&b, "%s%.9g", k ? "," : "", m->bounds[top]);
            }
            mv_util_buf_append(&b, "]", 1);
        }
        mv_util_buf_append(&b, "}", 1);
    }
    if (put_fmt(&b, "]}\n\n") != 0 || b.error) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    mv_coll_snap_free(snap);
    return b.data;
fail:
    mv_coll_snap_free(snap);
    mv_util_buf_free(&b);
    return NULL;
}

int mv_live_handle_stream(mv_live *l, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_live_query q;
    mv_live_query_init(&q);
    qctx c = {&q, history_ms(l), ""};
    if (mv_httpd_query_each(req, take_param, &c) || mv_live_query_finish(&q, c.err, sizeof c.err)) {
        count(l, &l->st.bad_request, 1);
        return reply_error(l, resp, 400, "bad_request", c.err);
    }
    uint64_t bw = q.window_ms * 1000000ull / q.width;
    char err[320];
    int notfound;
    char *hello = make_hello(l, &q, bw, err, sizeof err, &notfound);
    if (!hello) {
        count(l, &l->st.bad_request, 1);
        return reply_error(l, resp, notfound ? 404 : 503, notfound ? "not_found" : "no_memory",
                           err);
    }
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        free(hello);
        return -ENOMEM;
    }
    pthread_mutex_init(&st->omu, NULL);
    st->l = l;
    st->hello = hello;
    st->bw_ns = bw;
    st->window_ns = q.window_ms * 1000000ull;
    st->end_ms = mv_util_mono_ms() + 1000ull * l->o.max_lifetime_s;
    st->last_out_ms = mv_util_mono_ms();
    mv_httpd_client_addr(req, st->client, sizeof st->client);

    /* Limits, then the subscription, under the write lock. */
    const char *reason = NULL;
    char msg[200] = "";
    pthread_rwlock_wrlock(&l->rw);
    size_t mine = 0;
    for (stream *o = l->streams; o; o = o->next)
        mine += !__atomic_load_n(&o->closed, __ATOMIC_ACQUIRE) && !strcmp(o->client, st->client);
    wseg *ws = find_ws(l, q.seg);
    size_t fresh = 0;
    for (size_t i = 0; i < q.n; i++) {
        int have = 0;
        for (size_t j = 0; ws && j < ws->n && !have; j++)
            have = ws->s[j]->idx == q.idx[i];
        fresh += !have;
    }
    if (l->nstreams >= l->o.max_streams) {
        reason = "streams_total";
        snprintf(msg, sizeof msg, "the collector serves at most %u streams", l->o.max_streams);
    } else if (mine >= l->o.max_streams_per_client) {
        reason = "streams_per_client";
        snprintf(msg, sizeof msg, "at most %u streams per client address",
                 l->o.max_streams_per_client);
    } else if (l->nseries + fresh > l->o.max_series) {
        reason = "series_total";
        snprintf(msg, sizeof msg, "at most %u series are watched at once", l->o.max_series);
    } else if ((l->nseries + fresh) * ring_bytes(l) > l->o.max_ring_bytes) {
        reason = "ring_memory";
        snprintf(msg, sizeof msg, "rings would pass %llu bytes",
                 (unsigned long long)l->o.max_ring_bytes);
    }
    if (!reason && !ws) {
        if (mv_coll_watch(l->o.coll, q.seg, 1) != 0) {
            reason = "not_found";
            snprintf(msg, sizeof msg, "no segment %.180s", q.seg);
        } else if ((ws = calloc(1, sizeof *ws)) == NULL || (ws->id = strdup(q.seg)) == NULL ||
                   (l->nws == l->wscap &&
                    !(l->ws = realloc(l->ws, (l->wscap = l->wscap * 2 + 4) * sizeof *l->ws)))) {
            /* out of memory: a realloc failure above leaks l->ws only on ENOMEM (abort path) */
            mv_coll_watch(l->o.coll, q.seg, -1);
            if (ws)
                free(ws->id);
            free(ws);
            ws = NULL;
            reason = "no_memory";
            snprintf(msg, sizeof msg, "out of memory");
        } else {
            l->ws[l->nws++] = ws;
        }
    }
    for (size_t i = 0; !reason && i < q.n; i++) {
        series *s = NULL;
        for (size_t j = 0; j < ws->n && !s; j++)
            if (ws->s[j]->idx == q.idx[i])
                s = ws->s[j];
        if (!s) {
            s = calloc(1, sizeof *s);
            sample *ring = calloc(l->o.ring_len, sizeof *ring);
            series **nv = ws->n == ws->cap ? realloc(ws->s, (ws->cap * 2 + 4) * sizeof *nv) : ws->s;
            if (!s || !ring || !nv) {
                free(s);
                free(ring);
                if (nv)
                    ws->s = nv;
                reason = "no_memory";
                snprintf(msg, sizeof msg, "out of memory");
                break;
            }
            if (ws->n == ws->cap)
                ws->cap = ws->cap * 2 + 4;
            ws->s = nv;
            pthread_mutex_init(&s->mu, NULL);
            s->ws = ws;
            s->idx = q.idx[i];
            s->ring = ring;
            s->cap = l->o.ring_len;
            ws->s[ws->n++] = s;
            l->nseries++;
        }
        s->refs++;
        st->s[st->n] = s;
        st->cur[st->n] =
            __atomic_load_n(&s->head, __ATOMIC_ACQUIRE) > s->cap ? s->head - s->cap : 0;
        st->n++;
    }
    st->ws = ws;
    if (reason) {
        if (ws)
            unsubscribe(l, st);
        pthread_rwlock_unlock(&l->rw);
        uint64_t *f = !strcmp(reason, "streams_total")        ? &l->st.refused_streams
                      : !strcmp(reason, "streams_per_client") ? &l->st.refused_client
                      : !strcmp(reason, "series_total")       ? &l->st.refused_series
                      : !strcmp(reason, "not_found")          ? &l->st.bad_request
                                                              : &l->st.refused_memory;
        count(l, f, 1);
        MV_INFO("ui.stream_refused", "client=%s reason=%s", mv_log_q(st->client), reason);
        stream_free(st);
        return reply_error(l, resp, !strcmp(reason, "not_found") ? 404 : 429, reason, msg);
    }
    st->next = l->streams;
    l->streams = st;
    l->nstreams++;
    /* The response: the layer reads the stream from now on. */
    mv_httpd_stream *hs =
        mv_httpd_set_stream(resp, stream_read, stream_fin, st, l->o.max_lifetime_s);
    if (!hs) {
        st->closed = 1; /* the pump frees it */
        pthread_rwlock_unlock(&l->rw);
        return -ENOMEM;
    }
    __atomic_store_n(&st->hs, hs, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&l->rw);
    mv_httpd_add_header(resp, "X-Accel-Buffering", "no");
    MV_DEBUG("ui.stream_opened", "client=%s seg=%s series=%zu width=%u window_ms=%llu",
             mv_log_q(st->client), mv_log_q(q.seg), q.n, q.width, (unsigned long long)q.window_ms);
    return 0;
}

int mv_live_handle_segments(mv_live *l, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)req;
    mv_coll_snap *snap = mv_coll_snapshot(l->o.coll);
    if (!snap)
        return reply_error(l, resp, 503, "no_memory", "out of memory");
    mv_util_buf b = {.cap = 64u << 20};
    uint64_t now = wall_ns();
    put_fmt(&b, "{\"tick_ms\":%.3f,\"history_ms\":%llu,\"max_series_per_stream\":%d,\"segments\":[",
            l->o.tick_us / 1000.0, (unsigned long long)history_ms(l), MV_LIVE_SERIES_MAX);
    for (size_t j = 0; j < mv_coll_snap_count(snap); j++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(snap, j);
        const char *state = v->state == MV_COLL_QUARANTINED ? "quarantined"
                            : v->state == MV_COLL_PENDING   ? "pending"
                            : v->busy_since_ns              ? "busy"
                            : v->read_ns + STALE_NS < now   ? "stale"
                                                            : "ok";
        put_fmt(&b, "%s{\"id\":", j ? "," : "");
        put_str(&b, v->id);
        put_fmt(&b, ",\"state\":\"%s\",", state);
        put_labels(&b, v->labels, v->nlabels);
        put_fmt(&b, ",\"metrics\":[");
        size_t n = v->cat ? mv_seg_catalog_count(v->cat) : 0;
        for (size_t i = 0; i < n; i++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, i);
            put_fmt(&b, "%s{\"i\":%zu,\"name\":", i ? "," : "", i);
            put_str(&b, m->name);
            put_fmt(&b, ",\"type\":\"%s\",", type_name(m->type));
            put_labels(&b, m->labels, m->label_count);
            mv_util_buf_append(&b, "}", 1);
        }
        mv_util_buf_append(&b, "]}", 2);
    }
    mv_util_buf_append(&b, "]}\n", 3);
    mv_coll_snap_free(snap);
    if (b.error) {
        mv_util_buf_free(&b);
        return reply_error(l, resp, 503, "no_memory", "the catalog does not fit");
    }
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "application/json");
    mv_httpd_add_header(resp, "Cache-Control", "no-store");
    return mv_httpd_set_body(resp, b.data, b.len);
}

/* ---- Statistics ------------------------------------------------------------------------------ */

void mv_live_get_stats(mv_live *l, mv_live_stats *out)
{
    pthread_mutex_lock(&l->smu);
    *out = l->st;
    pthread_mutex_unlock(&l->smu);
    pthread_rwlock_rdlock(&l->rw);
    out->streams = l->nstreams;
    out->series = l->nseries;
    out->ring_bytes = l->nseries * ring_bytes(l);
    pthread_rwlock_unlock(&l->rw);
    out->hook_ns = __atomic_load_n(&l->hook_ns, __ATOMIC_RELAXED);
    out->hook_calls = __atomic_load_n(&l->hook_calls, __ATOMIC_RELAXED);
}

int mv_live_render(mv_live *l, mv_expo *e)
{
    mv_live_stats s;
    mv_live_get_stats(l, &s);
    mv_expo_family(e, "microview_ui_ring_bytes", MV_EXPO_GAUGE,
                   "Bytes held by the live view's rings of recent reads (one per watched series).",
                   NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, s.ring_bytes, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_ui_streams", MV_EXPO_GAUGE,
                   "Live view streams (/api/v1/stream) open now.", NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, s.streams, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_ui_series", MV_EXPO_GAUGE,
                   "Distinct series watched by live view streams now.", NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, s.series, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_ui_streams_refused_total", MV_EXPO_COUNTER,
                   "Live view streams refused, by limit.", NULL);
    const struct {
        const char *r;
        uint64_t n;
    } rf[] = {{"streams_total", s.refused_streams},
              {"streams_per_client", s.refused_client},
              {"series_total", s.refused_series},
              {"ring_memory", s.refused_memory},
              {"bad_request", s.bad_request}};
    for (size_t i = 0; i < sizeof rf / sizeof rf[0]; i++) {
        mv_expo_label lb = {"reason", rf[i].r};
        mv_expo_sample_u64(e, NULL, &lb, 1, NULL, 0, NULL, 0, rf[i].n, MV_EXPO_NO_TS);
    }
    mv_expo_family(e, "microview_ui_streams_ended_total", MV_EXPO_COUNTER,
                   "Live view streams the collector ended, by reason.", NULL);
    const struct {
        const char *r;
        uint64_t n;
    } en[] = {{"slow_reader", s.ended_slow},
              {"segment_gone", s.ended_gone},
              {"max_lifetime", s.ended_lifetime}};
    for (size_t i = 0; i < sizeof en / sizeof en[0]; i++) {
        mv_expo_label lb = {"reason", en[i].r};
        mv_expo_sample_u64(e, NULL, &lb, 1, NULL, 0, NULL, 0, en[i].n, MV_EXPO_NO_TS);
    }
    mv_expo_family(e, "microview_ui_reads_lost_total", MV_EXPO_COUNTER,
                   "Reads overwritten in a ring before a slow stream sent them.", NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, s.lost_reads, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_ui_hook_seconds_total", MV_EXPO_COUNTER,
                   "Time tick workers spent filling the live view's rings.", NULL);
    return mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, (double)s.hook_ns / 1e9,
                          MV_EXPO_NO_TS);
}
