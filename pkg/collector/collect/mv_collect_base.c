/* mv_collect_base: the bottom of the module: the reference counts of catalogs, segments and
 * tick lists, reads through a transport (one caller at a time unless it is concurrent), and
 * removal from the table. Calls no other file of the module. */
#include "mv_collect_int.h"
#include "mv_detect.h"
#include "mv_log.h"

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

/* Reads through the segment's transport and counts the bytes that arrived. */
void mv_coll__seg_read(mv_coll *c, seg *s, mv_coll_read *rq, size_t n)
{
    mv_coll__read(c, s->t, rq, n);
    for (size_t i = 0; i < n; i++)
        if (rq[i].status == 0)
            __atomic_add_fetch(&s->read_bytes, rq[i].len, __ATOMIC_RELAXED);
}

void mv_coll__cat_put(cat_ref *r)
{
    if (r && __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        mv_seg_catalog_free(r->cat);
        free(r);
    }
}

cat_ref *mv_coll__cat_get(cat_ref *r)
{
    if (r)
        __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
    return r;
}

static void seg_free(seg *s)
{
    if (!s)
        return;
    if (s->t && s->t->src_close)
        s->t->src_close(s->t->ctx, s->src);
    for (size_t i = 0; i < s->nlabels; i++) {
        free((char *)s->labels[i].key);
        free((char *)s->labels[i].value);
    }
    free(s->labels);
    for (size_t i = 0; i < s->npod_labels; i++) {
        free((char *)s->pod_labels[i].key);
        free((char *)s->pod_labels[i].value);
    }
    free(s->pod_labels);
    free(s->id);
    free(s->full);
    free(s->work);
    free(s->pub_hot);
    free(s->pub_omit);
    free(s->good);
    free(s->have_good);
    free(s->omit_work);
    free(s->torn_since);
    free(s->probe_offs);
    free(s->probe_want);
    mv_pipe_seg_destroy(s->pipe);
    mv_detect_rate_destroy(s->rate);
    mv_coll__cat_put(s->pipe_cat);
    mv_coll__cat_put(s->cat);
    mv_coll__cat_put(s->pub_cat);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void mv_coll__seg_put(seg *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        seg_free(s);
}

void mv_coll__list_put(tick_list *l)
{
    if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (size_t i = 0; i < l->n; i++)
        mv_coll__seg_put(l->v[i]);
    free(l);
}

size_t mv_coll__remove_if(mv_coll *c, int (*pred)(const seg *, const void *), const void *arg)
{
    size_t total = 0, k;
    do { /* up to 64 per pass: their references are dropped outside the lock */
        seg *dead[64];
        size_t kept = 0;
        k = 0;
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < c->nsegs; i++) {
            seg *s = c->segs[i];
            if (k < 64 && pred(s, arg))
                dead[k++] = s;
            else
                c->segs[kept++] = s;
        }
        c->nsegs = kept;
        /* The ticks' list lets go of them too (the next tick makes a new one), so a removed
         * segment is closed when no running tick holds it, not a tick later. */
        tick_list *old = k ? c->tlist : NULL;
        if (k)
            c->tlist = NULL;
        c->stats.segments_removed += k;
        pthread_mutex_unlock(&c->mu);
        mv_coll__list_put(old);
        for (size_t i = 0; i < k; i++) {
            MV_INFO("segment.removed", "id=%s", mv_log_q(dead[i]->id));
            mv_coll__seg_put(dead[i]);
        }
        total += k;
    } while (k == 64);
    return total;
}

int mv_coll__seg_is(const seg *s, const void *arg)
{
    return s == arg;
}
