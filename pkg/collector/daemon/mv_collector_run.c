/* mv_collector_run: the collector's start-up, wait and shutdown (mv_collector.h), the /metrics
 * families of its HTTP server and access checks, and the catalog follower's callbacks. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mv_api.h"
#include "mv_collector.h"
#include "mv_discovery.h"
#include "mv_expo.h"
#include "mv_live.h"
#include "mv_log.h"
#include "mv_util.h"
#include "mv_verbs.h"

/* Reviews waiting at once with --auth kubernetes unless --auth-max-inflight says. */
#define AUTH_MAX_INFLIGHT 4

typedef struct app {
    mv_coll *coll;
    mv_verbs *verbs; /* --transport verbs only */
    mv_httpd *httpd; /* set before it serves */
    mv_authz *authz; /* --auth kubernetes only */
    mv_rw *rw;       /* --remote-write-url only */
    mv_live *live;   /* the live view; NULL with --ui-max-streams 0 */
} app;

/* The HTTP server's connection figures, so refused clients are visible. */
static void render_http_stats(mv_httpd *h, mv_expo *e)
{
    mv_httpd_stats st;
    mv_httpd_get_stats(h, &st);
    mv_expo_family(e, "microview_http_connections_total", MV_EXPO_COUNTER,
                   "HTTP connections accepted by the collector.", NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, st.accepted, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_http_connections_open", MV_EXPO_GAUGE,
                   "HTTP connections open now.", NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, st.active, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_http_connections_refused_total", MV_EXPO_COUNTER,
                   "HTTP connections refused, by limit (per_client: --http-max-conns-per-client; "
                   "total: --http-max-conns).",
                   NULL);
    mv_expo_label l = {"limit", "per_client"};
    mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st.refused_client, MV_EXPO_NO_TS);
    l.value = "total";
    mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st.refused_limit, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_http_deadline_closed_total", MV_EXPO_COUNTER,
                   "HTTP connections closed because no whole request arrived within "
                   "--http-request-deadline-s.",
                   NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, st.deadline_closed, MV_EXPO_NO_TS);
}

/* The access checks' figures (--auth kubernetes). */
static void render_authz_stats(mv_authz *z, mv_expo *e)
{
    mv_authz_stats st;
    mv_authz_get_stats(z, &st);
    mv_expo_family(e, "microview_http_auth_decisions_total", MV_EXPO_COUNTER,
                   "Access checks of HTTP requests, by answer (--auth kubernetes).", NULL);
    const struct {
        const char *v;
        uint64_t n;
    } d[] = {{"allowed", st.allowed},
             {"unauthenticated", st.unauthenticated},
             {"forbidden", st.forbidden},
             {"unavailable", st.unavailable}};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        mv_expo_label l = {"decision", d[i].v};
        mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, d[i].n, MV_EXPO_NO_TS);
    }
    mv_expo_family(e, "microview_http_auth_cache_total", MV_EXPO_COUNTER,
                   "Access checks answered from the decision cache (hit) or by the API server "
                   "(miss).",
                   NULL);
    mv_expo_label l = {"result", "hit"};
    mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st.cache_hits, MV_EXPO_NO_TS);
    l.value = "miss";
    mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st.cache_misses, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_http_auth_reviews_total", MV_EXPO_COUNTER,
                   "TokenReviews and SubjectAccessReviews sent to the API server.", NULL);
    l = (mv_expo_label){"kind", "TokenReview"};
    mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st.token_reviews, MV_EXPO_NO_TS);
    l.value = "SubjectAccessReview";
    mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st.access_reviews, MV_EXPO_NO_TS);
}

/* /metrics renders the HTTP connection figures and the RDMA read statistics (--transport
 * verbs) before the collector's own families. */
static int render_extra(void *arg, mv_expo *e, const mv_coll_snap *snap)
{
    app *a = arg;
    if (a->httpd)
        render_http_stats(a->httpd, e);
    if (a->authz)
        render_authz_stats(a->authz, e);
    if (a->rw)
        mv_rw_render(a->rw, e);
    if (a->live)
        mv_live_render(a->live, e);
    return a->verbs ? mv_verbs_render(a->verbs, e, snap) : 0;
}

/* 1 if the listen host is a loopback address (127.0.0.0/8 or ::1). */
static int listen_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

/* ---- Discovery → table ------------------------------------------------------------ */

/* The pod's labels, which the value API's workload selectors match. */
static void set_pod_labels(app *a, const mv_disc_segment *s)
{
    int rc = mv_coll_set_pod_labels(a->coll, s->id, s->pod_labels, s->npod_labels);
    if (rc == -ENOMEM)
        MV_WARN("segment.pod_labels_failed", "id=%s error=%s effect=%s", mv_log_q(s->id),
                mv_log_q(strerror(-rc)),
                mv_log_q("label selectors do not see this segment's pod labels"));
}

static void disc_added(void *arg, const mv_disc_segment *s)
{
    app *a = arg;
    char err[MV_ERR_MAX];
    void *src;
    uint64_t size;
    int rc = mv_coll_shm_open(s->path, s->size, &src, &size, err, sizeof err);
    if (rc != 0) {
        MV_WARN("segment.open_failed", "id=%s path=%s error=%s", mv_log_q(s->id), mv_log_q(s->path),
                mv_log_q(err));
        return;
    }
    rc = mv_coll_add(a->coll, s->id, size, s->labels, s->nlabels, mv_coll_shm_transport(), src);
    if (rc != 0 && rc != -EEXIST)
        MV_WARN("segment.add_failed", "id=%s error=%s", mv_log_q(s->id), mv_log_q(strerror(-rc)));
    else
        set_pod_labels(a, s);
}

static void disc_removed(void *arg, const char *id)
{
    app *a = arg;
    mv_coll_remove(a->coll, id);
}

/* A relabel (the agent set the segment's labels, e.g. at a container's start): the same
 * mapping and analytics, new identity labels. */
static void disc_updated(void *arg, const mv_disc_segment *s)
{
    app *a = arg;
    if (mv_coll_relabel(a->coll, s->id, s->labels, s->nlabels) == -ENOENT)
        disc_added(arg, s); /* never added (its open failed): try again */
    else
        set_pod_labels(a, s);
}

static void disc_synced(void *arg, const char *const *ids, size_t n)
{
    app *a = arg;
    mv_coll_retain(a->coll, ids, n);
}

static int add_static(app *a, char *spec)
{
    mv_seg_label labels[MV_SEG_LABELS_MAX];
    size_t n = 0;
    char *save = NULL, *path = strtok_r(spec, ",", &save), *kv;
    char err[MV_ERR_MAX], id[300];
    while ((kv = strtok_r(NULL, ",", &save))) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv || n == MV_SEG_LABELS_MAX) {
            fprintf(stderr, "microview-collector: --segment labels are k=v (at most %d): %s\n",
                    MV_SEG_LABELS_MAX, kv);
            return -1;
        }
        *eq = '\0';
        labels[n].key = kv;
        labels[n++].value = eq + 1;
    }
    void *src;
    uint64_t size;
    if (mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) != 0) {
        fprintf(stderr, "microview-collector: --segment %s: %s\n", path, err);
        return -1;
    }
    snprintf(id, sizeof id, "static:%s", path);
    return mv_coll_add(a->coll, id, size, labels, n, mv_coll_shm_transport(), src);
}

int mv_collector_run(const mv_collector_opts *o)
{
    mv_coll_opts co = o->coll;
    mv_httpd_config hc = o->http;
    mv_authz_opts zo = o->authz;
    const char *agent = o->agent, *listen = o->listen, *host = o->listen_host;
    size_t nagents = o->nagents, nstatic = o->nstatic;
    int verbs = o->verbs;
    app a = {0};

    /* Each scrape copies every segment's published state and frees it again: the freed heap
     * stays in the process (up to MV_COLL_HEAP_KEEP) so the next scrape's copies do not
     * fault their pages in again. */
    if (mv_util_malloc_keep(MV_COLL_HEAP_KEEP) != 0)
        MV_WARN("collector.malloc", "error=%s",
                mv_log_q("the heap's trim threshold cannot be set"));

    /* SIGINT/SIGTERM are blocked before any thread starts, so every thread inherits the mask,
     * and taken synchronously by this thread below. (A handler setting a flag for a main
     * thread in pause() hangs when the kernel delivers the signal to another thread.) */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    mv_api *api = NULL;
    if (mv_coll_create(&co, &a.coll) != 0) {
        MV_ERROR("collector.failed", "error=%s", mv_log_q("out of memory"));
        return 1;
    }
    for (size_t i = 0; i < nstatic; i++)
        if (add_static(&a, o->statics[i]) != 0)
            goto destroy_coll;
    if (mv_coll_start(a.coll) != 0) {
        MV_ERROR("collector.failed", "error=%s", mv_log_q("cannot start the tick thread"));
        goto destroy_coll;
    }
    if (o->auth == MV_AUTHZ_KUBERNETES) {
        if (hc.threads < MV_COLLECTOR_AUTH_HTTP_THREADS)
            hc.threads = MV_COLLECTOR_AUTH_HTTP_THREADS;
        if (!zo.max_inflight)
            zo.max_inflight = AUTH_MAX_INFLIGHT;
    }
    if (o->auth == MV_AUTHZ_KUBERNETES && mv_authz_create(&zo, &a.authz) != 0) {
        MV_ERROR("collector.failed", "error=%s", mv_log_q("--auth kubernetes: see authz.* above"));
        goto destroy_coll;
    }
    if (o->live.max_streams) {
        mv_live_opts lo = o->live;
        lo.coll = a.coll;
        lo.tick_us = co.tick_us;
        if (mv_live_create(&lo, &a.live) != 0) {
            MV_ERROR("collector.failed", "error=%s", mv_log_q("cannot start the live view"));
            goto destroy_coll;
        }
    }
    mv_api_opts ao = {.coll = a.coll,
                      .live = a.live,
                      .authz = a.authz,
                      .body_cap = o->body_cap,
                      .cache_cap = o->cache_cap,
                      .render_extra = render_extra,
                      .extra_arg = &a,
                      .derived = o->derived,
                      .native_set = o->native_set,
                      .native_schema = o->native_schema,
                      .native_max_buckets = o->native_max_buckets};
    if (mv_api_create(&ao, &api) != 0) {
        MV_ERROR("collector.failed", "error=%s", mv_log_q("out of memory"));
        goto destroy_coll;
    }
    mv_httpd *httpd = NULL;
    if (hc.max_conns_per_client > hc.max_conns)
        hc.max_conns_per_client = hc.max_conns;
    hc.addr = host[0] ? host : "0.0.0.0";
    hc.port = o->listen_port;
    if (mv_httpd_create(&hc, &httpd) != 0) {
        MV_ERROR("http.failed", "listen=%s error=%s", mv_log_q(listen),
                 mv_log_q("invalid listen address"));
        goto destroy_coll;
    }
    a.httpd = httpd; /* before it serves: /metrics shows its connection figures */
    int err = mv_api_route(api, httpd);
    if (err == 0)
        err = mv_httpd_start(httpd);
    if (err != 0) {
        MV_ERROR("http.failed", "listen=%s error=%s", mv_log_q(listen), mv_log_q(strerror(-err)));
        goto destroy_httpd;
    }
    mv_disc *disc = NULL;
    if (agent) {
        mv_disc_callbacks cb = {.arg = &a,
                                .added = disc_added,
                                .removed = disc_removed,
                                .updated = disc_updated,
                                .synced = disc_synced};
        if (mv_disc_start(agent, &cb, &disc) != 0) {
            MV_ERROR("collector.failed", "error=%s", mv_log_q("cannot start agent discovery"));
            goto destroy_httpd;
        }
    }
    if (verbs) {
        mv_verbs_opts vo = {.targets = o->agents,
                            .ntargets = nagents,
                            .token = o->rdma_token,
                            .rdma_port = o->rdma_port,
                            .src_ip = o->rdma_src_ip};
        if (mv_verbs_create(&vo, a.coll, &a.verbs) != 0)
            goto destroy_disc; /* logged collector.failed; exits 1 */
    }
    if (o->rw.url) {
        mv_rw_config rc_ = o->rw;
        rc_.sel = o->derived;
        if (mv_rw_create(&rc_, a.coll, &a.rw) != 0) {
            MV_ERROR("collector.failed", "error=%s",
                     mv_log_q("cannot start remote write (out of memory or threads)"));
            goto destroy_disc;
        }
    }
    /* Whether the analytics' heap is on huge pages (docs/install.md, "Huge pages"). */
    char thp[16];
    int huge = mv_util_malloc_huge_pages(thp, sizeof thp);
    MV_INFO(
        "collector.started",
        "transport=%s listen=%s:%u tick_ms=%.3f tick_workers=%u tick_poll=%d max_interval_ms=%.3f "
        "window_ms=%llu window_align=%s analytics=%d detect=%d detect_ms=%llu agent=%s agents=%zu "
        "statics=%zu thp=%s malloc_hugetlb=%d auth=%s api_server=%s",
        verbs ? "verbs" : "shm", host, mv_httpd_port(httpd), co.tick_us / 1000.0, co.tick_workers,
        co.tick_poll, co.max_interval_us ? co.max_interval_us / 1000.0 : co.tick_us / 1000.0,
        (unsigned long long)(co.pipe.window_ns / 1000000ull),
        co.window_aligned ? "wall" : "segment", co.analytics, co.pipe.detect,
        (unsigned long long)(co.pipe.detect_period_ns / 1000000ull),
        agent ? mv_log_q(agent) : "none", verbs ? nagents : (size_t)(agent != NULL), nstatic, thp,
        huge, mv_authz_mode_name(o->auth),
        a.authz ? mv_log_q(mv_authz_api_server(a.authz)) : "none");
    if (!a.authz && !listen_loopback(host))
        MV_WARN("collector.unauthenticated", "listen=%s:%u risk=%s hint=%s", host,
                mv_httpd_port(httpd),
                mv_log_q("anyone who reaches this address reads every tenant's metrics, labels "
                         "and /debug/segments"),
                mv_log_q("--auth kubernetes, or --listen 127.0.0.1:PORT"));
    for (;;) {
        struct timespec ts = {0, 500 * 1000000L};
        if (sigtimedwait(&sigs, NULL, a.verbs ? &ts : NULL) >= 0)
            break;
        if (a.verbs)
            mv_verbs_poll(a.verbs);
    }
    MV_INFO("collector.stopping", "%s", "");
    rc = 0; /* the only way to exit 0: a SIGINT or SIGTERM after a complete start */
destroy_disc:
    mv_verbs_stop(a.verbs);
    mv_disc_destroy(disc);
destroy_httpd:
    mv_httpd_destroy(httpd);
destroy_coll:
    mv_rw_destroy(a.rw);     /* after the server (its /metrics), before the table it reads */
    mv_live_destroy(a.live); /* after the server (its streams), before the table (its hook) */
    mv_coll_destroy(a.coll);
    mv_verbs_destroy(a.verbs); /* after the table: its sources used the connections */
    mv_api_destroy(api);
    mv_authz_destroy(a.authz); /* after the server: its handlers used it */
    return rc;
}
