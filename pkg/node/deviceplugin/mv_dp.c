/* mv_dp: device plugin server, kubelet registration and the restart watcher. */
#include "mv_dp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "k8s/deviceplugin/v1beta1/api.pb-c.h"
#include "mv_log.h"
#include "mv_util.h"
#include "mv_rpc.h"

#define P_OPTIONS   "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define P_LAW       "/v1beta1.DevicePlugin/ListAndWatch"
#define P_ALLOCATE  "/v1beta1.DevicePlugin/Allocate"
#define P_PRESTART  "/v1beta1.DevicePlugin/PreStartContainer"
#define P_PREFERRED "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define P_REGISTER  "/v1beta1.Registration/Register"

#define REQ_MAX     (16u << 20)
#define DEVICES_CAP 65536u /* see MAX_LIST_BYTES */
/* A ListAndWatch message larger than this is refused at start: the kubelet accepts 4 MiB. */
#define MAX_LIST_BYTES (2u << 20)
#define TICK_MS        250
#define BACKOFF_MIN    100
#define STREAMS_MAX    64
#define SOCK_PATH_MAX  108 /* sun_path */

struct mv_dp {
    char *dir, *endpoint, *resource, *prefix;
    char *sock_path, *kubelet_path;
    size_t ndevices;
    int reg_timeout_ms, backoff_max_ms;
    mv_dp_callbacks cb;
    mv_rpc_buf devices_msg; /* packed ListAndWatchResponse for `healthy`; under mu */
    int healthy;            /* what every device reports; under mu */

    pthread_t mgr;
    int wake_fd;
    int stop; /* atomic */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    mv_rpc_server *srv;
    unsigned gen;                        /* server generation */
    mv_rpc_stream *streams[STREAMS_MAX]; /* open ListAndWatch streams (refs held) */
    size_t nstreams;
    int stream_dropped;
    int inflight; /* worker threads */
    unsigned registrations;
};

static mv_rpc_buf build_devices(const mv_dp *dp, int healthy, int *rc);

static void wake(mv_dp *dp)
{
    uint64_t one = 1;
    if (write(dp->wake_fd, &one, sizeof one) < 0) {
        /* the counter is saturated: the manager is awake anyway */
    }
}

static int device_id(const mv_dp *dp, size_t index, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s%zu", dp->prefix, index);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int device_index(const mv_dp *dp, const char *id, size_t *index)
{
    size_t pl = strlen(dp->prefix);
    if (!id || strncmp(id, dp->prefix, pl) != 0)
        return -EINVAL;
    const char *d = id + pl;
    if (!*d || strlen(d) > 9 || (d[0] == '0' && d[1]))
        return -EINVAL;
    size_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return -EINVAL;
        v = v * 10 + (size_t)(*d - '0');
    }
    if (v >= dp->ndevices)
        return -EINVAL;
    *index = v;
    return 0;
}

int mv_dp_set_healthy(mv_dp *dp, int healthy, const char *reason)
{
    healthy = !!healthy;
    int rc = 0;
    pthread_mutex_lock(&dp->mu);
    if (dp->healthy == healthy) {
        pthread_mutex_unlock(&dp->mu);
        return 0;
    }
    mv_rpc_buf msg = build_devices(dp, healthy, &rc);
    if (rc < 0) {
        pthread_mutex_unlock(&dp->mu);
        MV_ERROR("dp.health_update_failed", "resource=%s err=%s", mv_log_q(dp->resource),
                 mv_log_q(strerror(-rc)));
        return rc;
    }
    mv_rpc_buf_free(&dp->devices_msg);
    dp->devices_msg = msg;
    dp->healthy = healthy;
    size_t streams = dp->nstreams;
    for (size_t i = 0; i < dp->nstreams; i++)
        mv_rpc_stream_write(dp->streams[i], dp->devices_msg.data, dp->devices_msg.len);
    pthread_mutex_unlock(&dp->mu);
    mv_log(healthy ? MV_LOG_INFO : MV_LOG_WARN, "dp.health_changed",
           "resource=%s devices=%zu health=%s reason=%s streams=%zu", mv_log_q(dp->resource),
           dp->ndevices, healthy ? "Healthy" : "Unhealthy", mv_log_q(reason ? reason : ""),
           streams);
    return 0;
}

/* ---- Handlers (server thread) -------------------------------------------------- */

static void on_options(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.pre_start_required = 1;
    o.get_preferred_allocation_available = 0;
    mv_rpc_reply_msg(call, &o.base);
    MV_DEBUG("dp.options_served", "%s", "");
}

static void on_law(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    (void)req;
    (void)len;
    mv_dp *dp = arg;
    pthread_mutex_lock(&dp->mu);
    if (dp->nstreams == STREAMS_MAX) {
        pthread_mutex_unlock(&dp->mu);
        mv_rpc_stream_end(st, MV_RPC_RESOURCE_EXHAUSTED, "too many ListAndWatch streams");
        mv_rpc_stream_unref(st);
        return;
    }
    mv_rpc_stream_set_user(st, (void *)(uintptr_t)dp->gen);
    dp->streams[dp->nstreams++] = st; /* keeps the handler's reference */
    mv_rpc_stream_write(st, dp->devices_msg.data, dp->devices_msg.len);
    int healthy = dp->healthy;
    pthread_mutex_unlock(&dp->mu);
    MV_INFO("dp.list_and_watch", "resource=%s devices=%zu healthy=%zu", mv_log_q(dp->resource),
            dp->ndevices, healthy ? dp->ndevices : 0);
}

static void on_law_close(void *arg, mv_rpc_stream *st, int cancelled)
{
    (void)cancelled;
    mv_dp *dp = arg;
    int found = 0, dropped = 0;
    pthread_mutex_lock(&dp->mu);
    for (size_t i = 0; i < dp->nstreams; i++)
        if (dp->streams[i] == st) {
            dp->streams[i] = dp->streams[--dp->nstreams];
            found = 1;
            break;
        }
    if (found && (unsigned)(uintptr_t)mv_rpc_stream_user(st) == dp->gen &&
        !__atomic_load_n(&dp->stop, __ATOMIC_ACQUIRE) && dp->nstreams == 0) {
        dp->stream_dropped = 1;
        dropped = 1;
    }
    pthread_mutex_unlock(&dp->mu);
    if (found)
        mv_rpc_stream_unref(st);
    if (dropped) {
        MV_WARN("dp.list_and_watch_dropped", "resource=%s action=%s", mv_log_q(dp->resource),
                mv_log_q("re-registering with backoff"));
        wake(dp);
    }
}

typedef struct work {
    mv_dp *dp;
    mv_rpc_call *call;
    int prestart;
    ProtobufCMessage *req;
} work;

static int build_container_response(const mv_dp_alloc *a, V1beta1__ContainerAllocateResponse *r,
                                    V1beta1__ContainerAllocateResponse__EnvsEntry *envs,
                                    V1beta1__ContainerAllocateResponse__EnvsEntry **envp,
                                    V1beta1__Mount *mounts, V1beta1__Mount **mountp)
{
    v1beta1__container_allocate_response__init(r);
    size_t ne = a->nenvs < MV_DP_ENVS_MAX ? a->nenvs : MV_DP_ENVS_MAX;
    size_t nm = a->nmounts < MV_DP_MOUNTS_MAX ? a->nmounts : MV_DP_MOUNTS_MAX;
    for (size_t i = 0; i < ne; i++) {
        v1beta1__container_allocate_response__envs_entry__init(&envs[i]);
        envs[i].key = (char *)a->envs[i].key;
        envs[i].value = (char *)a->envs[i].value;
        envp[i] = &envs[i];
    }
    for (size_t i = 0; i < nm; i++) {
        v1beta1__mount__init(&mounts[i]);
        mounts[i].container_path = (char *)a->mounts[i].container_path;
        mounts[i].host_path = (char *)a->mounts[i].host_path;
        mounts[i].read_only = a->mounts[i].read_only != 0;
        mountp[i] = &mounts[i];
    }
    r->n_envs = ne;
    r->envs = ne ? envp : NULL;
    r->n_mounts = nm;
    r->mounts = nm ? mountp : NULL;
    return 0;
}

static void do_allocate(mv_dp *dp, mv_rpc_call *call, V1beta1__AllocateRequest *r)
{
    size_t n = r->n_container_requests;
    char err[MV_ERR_MAX] = "";
    if (n == 0 || n > 64) {
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT,
                           "AllocateRequest needs 1..64 container requests");
        return;
    }
    mv_dp_alloc *allocs = calloc(n, sizeof *allocs);
    V1beta1__ContainerAllocateResponse *cr = calloc(n, sizeof *cr);
    V1beta1__ContainerAllocateResponse **crp = calloc(n, sizeof *crp);
    V1beta1__ContainerAllocateResponse__EnvsEntry *envs = calloc(n * MV_DP_ENVS_MAX, sizeof *envs);
    V1beta1__ContainerAllocateResponse__EnvsEntry **envp = calloc(n * MV_DP_ENVS_MAX, sizeof *envp);
    V1beta1__Mount *mounts = calloc(n * MV_DP_MOUNTS_MAX, sizeof *mounts);
    V1beta1__Mount **mountp = calloc(n * MV_DP_MOUNTS_MAX, sizeof *mountp);
    if (!allocs || !cr || !crp || !envs || !envp || !mounts || !mountp) {
        mv_rpc_reply_error(call, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto free_all;
    }
    for (size_t i = 0; i < n; i++) {
        V1beta1__ContainerAllocateRequest *c = r->container_requests[i];
        if (!c->n_devices_ids || c->n_devices_ids > MV_DP_DEVICES_PER_CALL) {
            mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT,
                               "a container request names no devices or too many");
            goto free_all;
        }
        for (size_t j = 0; j < c->n_devices_ids; j++) {
            size_t idx;
            if (device_index(dp, c->devices_ids[j], &idx) < 0) {
                snprintf(err, sizeof err, "unknown device ID %.64s for resource %s",
                         c->devices_ids[j], dp->resource);
                MV_WARN("dp.allocate_refused", "resource=%s reason=%s", mv_log_q(dp->resource),
                        mv_log_q(err));
                mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, err);
                goto free_all;
            }
        }
        int rc = dp->cb.allocate(dp->cb.arg, (const char *const *)c->devices_ids, c->n_devices_ids,
                                 &allocs[i], err, sizeof err);
        if (rc < 0) {
            MV_WARN("dp.allocate_refused", "resource=%s devices=%zu reason=%s",
                    mv_log_q(dp->resource), c->n_devices_ids, mv_log_q(err));
            mv_rpc_reply_error(call,
                               rc == -ENOSPC || rc == -EBUSY   ? MV_RPC_RESOURCE_EXHAUSTED
                               : rc == -EINVAL || rc == -EFBIG ? MV_RPC_INVALID_ARGUMENT
                                                               : MV_RPC_INTERNAL,
                               err[0] ? err : "allocation failed");
            goto free_all;
        }
        build_container_response(&allocs[i], &cr[i], envs + i * MV_DP_ENVS_MAX,
                                 envp + i * MV_DP_ENVS_MAX, mounts + i * MV_DP_MOUNTS_MAX,
                                 mountp + i * MV_DP_MOUNTS_MAX);
        crp[i] = &cr[i];
    }
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    resp.n_container_responses = n;
    resp.container_responses = crp;
    mv_rpc_reply_msg(call, &resp.base);
free_all:
    free(mountp);
    free(mounts);
    free(envp);
    free(envs);
    free(crp);
    free(cr);
    free(allocs);
}

static void do_prestart(mv_dp *dp, mv_rpc_call *call, V1beta1__PreStartContainerRequest *r)
{
    char err[MV_ERR_MAX] = "";
    if (!r->n_devices_ids || r->n_devices_ids > MV_DP_DEVICES_PER_CALL) {
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, "PreStartContainer names no devices");
        return;
    }
    int rc = dp->cb.prestart(dp->cb.arg, (const char *const *)r->devices_ids, r->n_devices_ids, err,
                             sizeof err);
    if (rc < 0) {
        mv_rpc_reply_error(call, MV_RPC_INTERNAL, err[0] ? err : "prestart failed");
        return;
    }
    V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    mv_rpc_reply_msg(call, &resp.base);
}

static void *work_main(void *arg)
{
    mv_util_thread_name("mv-dp-work");
    work *w = arg;
    mv_dp *dp = w->dp;
    if (w->prestart)
        do_prestart(dp, w->call, (V1beta1__PreStartContainerRequest *)w->req);
    else
        do_allocate(dp, w->call, (V1beta1__AllocateRequest *)w->req);
    protobuf_c_message_free_unpacked(w->req, NULL);
    free(w);
    pthread_mutex_lock(&dp->mu);
    dp->inflight--;
    pthread_cond_broadcast(&dp->cv);
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

static void dispatch(mv_dp *dp, mv_rpc_call *call, int prestart, const uint8_t *req, size_t len)
{
    const ProtobufCMessageDescriptor *d = prestart
                                              ? &v1beta1__pre_start_container_request__descriptor
                                              : &v1beta1__allocate_request__descriptor;
    ProtobufCMessage *m = mv_rpc_unpack(d, req, len, REQ_MAX);
    if (!m) {
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, "malformed request");
        return;
    }
    work *w = calloc(1, sizeof *w);
    if (!w) {
        protobuf_c_message_free_unpacked(m, NULL);
        mv_rpc_reply_error(call, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    *w = (work){.dp = dp, .call = call, .prestart = prestart, .req = m};
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    pthread_mutex_lock(&dp->mu);
    dp->inflight++;
    int e = pthread_create(&t, &at, work_main, w);
    if (e)
        dp->inflight--;
    pthread_mutex_unlock(&dp->mu);
    pthread_attr_destroy(&at);
    if (e) {
        protobuf_c_message_free_unpacked(m, NULL);
        free(w);
        mv_rpc_reply_error(call, MV_RPC_RESOURCE_EXHAUSTED, "cannot start a worker thread");
    }
}

static void on_allocate(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    dispatch(arg, call, 0, req, len);
}

static void on_prestart(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    dispatch(arg, call, 1, req, len);
}

static void on_preferred(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    mv_rpc_reply_error(call, MV_RPC_UNIMPLEMENTED,
                       "GetPreferredAllocation is not offered by this plugin");
}

/* ---- Server lifecycle and registration (manager thread) ----------------------------- */

/* Stops the current server after its workers are done. */
static void server_down(mv_dp *dp)
{
    pthread_mutex_lock(&dp->mu);
    dp->gen++; /* closes of old streams no longer count as drops */
    while (dp->inflight > 0)
        pthread_cond_wait(&dp->cv, &dp->mu);
    mv_rpc_server *old = dp->srv;
    dp->srv = NULL;
    pthread_mutex_unlock(&dp->mu);
    mv_rpc_server_destroy(old);
}

static int server_up(mv_dp *dp)
{
    mv_rpc_server *srv;
    int rc = mv_rpc_server_create(NULL, &srv);
    if (rc < 0)
        return rc;
    char addr[SOCK_PATH_MAX + 8];
    if ((rc = mv_util_fmt(addr, sizeof addr, "unix:%s", dp->sock_path)) < 0) {
        MV_WARN("dp.listen_failed", "socket=%s reason=%s", mv_log_q(dp->sock_path),
                mv_log_q("path too long for a unix socket"));
        goto destroy;
    }
    if ((rc = mv_rpc_server_add_unary(srv, P_OPTIONS, on_options, dp)) < 0 ||
        (rc = mv_rpc_server_add_stream(srv, P_LAW, on_law, on_law_close, dp)) < 0 ||
        (rc = mv_rpc_server_add_unary(srv, P_ALLOCATE, on_allocate, dp)) < 0 ||
        (rc = mv_rpc_server_add_unary(srv, P_PRESTART, on_prestart, dp)) < 0 ||
        (rc = mv_rpc_server_add_unary(srv, P_PREFERRED, on_preferred, dp)) < 0)
        goto destroy;
    rc = mv_rpc_server_listen(srv, addr);
    if (rc < 0) {
        MV_WARN("dp.listen_failed", "socket=%s", mv_log_q(dp->sock_path));
        goto destroy;
    }
    rc = mv_rpc_server_start(srv);
    if (rc < 0)
        goto destroy;
    pthread_mutex_lock(&dp->mu);
    dp->srv = srv;
    dp->stream_dropped = 0;
    pthread_mutex_unlock(&dp->mu);
    return 0;
destroy:
    mv_rpc_server_destroy(srv);
    return rc;
}

static int do_register(mv_dp *dp, char *why, size_t whylen)
{
    char target[SOCK_PATH_MAX + 8];
    if (mv_util_fmt(target, sizeof target, "unix:%s", dp->kubelet_path) < 0) {
        snprintf(why, whylen, "kubelet socket path too long: %s", dp->kubelet_path);
        return -ENAMETOOLONG;
    }
    mv_rpc_channel *ch;
    int rc = mv_rpc_channel_open(target, 0, &ch);
    if (rc < 0) {
        snprintf(why, whylen, "cannot open a channel: %s", strerror(-rc));
        return rc;
    }
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.pre_start_required = 1;
    V1beta1__RegisterRequest r = V1BETA1__REGISTER_REQUEST__INIT;
    r.version = (char *)MV_DP_VERSION;
    r.endpoint = dp->endpoint;
    r.resource_name = dp->resource;
    r.options = &o;
    mv_rpc_buf req = {0}, resp = {0};
    mv_rpc_status st;
    rc = mv_rpc_pack(&r.base, &req);
    if (rc == 0) {
        rc = mv_rpc_unary(ch, P_REGISTER, req.data, req.len, dp->reg_timeout_ms, &resp, &st);
        if (rc > 0)
            snprintf(why, whylen, "%s: %s", mv_rpc_code_name(rc), st.message);
        else if (rc < 0)
            snprintf(why, whylen, "local error: %s", strerror(-rc));
    }
    mv_rpc_buf_free(&req);
    mv_rpc_buf_free(&resp);
    mv_rpc_channel_close(ch);
    return rc;
}

/* Which kubelet instance serves kubelet.sock: the socket file's identity. Device, inode and
 * birth time, not ctime: a kubelet changes its socket's metadata after listening (SELinux
 * label, mode), and taking that for a new instance would register twice with one kubelet
 * (older kubelets can then drop the newer registration). The birth time tells a new socket
 * that reuses a freed inode number from the old one. */
typedef struct file_id {
    int exists;
    dev_t dev;
    ino_t ino;
    int64_t btime_sec;
    uint32_t btime_nsec;
} file_id;

static file_id stat_id(const char *path)
{
    file_id f = {0};
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_INO | STATX_BTIME, &sx) == 0) {
        f.exists = 1;
        f.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
        f.ino = sx.stx_ino;
        if (sx.stx_mask & STATX_BTIME) {
            f.btime_sec = sx.stx_btime.tv_sec;
            f.btime_nsec = sx.stx_btime.tv_nsec;
        }
    }
    return f;
}

static int same_id(const file_id *a, const file_id *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
           a->btime_sec == b->btime_sec && a->btime_nsec == b->btime_nsec;
}

/* Drains inotify; returns nonzero if kubelet.sock or our socket was touched or
 * the watch went away. */
static int drain_inotify(mv_dp *dp, int ifd, int *wd, int *kubelet_created)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int relevant = 0;
    for (;;) {
        ssize_t n = read(ifd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
                *wd = -1;
                relevant = 1;
            } else if (ev->len && (strcmp(ev->name, MV_DP_KUBELET_SOCKET) == 0 ||
                                   strcmp(ev->name, dp->endpoint) == 0)) {
                relevant = 1;
                if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) &&
                    strcmp(ev->name, MV_DP_KUBELET_SOCKET) == 0)
                    *kubelet_created = 1; /* a new socket, even if its inode number is reused */
            }
            p += sizeof *ev + ev->len;
        }
    }
    return relevant;
}

static void *mgr_main(void *arg)
{
    mv_util_thread_name("mv-dp-manager");
    mv_dp *dp = arg;
    int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    int wd = -1;
    int need = 1, registered_once = 0, kubelet_gone_logged = 0, kubelet_created = 0;
    const char *reason = "startup";
    unsigned backoff = BACKOFF_MIN;
    uint64_t next_try = 0;
    file_id kubelet_id = {0};
    file_id tried_id = {0}; /* kubelet.sock at the last failed attempt */
    if (ifd < 0)
        MV_WARN("dp.inotify_unavailable", "err=%s action=%s", mv_log_q(strerror(errno)),
                mv_log_q("polling every 250 ms instead"));

    while (!__atomic_load_n(&dp->stop, __ATOMIC_ACQUIRE)) {
        if (ifd >= 0 && wd < 0)
            wd = inotify_add_watch(ifd, dp->dir,
                                   IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM |
                                       IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB);
        uint64_t now = mv_util_mono_ms();
        file_id kid = stat_id(dp->kubelet_path);
        if (need && now >= next_try) {
            if (!kid.exists) {
                if (!kubelet_gone_logged)
                    MV_INFO("dp.waiting_for_kubelet", "socket=%s", mv_log_q(dp->kubelet_path));
                kubelet_gone_logged = 1;
            } else {
                kubelet_gone_logged = 0;
                uint64_t t0 = mv_util_mono_ms();
                server_down(dp);
                char why[384] = "";
                int rc = server_up(dp);
                if (rc < 0)
                    snprintf(why, sizeof why, "cannot serve on %s: %s", dp->sock_path,
                             strerror(-rc));
                else
                    rc = do_register(dp, why, sizeof why);
                if (rc == 0) {
                    pthread_mutex_lock(&dp->mu);
                    dp->registrations++;
                    pthread_mutex_unlock(&dp->mu);
                    MV_INFO(registered_once ? "dp.reregistered" : "dp.registered",
                            "resource=%s endpoint=%s devices=%zu reason=%s took_ms=%llu",
                            mv_log_q(dp->resource), mv_log_q(dp->sock_path), dp->ndevices,
                            mv_log_q(reason), (unsigned long long)(mv_util_mono_ms() - t0));
                    registered_once = 1;
                    need = 0;
                    backoff = BACKOFF_MIN;
                    kubelet_id = kid;
                    /* Creations seen so far are of the instance we just registered with. */
                    if (ifd >= 0)
                        drain_inotify(dp, ifd, &wd, &kubelet_created);
                    kubelet_created = 0;
                } else {
                    /* The first refusal by a new kubelet.sock (bound, not yet listening) is
                     * retried soon: the kubelet is coming up, not failing. */
                    if (!same_id(&kid, &tried_id))
                        backoff = BACKOFF_MIN;
                    MV_WARN("dp.register_failed", "resource=%s kubelet=%s err=%s retry_ms=%u",
                            mv_log_q(dp->resource), mv_log_q(dp->kubelet_path), mv_log_q(why),
                            backoff);
                    next_try = mv_util_mono_ms() + backoff;
                    backoff = backoff * 2 > (unsigned)dp->backoff_max_ms
                                  ? (unsigned)dp->backoff_max_ms
                                  : backoff * 2;
                    tried_id = kid;
                }
            }
        }
        int timeout = TICK_MS;
        if (need && next_try > mv_util_mono_ms() &&
            next_try - mv_util_mono_ms() < (uint64_t)timeout)
            timeout = (int)(next_try - mv_util_mono_ms());
        struct pollfd pfd[2] = {{.fd = dp->wake_fd, .events = POLLIN},
                                {.fd = ifd, .events = POLLIN}};
        poll(pfd, ifd >= 0 ? 2 : 1, timeout);
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            if (read(dp->wake_fd, &v, sizeof v) < 0) {
                /* nothing to do: it was only a wake-up */
            }
        }
        int touched = ifd >= 0 && (pfd[1].revents & POLLIN)
                          ? drain_inotify(dp, ifd, &wd, &kubelet_created)
                          : 0;
        if (__atomic_load_n(&dp->stop, __ATOMIC_ACQUIRE))
            break;
        if (need) {
            /* A new kubelet.sock ends any backoff: the kubelet just came up. Our own socket's
             * events (every attempt re-creates it) and the stale kubelet.sock of a stopped
             * kubelet do not, or a refused attempt would retry at once, forever. */
            file_id k = touched ? stat_id(dp->kubelet_path) : (file_id){0};
            if (k.exists && !same_id(&k, &tried_id))
                next_try = 0;
            continue;
        }
        file_id now_kid = stat_id(dp->kubelet_path);
        pthread_mutex_lock(&dp->mu);
        int dropped = dp->stream_dropped;
        pthread_mutex_unlock(&dp->mu);
        if (now_kid.exists && (!same_id(&now_kid, &kubelet_id) || kubelet_created)) {
            need = 1;
            reason = "kubelet_restarted";
            next_try = 0;
        } else if (!stat_id(dp->sock_path).exists) {
            need = 1;
            reason = "plugin_socket_removed";
            next_try = 0;
        } else if (dropped) {
            need = 1;
            reason = "list_and_watch_dropped";
            next_try = mv_util_mono_ms() + backoff;
            backoff = backoff * 2 > (unsigned)dp->backoff_max_ms ? (unsigned)dp->backoff_max_ms
                                                                 : backoff * 2;
        }
        if (need)
            MV_INFO("dp.reregistering", "resource=%s reason=%s", mv_log_q(dp->resource),
                    mv_log_q(reason));
    }
    server_down(dp);
    if (ifd >= 0)
        close(ifd);
    return NULL;
}

static mv_rpc_buf build_devices(const mv_dp *dp, int healthy, int *rc)
{
    mv_rpc_buf out = {0};
    V1beta1__Device *devs = calloc(dp->ndevices, sizeof *devs);
    V1beta1__Device **ptrs = calloc(dp->ndevices, sizeof *ptrs);
    char *ids = calloc(dp->ndevices, 64);
    *rc = -ENOMEM;
    if (!devs || !ptrs || !ids)
        goto free_all;
    for (size_t i = 0; i < dp->ndevices; i++) {
        v1beta1__device__init(&devs[i]);
        if (device_id(dp, i, ids + i * 64, 64) < 0) {
            *rc = -ENAMETOOLONG;
            goto free_all;
        }
        devs[i].id = ids + i * 64;
        devs[i].health = (char *)(healthy ? "Healthy" : "Unhealthy");
        ptrs[i] = &devs[i];
    }
    V1beta1__ListAndWatchResponse r = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    r.n_devices = dp->ndevices;
    r.devices = ptrs;
    *rc = mv_rpc_pack(&r.base, &out);
free_all:
    free(ids);
    free(ptrs);
    free(devs);
    return out;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Frees the plugin's strings, its device list message and the plugin itself. */
static void dp_free(mv_dp *dp)
{
    mv_rpc_buf_free(&dp->devices_msg);
    free(dp->kubelet_path);
    free(dp->sock_path);
    free(dp->prefix);
    free(dp->resource);
    free(dp->endpoint);
    free(dp->dir);
    free(dp);
}

int mv_dp_start(const mv_dp_config *cfg, const mv_dp_callbacks *cb, mv_dp **out)
{
    int rc = -EINVAL;
    *out = NULL;
    if (!cfg || !cb || !cb->allocate || !cb->prestart || !cfg->plugin_dir || !cfg->endpoint ||
        !cfg->resource_name || !cfg->ndevices || cfg->ndevices > DEVICES_CAP ||
        strchr(cfg->endpoint, '/') || strcmp(cfg->endpoint, MV_DP_KUBELET_SOCKET) == 0 ||
        !strchr(cfg->resource_name, '/')) {
        MV_ERROR("dp.bad_config", "detail=%s",
                 mv_log_q("need plugin_dir, an endpoint file name other than kubelet.sock, a "
                          "<domain>/<name> resource and 1..1000000 devices"));
        return -EINVAL;
    }
    mv_dp *dp = calloc(1, sizeof *dp);
    if (!dp)
        return -ENOMEM;
    dp->wake_fd = -1;
    dp->dir = strdup(cfg->plugin_dir);
    dp->endpoint = strdup(cfg->endpoint);
    dp->resource = strdup(cfg->resource_name);
    dp->prefix = strdup(cfg->device_prefix ? cfg->device_prefix : "page-");
    dp->ndevices = cfg->ndevices;
    dp->reg_timeout_ms = cfg->register_timeout_ms > 0 ? cfg->register_timeout_ms : 5000;
    dp->backoff_max_ms = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : 5000;
    dp->cb = *cb;
    if (!dp->dir || !dp->endpoint || !dp->resource || !dp->prefix) {
        rc = -ENOMEM;
        goto free_dp;
    }
    dp->sock_path = join(dp->dir, dp->endpoint);
    dp->kubelet_path = join(dp->dir, MV_DP_KUBELET_SOCKET);
    if (!dp->sock_path || !dp->kubelet_path) {
        rc = -ENOMEM;
        goto free_dp;
    }
    if (strlen(dp->sock_path) >= SOCK_PATH_MAX || strlen(dp->kubelet_path) >= SOCK_PATH_MAX) {
        MV_ERROR("dp.bad_config", "socket=%s detail=%s", mv_log_q(dp->sock_path),
                 mv_log_q("socket path longer than 107 bytes"));
        rc = -ENAMETOOLONG;
        goto free_dp;
    }
    dp->healthy = !cfg->start_unhealthy;
    /* The largest list we may send (all Unhealthy) must fit the kubelet's limit with room. */
    mv_rpc_buf worst = build_devices(dp, 0, &rc);
    if (rc < 0)
        goto free_dp;
    size_t worst_len = worst.len;
    free(worst.data);
    if (worst_len > MAX_LIST_BYTES) {
        MV_ERROR("dp.bad_config", "devices=%zu list_bytes=%zu max_bytes=%u detail=%s", dp->ndevices,
                 worst_len, MAX_LIST_BYTES,
                 mv_log_q("the device list would not fit well under the kubelet's 4 MiB gRPC "
                          "message limit: use fewer, larger pages"));
        rc = -E2BIG;
        goto free_dp;
    }
    dp->devices_msg = build_devices(dp, dp->healthy, &rc);
    if (rc < 0)
        goto free_dp;
    dp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (dp->wake_fd < 0) {
        rc = -errno;
        goto free_dp;
    }
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->cv, NULL);
    int e = pthread_create(&dp->mgr, NULL, mgr_main, dp);
    if (e) {
        rc = -e;
        goto destroy_sync;
    }
    *out = dp;
    return 0;
destroy_sync:
    pthread_cond_destroy(&dp->cv);
    pthread_mutex_destroy(&dp->mu);
    close(dp->wake_fd);
free_dp:
    dp_free(dp);
    return rc;
}

void mv_dp_stop(mv_dp *dp)
{
    if (!dp)
        return;
    __atomic_store_n(&dp->stop, 1, __ATOMIC_RELEASE);
    wake(dp);
    pthread_join(dp->mgr, NULL);
    pthread_cond_destroy(&dp->cv);
    pthread_mutex_destroy(&dp->mu);
    close(dp->wake_fd);
    dp_free(dp);
}
