/* mv_collect tick workers: the helper threads sharing each tick's segments, their scratch,
 * and the locks serialising reads through transports that are not concurrent. */
#include "mv_collect_int.h"
#include "mv_log.h"
#include "mv_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Reads through a transport, one caller at a time unless it says it is
 * concurrent. */
void mv_coll__read(mv_coll *c, const mv_coll_transport *t, mv_coll_read *rq, size_t n)
{
    pthread_mutex_t *mu = NULL;
    if (c->nw > 1 && !t->concurrent)
        mu = &c->read_mu[((uintptr_t)t * 0x9E3779B97F4A7C15ull >> 40) % READ_LOCKS];
    if (mu)
        pthread_mutex_lock(mu);
    t->read_many(t->ctx, rq, n);
    if (mu)
        pthread_mutex_unlock(mu);
}

/* The fewest segments a worker takes at once (but for the last): a local transport's copy
 * groups, an RDMA transport's batch of READs, stay whole. */
#define MIN_CHUNK 16

/* Takes chunks of the current tick's list until none is left. Chunks shrink as the list
 * does (a share of what is left per worker, halved): the first are large, so each transport
 * batch is, and the last are small, so a worker that was descheduled or slowed down
 * mid-tick leaves little for the tick to wait on while the others take the rest. */
static void take_chunks(mv_coll *c, tick_worker *w)
{
    size_t at = __atomic_load_n(&c->wnext, __ATOMIC_RELAXED);
    while (at < c->wn) {
        size_t left = c->wn - at, k = left / (2 * c->nw);
        if (k < MIN_CHUNK)
            k = left < MIN_CHUNK ? left : MIN_CHUNK;
        if (!__atomic_compare_exchange_n(&c->wnext, &at, at + k, 1, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            continue; /* `at` is the current one now */
        mv_coll__tick_chunk(c, w, c->tick_segs + at, k);
        at = __atomic_load_n(&c->wnext, __ATOMIC_RELAXED);
    }
}

/* A helper: joins each tick that is still open, once, and takes chunks. */
static void *worker_main(void *arg)
{
    mv_thread_name("mv-tick-worker");
    tick_worker *w = arg;
    mv_coll *c = w->c;
    uint64_t seen = 0;
    pthread_mutex_lock(&c->wmu);
    for (;;) {
        while (!c->wstop && !(c->wopen && c->wgen != seen))
            pthread_cond_wait(&c->wgo, &c->wmu);
        if (c->wstop)
            break;
        seen = c->wgen;
        c->wactive++;
        pthread_mutex_unlock(&c->wmu);
        take_chunks(c, w);
        pthread_mutex_lock(&c->wmu);
        if (--c->wactive == 0)
            pthread_cond_signal(&c->wdone);
    }
    pthread_mutex_unlock(&c->wmu);
    return NULL;
}

/* Grows the tick's list and every worker's scratch to `want` segments; on
 * failure the capacity stays as it was (the tick then reads fewer). */
void mv_coll__grow_tick(mv_coll *c, size_t want)
{
    seg **v = realloc(c->tick_segs, want * sizeof *v);
    if (!v)
        return;
    c->tick_segs = v;
    for (size_t i = 0; i < c->nw; i++) {
        tick_worker *w = &c->w[i];
        if (w->cap >= want)
            continue;
        tick_item *it = realloc(w->items, want * sizeof *it);
        if (it)
            w->items = it;
        mv_coll_read *rq = realloc(w->reqs, want * sizeof *rq);
        if (rq)
            w->reqs = rq;
        if (!it || !rq)
            return;
        w->cap = want;
    }
    c->tick_cap = want;
}

/* Starts the helper workers (tick_workers - 1 threads), after initialising
 * the pool's locks. On failure the caller's mv_coll_destroy stops and joins
 * those that started. */
int mv_coll__start_workers(mv_coll *c)
{
    pthread_mutex_init(&c->wmu, NULL);
    for (size_t i = 0; i < READ_LOCKS; i++)
        pthread_mutex_init(&c->read_mu[i], NULL);
    pthread_cond_init(&c->wgo, NULL);
    pthread_cond_init(&c->wdone, NULL);
    size_t want = c->o.tick_workers;
    if (!(c->w = calloc(want, sizeof *c->w)))
        return -ENOMEM;
    c->nw = 1;
    c->w[0].c = c;
    for (size_t i = 1; i < want; i++) {
        c->w[i].c = c;
        int rc = pthread_create(&c->w[i].thread, NULL, worker_main, &c->w[i]);
        if (rc) {
            MV_ERROR("collector.tick_worker_failed", "worker=%zu workers=%zu error=%s", i, want,
                     mv_log_q(strerror(rc)));
            return -rc;
        }
        c->w[i].started = 1;
        c->nw++;
    }
    return 0;
}

void mv_coll__stop_workers(mv_coll *c)
{
    /* Helpers exist from create on, whether or not a tick ever ran. */
    pthread_mutex_lock(&c->wmu);
    c->wstop = 1;
    pthread_cond_broadcast(&c->wgo);
    pthread_mutex_unlock(&c->wmu);
    for (size_t i = 1; c->w && i < c->o.tick_workers; i++)
        if (c->w[i].started)
            pthread_join(c->w[i].thread, NULL);
}

void mv_coll__free_workers(mv_coll *c)
{
    for (size_t i = 0; c->w && i < c->o.tick_workers; i++) {
        free(c->w[i].items);
        free(c->w[i].reqs);
    }
    free(c->w);
    pthread_cond_destroy(&c->wgo);
    pthread_cond_destroy(&c->wdone);
    for (size_t i = 0; i < READ_LOCKS; i++)
        pthread_mutex_destroy(&c->read_mu[i]);
    pthread_mutex_destroy(&c->wmu);
}

uint64_t mv_coll__run_tick(mv_coll *c, size_t n)
{
    uint64_t torn = 0;
    if (c->nw > 1 && n > 1) {
        /* No helper is inside a tick here, so these are published to them by wmu. */
        c->wn = n;
        __atomic_store_n(&c->wnext, 0, __ATOMIC_RELAXED);
        pthread_mutex_lock(&c->wmu);
        c->wgen++;
        c->wopen = 1;
        pthread_cond_broadcast(&c->wgo);
        pthread_mutex_unlock(&c->wmu);
        take_chunks(c, &c->w[0]);
        /* Out of chunks: a helper that wakes up only now must not join, and
         * those that joined still finish theirs. */
        pthread_mutex_lock(&c->wmu);
        c->wopen = 0;
        while (c->wactive)
            pthread_cond_wait(&c->wdone, &c->wmu);
        pthread_mutex_unlock(&c->wmu);
    } else {
        mv_coll__tick_chunk(c, &c->w[0], c->tick_segs, n);
    }
    for (size_t i = 0; i < c->nw; i++) {
        torn += c->w[i].torn;
        c->w[i].torn = 0;
    }
    return torn;
}
