/* mv_agent_k8s: Kubernetes mode: device plugin callbacks, pod identity, garbage collection,
 * RDMA export with device health. */
#include "mv_agent.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mv_kube.h"
#include "mv_log.h"
#include "mv_podres.h"
#include "mv_rdmatoken.h"
#include "mv_rdmax.h"
#include "mv_util.h"

#define PODRES_TIMEOUT_MS 5000
#define PENDING_MAX       4096

struct mv_agent_k8s {
    mv_config cfg;
    mv_segstore *store;
    mv_kube *kube; /* NULL without an API server */
    mv_dp *dp;
    mv_agentsvc *svc;
    pthread_t bg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping;
    /* RDMA export (rdma_listen): the exporter once its target came up; until then
     * the last reason it could not. Both under mu; the exporter is never replaced. */
    mv_rdmax *rdmax;
    char rdma_err[MV_ERR_MAX];
    char token[MV_RDMA_TOKEN_MAX + 1];       /* collector_token_file's content */
    char admin_token[MV_RDMA_TOKEN_MAX + 1]; /* admin_token_file's content */
    mv_rpc_unix_perms sock_perms;            /* segment_group: 0660 and that group */
    /* segments whose identity is incomplete (PodResources or API server failed) */
    char pending[PENDING_MAX][MV_SEGSTORE_ID_LEN + 1];
    size_t npending;
    int podres_down_logged;
    /* GC thread only: segments PodResources did not list, since when (first such List) */
    struct gc_unheld {
        char id[MV_SEGSTORE_ID_LEN + 1];
        uint64_t since_ns;
    } * unheld;
    size_t nunheld;
};

static void pending_set(mv_agent_k8s *a, const char *id, int on)
{
    pthread_mutex_lock(&a->mu);
    size_t i = 0;
    while (i < a->npending && strcmp(a->pending[i], id) != 0)
        i++;
    if (on && i == a->npending && a->npending < PENDING_MAX)
        snprintf(a->pending[a->npending++], sizeof a->pending[0], "%s", id);
    else if (!on && i < a->npending)
        memcpy(a->pending[i], a->pending[--a->npending], sizeof a->pending[0]);
    pthread_mutex_unlock(&a->mu);
}

/* ---- Identity ----------------------------------------------------------------------- */

typedef struct inval_ctx {
    const char *ns, *pod;
} inval_ctx;

static void on_invalid_label(void *arg, const char *entry, const char *why)
{
    inval_ctx *c = arg;
    MV_WARN("identity.annotation_label_ignored",
            "namespace=%s pod=%s annotation=%s entry=%s "
            "reason=%s",
            mv_log_q(c->ns), mv_log_q(c->pod), mv_log_q(MV_KUBE_ANNOTATION), mv_log_q(entry),
            mv_log_q(why));
}

/* Publishes the pod's Kubernetes labels with the segment, for the value API's workload
 * selectors: the first MV_SEGSTORE_POD_LABELS_MAX valid ones in the API server's order (the
 * API server validated them; a label that does not pass the same check here is left out and
 * logged, never cut). */
static void publish_pod_labels(mv_agent_k8s *a, const mv_segstore_seg *seg, const mv_kube_pod *pod)
{
    mv_segstore_label pl[MV_SEGSTORE_POD_LABELS_MAX];
    size_t n = 0, left_out = 0;
    char err[MV_ERR_MAX];
    for (size_t i = 0; i < pod->nlabels; i++) {
        const char *k = pod->labels[i].key, *v = pod->labels[i].value;
        mv_segstore_label one = {(char *)k, (char *)v};
        if (n == MV_SEGSTORE_POD_LABELS_MAX ||
            mv_segstore_check_pod_labels(&one, 1, err, sizeof err) < 0) {
            left_out++;
            continue;
        }
        pl[n++] = one;
    }
    if (left_out)
        MV_WARN("identity.pod_labels_left_out", "id=%s pod=%s kept=%zu left_out=%zu max=%d",
                seg->id, mv_log_q(pod->name ? pod->name : ""), n, left_out,
                MV_SEGSTORE_POD_LABELS_MAX);
    if (mv_segstore_set_pod_labels(a->store, seg->id, pl, n, err, sizeof err) < 0)
        MV_WARN("identity.pod_labels_refused", "id=%s err=%s", seg->id, mv_log_q(err));
}

/* Resolves the identity of segment `seg` and stores it. `why` names the trigger
 * (prestart, retry). Returns 1 when the identity is complete, 0 when a fallback
 * was stored and a retry is due. */
static int resolve_identity(mv_agent_k8s *a, const mv_segstore_seg *seg, const char *why)
{
    mv_podres_entry *pr = NULL;
    size_t npr = 0;
    char err[MV_ERR_MAX];
    mv_segstore_label labels[MV_SEGSTORE_LABELS_MAX];
    size_t nl = 0;
    int complete = 0;
    int rc = mv_podres_list(a->cfg.pod_resources_socket, a->cfg.resource_name, PODRES_TIMEOUT_MS,
                            &pr, &npr, err, sizeof err);
    const mv_podres_entry *e = rc == 0 ? mv_podres_find(pr, npr, seg->devices[0]) : NULL;
    if (!e) {
        /* Device-level fallback until the kubelet can tell us the container. */
        labels[nl++] = (mv_segstore_label){"device", seg->devices[0]};
        MV_WARN("identity.fallback", "id=%s device=%s trigger=%s reason=%s action=%s", seg->id,
                mv_log_q(seg->devices[0]), why,
                mv_log_q(rc < 0 ? err : "devices not listed by PodResources yet"),
                mv_log_q("labelled by device; retrying"));
        if (seg->nlabels == 0)
            mv_segstore_set_labels(a->store, seg->id, labels, nl, err, sizeof err);
        goto free_pr;
    }
    labels[nl++] = (mv_segstore_label){"container", e->container};
    labels[nl++] = (mv_segstore_label){"namespace", e->namespace_};
    labels[nl++] = (mv_segstore_label){"pod", e->pod};
    mv_kube_pod pod = {0};
    mv_kube_kv *extra = NULL;
    size_t nextra = 0;
    if (!a->kube) {
        complete = 1;
    } else {
        rc = mv_kube_get_pod(a->kube, e->namespace_, e->pod, &pod, err, sizeof err);
        if (rc < 0) {
            const char *oldns = NULL, *oldpod = NULL;
            for (size_t i = 0; i < seg->nlabels; i++) {
                if (strcmp(seg->labels[i].name, "namespace") == 0)
                    oldns = seg->labels[i].value;
                if (strcmp(seg->labels[i].name, "pod") == 0)
                    oldpod = seg->labels[i].value;
            }
            if (oldns && oldpod && strcmp(oldns, e->namespace_) == 0 &&
                strcmp(oldpod, e->pod) == 0 && seg->nlabels > 3) {
                /* Keep the full identity learnt earlier (a container restart). */
                MV_WARN("identity.api_unavailable", "id=%s namespace=%s pod=%s err=%s action=%s",
                        seg->id, mv_log_q(e->namespace_), mv_log_q(e->pod), mv_log_q(err),
                        mv_log_q("keeping the labels learnt before"));
                complete = 1;
                goto free_pod;
            }
            MV_WARN("identity.api_unavailable", "id=%s namespace=%s pod=%s err=%s action=%s",
                    seg->id, mv_log_q(e->namespace_), mv_log_q(e->pod), mv_log_q(err),
                    mv_log_q("namespace/pod/container labels only; retrying"));
        } else {
            complete = 1;
            if (a->cfg.node_name[0] && pod.node_name && strcmp(pod.node_name, a->cfg.node_name))
                MV_WARN("identity.node_mismatch", "pod=%s node=%s expected=%s", mv_log_q(e->pod),
                        mv_log_q(pod.node_name), mv_log_q(a->cfg.node_name));
            inval_ctx ic = {e->namespace_, e->pod};
            mv_kube_parse_labels(mv_kube_pod_annotation(&pod, MV_KUBE_ANNOTATION), &extra, &nextra,
                                 on_invalid_label, &ic);
            for (size_t i = 0; i < nextra && nl < MV_SEGSTORE_LABELS_MAX; i++)
                labels[nl++] = (mv_segstore_label){extra[i].key, extra[i].value};
            /* The writer may run as non-root (restricted Pod Security): hand it the file. */
            int64_t uid, gid;
            mv_kube_pod_owner(&pod, e->container, &uid, &gid);
            /* A known user owns the file; its group is segment_group (a non-root collector's
             * group), else root, so that a host-mode collector (uid 0 without capabilities)
             * reads it through the group bits. Only without a user does the spec's group
             * (runAsGroup or fsGroup) get the file: the writer needs it more. */
            if (uid >= 0)
                gid = a->cfg.segment_gid >= 0 ? a->cfg.segment_gid : 0;
            else if (gid >= 0 && a->cfg.segment_gid >= 0)
                MV_WARN(
                    "segment.group_not_applied",
                    "id=%s pod=%s container=%s gid=%lld "
                    "reason=%s",
                    seg->id, mv_log_q(e->pod), mv_log_q(e->container), (long long)gid,
                    mv_log_q("the writer has a group but no user (set "
                             "runAsUser): the file's group is the writer's, not segment_group"));
            if (mv_segstore_set_owner(a->store, seg->id, uid, gid, err, sizeof err) < 0)
                MV_WARN("segment.owner_failed", "id=%s pod=%s container=%s err=%s", seg->id,
                        mv_log_q(e->pod), mv_log_q(e->container), mv_log_q(err));
            publish_pod_labels(a, seg, &pod);
        }
    }
    rc = mv_segstore_set_labels(a->store, seg->id, labels, nl, err, sizeof err);
    if (rc < 0) {
        MV_WARN("identity.labels_refused", "id=%s err=%s", seg->id, mv_log_q(err));
    } else {
        MV_INFO("prestart.mapped",
                "id=%s namespace=%s pod=%s container=%s extra_labels=%zu complete=%d trigger=%s "
                "changed=%d",
                seg->id, mv_log_q(e->namespace_), mv_log_q(e->pod), mv_log_q(e->container), nextra,
                complete, why, rc);
    }
free_pod:
    mv_kube_kvs_free(extra, nextra);
    mv_kube_pod_clear(&pod);
free_pr:
    mv_podres_free(pr, npr);
    return complete;
}

/* ---- RDMA export ----------------------------------------------------------------------- */

static mv_rdmax *rdmax_get(mv_agent_k8s *a, char *why, size_t whylen)
{
    pthread_mutex_lock(&a->mu);
    mv_rdmax *x = a->rdmax;
    if (why)
        snprintf(why, whylen, "%s", a->rdma_err);
    pthread_mutex_unlock(&a->mu);
    return x;
}

/* Tries to bring up the RDMA target once. On success the exporter registers every
 * segment, the Agent service starts filling the rdma fields, open catalog watches
 * get every segment again with them, and the devices turn Healthy. Returns 1 when
 * the exporter is up (now or before), 0 when it is not. */
static int rdma_try(mv_agent_k8s *a)
{
    const mv_config *c = &a->cfg;
    if (rdmax_get(a, NULL, 0))
        return 1;
    char err[MV_ERR_MAX] = "";
    mv_rdmax_opts xo = {.bind_ip = c->rdma_ip, .port = c->rdma_port, .token = a->token};
    mv_rdmax *x;
    if (mv_rdmax_create(&xo, a->store, &x, err, sizeof err) < 0) {
        pthread_mutex_lock(&a->mu);
        int same = strncmp(a->rdma_err, err, sizeof a->rdma_err - 1) == 0;
        snprintf(a->rdma_err, sizeof a->rdma_err, "%.*s", (int)sizeof a->rdma_err - 1, err);
        pthread_mutex_unlock(&a->mu);
        /* Once per distinct reason; the retries in between go to debug. */
        mv_log(same              ? MV_LOG_DEBUG
               : c->require_rdma ? MV_LOG_ERROR
                                 : MV_LOG_WARN,
               "rdma.unavailable", "listen=%s error=%s effect=%s retry_ms=%" PRIu64,
               mv_log_q(c->rdma_listen), mv_log_q(err),
               mv_log_q(c->require_rdma ? "devices Unhealthy, Allocate refused (require_rdma)"
                                        : "segments served to same-host collectors only"),
               c->rdma_retry_ms);
        return 0;
    }
    pthread_mutex_lock(&a->mu);
    a->rdmax = x;
    a->rdma_err[0] = 0;
    pthread_mutex_unlock(&a->mu);
    mv_agentsvc_set_rdma(a->svc, mv_rdmax_lookup, x, c->require_rdma);
    size_t n = mv_segstore_announce_all(a->store);
    MV_INFO("rdma.ready", "listen=%s port=%u registered=%zu announced=%zu",
            mv_log_q(c->rdma_listen), (unsigned)mv_rdmax_port(x), mv_rdmax_registered(x), n);
    if (a->dp && c->require_rdma)
        mv_dp_set_healthy(a->dp, 1, "RDMA target is up");
    return 1;
}

/* ---- Device plugin callbacks ------------------------------------------------------------ */

int mv_agent_k8s_allocate(mv_agent_k8s *a, const char *const *ids, size_t n, mv_dp_alloc *out,
                          char *err, size_t errlen)
{
    /* Devices still backing a segment: either its pod is gone and GC has not run yet
     * (collect it now), or another container holds them (refuse). */
    mv_podres_entry *pr = NULL;
    size_t npr = 0;
    int listed = 0, rc;
    for (size_t i = 0; i < n; i++) {
        mv_segstore_seg old;
        if (mv_segstore_find_device(a->store, ids[i], &old) < 0)
            continue;
        if (!listed) {
            char perr[MV_ERR_MAX];
            rc = mv_podres_list(a->cfg.pod_resources_socket, a->cfg.resource_name,
                                PODRES_TIMEOUT_MS, &pr, &npr, perr, sizeof perr);
            if (rc < 0) {
                snprintf(err, errlen,
                         "device %s still backs segment %s and PodResources cannot tell whether "
                         "its pod is gone: %s",
                         ids[i], old.id, perr);
                mv_segstore_seg_clear(&old);
                return -EBUSY;
            }
            listed = 1;
        }
        const mv_podres_entry *holder = NULL;
        for (size_t j = 0; j < old.ndevices && !holder; j++)
            holder = mv_podres_find(pr, npr, old.devices[j]);
        if (holder) {
            snprintf(err, errlen, "device %s is still held by %s/%s/%s (segment %s)", ids[i],
                     holder->namespace_, holder->pod, holder->container, old.id);
            mv_segstore_seg_clear(&old);
            mv_podres_free(pr, npr);
            return -EBUSY;
        }
        if (mv_segstore_release(a->store, old.id) == 0) {
            pending_set(a, old.id, 0);
            MV_INFO("segment.collected", "id=%s reason=%s pages=%zu", old.id,
                    mv_log_q("devices re-allocated by the kubelet"), old.ndevices);
        }
        mv_segstore_seg_clear(&old);
    }
    mv_podres_free(pr, npr);

    char why[MV_ERR_MAX];
    mv_rdmax *x = a->cfg.rdma_listen[0] ? rdmax_get(a, why, sizeof why) : NULL;
    if (a->cfg.require_rdma && !x) {
        snprintf(err, errlen,
                 "microview: RDMA is required on this node (require_rdma) but unavailable: %s",
                 why[0] ? why : "not started yet");
        MV_WARN("dp.allocate_refused", "pages=%zu reason=%s", n, mv_log_q(err));
        return -ENODEV;
    }
    mv_segstore_label dev = {"device", (char *)ids[0]};
    mv_segstore_seg seg;
    rc = mv_segstore_create_dev(a->store, ids, n, &dev, 1, &seg, err, errlen);
    if (rc < 0) {
        uint64_t total, used;
        mv_segstore_pool(a->store, &total, &used);
        MV_WARN("dp.allocate_failed",
                "pages=%zu pool_used=%" PRIu64 " pool_total=%" PRIu64 " err=%s", n, used, total,
                mv_log_q(err));
        return rc;
    }
    /* segment_group: root:GROUP 0660 until PreStartContainer hands the file to its writer. */
    if (a->cfg.segment_gid >= 0 &&
        mv_segstore_set_owner(a->store, seg.id, -1, a->cfg.segment_gid, err, errlen) < 0) {
        MV_WARN("dp.allocate_failed", "id=%s pages=%zu err=%s", seg.id, n, mv_log_q(err));
        mv_segstore_release(a->store, seg.id);
        mv_segstore_seg_clear(&seg);
        return -EIO;
    }
    if (a->cfg.require_rdma) {
        /* The exporter registered it on ADDED; refuse a segment no collector could read. */
        mv_agentsvc_rdma_info ri;
        mv_rdmax_lookup(x, &seg, 0, &ri);
        if (!ri.readable) {
            snprintf(err, errlen, "microview: segment could not be registered for RDMA: %s",
                     ri.reason);
            MV_WARN("dp.allocate_refused", "id=%s pages=%zu reason=%s", seg.id, n, mv_log_q(err));
            mv_segstore_release(a->store, seg.id);
            mv_segstore_seg_clear(&seg);
            return -EIO;
        }
    }
    char dir[MV_DP_PATH_MAX];
    if (mv_segstore_seg_dir(a->store, seg.id, dir, sizeof dir) < 0 ||
        strlen(a->cfg.container_path) + sizeof MV_SEGSTORE_SEG_FILE + 1 >= MV_DP_PATH_MAX) {
        snprintf(err, errlen, "segment path too long");
        mv_segstore_release(a->store, seg.id);
        mv_segstore_seg_clear(&seg);
        return -ENAMETOOLONG;
    }
    out->nmounts = 1;
    snprintf(out->mounts[0].host_path, MV_DP_PATH_MAX, "%s", dir);
    snprintf(out->mounts[0].container_path, MV_DP_PATH_MAX, "%s", a->cfg.container_path);
    out->mounts[0].read_only = 0;
    out->nenvs = 3;
    snprintf(out->envs[0].key, MV_DP_ENV_KEY_MAX, "MICROVIEW_SEGMENT");
    int w = snprintf(out->envs[0].value, MV_DP_PATH_MAX, "%s/%s", a->cfg.container_path,
                     MV_SEGSTORE_SEG_FILE);
    if (w < 0 || w >= MV_DP_PATH_MAX) {
        snprintf(err, errlen, "container path too long");
        mv_segstore_release(a->store, seg.id);
        mv_segstore_seg_clear(&seg);
        return -ENAMETOOLONG;
    }
    snprintf(out->envs[1].key, MV_DP_ENV_KEY_MAX, "MICROVIEW_SEGMENT_SIZE");
    snprintf(out->envs[1].value, MV_DP_PATH_MAX, "%" PRIu64, seg.size);
    snprintf(out->envs[2].key, MV_DP_ENV_KEY_MAX, "MICROVIEW_SEGMENT_ID");
    snprintf(out->envs[2].value, MV_DP_PATH_MAX, "%s", seg.id);
    uint64_t total, used;
    mv_segstore_pool(a->store, &total, &used);
    MV_INFO("dp.allocated",
            "id=%s pages=%zu size=%" PRIu64 " first_device=%s host_dir=%s container_path=%s "
            "pool_used=%" PRIu64 " pool_total=%" PRIu64,
            seg.id, n, seg.size, mv_log_q(ids[0]), mv_log_q(dir), mv_log_q(a->cfg.container_path),
            used, total);
    mv_segstore_seg_clear(&seg);
    return 0;
}

int mv_agent_k8s_prestart(mv_agent_k8s *a, const char *const *ids, size_t n, char *err,
                          size_t errlen)
{
    (void)err;
    (void)errlen;
    mv_segstore_seg seg;
    if (mv_segstore_find_device(a->store, ids[0], &seg) < 0) {
        MV_WARN("prestart.unknown_devices", "first_device=%s devices=%zu action=%s",
                mv_log_q(ids[0]), n, mv_log_q("none: no segment is backed by these devices"));
        return 0;
    }
    if (!resolve_identity(a, &seg, "prestart"))
        pending_set(a, seg.id, 1);
    else
        pending_set(a, seg.id, 0);
    mv_segstore_seg_clear(&seg);
    return 0;
}

/* ---- Background: garbage collection and identity retries ------------------------------- */

void mv_agent_k8s_gc_pass(mv_agent_k8s *a)
{
    mv_podres_entry *pr = NULL;
    size_t npr = 0;
    char err[MV_ERR_MAX];
    /* The assignments seen are as of the List call: only a segment created a grace period
     * before it can be judged by it (one allocated while List was in flight is not in it). */
    uint64_t listed_at = mv_util_wall_ns();
    int rc = mv_podres_list(a->cfg.pod_resources_socket, a->cfg.resource_name, PODRES_TIMEOUT_MS,
                            &pr, &npr, err, sizeof err);
    if (rc < 0) {
        if (!a->podres_down_logged)
            MV_WARN("gc.skipped", "err=%s action=%s", mv_log_q(err),
                    mv_log_q("nothing is collected while PodResources is unreachable"));
        a->podres_down_logged = 1;
        return;
    }
    a->podres_down_logged = 0;
    mv_segstore_seg *v;
    size_t n;
    if (mv_segstore_list(a->store, &v, &n, NULL) < 0) {
        mv_podres_free(pr, npr);
        return;
    }
    uint64_t grace = a->cfg.gc_grace_ms * 1000000ull;
    /* A segment is collected only once List has left it out for a grace period in a row: a
     * kubelet that has just restarted answers List before it knows its running pods. */
    struct gc_unheld *unheld = n ? calloc(n, sizeof *unheld) : NULL;
    size_t nunheld = 0;
    for (size_t i = 0; i < n; i++) {
        const mv_segstore_seg *s = &v[i];
        if (!s->ndevices)
            continue;
        if (s->created_ns + grace > listed_at)
            continue;
        int held = 0;
        for (size_t j = 0; j < s->ndevices && !held; j++)
            held = mv_podres_find(pr, npr, s->devices[j]) != NULL;
        if (held)
            continue;
        uint64_t since = listed_at;
        for (size_t j = 0; j < a->nunheld; j++)
            if (strcmp(a->unheld[j].id, s->id) == 0)
                since = a->unheld[j].since_ns;
        if (since + grace > listed_at) {
            if (unheld) {
                snprintf(unheld[nunheld].id, sizeof unheld[0].id, "%s", s->id);
                unheld[nunheld++].since_ns = since;
            }
            continue;
        }
        if (mv_segstore_release(a->store, s->id) == 0) {
            pending_set(a, s->id, 0);
            uint64_t total, used;
            mv_segstore_pool(a->store, &total, &used);
            MV_INFO("segment.collected",
                    "id=%s reason=%s pages=%zu pool_used=%" PRIu64 " pool_total=%" PRIu64, s->id,
                    mv_log_q("devices no longer assigned (pod gone)"), s->ndevices, used, total);
        }
    }
    free(a->unheld);
    a->unheld = unheld;
    a->nunheld = nunheld;
    mv_segstore_segs_free(v, n);
    mv_podres_free(pr, npr);
}

void mv_agent_k8s_retry_pass(mv_agent_k8s *a)
{
    char ids[64][MV_SEGSTORE_ID_LEN + 1];
    size_t n = 0;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->npending && n < 64; i++)
        memcpy(ids[n++], a->pending[i], sizeof ids[0]);
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < n; i++) {
        mv_segstore_seg *v;
        size_t cnt;
        if (mv_segstore_list(a->store, &v, &cnt, NULL) < 0)
            return;
        const mv_segstore_seg *s = NULL;
        for (size_t j = 0; j < cnt && !s; j++)
            if (strcmp(v[j].id, ids[i]) == 0)
                s = &v[j];
        if (!s || !s->ndevices)
            pending_set(a, ids[i], 0);
        else if (resolve_identity(a, s, "retry"))
            pending_set(a, ids[i], 0);
        mv_segstore_segs_free(v, cnt);
    }
}

static void *bg_main(void *arg)
{
    mv_util_thread_name("mv-k8s");
    mv_agent_k8s *a = arg;
    uint64_t next_gc = mv_util_mono_ms() + a->cfg.gc_interval_ms;
    uint64_t next_retry = mv_util_mono_ms() + a->cfg.identity_retry_ms;
    /* UINT64_MAX: no RDMA target to bring up (none configured, or it is up). */
    uint64_t next_rdma = a->cfg.rdma_listen[0] && !rdmax_get(a, NULL, 0)
                             ? mv_util_mono_ms() + a->cfg.rdma_retry_ms
                             : UINT64_MAX;
    pthread_mutex_lock(&a->mu);
    while (!a->stopping) {
        uint64_t now = mv_util_mono_ms();
        uint64_t due = next_gc < next_retry ? next_gc : next_retry;
        if (next_rdma < due)
            due = next_rdma;
        if (now < due) {
            uint64_t wait = due - now;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&a->cv, &a->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        if (mv_util_mono_ms() >= next_rdma)
            next_rdma = rdma_try(a) ? UINT64_MAX : mv_util_mono_ms() + a->cfg.rdma_retry_ms;
        if (mv_util_mono_ms() >= next_retry) {
            mv_agent_k8s_retry_pass(a);
            next_retry = mv_util_mono_ms() + a->cfg.identity_retry_ms;
        }
        if (mv_util_mono_ms() >= next_gc) {
            mv_agent_k8s_gc_pass(a);
            next_gc = mv_util_mono_ms() + a->cfg.gc_interval_ms;
        }
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ---- Life cycle and the run hooks ---------------------------------------------------------- */

int mv_agent_k8s_create(const mv_config *cfg, mv_agent_k8s **out)
{
    mv_agent_k8s *a = calloc(1, sizeof *a);
    *out = NULL;
    if (!a)
        return -ENOMEM;
    a->cfg = *cfg;
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = a;
    return 0;
}

void mv_agent_k8s_destroy(mv_agent_k8s *a)
{
    if (!a)
        return;
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->unheld);
    free(a);
}

size_t mv_agent_k8s_pending(mv_agent_k8s *a)
{
    pthread_mutex_lock(&a->mu);
    size_t n = a->npending;
    pthread_mutex_unlock(&a->mu);
    return n;
}

int mv_agent_k8s_attach(mv_agent_k8s *a, mv_segstore *store)
{
    const mv_config *c = &a->cfg;
    a->store = store;
    if (c->api_server[0]) {
        mv_kube_opts ko = {.url = c->api_server,
                           .token_file = c->token_file[0] ? c->token_file : NULL,
                           .ca_file =
                               c->ca_file[0] && access(c->ca_file, R_OK) == 0 ? c->ca_file : NULL,
                           .token_reread_s = (int)c->token_reread_seconds,
                           .timeout_ms = (int)c->api_timeout_ms};
        if (mv_kube_create(&ko, &a->kube) < 0)
            return -EINVAL;
    } else {
        MV_WARN("kube.disabled", "reason=%s effect=%s",
                mv_log_q("no api_server and no KUBERNETES_SERVICE_HOST"),
                mv_log_q("identity labels come from PodResources only; no annotation labels"));
    }
    /* Segments from before a restart: refresh their identity once. */
    mv_segstore_seg *v;
    size_t n;
    if (mv_segstore_list(a->store, &v, &n, NULL) == 0) {
        for (size_t i = 0; i < n; i++)
            if (v[i].ndevices)
                pending_set(a, v[i].id, 1);
        mv_segstore_segs_free(v, n);
    }

    char err[MV_ERR_MAX];
    if (c->collector_token_file[0] && mv_rdmatoken_load(c->collector_token_file, a->token,
                                                        sizeof a->token, err, sizeof err) < 0) {
        MV_ERROR("agent.config_invalid", "key=collector_token_file err=%s", mv_log_q(err));
        mv_agent_k8s_detach(a);
        return -EINVAL;
    }
    if (c->admin_token_file[0] && mv_rdmatoken_load(c->admin_token_file, a->admin_token,
                                                    sizeof a->admin_token, err, sizeof err) < 0) {
        MV_ERROR("agent.config_invalid", "key=admin_token_file err=%s", mv_log_q(err));
        mv_agent_k8s_detach(a);
        return -EINVAL;
    }
    if (a->token[0] && strcmp(a->token, a->admin_token) == 0) {
        MV_ERROR("agent.config_invalid", "key=admin_token_file err=%s",
                 mv_log_q("collector_token_file and admin_token_file hold the same token: the "
                          "read token would allow everything"));
        mv_agent_k8s_detach(a);
        return -EINVAL;
    }
    if (c->listen[0] && !a->token[0] && !a->admin_token[0])
        MV_WARN("agent.open_listen", "listen=%s risk=%s", mv_log_q(c->listen),
                mv_log_q("no collector_token_file: anyone who reaches this address can list "
                         "and release segments"));
    return 0;
}

void mv_agent_k8s_detach(mv_agent_k8s *a)
{
    mv_kube_destroy(a->kube);
    a->kube = NULL;
}

static int hook_setup(void *arg, mv_segstore *store)
{
    return mv_agent_k8s_attach(arg, store);
}

static void hook_teardown(void *arg)
{
    mv_agent_k8s_detach(arg);
}

static int hook_before_listen(void *arg, mv_agentsvc *svc)
{
    mv_agent_k8s *a = arg;
    a->svc = svc;
    mv_agentsvc_refuse_tcp_create(svc, "in Kubernetes mode segments come from the device "
                                       "plugin's page pool (a pod's resource request); a TCP "
                                       "create would bypass it");
    /* First try at the RDMA target before serving; the background thread retries. */
    if (a->cfg.rdma_listen[0])
        rdma_try(a);
    return 0;
}

static int dp_allocate(void *arg, const char *const *ids, size_t n, mv_dp_alloc *out, char *err,
                       size_t errlen)
{
    return mv_agent_k8s_allocate(arg, ids, n, out, err, errlen);
}

static int dp_prestart(void *arg, const char *const *ids, size_t n, char *err, size_t errlen)
{
    return mv_agent_k8s_prestart(arg, ids, n, err, errlen);
}

static int hook_started(void *arg, int tcp_port)
{
    mv_agent_k8s *a = arg;
    const mv_config *c = &a->cfg;
    uint64_t pages = c->pool_size / c->page_size;
    int rdma_up = rdmax_get(a, NULL, 0) != NULL;
    mv_dp_config dc = {.plugin_dir = c->device_plugin_dir,
                       .endpoint = c->endpoint,
                       .resource_name = c->resource_name,
                       .ndevices = (size_t)pages,
                       .start_unhealthy = c->require_rdma && !rdma_up};
    mv_dp_callbacks cb = {.allocate = dp_allocate, .prestart = dp_prestart, .arg = a};
    if (mv_dp_start(&dc, &cb, &a->dp) < 0)
        return -EIO;
    if (dc.start_unhealthy)
        MV_WARN("dp.health_changed", "resource=%s devices=%" PRIu64 " health=%s reason=%s",
                mv_log_q(c->resource_name), pages, "Unhealthy",
                mv_log_q("RDMA is required (require_rdma) but unavailable"));
    int e = pthread_create(&a->bg, NULL, bg_main, a);
    if (e) {
        mv_dp_stop(a->dp);
        a->dp = NULL;
        return -e;
    }
    MV_INFO("agent.started",
            "mode=kubernetes resource=%s pages=%" PRIu64 " page_size=%" PRIu64
            " plugin_dir=%s state_dir=%s agent_socket=%s pod_resources=%s api_server=%s "
            "node=%s listen=%s tcp_port=%d tls=%s client_cert=%s segment_gid=%lld rdma=%s pid=%d",
            mv_log_q(c->resource_name), pages, c->page_size, mv_log_q(c->device_plugin_dir),
            mv_log_q(c->state_dir), mv_log_q(c->agent_socket), mv_log_q(c->pod_resources_socket),
            mv_log_q(c->api_server[0] ? c->api_server : "none"),
            mv_log_q(c->node_name[0] ? c->node_name : "unknown"),
            mv_log_q(c->listen[0] ? c->listen : "off"), tcp_port,
            !c->listen[0]         ? "off"
            : c->tls_cert_file[0] ? "on"
                                  : "off_insecure_listen",
            !c->tls_client_ca_file[0]    ? "off"
            : c->tls_require_client_cert ? "required"
                                         : "optional",
            (long long)c->segment_gid,
            !c->rdma_listen[0] ? "off"
            : rdma_up          ? "ready"
            : c->require_rdma  ? "required_unavailable"
                               : "unavailable",
            (int)getpid());
    return 0;
}

/* The background thread first (it may touch the device plugin), then the plugin
 * (waits for callbacks in flight); the control plane goes next. */
static void hook_stopping(void *arg)
{
    mv_agent_k8s *a = arg;
    pthread_mutex_lock(&a->mu);
    a->stopping = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->bg, NULL);
    mv_dp_stop(a->dp);
    a->dp = NULL;
}

static void hook_after_server(void *arg)
{
    mv_agent_k8s *a = arg;
    mv_rdmax_destroy(a->rdmax); /* revokes every rkey */
    a->rdmax = NULL;
    a->svc = NULL;
}

void mv_agent_k8s_mode(mv_agent_k8s *a, mv_agent_run_opts *o, mv_agent_mode *m)
{
    const mv_config *c = &a->cfg;
    *o = (mv_agent_run_opts){
        .mode = "kubernetes",
        .store = {.dir = c->state_dir,
                  .max_size = c->max_segment_size,
                  .pool_pages = c->pool_size / c->page_size,
                  .page_size = c->page_size,
                  .min_free_bytes = c->min_free_bytes,
                  .min_free_percent = (unsigned)c->min_free_percent},
        .socket_path = c->agent_socket,
        .socket_perms = c->segment_gid >= 0 ? &a->sock_perms : NULL,
        .tcp_listen = c->listen,
        .tls = {.cert_file = c->tls_cert_file[0] ? c->tls_cert_file : NULL,
                .key_file = c->tls_key_file[0] ? c->tls_key_file : NULL,
                .client_ca_file = c->tls_client_ca_file[0] ? c->tls_client_ca_file : NULL,
                .require_client_cert = c->tls_require_client_cert},
        .insecure_tcp = c->insecure_listen,
        .token = a->token,
        .admin_token = a->admin_token};
    a->sock_perms = (mv_rpc_unix_perms){.mode = 0660, .gid = c->segment_gid};
    *m = (mv_agent_mode){.arg = a,
                         .setup = hook_setup,
                         .before_listen = hook_before_listen,
                         .started = hook_started,
                         .stopping = hook_stopping,
                         .after_server = hook_after_server,
                         .teardown = hook_teardown};
}
