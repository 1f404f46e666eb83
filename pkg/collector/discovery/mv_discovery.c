/* mv_discovery: a thread that mirrors an agent's catalog into callbacks. */
#include "mv_discovery.h"
#include "mv_agentc.h"
#include "mv_log.h"
#include "mv_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mv_disc {
    char *target;
    char *token; /* NULL = none */
    mv_disc_callbacks cb;
    pthread_t thread;
    int stop; /* atomic */
    /* ids seen since the current stream started, for the resync */
    char **seen;
    size_t nseen, capseen;
    int synced;
    /* A REMOVED held back for one event: the agent sends a segment whose labels (or RDMA
     * fields) changed as REMOVED then ADDED with the same revision, which is one update. */
    char *pend_id, *pend_path;
    uint64_t pend_size, pend_rev;
};

static void pend_clear(mv_disc *d)
{
    free(d->pend_id);
    free(d->pend_path);
    d->pend_id = d->pend_path = NULL;
}

/* Delivers the held-back REMOVED as a removal. */
static void pend_flush(mv_disc *d)
{
    if (!d->pend_id)
        return;
    if (d->cb.removed)
        d->cb.removed(d->cb.arg, d->pend_id);
    pend_clear(d);
}

static void seen_reset(mv_disc *d)
{
    for (size_t i = 0; i < d->nseen; i++)
        free(d->seen[i]);
    d->nseen = 0;
    d->synced = 0;
}

static void seen_add(mv_disc *d, const char *id)
{
    if (d->nseen == d->capseen) {
        size_t cap = d->capseen ? d->capseen * 2 : 64;
        char **v = realloc(d->seen, cap * sizeof *v);
        if (!v)
            return;
        d->seen = v;
        d->capseen = cap;
    }
    char *s = strdup(id);
    if (s)
        d->seen[d->nseen++] = s;
}

static void to_disc(const mv_agentc_segment *s, mv_seg_label *labels, mv_seg_label *pod_labels,
                    mv_disc_segment *ds)
{
    size_t n = s->nlabels < 64 ? s->nlabels : 64;
    for (size_t i = 0; i < n; i++) {
        labels[i].key = s->labels[i].name;
        labels[i].value = s->labels[i].value;
    }
    size_t np =
        s->npod_labels < MV_AGENTC_POD_LABELS_MAX ? s->npod_labels : MV_AGENTC_POD_LABELS_MAX;
    for (size_t i = 0; i < np; i++) {
        pod_labels[i].key = s->pod_labels[i].name;
        pod_labels[i].value = s->pod_labels[i].value;
    }
    *ds = (mv_disc_segment){.id = s->id,
                            .path = s->path,
                            .size = s->size,
                            .labels = labels,
                            .nlabels = n,
                            .pod_labels = pod_labels,
                            .npod_labels = np,
                            .rdma_addr = s->rdma_addr,
                            .rdma_rkey = s->rdma_rkey,
                            .rdma_length = s->rdma_length,
                            .layout_version = s->layout_version,
                            .rdma_readable = s->rdma_readable};
}

/* Whether ADDED `s` completes the held-back REMOVED into an update of the same segment: same
 * id, path, size and catalog revision (a removal and a later addition of the same id never
 * share a revision: each bumps it). */
static int completes_update(const mv_disc *d, const mv_agentc_segment *s)
{
    return d->pend_id && strcmp(d->pend_id, s->id) == 0 && d->pend_rev == s->revision &&
           d->pend_size == s->size && strcmp(d->pend_path, s->path ? s->path : "") == 0;
}

static void on_event(void *arg, int event, const mv_agentc_segment *s)
{
    mv_disc *d = arg;
    if (event == MV_AGENTC_IDLE) {
        pend_flush(d);
        return;
    }
    if (event == MV_AGENTC_SYNCED) {
        pend_flush(d);
        if (!d->synced)
            MV_INFO("agent.synced", "target=%s segments=%zu", mv_log_q(d->target), d->nseen);
        d->synced = 1;
        if (d->cb.synced)
            d->cb.synced(d->cb.arg, (const char *const *)d->seen, d->nseen);
        return;
    }
    if (!s || !s->id)
        return;
    if (event == MV_AGENTC_REMOVED) {
        pend_flush(d);
        if (!d->cb.updated) {
            if (d->cb.removed)
                d->cb.removed(d->cb.arg, s->id);
            return;
        }
        d->pend_id = strdup(s->id);
        d->pend_path = strdup(s->path ? s->path : "");
        d->pend_size = s->size;
        d->pend_rev = s->revision;
        if (!d->pend_id || !d->pend_path) { /* out of memory: deliver it now */
            pend_clear(d);
            if (d->cb.removed)
                d->cb.removed(d->cb.arg, s->id);
        }
        return;
    }
    if (event != MV_AGENTC_ADDED)
        return;
    mv_seg_label labels[64], pod_labels[MV_AGENTC_POD_LABELS_MAX];
    mv_disc_segment ds;
    to_disc(s, labels, pod_labels, &ds);
    if (completes_update(d, s)) {
        pend_clear(d);
        d->cb.updated(d->cb.arg, &ds);
        return;
    }
    pend_flush(d);
    if (!d->synced)
        seen_add(d, s->id);
    if (d->cb.added)
        d->cb.added(d->cb.arg, &ds);
}

static void sleep_ms(unsigned ms, const int *stop)
{
    while (ms && !__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        unsigned step = ms < 100 ? ms : 100;
        struct timespec ts = {0, (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

static void *disc_main(void *arg)
{
    mv_util_thread_name("mv-discovery");
    mv_disc *d = arg;
    unsigned backoff = 100;
    int was_up = -1;
    while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
        mv_agentc *c = NULL;
        char why[MV_ERR_MAX] = "";
        int rc = mv_agentc_open(d->target, &c);
        if (rc == 0 && d->token && (rc = mv_agentc_set_token(c, d->token)) < 0) {
            mv_agentc_close(c);
            c = NULL;
        }
        if (rc == 0) {
            seen_reset(d);
            rc = mv_agentc_watch_idle(c, on_event, d, (const volatile int *)&d->stop);
            pend_flush(d); /* the stream ended between a REMOVED and what followed it */
            if (rc == -EACCES)
                MV_ERROR("agent.refused", "target=%s error=%s", mv_log_q(d->target),
                         mv_log_q(mv_agentc_error(c)));
            mv_util_fmt(why, sizeof why, "%s", mv_agentc_error(c));
            mv_agentc_close(c);
            if (d->synced) {
                backoff = 100;
                was_up = 1;
            }
        }
        if (__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE))
            break;
        if (was_up != 0)
            MV_WARN(d->synced ? "agent.watch_ended" : "agent.unreachable",
                    "target=%s error=%s retry_ms=%u", mv_log_q(d->target),
                    mv_log_q(why[0] ? why : strerror(rc < 0 ? -rc : rc)), backoff);
        was_up = 0;
        sleep_ms(backoff, &d->stop);
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
    seen_reset(d);
    return NULL;
}

int mv_disc_start(const char *target, const mv_disc_callbacks *cb, mv_disc **out)
{
    return mv_disc_start_token(target, NULL, cb, out);
}

int mv_disc_start_token(const char *target, const char *token, const mv_disc_callbacks *cb,
                        mv_disc **out)
{
    mv_disc *d = calloc(1, sizeof *d);
    if (!d || !(d->target = strdup(target)) || (token && !(d->token = strdup(token)))) {
        if (d)
            free(d->target);
        free(d);
        return -ENOMEM;
    }
    d->cb = *cb;
    int rc = pthread_create(&d->thread, NULL, disc_main, d);
    if (rc) {
        free(d->token);
        free(d->target);
        free(d);
        return -rc;
    }
    *out = d;
    return 0;
}

void mv_disc_destroy(mv_disc *d)
{
    if (!d)
        return;
    __atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
    pthread_join(d->thread, NULL);
    free(d->seen);
    free(d->token);
    free(d->target);
    free(d);
}
