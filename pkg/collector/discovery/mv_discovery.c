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
};

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

static void on_event(void *arg, int event, const mv_agentc_segment *s)
{
    mv_disc *d = arg;
    if (event == MV_AGENTC_SYNCED) {
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
        if (d->cb.removed)
            d->cb.removed(d->cb.arg, s->id);
        return;
    }
    if (event != MV_AGENTC_ADDED)
        return;
    if (!d->synced)
        seen_add(d, s->id);
    mv_seg_label labels[64];
    size_t n = s->nlabels < 64 ? s->nlabels : 64;
    for (size_t i = 0; i < n; i++) {
        labels[i].key = s->labels[i].name;
        labels[i].value = s->labels[i].value;
    }
    mv_disc_segment ds = {.id = s->id,
                          .path = s->path,
                          .size = s->size,
                          .labels = labels,
                          .nlabels = n,
                          .rdma_addr = s->rdma_addr,
                          .rdma_rkey = s->rdma_rkey,
                          .rdma_length = s->rdma_length,
                          .layout_version = s->layout_version,
                          .rdma_readable = s->rdma_readable};
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
    mv_thread_name("mv-discovery");
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
            rc = mv_agentc_watch(c, on_event, d, (const volatile int *)&d->stop);
            if (rc == -EACCES)
                MV_ERROR("agent.refused", "target=%s error=%s", mv_log_q(d->target),
                         mv_log_q(mv_agentc_error(c)));
            mv_fmt(why, sizeof why, "%s", mv_agentc_error(c));
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
