/* mv_scsvc_pool: bounded work. A fixed set of worker threads, each with its own kept
 * connections to the collectors, takes evaluations from a queue; the calls waiting for them
 * (queued or joined to one in flight) are at most max_pending. Calls for the same key share
 * one evaluation (single flight) and its result for cache_ms. Above mv_scsvc_eval.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_scsvc_int.h"
#include "mv_util.h"

#define MAX_WORKERS 256

typedef struct waiter {
    mv_scsvc__done_fn fn;
    void *arg;
    struct waiter *next;
} waiter;

typedef struct flight {
    char *key;
    char so_ns[MV_SCSVC_NAME_MAX + 1], so_name[MV_SCSVC_NAME_MAX + 1];
    mv_scaler_meta *m; /* while queued or running */
    int running;       /* queued or being evaluated */
    uint64_t done_ms;  /* when the result was stored; 0: none yet */
    mv_scsvc__result r;
    waiter *waiters;
} flight;

struct mv_scsvc__pool {
    mv_scsvc__ctx *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t threads[MAX_WORKERS];
    unsigned nthreads;
    flight **f; /* the flights known: running ones and recent results */
    size_t nf, fcap;
    flight **q; /* ring of flights to evaluate */
    size_t qhead, qlen, qcap;
    size_t pending;
    int stopping;
};

static void flight_free(flight *f)
{
    if (!f)
        return;
    free(f->key);
    free(f->m);
    free(f);
}

/* Answers a list of waiters with `r` and forgets them. Unlocked. */
static void answer(waiter *w, const mv_scsvc__result *r)
{
    while (w) {
        waiter *next = w->next;
        w->fn(w->arg, r);
        free(w);
        w = next;
    }
}

static size_t count(const waiter *w)
{
    size_t n = 0;
    for (; w; w = w->next)
        n++;
    return n;
}

static void *worker(void *arg)
{
    mv_scsvc__pool *p = arg;
    mv_util_thread_name("scaler-worker");
    mv_scaler_conns *conns = mv_scaler_conns_create();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->qlen == 0)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break;
        flight *f = p->q[p->qhead];
        p->qhead = (p->qhead + 1) % p->qcap;
        p->qlen--;
        mv_scaler_meta *m = f->m;
        pthread_mutex_unlock(&p->mu);

        mv_scsvc__result r;
        mv_scsvc__eval(p->ctx, f->so_ns, f->so_name, m, conns, &r);

        pthread_mutex_lock(&p->mu);
        f->r = r;
        f->done_ms = mv_util_mono_ms();
        f->running = 0;
        free(f->m);
        f->m = NULL;
        waiter *w = f->waiters;
        f->waiters = NULL;
        size_t n = count(w);
        pthread_mutex_unlock(&p->mu);
        answer(w, &r);
        pthread_mutex_lock(&p->mu);
        p->pending -= n;
    }
    pthread_mutex_unlock(&p->mu);
    mv_scaler_conns_destroy(conns);
    return NULL;
}

int mv_scsvc__pool_create(mv_scsvc__ctx *c, mv_scsvc__pool **out)
{
    *out = NULL;
    mv_scsvc__pool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->ctx = c;
    p->qcap = c->cfg.max_pending;
    /* Every running flight has a waiter, so at most max_pending run; room for as many
     * results again. */
    p->fcap = 2 * (size_t)c->cfg.max_pending + 64;
    p->q = calloc(p->qcap, sizeof *p->q);
    p->f = calloc(p->fcap, sizeof *p->f);
    if (!p->q || !p->f) {
        free(p->q);
        free(p->f);
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    unsigned n = c->cfg.workers > MAX_WORKERS ? MAX_WORKERS : c->cfg.workers;
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0)
            break;
        p->nthreads++;
    }
    if (p->nthreads == 0) {
        mv_scsvc__pool_destroy(p);
        return -EAGAIN;
    }
    *out = p;
    return 0;
}

void mv_scsvc__pool_stop(mv_scsvc__pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    int was = p->stopping;
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (was)
        return;
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    mv_scsvc__result stop = {.code = MV_RPC_UNAVAILABLE};
    snprintf(stop.msg, sizeof stop.msg, "scaler stopping");
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->nf; i++) {
        waiter *w = p->f[i]->waiters;
        p->f[i]->waiters = NULL;
        pthread_mutex_unlock(&p->mu);
        answer(w, &stop);
        pthread_mutex_lock(&p->mu);
    }
    p->pending = 0;
    pthread_mutex_unlock(&p->mu);
}

void mv_scsvc__pool_destroy(mv_scsvc__pool *p)
{
    if (!p)
        return;
    mv_scsvc__pool_stop(p);
    for (size_t i = 0; i < p->nf; i++)
        flight_free(p->f[i]);
    free(p->f);
    free(p->q);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The flight of `key`, or a new one (evicting the oldest finished one when full). Locked. */
static flight *flight_for(mv_scsvc__pool *p, const char *key)
{
    for (size_t i = 0; i < p->nf; i++)
        if (strcmp(p->f[i]->key, key) == 0)
            return p->f[i];
    if (p->nf == p->fcap) {
        size_t old = p->nf;
        for (size_t i = 0; i < p->nf; i++)
            if (!p->f[i]->running && (old == p->nf || p->f[i]->done_ms < p->f[old]->done_ms))
                old = i;
        if (old == p->nf)
            return NULL;
        flight_free(p->f[old]);
        p->f[old] = p->f[--p->nf];
    }
    flight *f = calloc(1, sizeof *f);
    if (!f || !(f->key = strdup(key))) {
        free(f);
        return NULL;
    }
    p->f[p->nf++] = f;
    return f;
}

int mv_scsvc__pool_submit(mv_scsvc__pool *p, const char *key, const char *so_ns,
                          const char *so_name, const mv_scaler_meta *m, mv_scsvc__done_fn fn,
                          void *arg, size_t *pending)
{
    uint64_t now = mv_util_mono_ms();
    waiter *w = malloc(sizeof *w);
    if (!w)
        return -ENOMEM;
    w->fn = fn;
    w->arg = arg;
    w->next = NULL;
    pthread_mutex_lock(&p->mu);
    *pending = p->pending;
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(w);
        return -ESHUTDOWN;
    }
    flight *f = flight_for(p, key);
    if (f && !f->running && f->done_ms && p->ctx->cfg.cache_ms &&
        now - f->done_ms <= p->ctx->cfg.cache_ms) {
        mv_scsvc__result r = f->r; /* a fresh result: answered here */
        pthread_mutex_unlock(&p->mu);
        free(w);
        atomic_fetch_add(&p->ctx->metrics.cache_hits[MV_SCSVC__HIT_RESULT], 1);
        fn(arg, &r);
        return 0;
    }
    if (p->pending >= p->ctx->cfg.max_pending || !f) {
        pthread_mutex_unlock(&p->mu);
        free(w);
        return f ? -EBUSY : -ENOMEM;
    }
    if (!f->running) {
        if (p->qlen == p->qcap || !(f->m = malloc(sizeof *f->m))) {
            pthread_mutex_unlock(&p->mu);
            free(w);
            return p->qlen == p->qcap ? -EBUSY : -ENOMEM;
        }
        *f->m = *m;
        snprintf(f->so_ns, sizeof f->so_ns, "%s", so_ns);
        snprintf(f->so_name, sizeof f->so_name, "%s", so_name);
        f->running = 1;
        p->q[(p->qhead + p->qlen) % p->qcap] = f;
        p->qlen++;
        pthread_cond_signal(&p->cv);
    }
    w->next = f->waiters;
    f->waiters = w;
    p->pending++;
    pthread_mutex_unlock(&p->mu);
    return 0;
}
