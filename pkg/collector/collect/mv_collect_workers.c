/* mv_collect tick workers: the threads that start and share the ticks (several ticks may be
 * open at once: one whose segments are all taken does not hold back the next), their scratch,
 * and the locks serialising reads through transports that are not concurrent. */
#include "mv_collect_int.h"
#include "mv_log.h"
#include "mv_util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The fewest segments a worker takes at once (but for the last): a local transport's copy
 * groups, an RDMA transport's batch of READs, stay whole. Every worker's scratch holds at
 * least this many from the start. */
#define MIN_CHUNK 16
/* The most: a worker stopped mid-chunk (its CPU taken away) holds no more than this many
 * segments back from the ticks that follow, while a chunk still fills an RDMA batch. */
#define MAX_CHUNK 64

/* Tells polling workers that something changed (wmu held): a tick to join, stop, an early
 * tick asked for. */
static void bump(mv_coll *c)
{
    __atomic_add_fetch(&c->wseq, 1, __ATOMIC_RELEASE);
}

/* Grows a worker's scratch to `want` segments; on failure it stays as it was (the worker then
 * takes smaller chunks). Only its own thread calls this. */
static void grow_scratch(tick_worker *w, size_t want)
{
    if (w->cap >= want)
        return;
    tick_item *it = realloc(w->items, want * sizeof *it);
    if (it)
        w->items = it;
    mv_coll_read *rq = realloc(w->reqs, want * sizeof *rq);
    if (rq)
        w->reqs = rq;
    seg **mine = realloc(w->mine, want * sizeof *mine);
    if (mine)
        w->mine = mine;
    if (it && rq && mine)
        w->cap = want;
}

/* Claims segments [at, at+k) of the run, reads the ones it got, and lets them go. A segment a
 * worker of an earlier tick still holds is left to the next tick (deferred). */
static void run_chunk(mv_coll *c, tick_worker *w, tick_run *r, size_t at, size_t k)
{
    size_t m = 0;
    uint64_t deferred = 0;
    for (size_t i = 0; i < k; i++) {
        seg *s = r->segs[at + i];
        if (__atomic_exchange_n(&s->busy, 1, __ATOMIC_ACQUIRE)) {
            __atomic_add_fetch(&s->deferred, 1, __ATOMIC_RELAXED);
            deferred++;
        } else
            w->mine[m++] = s;
    }
    if (m)
        mv_coll__tick_chunk(c, w, w->mine, m);
    for (size_t i = 0; i < m; i++)
        __atomic_store_n(&w->mine[i]->busy, 0, __ATOMIC_RELEASE);
    if (w->torn)
        __atomic_add_fetch(&r->torn, w->torn, __ATOMIC_RELAXED);
    w->torn = 0;
    if (deferred)
        __atomic_add_fetch(&r->deferred, deferred, __ATOMIC_RELAXED);
}

/* Takes chunks of the run until none is left. Chunks shrink as the list does (a share of what
 * is left per worker, halved, at most MAX_CHUNK): the first are large, so each transport batch
 * is, and the last are small, so a worker that was descheduled mid-tick holds little of it. */
static void take_chunks(mv_coll *c, tick_worker *w, tick_run *r)
{
    size_t at = __atomic_load_n(&r->next, __ATOMIC_RELAXED);
    while (at < r->n) {
        size_t left = r->n - at, k = left / (2 * c->nw);
        if (k < MIN_CHUNK)
            k = left < MIN_CHUNK ? left : MIN_CHUNK;
        if (k > MAX_CHUNK)
            k = MAX_CHUNK;
        if (c->nw == 1) /* nobody to share with: the whole tick in one chunk, one batch */
            k = left;
        grow_scratch(w, k);
        if (k > w->cap)
            k = w->cap;
        if (!__atomic_compare_exchange_n(&r->next, &at, at + k, 1, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            continue; /* `at` is the current one now */
        run_chunk(c, w, r, at, k);
        at = __atomic_load_n(&r->next, __ATOMIC_RELAXED);
    }
}

/* Ends a run whose segments are all done (wmu held, and held again on return): drops its
 * list, counts it, tells on_tick, frees its slot. */
static void end_run(mv_coll *c, tick_run *r)
{
    r->live = 2; /* neither open nor free while its list goes */
    pthread_mutex_unlock(&c->wmu);
    mv_coll__list_put(r->list);
    r->list = NULL;
    mv_coll_tick_info ti = {.due_ns = r->due_ns,
                            .start_ns = r->start_ns,
                            .end_ns = mono_ns(),
                            .missed = r->missed,
                            .segments = r->n,
                            .deferred = __atomic_load_n(&r->deferred, __ATOMIC_RELAXED)};
    double took = (double)(ti.end_ns - ti.start_ns) / 1e9;
    size_t b = 0;
    while (b < MV_COLL_TICK_BUCKETS && took > mv_coll_tick_bounds[b])
        b++;
    pthread_mutex_lock(&c->mu);
    c->stats.ticks++;
    c->stats.ticks_missed += ti.missed;
    c->stats.reads_deferred += ti.deferred;
    c->stats.torn_retries += __atomic_load_n(&r->torn, __ATOMIC_RELAXED);
    c->stats.last_tick_seconds = took;
    c->stats.tick_buckets[b]++;
    c->stats.tick_seconds_sum += took;
    if (c->o.on_tick)
        c->o.on_tick(c->o.on_tick_arg, &ti);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&c->wmu);
    r->live = 0;
    r->gen++;
    pthread_cond_broadcast(&c->wdone);
    pthread_cond_broadcast(&c->wgo); /* a due tick may have waited for the slot */
}

/* Works on a run until it has no segment left to take (wmu held on entry and on return); the
 * last worker to leave it ends it (its starter leaves an empty one at once). */
static void work_on(mv_coll *c, tick_worker *w, tick_run *r)
{
    r->holders++;
    pthread_mutex_unlock(&c->wmu);
    take_chunks(c, w, r);
    pthread_mutex_lock(&c->wmu);
    if (--r->holders == 0)
        end_run(c, r); /* none left to take: nobody joins it any more */
}

/* A new tick list from the table's list (mu held): a reference on each segment, newest
 * first. NULL when out of memory. */
static tick_list *list_make(mv_coll *c)
{
    tick_list *l = malloc(sizeof *l + c->nsegs * sizeof l->v[0]);
    if (!l)
        return NULL;
    l->refs = 1;
    l->n = 0;
    for (size_t i = c->nsegs; i-- > 0;) {
        seg *s = c->segs[i];
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        l->v[l->n++] = s;
    }
    return l;
}

tick_list *mv_coll__list_ref(mv_coll *c, tick_list **old)
{
    *old = NULL;
    if (c->tlist_stale || !c->tlist) {
        tick_list *l = list_make(c);
        if (l) { /* else the ticks go on with the list they have until memory is found */
            *old = c->tlist;
            c->tlist = l;
            c->tlist_stale = 0;
        }
    }
    if (c->tlist)
        __atomic_add_fetch(&c->tlist->refs, 1, __ATOMIC_RELAXED);
    return c->tlist;
}

/* Starts a tick in the free slot `r` (wmu held): a reference on the tick list, made again first
 * if the table's list changed. */
static void start_run(mv_coll *c, tick_run *r, uint64_t due, uint64_t missed, uint64_t now)
{
    r->live = 1;
    r->due_ns = due;
    r->start_ns = now;
    r->missed = missed;
    r->torn = r->deferred = 0;
    __atomic_store_n(&r->next, 0, __ATOMIC_RELAXED);
    tick_list *old;
    pthread_mutex_lock(&c->mu);
    r->list = mv_coll__list_ref(c, &old);
    pthread_mutex_unlock(&c->mu);
    mv_coll__list_put(old); /* segments removed meanwhile go with the last tick holding it */
    r->segs = r->list ? r->list->v : NULL;
    r->n = r->list ? r->list->n : 0;
    if (c->nw > 1) {
        bump(c);
        pthread_cond_broadcast(&c->wgo);
    }
}

/* A run with segments left to take, the oldest first; NULL if none. */
static tick_run *open_run(mv_coll *c)
{
    tick_run *best = NULL;
    for (size_t i = 0; i < TICK_RUNS; i++) {
        tick_run *r = &c->runs[i];
        if (r->live == 1 && __atomic_load_n(&r->next, __ATOMIC_RELAXED) < r->n &&
            (!best || r->start_ns < best->start_ns))
            best = r;
    }
    return best;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* This thread's CPU time (ns). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* tick_poll: spins (wmu released meanwhile) until `until`, or until another worker started a
 * tick or something else changed; the CPU time spent counts in mv_coll_stats.poll_seconds
 * (not the wall time: a vCPU the host took away meanwhile did not poll). */
static void poll_until(mv_coll *c, uint64_t until)
{
    uint64_t seq = __atomic_load_n(&c->wseq, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->wmu);
    uint64_t cpu0 = thread_cpu_ns(), t = mono_ns();
    while (t < until && __atomic_load_n(&c->wseq, __ATOMIC_ACQUIRE) == seq) {
        for (int i = 0; i < 32; i++)
            cpu_relax();
        t = mono_ns();
    }
    uint64_t cpu1 = thread_cpu_ns();
    if (cpu1 > cpu0)
        __atomic_add_fetch(&c->poll_ns, cpu1 - cpu0, __ATOMIC_RELAXED);
    pthread_mutex_lock(&c->wmu);
}

static tick_run *free_run(mv_coll *c)
{
    for (size_t i = 0; i < TICK_RUNS; i++)
        if (!c->runs[i].live)
            return &c->runs[i];
    return NULL;
}

static void wait_until(mv_coll *c, uint64_t until)
{
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    pthread_cond_timedwait(&c->wgo, &c->wmu, &ts);
}

/* Starts the next scheduled tick if it is due, or an early one if asked for and allowed, and
 * works on it (wmu held on entry and on return). Returns 1 if it started one, 0 if not, and
 * sets *until to when to look again (0: when woken). */
static int start_due(mv_coll *c, tick_worker *w, uint64_t *until)
{
    uint64_t period = (uint64_t)c->o.tick_us * 1000ull, now = mono_ns();
    *until = c->sched_next;
    int early = 0;
    if (now < c->sched_next && c->tick_wake) {
        uint64_t ok_at = c->early_at + MV_COLL_EARLY_NS;
        early = now >= ok_at;
        if (!early && ok_at < *until)
            *until = ok_at;
    }
    if (now < c->sched_next && !early)
        return 0;
    tick_run *r = free_run(c);
    if (!r) { /* every slot held by stopped workers: wait for one to end */
        *until = 0;
        return 0;
    }
    if (early) { /* a new segment's first read; the schedule stays */
        c->tick_wake = 0;
        c->early_at = now;
        start_run(c, r, 0, 0, now);
        work_on(c, w, r);
        return 1;
    }
    uint64_t due = c->sched_next, missed = 0;
    if (now - due >= period) { /* late by whole periods: missed, and go on from now */
        missed = (now - due) / period;
        c->sched_next = now;
    }
    c->sched_next += period;
    start_run(c, r, due, missed, now);
    work_on(c, w, r);
    return 1;
}

/* A tick worker's loop: joins open ticks, starts due ones once scheduled ticks are on, and
 * sleeps otherwise. It leaves only when stopped and no tick is left to join. */
static void worker_loop(mv_coll *c, tick_worker *w)
{
    pthread_mutex_lock(&c->wmu);
    for (;;) {
        tick_run *r = open_run(c);
        if (r) {
            work_on(c, w, r);
            continue;
        }
        if (c->wstop)
            break;
        uint64_t until = 0;
        if (c->sched && start_due(c, w, &until))
            continue;
        if (until && c->o.tick_poll)
            poll_until(c, until);
        else if (until)
            wait_until(c, until);
        else
            pthread_cond_wait(&c->wgo, &c->wmu);
    }
    pthread_mutex_unlock(&c->wmu);
}

/* tick_poll: worker i keeps to the i-th CPU the process may use, when there are as many CPUs
 * as workers: two pollers never share a CPU, and a worker the scheduler woke after a lock does
 * not stay on the other's CPU until it is balanced away. */
static void pin_poller(tick_worker *w)
{
    mv_coll *c = w->c;
    cpu_set_t all, one;
    if (!c->o.tick_poll || sched_getaffinity(0, sizeof all, &all) != 0 ||
        (size_t)CPU_COUNT(&all) < c->nw)
        return;
    size_t want = (size_t)(w - c->w), k = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &all) || k++ != want)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        int rc = pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        if (rc)
            MV_WARN("collector.tick_worker_unpinned", "worker=%zu cpu=%d error=%s", want, cpu,
                    mv_log_q(strerror(rc)));
        return;
    }
}

/* A tick worker's thread: w[0] is the tick thread mv_coll_start starts, the others helpers. */
static void *worker_main(void *arg)
{
    tick_worker *w = arg;
    mv_util_thread_name(w == w->c->w ? "mv-tick" : "mv-tick-worker");
    pin_poller(w);
    worker_loop(w->c, w);
    return NULL;
}

void mv_coll_tick(mv_coll *c)
{
    tick_worker *w = &c->w[c->nw]; /* the caller's scratch: one caller at a time */
    pthread_mutex_lock(&c->sync_mu);
    pthread_mutex_lock(&c->wmu);
    tick_run *r;
    while (!(r = free_run(c)))
        pthread_cond_wait(&c->wdone, &c->wmu);
    start_run(c, r, 0, 0, mono_ns());
    uint64_t gen = r->gen;
    work_on(c, w, r);
    while (r->gen == gen) /* helpers that joined still finish theirs */
        pthread_cond_wait(&c->wdone, &c->wmu);
    pthread_mutex_unlock(&c->wmu);
    pthread_mutex_unlock(&c->sync_mu);
}

void mv_coll__wake_early(mv_coll *c)
{
    pthread_mutex_lock(&c->wmu);
    c->tick_wake = 1;
    bump(c);
    pthread_cond_broadcast(&c->wgo);
    pthread_mutex_unlock(&c->wmu);
}

/* Initialises the pool and starts the helper workers (tick_workers - 1 threads). On failure
 * the caller's mv_coll_destroy stops and joins those that started. */
int mv_coll__start_workers(mv_coll *c)
{
    pthread_mutex_init(&c->wmu, NULL);
    pthread_mutex_init(&c->sync_mu, NULL);
    for (size_t i = 0; i < READ_LOCKS; i++)
        pthread_mutex_init(&c->read_mu[i], NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wgo, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&c->wdone, NULL);
    size_t want = c->o.tick_workers;
    /* want tick workers and mv_coll_tick's caller's scratch */
    if (!(c->w = calloc(want + 1, sizeof *c->w)))
        return -ENOMEM;
    for (size_t i = 0; i <= want; i++) {
        c->w[i].c = c;
        grow_scratch(&c->w[i], MIN_CHUNK);
        if (c->w[i].cap < MIN_CHUNK)
            return -ENOMEM;
    }
    /* w[want] is the caller's from here on, whatever number of helpers started. */
    c->nw = want;
    for (size_t i = 1; i < want; i++) {
        int rc = pthread_create(&c->w[i].thread, NULL, worker_main, &c->w[i]);
        if (rc) {
            MV_ERROR("collector.tick_worker_failed", "worker=%zu workers=%zu error=%s", i, want,
                     mv_log_q(strerror(rc)));
            return -rc;
        }
        c->w[i].started = 1;
    }
    return 0;
}

int mv_coll__start_ticks(mv_coll *c)
{
    pthread_mutex_lock(&c->wmu);
    c->sched = 1;
    c->sched_next = mono_ns();
    pthread_cond_broadcast(&c->wgo);
    pthread_mutex_unlock(&c->wmu);
    int rc = pthread_create(&c->w[0].thread, NULL, worker_main, &c->w[0]);
    if (rc) {
        pthread_mutex_lock(&c->wmu);
        c->sched = 0;
        pthread_mutex_unlock(&c->wmu);
        return -rc;
    }
    c->w[0].started = 1;
    return 0;
}

void mv_coll__stop_workers(mv_coll *c)
{
    /* Helpers exist from create on, whether or not a tick ever ran. */
    pthread_mutex_lock(&c->wmu);
    c->wstop = 1;
    c->sched = 0;
    bump(c);
    pthread_cond_broadcast(&c->wgo);
    pthread_mutex_unlock(&c->wmu);
    for (size_t i = 0; c->w && i < c->o.tick_workers; i++)
        if (c->w[i].started)
            pthread_join(c->w[i].thread, NULL);
}

void mv_coll__free_workers(mv_coll *c)
{
    for (size_t i = 0; c->w && i <= c->o.tick_workers; i++) {
        free(c->w[i].items);
        free(c->w[i].reqs);
        free(c->w[i].mine);
    }
    free(c->w);
    pthread_cond_destroy(&c->wgo);
    pthread_cond_destroy(&c->wdone);
    for (size_t i = 0; i < READ_LOCKS; i++)
        pthread_mutex_destroy(&c->read_mu[i]);
    pthread_mutex_destroy(&c->sync_mu);
    pthread_mutex_destroy(&c->wmu);
}
