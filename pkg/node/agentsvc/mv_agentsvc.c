/* mv_agentsvc: request decoding, store calls and replies for microview.v1.Agent. */
#include "mv_agentsvc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "microview/v1/agent.pb-c.h"
#include "mv_log.h"
#include "mv_util.h"

#define REQ_MAX (64u << 10) /* control-plane requests are small */

struct mv_agentsvc {
    mv_segstore *store;
    pthread_mutex_t rdma_mu;     /* guards the hook: it may be attached while serving */
    mv_agentsvc_rdma_fn rdma_fn; /* NULL: no RDMA exporter */
    void *rdma_arg;
    int rdma_require;
    int tcp_create_refused; /* mv_agentsvc_refuse_tcp_create */
    char tcp_create_why[200];
};

typedef struct rdma_hook {
    mv_agentsvc_rdma_fn fn;
    void *arg;
    int require;
} rdma_hook;

static rdma_hook hook_get(mv_agentsvc *svc)
{
    pthread_mutex_lock(&svc->rdma_mu);
    rdma_hook h = {svc->rdma_fn, svc->rdma_arg, svc->rdma_require};
    pthread_mutex_unlock(&svc->rdma_mu);
    return h;
}

/* A Segment message view over a store segment (borrows its strings). */
typedef struct seg_msg {
    Microview__V1__Segment m;
    Microview__V1__Label lab[MV_SEGSTORE_LABELS_MAX];
    Microview__V1__Label *labp[MV_SEGSTORE_LABELS_MAX];
    Microview__V1__Label plab[MV_SEGSTORE_POD_LABELS_MAX];
    Microview__V1__Label *plabp[MV_SEGSTORE_POD_LABELS_MAX];
} seg_msg;

static void seg_to_msg(const mv_segstore_seg *s, seg_msg *out)
{
    microview__v1__segment__init(&out->m);
    out->m.id = (char *)s->id;
    out->m.path = s->path;
    out->m.size_bytes = s->size;
    out->m.owner_pid = s->owner_pid;
    out->m.created_unix_ns = s->created_ns;
    size_t n = s->nlabels < MV_SEGSTORE_LABELS_MAX ? s->nlabels : MV_SEGSTORE_LABELS_MAX;
    for (size_t i = 0; i < n; i++) {
        microview__v1__label__init(&out->lab[i]);
        out->lab[i].name = s->labels[i].name;
        out->lab[i].value = s->labels[i].value;
        out->labp[i] = &out->lab[i];
    }
    out->m.n_labels = n;
    out->m.labels = n ? out->labp : NULL;
    n = s->npod_labels < MV_SEGSTORE_POD_LABELS_MAX ? s->npod_labels : MV_SEGSTORE_POD_LABELS_MAX;
    for (size_t i = 0; i < n; i++) {
        microview__v1__label__init(&out->plab[i]);
        out->plab[i].name = s->pod_labels[i].name;
        out->plab[i].value = s->pod_labels[i].value;
        out->plabp[i] = &out->plab[i];
    }
    out->m.n_pod_labels = n;
    out->m.pod_labels = n ? out->plabp : NULL;
}

/* Adds the RDMA exporter's view of the segment, if there is an exporter. */
static void seg_rdma(mv_agentsvc *svc, const mv_segstore_seg *s, int may_register, seg_msg *out)
{
    mv_agentsvc_rdma_info ri;
    rdma_hook h = hook_get(svc);
    if (!h.fn)
        return;
    memset(&ri, 0, sizeof ri);
    if (h.fn(h.arg, s, may_register, &ri) < 0 || !ri.readable)
        return;
    out->m.rdma_addr = ri.addr;
    out->m.rdma_rkey = ri.rkey;
    out->m.rdma_length = ri.length;
    out->m.layout_version = ri.layout_version;
    out->m.rdma_readable = 1;
}

static int code_for(int err)
{
    switch (err) {
    case -EINVAL:
    case -EFBIG:
        return MV_RPC_INVALID_ARGUMENT;
    case -ENOENT:
        return MV_RPC_NOT_FOUND;
    case -ENOSPC:
    case -EDQUOT:
    case -ENOMEM:
        return MV_RPC_RESOURCE_EXHAUSTED;
    default:
        return MV_RPC_INTERNAL;
    }
}

/* Who a new segment is handed to. */
typedef struct seg_owner {
    int64_t uid, gid;                /* -1: left as created (root) */
    const char *uid_from, *gid_from; /* "caller", "request" or "none", for the log */
    int has_caller;
    mv_rpc_peer caller;
} seg_owner;

/* Decides the owner of the segment a CreateSegment call makes: an owner named in the request
 * is honoured only from a root caller or when it is the caller's own uid (gid); an unnamed
 * one is the caller's, except that a root caller keeps root. A caller without credentials
 * (TCP) may name no owner and gets today's root:root. Returns 0, or -1 with the reply made
 * (PERMISSION_DENIED or INVALID_ARGUMENT, naming the field). */
static int owner_decide(mv_rpc_call *call, const Microview__V1__CreateSegmentRequest *r,
                        seg_owner *o)
{
    memset(o, 0, sizeof *o);
    o->uid = o->gid = -1;
    o->uid_from = o->gid_from = "none";
    o->has_caller = mv_rpc_call_peer(call, &o->caller) == 0;
    int root = o->has_caller && o->caller.uid == 0;
    const struct {
        const char *field, *what;
        const Microview__V1__UnixId *asked;
        uint32_t mine;
        int64_t *out;
        const char **from;
    } f[2] = {
        {"owner_uid", "uid", r->owner_uid, o->caller.uid, &o->uid, &o->uid_from},
        {"owner_gid", "gid", r->owner_gid, o->caller.gid, &o->gid, &o->gid_from},
    };
    char msg[320];
    for (int i = 0; i < 2; i++) {
        if (!f[i].asked) {
            if (o->has_caller && !root) {
                *f[i].out = f[i].mine;
                *f[i].from = "caller";
            }
            continue;
        }
        uint32_t want = f[i].asked->id;
        int code = MV_RPC_PERMISSION_DENIED;
        if (want == UINT32_MAX) {
            code = MV_RPC_INVALID_ARGUMENT;
            snprintf(msg, sizeof msg, "%s %u: not a valid %s", f[i].field, want, f[i].what);
        } else if (!o->has_caller) {
            snprintf(msg, sizeof msg,
                     "%s %u: the agent cannot tell who is calling (not on its unix socket) "
                     "and takes a named owner only from a caller it knows; call over the unix "
                     "socket",
                     f[i].field, want);
        } else if (!root && want != f[i].mine) {
            snprintf(msg, sizeof msg,
                     "%s %u: a caller running as uid %u gid %u may name only its own %s "
                     "(%u); only root may hand a segment to another %s",
                     f[i].field, want, o->caller.uid, o->caller.gid, f[i].what, f[i].mine,
                     i ? "group" : "user");
        } else {
            *f[i].out = want;
            *f[i].from = "request";
            continue;
        }
        /* caller_* -1: no credentials (a TCP caller) */
        MV_WARN("segment.create_refused",
                "field=%s requested=%u caller_uid=%lld caller_gid=%lld caller_pid=%lld err=%s",
                f[i].field, want, o->has_caller ? (long long)o->caller.uid : -1LL,
                o->has_caller ? (long long)o->caller.gid : -1LL,
                o->has_caller ? (long long)o->caller.pid : -1LL, mv_log_q(msg));
        mv_rpc_reply_error(call, code, msg);
        return -1;
    }
    return 0;
}

/* The token scope rule of the calls that change segments (see the header). Returns 0 when
 * `call` may go on, -1 after replying PERMISSION_DENIED. */
static int scope_check(mv_agentsvc *svc, mv_rpc_call *call, const char *method)
{
    if (!mv_rpc_call_remote(call))
        return 0;
    char msg[320];
    if (svc->tcp_create_refused && strcmp(method, "CreateSegment") == 0) {
        snprintf(msg, sizeof msg, "CreateSegment over TCP is refused: %s", svc->tcp_create_why);
    } else if (mv_rpc_call_scope(call) != MV_RPC_SCOPE_ADMIN) {
        snprintf(msg, sizeof msg,
                 "%s needs the admin scope: this caller presented the read token (--token-file: "
                 "ListSegments and WatchSegments only); present the admin token "
                 "(--admin-token-file) instead",
                 method);
    } else {
        return 0;
    }
    MV_WARN("rpc.permission_denied", "method=%s scope=%s err=%s", method,
            mv_rpc_call_scope(call) == MV_RPC_SCOPE_ADMIN ? "admin" : "read", mv_log_q(msg));
    mv_rpc_reply_error(call, MV_RPC_PERMISSION_DENIED, msg);
    return -1;
}

void mv_agentsvc_refuse_tcp_create(mv_agentsvc *svc, const char *why)
{
    svc->tcp_create_refused = 1;
    snprintf(svc->tcp_create_why, sizeof svc->tcp_create_why, "%s", why ? why : "");
}

static void on_create(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    mv_agentsvc *svc = arg;
    if (scope_check(svc, call, "CreateSegment") < 0)
        return;
    Microview__V1__CreateSegmentRequest *r = (Microview__V1__CreateSegmentRequest *)mv_rpc_unpack(
        &microview__v1__create_segment_request__descriptor, req, len, REQ_MAX);
    if (!r) {
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, "malformed CreateSegmentRequest");
        return;
    }
    if (r->n_labels > MV_SEGSTORE_LABELS_MAX) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu labels: at most %d are allowed", r->n_labels,
                 MV_SEGSTORE_LABELS_MAX);
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, msg);
        goto free_req;
    }
    char lerr[MV_ERR_MAX];
    if (mv_agentsvc_check_raw_labels(req, len, lerr, sizeof lerr) < 0) {
        MV_WARN("segment.create_refused", "err=%s", mv_log_q(lerr));
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, lerr);
        goto free_req;
    }
    seg_owner own;
    if (owner_decide(call, r, &own) < 0)
        goto free_req;
    mv_segstore_label labels[MV_SEGSTORE_LABELS_MAX];
    for (size_t i = 0; i < r->n_labels; i++) {
        labels[i].name = r->labels[i]->name;
        labels[i].value = r->labels[i]->value;
    }
    mv_segstore_seg seg;
    char err[MV_ERR_MAX];
    /* Quotas are charged to the caller's uid (root and TCP callers: none). */
    int rc = mv_segstore_create_for(svc->store, own.has_caller ? (int64_t)own.caller.uid : -1,
                                    r->size_bytes, r->owner_pid, labels, r->n_labels, &seg, err,
                                    sizeof err);
    if (rc < 0) {
        MV_WARN("segment.create_failed", "size=%llu owner_pid=%u err=%s",
                (unsigned long long)r->size_bytes, r->owner_pid, mv_log_q(err));
        mv_rpc_reply_error(call, code_for(rc), err);
        goto free_req;
    }
    rdma_hook h = hook_get(svc);
    if (h.fn && h.require) {
        mv_agentsvc_rdma_info ri;
        memset(&ri, 0, sizeof ri);
        if (h.fn(h.arg, &seg, 0, &ri) < 0 || !ri.readable) {
            char msg[320];
            snprintf(msg, sizeof msg, "segment not RDMA-readable and --require-rdma is set: %s",
                     ri.reason[0] ? ri.reason : "unknown reason");
            MV_WARN("segment.create_failed", "id=%s err=%s", seg.id, mv_log_q(msg));
            mv_segstore_release(svc->store, seg.id);
            mv_rpc_reply_error(call, MV_RPC_FAILED_PRECONDITION, msg);
            mv_segstore_seg_clear(&seg);
            goto free_req;
        }
    }
    if (own.uid >= 0 || own.gid >= 0) {
        /* The file is handed over before the reply: the caller can open it once it knows it. */
        rc = mv_segstore_set_owner(svc->store, seg.id, own.uid, own.gid, err, sizeof err);
        if (rc < 0) {
            char msg[MV_ERR_MAX + 96];
            snprintf(msg, sizeof msg, "cannot hand the segment to uid %lld gid %lld: %s",
                     (long long)own.uid, (long long)own.gid, err);
            MV_WARN("segment.create_failed", "id=%s err=%s", seg.id, mv_log_q(msg));
            mv_segstore_release(svc->store, seg.id);
            mv_rpc_reply_error(call, MV_RPC_INTERNAL, msg);
            mv_segstore_seg_clear(&seg);
            goto free_req;
        }
        MV_INFO("segment.handed_over",
                "id=%s uid=%lld uid_from=%s gid=%lld gid_from=%s caller_uid=%lld caller_gid=%lld "
                "caller_pid=%lld",
                seg.id, (long long)own.uid, own.uid_from, (long long)own.gid, own.gid_from,
                own.has_caller ? (long long)own.caller.uid : -1LL,
                own.has_caller ? (long long)own.caller.gid : -1LL,
                own.has_caller ? (long long)own.caller.pid : -1LL);
    }
    seg_msg m;
    seg_to_msg(&seg, &m);
    seg_rdma(svc, &seg, 0, &m);
    mv_rpc_reply_msg(call, &m.m.base);
    mv_segstore_seg_clear(&seg);
free_req:
    microview__v1__create_segment_request__free_unpacked(r, NULL);
}

/* Who may release a segment: root, or the uid that owns the segment's file now. The file's
 * owner rather than an owner recorded at create, because:
 *  - it is the one authority on whom the segment belongs to: whoever may write the segment may
 *    remove it. CreateSegment hands the file to its caller (or the owner root named), and root
 *    may hand a segment over later with chown (Kubernetes mode's set_owner does), with no second
 *    record that could disagree;
 *  - it stays the same across agent restarts with nothing added to catalog.json: the file and
 *    its owner outlive the agent (segments made before this rule existed are covered too);
 *  - a caller cannot forge it: only root (CAP_CHOWN) changes a file's owner, and the segment
 *    directory is root's, mode 0755, so a user cannot put another file in its place.
 * A file that cannot be examined (deleted under the agent) has no known owner: root only.
 * TCP callers are not identified: their token's scope is their rule (scope_check). */
int mv_agentsvc_may_release(const mv_rpc_peer *caller, const char *id, int64_t file_uid,
                            int file_errno, char *msg, size_t msglen)
{
    if (msglen)
        msg[0] = '\0';
    if (!caller || caller->uid == 0 || (file_uid >= 0 && (uint64_t)file_uid == caller->uid))
        return 1;
    if (file_uid < 0)
        snprintf(msg, msglen,
                 "segment %.40s: its file cannot be examined (%s), so its owner is unknown: only "
                 "root may release it",
                 id ? id : "", strerror(file_errno ? file_errno : EIO));
    else
        snprintf(msg, msglen,
                 "segment %.40s belongs to uid %lld (the owner of its file): a caller running as "
                 "uid %u may release only the segments whose file it owns; only root may release "
                 "another user's segment",
                 id ? id : "", (long long)file_uid, caller->uid);
    return 0;
}

static void on_release(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    mv_agentsvc *svc = arg;
    if (scope_check(svc, call, "ReleaseSegment") < 0)
        return;
    Microview__V1__ReleaseSegmentRequest *r = (Microview__V1__ReleaseSegmentRequest *)mv_rpc_unpack(
        &microview__v1__release_segment_request__descriptor, req, len, REQ_MAX);
    if (!r) {
        mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, "malformed ReleaseSegmentRequest");
        return;
    }
    mv_rpc_peer caller;
    int known = mv_rpc_call_peer(call, &caller) == 0;
    int64_t file_uid = -1;
    int file_errno = 0;
    int rc = 0;
    if (known && caller.uid != 0) {
        /* Checked, then released: the owner can change between the two only by root's chown,
         * and segment ids are random 64-bit numbers, never reused for another segment. */
        rc = mv_segstore_file_owner(svc->store, r->id, &file_uid, &file_errno);
        char msg[320];
        if (rc != -ENOENT &&
            !mv_agentsvc_may_release(&caller, r->id, file_uid, file_errno, msg, sizeof msg)) {
            MV_WARN("segment.release_refused",
                    "id=%s owner_uid=%lld caller_uid=%u caller_gid=%u caller_pid=%d err=%s",
                    mv_log_q(r->id ? r->id : ""), (long long)file_uid, caller.uid, caller.gid,
                    (int)caller.pid, mv_log_q(msg));
            mv_rpc_reply_error(call, MV_RPC_PERMISSION_DENIED, msg);
            goto free_req;
        }
    }
    rc = rc == -ENOENT ? rc : mv_segstore_release(svc->store, r->id);
    if (rc < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "no segment with id %.40s", r->id ? r->id : "");
        mv_rpc_reply_error(call, code_for(rc), msg);
    } else {
        Microview__V1__ReleaseSegmentResponse resp = MICROVIEW__V1__RELEASE_SEGMENT_RESPONSE__INIT;
        mv_rpc_reply_msg(call, &resp.base);
    }
free_req:
    microview__v1__release_segment_request__free_unpacked(r, NULL);
}

static void on_list(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)req;
    (void)len;
    mv_agentsvc *svc = arg;
    mv_segstore_seg *v;
    size_t n;
    uint64_t rev;
    if (mv_segstore_list(svc->store, &v, &n, &rev) < 0) {
        mv_rpc_reply_error(call, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    seg_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    Microview__V1__Segment **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!msgs || !ptrs) {
        mv_rpc_reply_error(call, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto free_all;
    }
    for (size_t i = 0; i < n; i++) {
        seg_to_msg(&v[i], &msgs[i]);
        seg_rdma(svc, &v[i], 0, &msgs[i]);
        ptrs[i] = &msgs[i].m;
    }
    Microview__V1__ListSegmentsResponse resp = MICROVIEW__V1__LIST_SEGMENTS_RESPONSE__INIT;
    resp.n_segments = n;
    resp.segments = ptrs;
    resp.revision = rev;
    mv_rpc_reply_msg(call, &resp.base);
free_all:
    free(ptrs);
    free(msgs);
    mv_segstore_segs_free(v, n);
}

/* ---- WatchSegments ------------------------------------------------------------ */

typedef struct watch {
    mv_agentsvc *svc;
    mv_rpc_stream *st;
    mv_segstore_sub *sub;
} watch;

/* Queues one event (type `type`, segment `seg` or none) on the watch's stream. */
static void watch_send(watch *w, Microview__V1__SegmentEvent__Type type, const mv_segstore_seg *seg,
                       int with_rdma, uint64_t revision)
{
    Microview__V1__SegmentEvent ev = MICROVIEW__V1__SEGMENT_EVENT__INIT;
    seg_msg m;
    ev.type = type;
    ev.revision = revision;
    if (seg) {
        seg_to_msg(seg, &m);
        if (with_rdma)
            seg_rdma(w->svc, seg, 1, &m);
        ev.segment = &m.m;
    }
    mv_rpc_stream_write_msg(w->st, &ev.base);
}

/* Runs with the store lock held: only queues the event. A CHANGED segment goes to
 * clients as REMOVED then ADDED (the wire protocol has no update event), so a
 * client rebuilds its view of it with the new labels and rdma fields. */
static void watch_event(void *arg, int event, const mv_segstore_seg *seg, uint64_t revision)
{
    watch *w = arg;
    switch (event) {
    case MV_SEGSTORE_ADDED:
        watch_send(w, MICROVIEW__V1__SEGMENT_EVENT__TYPE__ADDED, seg, 1, revision);
        break;
    case MV_SEGSTORE_REMOVED:
        watch_send(w, MICROVIEW__V1__SEGMENT_EVENT__TYPE__REMOVED, seg, 0, revision);
        break;
    case MV_SEGSTORE_CHANGED:
        watch_send(w, MICROVIEW__V1__SEGMENT_EVENT__TYPE__REMOVED, seg, 0, revision);
        watch_send(w, MICROVIEW__V1__SEGMENT_EVENT__TYPE__ADDED, seg, 1, revision);
        break;
    default:
        watch_send(w, MICROVIEW__V1__SEGMENT_EVENT__TYPE__SYNCED, NULL, 0, revision);
        break;
    }
}

static void on_watch(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    (void)req;
    (void)len;
    mv_agentsvc *svc = arg;
    watch *w = calloc(1, sizeof *w);
    if (!w) {
        mv_rpc_stream_end(st, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
        mv_rpc_stream_unref(st);
        return;
    }
    w->svc = svc;
    w->st = st; /* keeps the handler's reference until on_watch_close */
    mv_rpc_stream_set_user(st, w);
    if (mv_segstore_subscribe(svc->store, watch_event, w, &w->sub) < 0)
        mv_rpc_stream_end(st, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
    MV_DEBUG("watch.started", "subscribed=%d", w->sub != NULL);
}

static void on_watch_close(void *arg, mv_rpc_stream *st, int cancelled)
{
    mv_agentsvc *svc = arg;
    watch *w = mv_rpc_stream_user(st);
    if (!w)
        return;
    mv_segstore_unsubscribe(svc->store, w->sub);
    mv_rpc_stream_set_user(st, NULL);
    MV_DEBUG("watch.ended", "cancelled=%d", cancelled);
    free(w);
    mv_rpc_stream_unref(st);
}

int mv_agentsvc_attach(mv_rpc_server *srv, mv_agentsvc *svc)
{
    int rc;
    if ((rc = mv_rpc_server_add_unary(srv, MV_AGENTSVC_CREATE, on_create, svc)) < 0 ||
        (rc = mv_rpc_server_add_unary(srv, MV_AGENTSVC_RELEASE, on_release, svc)) < 0 ||
        (rc = mv_rpc_server_add_unary(srv, MV_AGENTSVC_LIST, on_list, svc)) < 0 ||
        (rc = mv_rpc_server_add_stream(srv, MV_AGENTSVC_WATCH, on_watch, on_watch_close, svc)) < 0)
        return rc;
    return 0;
}

int mv_agentsvc_register(mv_rpc_server *srv, mv_segstore *store, mv_agentsvc **out)
{
    int rc;
    *out = NULL;
    mv_agentsvc *svc = calloc(1, sizeof *svc);
    if (!svc)
        return -ENOMEM;
    svc->store = store;
    pthread_mutex_init(&svc->rdma_mu, NULL);
    if ((rc = mv_agentsvc_attach(srv, svc)) < 0) {
        pthread_mutex_destroy(&svc->rdma_mu);
        free(svc);
        return rc;
    }
    *out = svc;
    return 0;
}

void mv_agentsvc_set_rdma(mv_agentsvc *svc, mv_agentsvc_rdma_fn fn, void *arg, int require)
{
    pthread_mutex_lock(&svc->rdma_mu);
    svc->rdma_fn = fn;
    svc->rdma_arg = arg;
    svc->rdma_require = require;
    pthread_mutex_unlock(&svc->rdma_mu);
}

void mv_agentsvc_destroy(mv_agentsvc *svc)
{
    if (!svc)
        return;
    pthread_mutex_destroy(&svc->rdma_mu);
    free(svc);
}
