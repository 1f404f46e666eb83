/* mv_collect snapshots: a copy of every segment's published state (values, catalog, read
 * statistics, analytics view) taken under the locks, for exposition and the APIs. */
#include "mv_collect_int.h"

#include <stdlib.h>
#include <string.h>

struct mv_coll_snap {
    mv_coll_seg_view *v;
    cat_ref **cats;
    size_t n;
    mv_coll_stats stats;
};

/* The table's lock is held only to take the statistics and a reference on the ticks' list of
 * segments: the copies are made under each segment's own lock, so that a snapshot of a large
 * table (a scrape) does not hold back the start or the end of a tick, both of which take the
 * table's lock. */
mv_coll_snap *mv_coll_snapshot(mv_coll *c)
{
    mv_coll_snap *sn = calloc(1, sizeof *sn);
    if (!sn)
        return NULL;
    tick_list *old;
    pthread_mutex_lock(&c->mu);
    tick_list *list = mv_coll__list_ref(c, &old);
    sn->stats = c->stats;
    pthread_mutex_unlock(&c->mu);
    mv_coll__list_put(old);
    sn->stats.poll_seconds = (double)__atomic_load_n(&c->poll_ns, __ATOMIC_RELAXED) / 1e9;
    size_t n = list ? list->n : 0;
    sn->v = calloc(n ? n : 1, sizeof *sn->v);
    sn->cats = calloc(n ? n : 1, sizeof *sn->cats);
    if (!list || !sn->v || !sn->cats) {
        mv_coll__list_put(list);
        mv_coll_snap_free(sn);
        return NULL;
    }
    size_t i = 0;
    for (; i < n; i++) {
        seg *s = list->v[i]; /* newest first */
        mv_coll_seg_view *v = &sn->v[i];
        pthread_mutex_lock(&s->mu);
        v->id = strdup(s->id);
        v->nlabels = s->nlabels;
        mv_seg_label *l = calloc(s->nlabels ? s->nlabels : 1, sizeof *l);
        for (size_t k = 0; l && k < s->nlabels; k++) {
            l[k].key = strdup(s->labels[k].key);
            l[k].value = strdup(s->labels[k].value);
        }
        v->labels = l;
        l = calloc(s->npod_labels ? s->npod_labels : 1, sizeof *l);
        size_t np = 0;
        for (size_t k = 0; l && k < s->npod_labels; k++) {
            l[np].key = strdup(s->pod_labels[k].key);
            l[np].value = strdup(s->pod_labels[k].value);
            if (l[np].key && l[np].value) {
                np++;
            } else { /* out of memory: that label is left out, never half there */
                free((char *)l[np].key);
                free((char *)l[np].value);
            }
        }
        v->pod_labels = l;
        v->npod_labels = l ? np : 0;
        v->state = s->state;
        v->reason = s->reason;
        v->detail = strdup(s->detail);
        if (s->pub_cat && s->pub_hot) {
            void *hot = aligned_alloc(64, ((size_t)s->pub_len + 63) & ~(size_t)63);
            if (hot) {
                memcpy(hot, s->pub_hot, s->pub_len);
                sn->cats[i] = mv_coll__cat_get(s->pub_cat);
                v->cat = s->pub_cat->cat;
                v->cat_serial = s->pub_cat->serial;
                v->hot = hot;
                v->hot_len = s->pub_len;
                if (s->pub_omit && (v->omitted = malloc(s->pub_nomit)) != NULL)
                    memcpy((void *)v->omitted, s->pub_omit, s->pub_nomit);
            }
        }
        v->stale_histograms = s->pub_stale;
        v->busy_since_ns = s->busy_since_ns;
        v->omitted_histograms = s->pub_omitted;
        v->read_ns = s->read_ns;
        v->heartbeat_ns = s->heartbeat_ns;
        v->reads = s->reads;
        v->read_errors = s->read_errors;
        v->read_bytes = __atomic_load_n(&s->read_bytes, __ATOMIC_RELAXED);
        v->torn = s->torn;
        v->size = s->size;
        v->transport = s->t->name;
        v->read_interval_ns = s->interval_ns;
        v->reads_skipped = __atomic_load_n(&s->skipped, __ATOMIC_RELAXED);
        v->probes = __atomic_load_n(&s->probes, __ATOMIC_RELAXED);
        v->probe_reads = __atomic_load_n(&s->probe_reads, __ATOMIC_RELAXED);
        v->reads_same = s->reads_same;
        v->reads_deferred = __atomic_load_n(&s->deferred, __ATOMIC_RELAXED);
        if (s->pipe)
            v->pipe = mv_pipe_seg_view(s->pipe);
        pthread_mutex_unlock(&s->mu);
    }
    sn->n = i;
    mv_coll__list_put(list); /* a segment removed meanwhile is closed with the last reference */
    return sn;
}

void mv_coll_stats_get(mv_coll *c, mv_coll_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
    out->poll_seconds = (double)__atomic_load_n(&c->poll_ns, __ATOMIC_RELAXED) / 1e9;
}

void mv_coll_snap_free(mv_coll_snap *sn)
{
    if (!sn)
        return;
    for (size_t i = 0; i < sn->n; i++) {
        mv_coll_seg_view *v = &sn->v[i];
        free((char *)v->id);
        free((char *)v->detail);
        for (size_t k = 0; v->labels && k < v->nlabels; k++) {
            free((char *)v->labels[k].key);
            free((char *)v->labels[k].value);
        }
        free((void *)v->labels);
        for (size_t k = 0; v->pod_labels && k < v->npod_labels; k++) {
            free((char *)v->pod_labels[k].key);
            free((char *)v->pod_labels[k].value);
        }
        free((void *)v->pod_labels);
        free((void *)v->hot);
        free((void *)v->omitted);
        free((void *)v->pipe);
        mv_coll__cat_put(sn->cats[i]);
    }
    free(sn->v);
    free(sn->cats);
    free(sn);
}

size_t mv_coll_snap_count(const mv_coll_snap *s)
{
    return s->n;
}

const mv_coll_seg_view *mv_coll_snap_seg(const mv_coll_snap *s, size_t i)
{
    return i < s->n ? &s->v[i] : NULL;
}

const mv_coll_stats *mv_coll_snap_stats(const mv_coll_snap *s)
{
    return &s->stats;
}
