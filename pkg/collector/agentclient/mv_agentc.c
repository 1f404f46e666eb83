/* mv_agentc: microview.v1.Agent client over mv_rpc. */
#include "mv_agentc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "microview/v1/agent.pb-c.h"
#include "mv_labelsel.h"
#include "mv_rpc.h"
#include "mv_util.h"

#define M_CREATE  "/microview.v1.Agent/CreateSegment"
#define M_RELEASE "/microview.v1.Agent/ReleaseSegment"
#define M_LIST    "/microview.v1.Agent/ListSegments"
#define M_WATCH   "/microview.v1.Agent/WatchSegments"

#define REPLY_MAX  (64u << 20) /* a list of many segments */
#define WATCH_POLL 200         /* ms between checks of *stop */
#define LABELS_MAX 64          /* accepted per segment from the agent */

struct mv_agentc {
    mv_rpc_channel *ch;
    char *target;
    int timeout_ms;
    char err[MV_ERR_MAX];
};

/* The process's TLS settings for TCP targets (mv_agentc_set_tls). */
static pthread_mutex_t g_tls_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int on;
    char ca[4096], cert[4096], key[4096], name[256];
} g_tls;

int mv_agentc_set_tls(const mv_agentc_tls *t, char *err, size_t errlen)
{
    struct {
        const char *flag, *path;
    } files[] = {{"CA", t ? t->ca_file : NULL},
                 {"certificate", t ? t->cert_file : NULL},
                 {"key", t ? t->key_file : NULL}};
    if (!t || !t->ca_file) {
        mv_util_err_set(err, errlen, "TLS needs the CA that signed the agent's certificate");
        return -EINVAL;
    }
    if (!t->cert_file != !t->key_file) {
        mv_util_err_set(err, errlen,
                        "a client certificate needs its key, and a key its certificate");
        return -EINVAL;
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        FILE *f = files[i].path ? fopen(files[i].path, "re") : NULL;
        if (files[i].path && !f) {
            int e = errno;
            mv_util_err_set(err, errlen, "%s %s: %s", files[i].flag, files[i].path, strerror(e));
            return -e;
        }
        if (f)
            fclose(f);
        if (files[i].path && strlen(files[i].path) >= sizeof g_tls.ca) {
            mv_util_err_set(err, errlen, "%s %s: path too long", files[i].flag, files[i].path);
            return -ENAMETOOLONG;
        }
    }
    if (t->server_name && strlen(t->server_name) >= sizeof g_tls.name) {
        mv_util_err_set(err, errlen, "server name too long");
        return -ENAMETOOLONG;
    }
    pthread_mutex_lock(&g_tls_mu);
    g_tls.on = 1;
    snprintf(g_tls.ca, sizeof g_tls.ca, "%s", t->ca_file);
    snprintf(g_tls.cert, sizeof g_tls.cert, "%s", t->cert_file ? t->cert_file : "");
    snprintf(g_tls.key, sizeof g_tls.key, "%s", t->key_file ? t->key_file : "");
    snprintf(g_tls.name, sizeof g_tls.name, "%s", t->server_name ? t->server_name : "");
    pthread_mutex_unlock(&g_tls_mu);
    return 0;
}

static void set_err(mv_agentc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(mv_agentc *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
}

const char *mv_agentc_error(const mv_agentc *c)
{
    return c ? c->err : "no client";
}

int mv_agentc_open(const char *target, mv_agentc **out)
{
    *out = NULL;
    if (!target || !*target)
        target = MV_AGENTC_DEFAULT_TARGET;
    mv_agentc *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    size_t n = strlen(target) + 6;
    c->target = malloc(n);
    if (!c->target)
        goto free_c;
    snprintf(c->target, n, "%s%s", target[0] == '/' ? "unix:" : "", target);
    c->timeout_ms = 5000;
    int rc;
    pthread_mutex_lock(&g_tls_mu);
    if (g_tls.on && strncmp(c->target, "unix:", 5) != 0) {
        mv_rpc_tls_client_opts o = {.ca_file = g_tls.ca,
                                    .cert_file = g_tls.cert[0] ? g_tls.cert : NULL,
                                    .key_file = g_tls.key[0] ? g_tls.key : NULL,
                                    .server_name = g_tls.name[0] ? g_tls.name : NULL};
        char err[MV_ERR_MAX];
        rc = mv_rpc_channel_open_tls(c->target, REPLY_MAX, &o, &c->ch, err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "agent client: TLS to %s: %s\n", c->target, err);
    } else {
        rc = mv_rpc_channel_open(c->target, REPLY_MAX, &c->ch);
    }
    pthread_mutex_unlock(&g_tls_mu);
    if (rc < 0) {
        free(c->target);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
free_c:
    free(c);
    return -ENOMEM;
}

void mv_agentc_close(mv_agentc *c)
{
    if (!c)
        return;
    mv_rpc_channel_close(c->ch);
    free(c->target);
    free(c);
}

int mv_agentc_set_token(mv_agentc *c, const char *token)
{
    return mv_rpc_channel_set_token(c->ch, token);
}

/* Maps a gRPC status to an errno and records a message. */
static int status_err(mv_agentc *c, const char *what, const mv_rpc_status *st)
{
    switch (st->code) {
    case MV_RPC_UNAVAILABLE:
        if (strncmp(c->target, "unix:", 5) != 0)
            set_err(c,
                    "agent not reachable at %s: is microview-agent running, and do TLS "
                    "(--agent-ca, --agent-cert/--agent-key) and plaintext match its listener? "
                    "(%s)",
                    c->target, st->message);
        else
            set_err(c, "agent not reachable at %s: is microview-agent running? (%s)", c->target,
                    st->message);
        return -ECONNREFUSED;
    case MV_RPC_INVALID_ARGUMENT:
    case MV_RPC_OUT_OF_RANGE:
        set_err(c, "%s rejected by the agent: %s", what, st->message);
        return -EINVAL;
    case MV_RPC_NOT_FOUND:
        set_err(c, "%s: %s", what, st->message);
        return -ENOENT;
    case MV_RPC_RESOURCE_EXHAUSTED:
        set_err(c, "%s: agent out of resources: %s", what, st->message);
        return -ENOSPC;
    case MV_RPC_DEADLINE_EXCEEDED:
        set_err(c, "%s: no answer from the agent at %s in time", what, c->target);
        return -ETIMEDOUT;
    case MV_RPC_UNAUTHENTICATED:
    case MV_RPC_PERMISSION_DENIED:
        set_err(c, "%s refused by the agent at %s: %s", what, c->target, st->message);
        return -EACCES;
    case MV_RPC_UNIMPLEMENTED:
        set_err(c, "%s: the agent at %s does not implement it (version mismatch?)", what,
                c->target);
        return -EPROTO;
    default:
        set_err(c, "%s failed: %s: %s", what, mv_rpc_code_name(st->code), st->message);
        return -EIO;
    }
}

static int call(mv_agentc *c, const char *method, const char *what, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *rd, ProtobufCMessage **resp)
{
    mv_rpc_buf in, out = {0};
    mv_rpc_status st;
    c->err[0] = 0;
    if (mv_rpc_pack(req, &in) < 0) {
        set_err(c, "%s: out of memory", what);
        return -ENOMEM;
    }
    int rc = mv_rpc_unary(c->ch, method, in.data, in.len, c->timeout_ms, &out, &st);
    mv_rpc_buf_free(&in);
    if (rc < 0) {
        set_err(c, "%s: local error %d", what, rc);
        return rc;
    }
    if (rc != MV_RPC_OK)
        return status_err(c, what, &st);
    *resp = mv_rpc_unpack(rd, out.data, out.len, REPLY_MAX);
    mv_rpc_buf_free(&out);
    if (!*resp) {
        set_err(c, "%s: malformed reply from the agent", what);
        return -EPROTO;
    }
    return 0;
}

void mv_agentc_segment_clear(mv_agentc_segment *s)
{
    if (!s)
        return;
    free(s->id);
    free(s->path);
    for (size_t i = 0; i < s->nlabels; i++) {
        free(s->labels[i].name);
        free(s->labels[i].value);
    }
    free(s->labels);
    for (size_t i = 0; i < s->npod_labels; i++) {
        free(s->pod_labels[i].name);
        free(s->pod_labels[i].value);
    }
    free(s->pod_labels);
    memset(s, 0, sizeof *s);
}

void mv_agentc_segments_free(mv_agentc_segment *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        mv_agentc_segment_clear(&v[i]);
    free(v);
}

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

static int from_msg(const Microview__V1__Segment *m, uint64_t revision, mv_agentc_segment *out)
{
    memset(out, 0, sizeof *out);
    if (m->n_labels > LABELS_MAX || m->n_pod_labels > MV_AGENTC_POD_LABELS_MAX)
        return -EPROTO;
    out->id = dup_or_empty(m->id);
    out->path = dup_or_empty(m->path);
    out->size = m->size_bytes;
    out->owner_pid = m->owner_pid;
    out->created_ns = m->created_unix_ns;
    out->revision = revision;
    out->rdma_addr = m->rdma_addr;
    out->rdma_rkey = m->rdma_rkey;
    out->rdma_length = m->rdma_length;
    out->layout_version = m->layout_version;
    out->rdma_readable = m->rdma_readable ? 1 : 0;
    if (!out->id || !out->path)
        goto nomem;
    if (m->n_labels) {
        out->labels = calloc(m->n_labels, sizeof *out->labels);
        if (!out->labels)
            goto nomem;
    }
    for (size_t i = 0; i < m->n_labels; i++) {
        out->nlabels++;
        out->labels[i].name = dup_or_empty(m->labels[i]->name);
        out->labels[i].value = dup_or_empty(m->labels[i]->value);
        if (!out->labels[i].name || !out->labels[i].value)
            goto nomem;
    }
    if (m->n_pod_labels) {
        out->pod_labels = calloc(m->n_pod_labels, sizeof *out->pod_labels);
        if (!out->pod_labels)
            goto nomem;
    }
    for (size_t i = 0; i < m->n_pod_labels; i++) {
        const char *k = m->pod_labels[i]->name ? m->pod_labels[i]->name : "";
        const char *v = m->pod_labels[i]->value ? m->pod_labels[i]->value : "";
        if (mv_lsel_check_key(k, strlen(k)) || mv_lsel_check_value(v, strlen(v)))
            continue; /* the agent checks them; a selector must never see a bad one */
        mv_agentc_label *l = &out->pod_labels[out->npod_labels++];
        l->name = strdup(k);
        l->value = strdup(v);
        if (!l->name || !l->value)
            goto nomem;
    }
    return 0;
nomem:
    mv_agentc_segment_clear(out);
    return -ENOMEM;
}

int mv_agentc_create(mv_agentc *c, uint64_t size, uint32_t owner_pid, const char *const *label_kv,
                     size_t nlabels, mv_agentc_segment *out)
{
    return mv_agentc_create_owned(c, size, owner_pid, label_kv, nlabels, NULL, out);
}

int mv_agentc_create_owned(mv_agentc *c, uint64_t size, uint32_t owner_pid,
                           const char *const *label_kv, size_t nlabels,
                           const mv_agentc_owner *owner, mv_agentc_segment *out)
{
    Microview__V1__UnixId uid = MICROVIEW__V1__UNIX_ID__INIT, gid = MICROVIEW__V1__UNIX_ID__INIT;
    if (owner && (owner->uid > (int64_t)UINT32_MAX - 1 || owner->gid > (int64_t)UINT32_MAX - 1)) {
        set_err(c, "create: owner uid/gid out of range");
        return -EINVAL;
    }
    if (nlabels > LABELS_MAX || (nlabels && !label_kv)) {
        set_err(c, "create: at most %d labels", LABELS_MAX);
        return -EINVAL;
    }
    Microview__V1__Label lab[LABELS_MAX], *labp[LABELS_MAX];
    for (size_t i = 0; i < nlabels; i++) {
        microview__v1__label__init(&lab[i]);
        lab[i].name = (char *)label_kv[2 * i];
        lab[i].value = (char *)label_kv[2 * i + 1];
        if (!lab[i].name || !lab[i].value) {
            set_err(c, "create: label %zu has a NULL name or value", i);
            return -EINVAL;
        }
        labp[i] = &lab[i];
    }
    Microview__V1__CreateSegmentRequest req = MICROVIEW__V1__CREATE_SEGMENT_REQUEST__INIT;
    req.size_bytes = size;
    req.owner_pid = owner_pid;
    req.n_labels = nlabels;
    req.labels = nlabels ? labp : NULL;
    if (owner && owner->uid >= 0) {
        uid.id = (uint32_t)owner->uid;
        req.owner_uid = &uid;
    }
    if (owner && owner->gid >= 0) {
        gid.id = (uint32_t)owner->gid;
        req.owner_gid = &gid;
    }
    ProtobufCMessage *resp;
    int rc =
        call(c, M_CREATE, "create segment", &req.base, &microview__v1__segment__descriptor, &resp);
    if (rc < 0)
        return rc;
    if (out) {
        rc = from_msg((Microview__V1__Segment *)resp, 0, out);
        if (rc < 0)
            set_err(c, "create segment: cannot decode the reply");
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

int mv_agentc_release(mv_agentc *c, const char *id)
{
    Microview__V1__ReleaseSegmentRequest req = MICROVIEW__V1__RELEASE_SEGMENT_REQUEST__INIT;
    req.id = (char *)(id ? id : "");
    ProtobufCMessage *resp;
    int rc = call(c, M_RELEASE, "release segment", &req.base,
                  &microview__v1__release_segment_response__descriptor, &resp);
    if (rc == 0)
        protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

int mv_agentc_list(mv_agentc *c, mv_agentc_segment **out, size_t *n, uint64_t *revision)
{
    *out = NULL;
    *n = 0;
    Microview__V1__ListSegmentsRequest req = MICROVIEW__V1__LIST_SEGMENTS_REQUEST__INIT;
    ProtobufCMessage *resp;
    int rc = call(c, M_LIST, "list segments", &req.base,
                  &microview__v1__list_segments_response__descriptor, &resp);
    if (rc < 0)
        return rc;
    Microview__V1__ListSegmentsResponse *r = (Microview__V1__ListSegmentsResponse *)resp;
    mv_agentc_segment *v = calloc(r->n_segments ? r->n_segments : 1, sizeof *v);
    if (!v) {
        rc = -ENOMEM;
        goto free_resp;
    }
    for (size_t i = 0; i < r->n_segments; i++) {
        rc = from_msg(r->segments[i], r->revision, &v[i]);
        if (rc < 0) {
            set_err(c, "list segments: cannot decode segment %zu", i);
            mv_agentc_segments_free(v, i);
            goto free_resp;
        }
    }
    *out = v;
    *n = r->n_segments;
    if (revision)
        *revision = r->revision;
free_resp:
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

static int watch(mv_agentc *c, void (*cb)(void *arg, int event, const mv_agentc_segment *s),
                 void *arg, const volatile int *stop, int idle)
{
    Microview__V1__WatchSegmentsRequest req = MICROVIEW__V1__WATCH_SEGMENTS_REQUEST__INIT;
    mv_rpc_buf in, msg;
    mv_rpc_status st;
    mv_rpc_cstream *cs;
    c->err[0] = 0;
    if (mv_rpc_pack(&req.base, &in) < 0)
        return -ENOMEM;
    int rc = mv_rpc_cstream_open(c->ch, M_WATCH, in.data, in.len, 0, &cs);
    mv_rpc_buf_free(&in);
    if (rc < 0) {
        set_err(c, "watch: cannot start the call (%d)", rc);
        return rc;
    }
    for (;;) {
        if (stop && *stop) {
            rc = 0;
            break;
        }
        rc = mv_rpc_cstream_next(cs, WATCH_POLL, &msg, &st);
        if (rc == -ETIMEDOUT) {
            if (idle)
                cb(arg, MV_AGENTC_IDLE, NULL);
            continue;
        }
        if (rc == 0) {
            if (stop && *stop)
                break;
            rc = st.code == MV_RPC_OK ? -EPIPE : status_err(c, "watch", &st);
            if (st.code == MV_RPC_OK)
                set_err(c, "watch: the agent ended the stream");
            break;
        }
        if (rc < 0) {
            set_err(c, "watch: receive failed (%d)", rc);
            break;
        }
        Microview__V1__SegmentEvent *ev = (Microview__V1__SegmentEvent *)mv_rpc_unpack(
            &microview__v1__segment_event__descriptor, msg.data, msg.len, REPLY_MAX);
        mv_rpc_buf_free(&msg);
        if (!ev) {
            set_err(c, "watch: malformed event from the agent");
            rc = -EPROTO;
            break;
        }
        mv_agentc_segment seg;
        memset(&seg, 0, sizeof seg);
        seg.revision = ev->revision;
        int type = 0;
        switch (ev->type) {
        case MICROVIEW__V1__SEGMENT_EVENT__TYPE__ADDED:
            type = MV_AGENTC_ADDED;
            break;
        case MICROVIEW__V1__SEGMENT_EVENT__TYPE__REMOVED:
            type = MV_AGENTC_REMOVED;
            break;
        case MICROVIEW__V1__SEGMENT_EVENT__TYPE__SYNCED:
            type = MV_AGENTC_SYNCED;
            break;
        default:
            break;
        }
        rc = 0;
        if (type && type != MV_AGENTC_SYNCED) {
            if (!ev->segment)
                rc = -EPROTO;
            else
                rc = from_msg(ev->segment, ev->revision, &seg);
        }
        if (rc == 0 && type)
            cb(arg, type, &seg);
        mv_agentc_segment_clear(&seg);
        microview__v1__segment_event__free_unpacked(ev, NULL);
        if (rc < 0) {
            set_err(c, "watch: bad segment in an event");
            break;
        }
    }
    mv_rpc_cstream_close(cs);
    return rc;
}

int mv_agentc_watch(mv_agentc *c, void (*cb)(void *arg, int event, const mv_agentc_segment *s),
                    void *arg, const volatile int *stop)
{
    return watch(c, cb, arg, stop, 0);
}

int mv_agentc_watch_idle(mv_agentc *c, void (*cb)(void *arg, int event, const mv_agentc_segment *s),
                         void *arg, const volatile int *stop)
{
    return watch(c, cb, arg, stop, 1);
}
