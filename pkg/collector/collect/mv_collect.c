/* mv_collect: the segment table, the top of the module: create/destroy, add, remove, relabel,
 * retain, the hooks, start. The files below it, bottom first: mv_collect_base.c (references,
 * reads, table removal), mv_collect_torn.c (torn histograms), mv_collect_probe.c,
 * mv_collect_tick.c (one tick's work per segment: copy, validate, publish),
 * mv_collect_workers.c (the threads that run the ticks); mv_collect_snap.c (snapshots) and
 * shm.c (the same-host transport) sit beside them. */
#include "mv_collect_int.h"
#include "mv_detect.h"
#include "mv_log.h"
#include "mv_util.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void mv_coll_opts_default(mv_coll_opts *o)
{
    memset(o, 0, sizeof *o); /* every field not named below: 0 */
    o->tick_us = 10000;
    o->quarantine_after_ms = 1000;
    o->recheck_ms = 5000;
    o->max_segment_size = 64ull << 20;
    o->analytics = 0;
    mv_pipe_config_default(&o->pipe);
    /* Detection at most every 10 ms: at a faster tick, steps of 10 ms (see
     * mv_pipe_config.detect_period_ns); at the default tick, every read. */
    o->pipe.detect_period_ns = 10000000ull;
    o->max_interval_us = 0;
    o->calm_reads = 8;
    o->torn_stale_ms = 1000;
    o->tick_workers = 1;
    o->stat_ms = 1000;
}

int mv_coll_create(const mv_coll_opts *o, mv_coll **out)
{
    mv_coll *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    if (o)
        c->o = *o;
    else
        mv_coll_opts_default(&c->o);
    if (c->o.tick_us < 1000)
        c->o.tick_us = 1000;
    if (!c->o.max_segment_size)
        c->o.max_segment_size = 64ull << 20;
    if (c->o.analytics && mv_pipe_config_check(&c->o.pipe)) {
        MV_ERROR("collector.config", "error=%s", mv_log_q(mv_pipe_config_check(&c->o.pipe)));
        free(c);
        return -EINVAL;
    }
    if (!c->o.analytics || c->o.max_interval_us <= c->o.tick_us)
        c->o.max_interval_us = 0;
    if (!c->o.calm_reads)
        c->o.calm_reads = 8;
    if (!c->o.tick_workers)
        c->o.tick_workers = 1;
    if (!c->o.stat_ms)
        c->o.stat_ms = 1000;
    if (c->o.tick_workers > MV_COLL_MAX_TICK_WORKERS) {
        MV_ERROR("collector.config", "error=%s tick_workers=%u max=%d",
                 mv_log_q("too many tick workers"), c->o.tick_workers, MV_COLL_MAX_TICK_WORKERS);
        free(c);
        return -EINVAL;
    }
    pthread_mutex_init(&c->mu, NULL);
    int rc = mv_coll__start_workers(c);
    if (rc != 0) {
        mv_coll_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

void mv_coll_destroy(mv_coll *c)
{
    if (!c)
        return;
    mv_coll__stop_workers(c); /* the tick thread too, if started */
    mv_coll__list_put(c->tlist);
    for (size_t i = 0; i < c->nsegs; i++)
        mv_coll__seg_put(c->segs[i]);
    free(c->segs);
    mv_coll__free_workers(c);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int mv_coll_add(mv_coll *c, const char *id, uint64_t size, const mv_seg_label *labels,
                size_t nlabels, const mv_coll_transport *t, void *src)
{
    /* Line-aligned: the tick-hot fields at its start take as few lines as they can. */
    size_t bytes = (sizeof(seg) + 63) & ~(size_t)63;
    seg *s = aligned_alloc(64, bytes);
    if (s)
        memset(s, 0, bytes);
    if (!s) {
        if (t && t->src_close)
            t->src_close(t->ctx, src);
        return -ENOMEM;
    }
    s->t = t;
    s->src = src;
    s->size = size;
    s->refs = 1;
    pthread_mutex_init(&s->mu, NULL);
    if (size > c->o.max_segment_size || size < MV_SEG_MIN_SIZE) {
        MV_WARN("segment.refused", "id=%s size=%llu max=%llu", mv_log_q(id),
                (unsigned long long)size, (unsigned long long)c->o.max_segment_size);
        mv_coll__seg_put(s); /* the only reference: frees it */
        return -EFBIG;
    }
    s->id = strdup(id);
    s->labels = calloc(nlabels ? nlabels : 1, sizeof *s->labels);
    s->interval_ns = (uint64_t)c->o.tick_us * 1000ull;
    /* The transport->changed checks of many segments spread over stat_ms, not one tick;
     * the first catalog read checks anyway. */
    s->stat_due_ns =
        mv_util_mono_ns() + mv_seg_fnv1a64(id, strlen(id)) % ((uint64_t)c->o.stat_ms * 1000000ull);
    if (c->o.max_interval_us) {
        mv_detect_rate_config rc;
        mv_detect_rate_config_default(&rc);
        rc.fast_ns = (uint64_t)c->o.tick_us * 1000ull;
        rc.max_ns = (uint64_t)c->o.max_interval_us * 1000ull;
        rc.calm_reads = c->o.calm_reads;
        rc.seed = mv_seg_fnv1a64(id, strlen(id)); /* dither differs per segment */
        if (mv_detect_rate_create(&rc, &s->rate) != 0) {
            mv_coll__seg_put(s); /* the only reference: frees it */
            return -ENOMEM;
        }
    }
    if (!s->id || !s->labels) {
        mv_coll__seg_put(s); /* the only reference: frees it */
        return -ENOMEM;
    }
    for (size_t i = 0; i < nlabels; i++) {
        s->labels[i].key = strdup(labels[i].key);
        s->labels[i].value = strdup(labels[i].value ? labels[i].value : "");
        s->nlabels = i + 1;
        if (!s->labels[i].key || !s->labels[i].value) {
            mv_coll__seg_put(s); /* the only reference: frees it */
            return -ENOMEM;
        }
    }
    /* Identity labels in name order, so every series renders the same way. */
    for (size_t i = 1; i < s->nlabels; i++)
        for (size_t j = i; j > 0 && strcmp(s->labels[j - 1].key, s->labels[j].key) > 0; j--) {
            mv_seg_label tmp = s->labels[j];
            s->labels[j] = s->labels[j - 1];
            s->labels[j - 1] = tmp;
        }
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nsegs; i++) {
        if (strcmp(c->segs[i]->id, id) == 0) {
            pthread_mutex_unlock(&c->mu);
            mv_coll__seg_put(s); /* the only reference: frees it */
            return -EEXIST;
        }
    }
    if (c->nsegs == c->segs_cap) {
        size_t cap = c->segs_cap ? 2 * c->segs_cap : 64;
        seg **v = realloc(c->segs, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&c->mu);
            mv_coll__seg_put(s); /* the only reference: frees it */
            return -ENOMEM;
        }
        c->segs = v;
        c->segs_cap = cap;
    }
    c->segs[c->nsegs++] = s;
    c->tlist_stale = 1;
    c->stats.segments_added++;
    int early = c->running && (uint64_t)c->o.tick_us * 1000ull > MV_COLL_EARLY_NS;
    pthread_mutex_unlock(&c->mu);
    if (early)
        mv_coll__wake_early(c); /* its first read need not wait a whole (long) tick */
    MV_INFO("segment.added", "id=%s size=%llu transport=%s", mv_log_q(id), (unsigned long long)size,
            t->name);
    return 0;
}

/* Takes segments matching `pred` out of the table under the lock, drops the table's
 * references outside it. */
static int id_is(const seg *s, const void *arg)
{
    return strcmp(s->id, arg) == 0;
}

void mv_coll_set_drop_hook(mv_coll *c, mv_coll_drop_fn fn, void *arg)
{
    pthread_mutex_lock(&c->mu);
    c->drop_fn = fn;
    c->drop_arg = arg;
    pthread_mutex_unlock(&c->mu);
}

void mv_coll_set_read_hook(mv_coll *c, mv_coll_read_fn fn, void *arg)
{
    pthread_mutex_lock(&c->mu);
    if (fn)
        c->read_arg = arg;
    __atomic_store_n(&c->read_fn, fn, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->mu);
    /* Cleared: wait for the calls already made to return, so `arg` may go. */
    while (!fn && __atomic_load_n(&c->read_busy, __ATOMIC_SEQ_CST))
        sched_yield();
}

int mv_coll_watch(mv_coll *c, const char *id, int delta)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nsegs; i++) {
        if (strcmp(c->segs[i]->id, id) != 0)
            continue;
        int *w = &c->segs[i]->watched;
        int v = __atomic_load_n(w, __ATOMIC_RELAXED) + (delta > 0 ? 1 : -1);
        __atomic_store_n(w, v < 0 ? 0 : v, __ATOMIC_RELAXED);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int mv_coll_remove(mv_coll *c, const char *id)
{
    return mv_coll__remove_if(c, id_is, id) ? 0 : -ENOENT;
}

static void labels_free(mv_seg_label *l, size_t n)
{
    for (size_t i = 0; l && i < n; i++) {
        free((char *)l[i].key);
        free((char *)l[i].value);
    }
    free(l);
}

int mv_coll_relabel(mv_coll *c, const char *id, const mv_seg_label *labels, size_t nlabels)
{
    mv_seg_label *l = calloc(nlabels ? nlabels : 1, sizeof *l);
    for (size_t i = 0; l && i < nlabels; i++) {
        l[i].key = strdup(labels[i].key);
        l[i].value = strdup(labels[i].value ? labels[i].value : "");
        if (!l[i].key || !l[i].value) {
            labels_free(l, i + 1);
            l = NULL;
        }
    }
    if (!l)
        return -ENOMEM;
    for (size_t i = 1; i < nlabels; i++) /* name order, as mv_coll_add keeps them */
        for (size_t j = i; j > 0 && strcmp(l[j - 1].key, l[j].key) > 0; j--) {
            mv_seg_label tmp = l[j];
            l[j] = l[j - 1];
            l[j - 1] = tmp;
        }
    int rc = -ENOENT;
    size_t nnew = nlabels;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nsegs; i++) {
        seg *s = c->segs[i];
        if (strcmp(s->id, id) != 0)
            continue;
        pthread_mutex_lock(&s->mu); /* snapshots copy the labels under it */
        mv_seg_label *old = s->labels;
        size_t nold = s->nlabels;
        s->labels = l;
        s->nlabels = nlabels;
        pthread_mutex_unlock(&s->mu);
        l = old;
        nlabels = nold;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0)
        MV_INFO("segment.relabeled", "id=%s labels=%zu", mv_log_q(id), nnew);
    labels_free(l, nlabels);
    return rc;
}

int mv_coll_set_pod_labels(mv_coll *c, const char *id, const mv_seg_label *labels, size_t n)
{
    mv_seg_label *l = calloc(n ? n : 1, sizeof *l);
    for (size_t i = 0; l && i < n; i++) {
        l[i].key = strdup(labels[i].key);
        l[i].value = strdup(labels[i].value ? labels[i].value : "");
        if (!l[i].key || !l[i].value) {
            labels_free(l, i + 1);
            l = NULL;
        }
    }
    if (!l)
        return -ENOMEM;
    int rc = -ENOENT;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nsegs; i++) {
        seg *s = c->segs[i];
        if (strcmp(s->id, id) != 0)
            continue;
        pthread_mutex_lock(&s->mu); /* snapshots copy the labels under it */
        mv_seg_label *old = s->pod_labels;
        size_t nold = s->npod_labels;
        s->pod_labels = l;
        s->npod_labels = n;
        pthread_mutex_unlock(&s->mu);
        l = old;
        n = nold;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    labels_free(l, n);
    return rc;
}

typedef struct keep_set {
    const char *const *ids;
    size_t n;
} keep_set;

static int not_kept(const seg *s, const void *arg)
{
    const keep_set *k = arg;
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->ids[i], s->id) == 0)
            return 0;
    return 1;
}

void mv_coll_retain(mv_coll *c, const char *const *keep, size_t n)
{
    keep_set k = {keep, n};
    mv_coll__remove_if(c, not_kept, &k);
}

int mv_coll_start(mv_coll *c)
{
    if (c->running)
        return -EALREADY;
    int rc = mv_coll__start_ticks(c);
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu); /* read by mv_coll_add under mu */
    c->running = 1;
    pthread_mutex_unlock(&c->mu);
    return 0;
}
