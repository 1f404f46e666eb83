/* mv_rpc: gRPC core server/client wrapper (see mv_rpc.h for the threading model). */
#include "mv_rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "mv_log.h"

#define DEFAULT_MAX_RECV    (4u << 20)
#define DEFAULT_QUEUE_CAP   1024u
#define REQUESTS_PER_METHOD 4

/* ---- Generic helpers ---------------------------------------------------------- */

const char *mv_rpc_code_name(int code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code < 0 || code >= (int)(sizeof names / sizeof names[0]))
        return "INVALID_CODE";
    return names[code];
}

void mv_rpc_buf_free(mv_rpc_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

int mv_rpc_pack(const ProtobufCMessage *m, mv_rpc_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    out->data = malloc(n ? n : 1);
    out->len = 0;
    if (!out->data)
        return -ENOMEM;
    out->len = protobuf_c_message_pack(m, out->data);
    return 0;
}

ProtobufCMessage *mv_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *buf, size_t len,
                                size_t cap)
{
    if (!cap)
        cap = DEFAULT_MAX_RECV;
    if (len > cap || (len && !buf))
        return NULL;
    return protobuf_c_message_unpack(d, NULL, len, buf);
}

static grpc_byte_buffer *bb_from(const void *buf, size_t len)
{
    grpc_slice s = grpc_slice_malloc(len);
    if (len)
        memcpy(GRPC_SLICE_START_PTR(s), buf, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Copies a received buffer into malloc'd memory. Returns 0 or -ENOMEM/-EPROTO. */
static int bb_read(grpc_byte_buffer *bb, mv_rpc_buf *out)
{
    grpc_byte_buffer_reader r;
    out->data = NULL;
    out->len = 0;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return -EPROTO;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    size_t n = GRPC_SLICE_LENGTH(s);
    out->data = malloc(n ? n : 1);
    if (!out->data) {
        grpc_slice_unref(s);
        return -ENOMEM;
    }
    memcpy(out->data, GRPC_SLICE_START_PTR(s), n);
    out->len = n;
    grpc_slice_unref(s);
    return 0;
}

static gpr_timespec deadline_ms(int ms)
{
    if (ms <= 0)
        return gpr_inf_future(GPR_CLOCK_REALTIME);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static grpc_channel_args *size_args(grpc_arg *a, grpc_channel_args *args, size_t max_recv)
{
    a[0].type = GRPC_ARG_INTEGER;
    a[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    a[0].value.integer = (int)max_recv;
    args->num_args = 1;
    args->args = a;
    return args;
}

/* ---- Server types ------------------------------------------------------------- */

enum tag_kind {
    TAG_NEW_CALL,    /* a registered-method request slot fired */
    TAG_NEW_GENERIC, /* an unknown-method request slot fired */
    TAG_GENERIC_DONE,
    TAG_UNARY_DONE,
    TAG_STREAM_CLOSE,
    TAG_STREAM_SEND,
    TAG_SHUTDOWN,
};

typedef struct tag {
    enum tag_kind kind;
    void *ctx;
} tag;

typedef struct rpc_method {
    struct mv_rpc_server *srv;
    char *path;
    void *handle; /* from grpc_server_register_method */
    int streaming;
    mv_rpc_unary_fn unary;
    mv_rpc_stream_fn stream;
    mv_rpc_close_fn on_close;
    void *arg;
    struct rpc_method *next;
} rpc_method;

/* One posted request for a registered method. */
typedef struct slot {
    tag t;
    rpc_method *m;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
} slot;

/* One posted request for unknown methods. */
typedef struct generic_slot {
    tag t, done;
    struct mv_rpc_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    int cancelled;
} generic_slot;

struct mv_rpc_call {
    tag done;
    struct mv_rpc_server *srv;
    grpc_call *call;
    grpc_metadata_array md;
    grpc_byte_buffer *send;
    int cancelled;
    atomic_int replied;
    struct mv_rpc_call *prev, *next; /* srv->calls: not yet replied */
};

typedef struct qmsg {
    grpc_byte_buffer *bb;
    struct qmsg *next;
} qmsg;

struct mv_rpc_stream {
    tag close_tag, send_tag;
    struct mv_rpc_server *srv;
    rpc_method *m;
    pthread_mutex_t mu;
    atomic_int refs; /* handler's ref + the server's ref */
    grpc_call *call; /* NULL once finished */
    grpc_metadata_array md;
    qmsg *head, *tail;
    size_t qlen, qcap;
    grpc_byte_buffer *inflight_bb;
    int send_inflight;
    int md_sent;
    int closed; /* RECV_CLOSE_ON_SERVER completed */
    int ending; /* a status is queued or sent */
    int status_sent;
    int status_code;
    char *status_msg;
    int cancelled;
    void *user;
};

struct mv_rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    int started;
    atomic_int shutting_down;
    size_t max_recv;
    size_t queue_cap;
    rpc_method *methods;
    pthread_mutex_t calls_mu;
    struct mv_rpc_call *calls;
    tag shutdown_tag;
    char *token; /* when set, non-unix-socket callers must present it */
};

/* ---- Server: posting requests ------------------------------------------------- */

static void post_slot(mv_rpc_server *s, slot *sl)
{
    if (atomic_load(&s->shutting_down))
        goto free_slot;
    sl->call = NULL;
    sl->payload = NULL;
    grpc_metadata_array_init(&sl->md);
    grpc_call_error e =
        grpc_server_request_registered_call(s->server, sl->m->handle, &sl->call, &sl->deadline,
                                            &sl->md, &sl->payload, s->cq, s->cq, &sl->t);
    if (e == GRPC_CALL_OK)
        return;
    MV_WARN("rpc.request_failed", "method=%s err=%d", mv_log_q(sl->m->path), (int)e);
    grpc_metadata_array_destroy(&sl->md);
free_slot:
    free(sl);
}

static void new_slot(mv_rpc_server *s, rpc_method *m)
{
    slot *sl = calloc(1, sizeof *sl);
    if (!sl) {
        MV_ERROR("rpc.oom", "what=request_slot");
        return;
    }
    sl->t.kind = TAG_NEW_CALL;
    sl->t.ctx = sl;
    sl->m = m;
    post_slot(s, sl);
}

static void post_generic(mv_rpc_server *s)
{
    if (atomic_load(&s->shutting_down))
        return;
    generic_slot *g = calloc(1, sizeof *g);
    if (!g) {
        MV_ERROR("rpc.oom", "what=generic_slot");
        return;
    }
    g->t.kind = TAG_NEW_GENERIC;
    g->t.ctx = g;
    g->done.kind = TAG_GENERIC_DONE;
    g->done.ctx = g;
    g->srv = s;
    grpc_call_details_init(&g->details);
    grpc_metadata_array_init(&g->md);
    if (grpc_server_request_call(s->server, &g->call, &g->details, &g->md, s->cq, s->cq, &g->t) ==
        GRPC_CALL_OK)
        return;
    grpc_call_details_destroy(&g->details);
    grpc_metadata_array_destroy(&g->md);
    free(g);
}

static void generic_free(generic_slot *g)
{
    grpc_call_details_destroy(&g->details);
    grpc_metadata_array_destroy(&g->md);
    if (g->call)
        grpc_call_unref(g->call);
    free(g);
}

/* An unknown method: answer UNIMPLEMENTED without reading the request. */
static void on_generic(mv_rpc_server *s, generic_slot *g, int ok)
{
    if (!ok) {
        generic_free(g);
        return;
    }
    post_generic(s);
    char *path = grpc_slice_to_c_string(g->details.method);
    MV_DEBUG("rpc.unimplemented", "method=%s", mv_log_q(path));
    char msg[300];
    snprintf(msg, sizeof msg, "unknown method %s", path);
    gpr_free(path);
    grpc_slice details = grpc_slice_from_copied_string(msg);
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
    ops[1].data.send_status_from_server.status_details = &details;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &g->cancelled;
    grpc_call_error e = grpc_call_start_batch(g->call, ops, 3, &g->done, NULL);
    grpc_slice_unref(details);
    if (e != GRPC_CALL_OK)
        generic_free(g);
}

/* ---- Server: unary calls ------------------------------------------------------ */

static void unary_free(mv_rpc_call *c)
{
    grpc_metadata_array_destroy(&c->md);
    if (c->send)
        grpc_byte_buffer_destroy(c->send);
    grpc_call_unref(c->call);
    free(c);
}

static void calls_unlink(mv_rpc_server *s, mv_rpc_call *c)
{
    pthread_mutex_lock(&s->calls_mu);
    if (c->prev)
        c->prev->next = c->next;
    else if (s->calls == c)
        s->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    pthread_mutex_unlock(&s->calls_mu);
}

static int reply_common(mv_rpc_call *c, int code, const char *message, const void *buf, size_t len)
{
    if (!c)
        return -EINVAL;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&c->replied, &expected, 1))
        return -EALREADY;
    calls_unlink(c->srv, c);
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (code == MV_RPC_OK) {
        c->send = bb_from(buf, len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->send;
    }
    grpc_slice details = grpc_slice_from_copied_string(message ? message : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    ops[n++].data.send_status_from_server.status_details = &details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->done, NULL);
    grpc_slice_unref(details);
    if (e != GRPC_CALL_OK) {
        MV_WARN("rpc.reply_failed", "err=%d", (int)e);
        unary_free(c);
        return -EIO;
    }
    return 0;
}

int mv_rpc_reply(mv_rpc_call *call, const void *buf, size_t len)
{
    return reply_common(call, MV_RPC_OK, NULL, buf, len);
}

int mv_rpc_reply_msg(mv_rpc_call *call, const ProtobufCMessage *m)
{
    mv_rpc_buf b;
    if (mv_rpc_pack(m, &b) < 0)
        return reply_common(call, MV_RPC_INTERNAL, "out of memory", NULL, 0);
    int rc = reply_common(call, MV_RPC_OK, NULL, b.data, b.len);
    mv_rpc_buf_free(&b);
    return rc;
}

int mv_rpc_reply_error(mv_rpc_call *call, int code, const char *message)
{
    if (code == MV_RPC_OK)
        code = MV_RPC_UNKNOWN;
    return reply_common(call, code, message, NULL, 0);
}

/* ---- Server: streams ---------------------------------------------------------- */

void mv_rpc_stream_ref(mv_rpc_stream *st)
{
    atomic_fetch_add(&st->refs, 1);
}

static void queue_drop(mv_rpc_stream *st)
{
    while (st->head) {
        qmsg *q = st->head;
        st->head = q->next;
        grpc_byte_buffer_destroy(q->bb);
        free(q);
    }
    st->tail = NULL;
    st->qlen = 0;
}

void mv_rpc_stream_unref(mv_rpc_stream *st)
{
    if (!st || atomic_fetch_sub(&st->refs, 1) != 1)
        return;
    queue_drop(st);
    free(st->status_msg);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

void mv_rpc_stream_set_user(mv_rpc_stream *st, void *user)
{
    st->user = user;
}

void *mv_rpc_stream_user(const mv_rpc_stream *st)
{
    return st->user;
}

/* Starts the next send if none is in flight. Caller holds st->mu. */
static void stream_kick(mv_rpc_stream *st)
{
    if (st->send_inflight || st->closed || !st->call || st->status_sent)
        return;
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!st->md_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    grpc_slice details = grpc_empty_slice();
    if (st->head) {
        qmsg *q = st->head;
        st->head = q->next;
        if (!st->head)
            st->tail = NULL;
        st->qlen--;
        st->inflight_bb = q->bb;
        free(q);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = st->inflight_bb;
    } else if (st->ending) {
        details = grpc_slice_from_copied_string(st->status_msg ? st->status_msg : "");
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = (grpc_status_code)st->status_code;
        ops[n++].data.send_status_from_server.status_details = &details;
        st->status_sent = 1;
    } else {
        return;
    }
    grpc_call_error e = grpc_call_start_batch(st->call, ops, n, &st->send_tag, NULL);
    grpc_slice_unref(details);
    if (e != GRPC_CALL_OK) {
        MV_WARN("rpc.stream_send_failed", "method=%s err=%d", mv_log_q(st->m->path), (int)e);
        if (st->inflight_bb) {
            grpc_byte_buffer_destroy(st->inflight_bb);
            st->inflight_bb = NULL;
        }
        return;
    }
    st->md_sent = 1;
    st->send_inflight = 1;
}

/* Releases the gRPC call once nothing is outstanding. Caller holds st->mu.
 * Returns nonzero if the server's reference should now be dropped. */
static int stream_maybe_finish(mv_rpc_stream *st)
{
    if (!st->call || !st->closed || st->send_inflight)
        return 0;
    queue_drop(st);
    grpc_metadata_array_destroy(&st->md);
    grpc_call_unref(st->call);
    st->call = NULL;
    return 1;
}

static int stream_queue(mv_rpc_stream *st, grpc_byte_buffer *bb)
{
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    if (st->closed || st->ending || !st->call) {
        rc = -EPIPE;
        goto out;
    }
    if (st->qlen >= st->qcap) {
        queue_drop(st);
        st->ending = 1;
        st->status_code = MV_RPC_RESOURCE_EXHAUSTED;
        st->status_msg = strdup("stream queue overflow: the client is too slow, resync");
        MV_WARN("rpc.stream_overflow", "method=%s cap=%zu", mv_log_q(st->m->path), st->qcap);
        stream_kick(st);
        rc = -ENOBUFS;
        goto out;
    }
    qmsg *q = malloc(sizeof *q);
    if (!q) {
        rc = -ENOMEM;
        goto out;
    }
    q->bb = bb;
    bb = NULL;
    q->next = NULL;
    if (st->tail)
        st->tail->next = q;
    else
        st->head = q;
    st->tail = q;
    st->qlen++;
    stream_kick(st);
out:
    pthread_mutex_unlock(&st->mu);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    return rc;
}

int mv_rpc_stream_write(mv_rpc_stream *st, const void *buf, size_t len)
{
    if (!st)
        return -EINVAL;
    return stream_queue(st, bb_from(buf, len));
}

int mv_rpc_stream_write_msg(mv_rpc_stream *st, const ProtobufCMessage *m)
{
    mv_rpc_buf b;
    if (mv_rpc_pack(m, &b) < 0)
        return -ENOMEM;
    int rc = mv_rpc_stream_write(st, b.data, b.len);
    mv_rpc_buf_free(&b);
    return rc;
}

int mv_rpc_stream_end(mv_rpc_stream *st, int code, const char *message)
{
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    if (st->closed || st->ending || !st->call) {
        rc = -EPIPE;
    } else {
        st->ending = 1;
        st->status_code = code;
        st->status_msg = strdup(message ? message : "");
        stream_kick(st);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static void stream_start(mv_rpc_server *s, slot *sl)
{
    mv_rpc_stream *st = calloc(1, sizeof *st);
    if (!st)
        goto fail;
    st->close_tag.kind = TAG_STREAM_CLOSE;
    st->close_tag.ctx = st;
    st->send_tag.kind = TAG_STREAM_SEND;
    st->send_tag.ctx = st;
    st->srv = s;
    st->m = sl->m;
    st->call = sl->call;
    st->md = sl->md;
    st->qcap = s->queue_cap;
    atomic_init(&st->refs, 2);
    pthread_mutex_init(&st->mu, NULL);

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &st->cancelled;
    if (grpc_call_start_batch(st->call, &op, 1, &st->close_tag, NULL) != GRPC_CALL_OK) {
        pthread_mutex_destroy(&st->mu);
        free(st);
        goto fail;
    }
    mv_rpc_buf req = {0};
    if (sl->payload)
        bb_read(sl->payload, &req);
    sl->m->stream(sl->m->arg, st, req.data, req.len);
    mv_rpc_buf_free(&req);
    return;
fail:
    MV_ERROR("rpc.stream_start_failed", "method=%s", mv_log_q(sl->m->path));
    grpc_metadata_array_destroy(&sl->md);
    grpc_call_cancel(sl->call, NULL);
    grpc_call_unref(sl->call);
}

static void on_stream_close(mv_rpc_stream *st)
{
    pthread_mutex_lock(&st->mu);
    st->closed = 1;
    queue_drop(st);
    int cancelled = st->cancelled;
    pthread_mutex_unlock(&st->mu);
    if (st->m->on_close)
        st->m->on_close(st->m->arg, st, cancelled);
    pthread_mutex_lock(&st->mu);
    int fin = stream_maybe_finish(st);
    pthread_mutex_unlock(&st->mu);
    if (fin)
        mv_rpc_stream_unref(st);
}

static void on_stream_send(mv_rpc_stream *st, int ok)
{
    pthread_mutex_lock(&st->mu);
    st->send_inflight = 0;
    if (st->inflight_bb) {
        grpc_byte_buffer_destroy(st->inflight_bb);
        st->inflight_bb = NULL;
    }
    if (ok)
        stream_kick(st);
    int fin = stream_maybe_finish(st);
    pthread_mutex_unlock(&st->mu);
    if (fin)
        mv_rpc_stream_unref(st);
}

/* ---- Server: dispatch ----------------------------------------------------------- */

/* Compares without an early exit, so timing does not reveal the matching prefix. */
static int bytes_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char d = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* Whether a new call may proceed: callers over a unix socket are trusted (file
 * permissions decide who reaches it); others need "authorization: Bearer <token>". */
static int call_authorized(const mv_rpc_server *s, grpc_call *call, const grpc_metadata_array *md)
{
    if (!s->token)
        return 1;
    char *peer = grpc_call_get_peer(call);
    int local = peer && strncmp(peer, "unix:", 5) == 0;
    gpr_free(peer);
    if (local)
        return 1;
    static const char prefix[] = "Bearer ";
    size_t plen = sizeof prefix - 1, tlen = strlen(s->token);
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        size_t klen = GRPC_SLICE_LENGTH(m->key), vlen = GRPC_SLICE_LENGTH(m->value);
        const char *k = (const char *)GRPC_SLICE_START_PTR(m->key);
        const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
        if (klen != 13 || memcmp(k, "authorization", 13) != 0)
            continue;
        if (vlen < plen || memcmp(v, prefix, plen) != 0)
            return 0;
        return bytes_equal(v + plen, vlen - plen, s->token, tlen);
    }
    return 0;
}

static void on_new_call(mv_rpc_server *s, slot *sl, int ok)
{
    if (!ok) { /* shutting down */
        grpc_metadata_array_destroy(&sl->md);
        if (sl->payload)
            grpc_byte_buffer_destroy(sl->payload);
        if (sl->call)
            grpc_call_unref(sl->call);
        free(sl);
        return;
    }
    rpc_method *m = sl->m;
    int authorized = call_authorized(s, sl->call, &sl->md);
    if (!authorized) {
        char *peer = grpc_call_get_peer(sl->call);
        MV_WARN("rpc.unauthenticated", "method=%s peer=%s", mv_log_q(m->path),
                mv_log_q(peer ? peer : "?"));
        gpr_free(peer);
    }
    if (authorized && m->streaming) {
        stream_start(s, sl);
    } else {
        mv_rpc_call *c = calloc(1, sizeof *c);
        if (!c) {
            MV_ERROR("rpc.oom", "what=call");
            grpc_metadata_array_destroy(&sl->md);
            grpc_call_cancel(sl->call, NULL);
            grpc_call_unref(sl->call);
        } else {
            c->done.kind = TAG_UNARY_DONE;
            c->done.ctx = c;
            c->srv = s;
            c->call = sl->call;
            c->md = sl->md;
            pthread_mutex_lock(&s->calls_mu);
            c->next = s->calls;
            if (s->calls)
                s->calls->prev = c;
            s->calls = c;
            pthread_mutex_unlock(&s->calls_mu);
            mv_rpc_buf req = {0};
            if (!authorized)
                mv_rpc_reply_error(c, MV_RPC_UNAUTHENTICATED,
                                   "missing or wrong token: send authorization: Bearer <token> "
                                   "(the agent's --token-file)");
            else if (sl->payload && bb_read(sl->payload, &req) < 0)
                mv_rpc_reply_error(c, MV_RPC_INTERNAL, "cannot read request");
            else
                m->unary(m->arg, c, req.data, req.len);
            mv_rpc_buf_free(&req);
        }
    }
    if (sl->payload)
        grpc_byte_buffer_destroy(sl->payload);
    post_slot(s, sl); /* reuse the slot for the next call */
}

static void *server_main(void *arg)
{
    mv_rpc_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        tag *t = ev.tag;
        switch (t->kind) {
        case TAG_NEW_CALL:
            on_new_call(s, t->ctx, ev.success);
            break;
        case TAG_NEW_GENERIC:
            on_generic(s, t->ctx, ev.success);
            break;
        case TAG_GENERIC_DONE:
            generic_free(t->ctx);
            break;
        case TAG_UNARY_DONE:
            unary_free(t->ctx);
            break;
        case TAG_STREAM_CLOSE:
            on_stream_close(t->ctx);
            break;
        case TAG_STREAM_SEND:
            on_stream_send(t->ctx, ev.success);
            break;
        case TAG_SHUTDOWN:
            grpc_completion_queue_shutdown(s->cq);
            break;
        }
    }
    return NULL;
}

/* ---- Server: lifecycle ------------------------------------------------------------ */

int mv_rpc_server_create(const mv_rpc_server_opts *opts, mv_rpc_server **out)
{
    *out = NULL;
    mv_rpc_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->max_recv = opts && opts->max_recv_bytes ? opts->max_recv_bytes : DEFAULT_MAX_RECV;
    s->queue_cap = opts && opts->stream_queue_cap ? opts->stream_queue_cap : DEFAULT_QUEUE_CAP;
    if (s->max_recv > INT32_MAX)
        s->max_recv = INT32_MAX;
    s->shutdown_tag.kind = TAG_SHUTDOWN;
    pthread_mutex_init(&s->calls_mu, NULL);
    grpc_init();
    grpc_arg a[1];
    grpc_channel_args args;
    s->server = grpc_server_create(size_args(a, &args, s->max_recv), NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    if (!s->server || !s->cq)
        goto fail;
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    *out = s;
    return 0;
fail:
    if (s->server)
        grpc_server_destroy(s->server);
    if (s->cq)
        grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    pthread_mutex_destroy(&s->calls_mu);
    free(s);
    return -ENOMEM;
}

int mv_rpc_server_listen(mv_rpc_server *s, const char *addr)
{
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        MV_ERROR("rpc.listen_failed", "addr=%s", mv_log_q(addr));
        return -EADDRNOTAVAIL;
    }
    return strncmp(addr, "unix:", 5) == 0 ? 0 : port;
}

static int add_method(mv_rpc_server *s, const char *path, int streaming, mv_rpc_unary_fn u,
                      mv_rpc_stream_fn sf, mv_rpc_close_fn cf, void *arg)
{
    if (s->started || !path || path[0] != '/')
        return -EINVAL;
    rpc_method *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->path = strdup(path);
    if (!m->path) {
        free(m);
        return -ENOMEM;
    }
    m->srv = s;
    m->streaming = streaming;
    m->unary = u;
    m->stream = sf;
    m->on_close = cf;
    m->arg = arg;
    m->handle = grpc_server_register_method(s->server, m->path, NULL,
                                            GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (!m->handle) {
        free(m->path);
        free(m);
        return -EINVAL;
    }
    m->next = s->methods;
    s->methods = m;
    return 0;
}

int mv_rpc_server_add_unary(mv_rpc_server *s, const char *path, mv_rpc_unary_fn fn, void *arg)
{
    if (!fn)
        return -EINVAL;
    return add_method(s, path, 0, fn, NULL, NULL, arg);
}

int mv_rpc_server_add_stream(mv_rpc_server *s, const char *path, mv_rpc_stream_fn fn,
                             mv_rpc_close_fn on_close, void *arg)
{
    if (!fn)
        return -EINVAL;
    return add_method(s, path, 1, NULL, fn, on_close, arg);
}

int mv_rpc_server_start(mv_rpc_server *s)
{
    if (s->started)
        return -EALREADY;
    grpc_server_start(s->server);
    for (rpc_method *m = s->methods; m; m = m->next)
        for (int i = 0; i < REQUESTS_PER_METHOD; i++)
            new_slot(s, m);
    for (int i = 0; i < REQUESTS_PER_METHOD; i++)
        post_generic(s);
    int e = pthread_create(&s->thread, NULL, server_main, s);
    if (e) {
        /* Nothing drains the queue: shut down inline. */
        atomic_store(&s->shutting_down, 1);
        return -e;
    }
    s->started = 1;
    return 0;
}

void mv_rpc_server_destroy(mv_rpc_server *s)
{
    if (!s)
        return;
    atomic_store(&s->shutting_down, 1);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
    if (s->started) {
        pthread_join(s->thread, NULL);
    } else {
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
    }
    /* Unary calls whose handlers never replied. */
    while (s->calls) {
        mv_rpc_call *c = s->calls;
        s->calls = c->next;
        MV_WARN("rpc.unreplied_call", "action=dropped");
        unary_free(c);
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    while (s->methods) {
        rpc_method *m = s->methods;
        s->methods = m->next;
        free(m->path);
        free(m);
    }
    pthread_mutex_destroy(&s->calls_mu);
    free(s->token);
    free(s);
    grpc_shutdown();
}

int mv_rpc_server_set_token(mv_rpc_server *s, const char *token)
{
    if (s->started || !token || !*token)
        return -EINVAL;
    char *t = strdup(token);
    if (!t)
        return -ENOMEM;
    free(s->token);
    s->token = t;
    return 0;
}

/* ---- Client ------------------------------------------------------------------------- */

struct mv_rpc_channel {
    grpc_channel *ch;
    char *auth; /* "Bearer <token>" sent with every call, or NULL */
};

struct mv_rpc_cstream {
    grpc_call *call;
    grpc_completion_queue *cq;
    int start_tag, recv_tag, status_tag; /* addresses used as tags */
    int recv_pending;
    int status_done;
    int ended;
    grpc_metadata_array md_initial, md_trailing;
    grpc_byte_buffer *recv_bb;
    grpc_byte_buffer *send_bb;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
};

int mv_rpc_channel_open(const char *target, size_t max_recv_bytes, mv_rpc_channel **out)
{
    *out = NULL;
    if (!target || !*target)
        return -EINVAL;
    mv_rpc_channel *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    grpc_init();
    grpc_arg a[1];
    grpc_channel_args args;
    if (!max_recv_bytes)
        max_recv_bytes = DEFAULT_MAX_RECV;
    if (max_recv_bytes > INT32_MAX)
        max_recv_bytes = INT32_MAX;
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    c->ch = grpc_channel_create(target, creds, size_args(a, &args, max_recv_bytes));
    grpc_channel_credentials_release(creds);
    if (!c->ch) {
        free(c);
        grpc_shutdown();
        return -EINVAL;
    }
    *out = c;
    return 0;
}

void mv_rpc_channel_close(mv_rpc_channel *ch)
{
    if (!ch)
        return;
    grpc_channel_destroy(ch->ch);
    free(ch->auth);
    free(ch);
    grpc_shutdown();
}

int mv_rpc_channel_set_token(mv_rpc_channel *ch, const char *token)
{
    if (!token || !*token)
        return -EINVAL;
    size_t n = strlen(token) + sizeof "Bearer ";
    char *a = malloc(n);
    if (!a)
        return -ENOMEM;
    snprintf(a, n, "Bearer %s", token);
    free(ch->auth);
    ch->auth = a;
    return 0;
}

/* Fills `md` with the channel's authorization header, if any, and points `op`
 * (a SEND_INITIAL_METADATA) at it. `md` must outlive the batch start. */
static void add_auth(const mv_rpc_channel *ch, grpc_metadata *md, grpc_op *op)
{
    if (!ch->auth)
        return;
    memset(md, 0, sizeof *md);
    md->key = grpc_slice_from_static_string("authorization");
    md->value = grpc_slice_from_static_string(ch->auth);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
}

static void cq_drain_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

static void fill_status(mv_rpc_status *st, grpc_status_code code, grpc_slice details,
                        const char *error_string)
{
    if (!st)
        return;
    st->code = (int)code;
    size_t n = GRPC_SLICE_LENGTH(details);
    if (n >= sizeof st->message)
        n = sizeof st->message - 1;
    memcpy(st->message, GRPC_SLICE_START_PTR(details), n);
    st->message[n] = 0;
    if (!n && error_string)
        snprintf(st->message, sizeof st->message, "%s", error_string);
}

int mv_rpc_unary(mv_rpc_channel *ch, const char *method, const void *req, size_t len,
                 int timeout_ms, mv_rpc_buf *resp, mv_rpc_status *st)
{
    return mv_rpc_unary_ex(ch, method, req, len, timeout_ms, 0, resp, st);
}

int mv_rpc_unary_ex(mv_rpc_channel *ch, const char *method, const void *req, size_t len,
                    int timeout_ms, unsigned flags, mv_rpc_buf *resp, mv_rpc_status *st)
{
    int rc;
    if (resp) {
        resp->data = NULL;
        resp->len = 0;
    }
    if (st) {
        st->code = MV_RPC_UNKNOWN;
        st->message[0] = 0;
    }
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    if (!cq)
        return -ENOMEM;
    grpc_slice mslice = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice,
                                               NULL, deadline_ms(timeout_ms), NULL);
    grpc_slice_unref(mslice);
    if (!call) {
        rc = -ENOMEM;
        goto destroy_cq;
    }
    grpc_metadata_array md_initial, md_trailing;
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    grpc_byte_buffer *send = bb_from(req, len), *recv = NULL;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    grpc_metadata auth_md;
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    add_auth(ch, &auth_md, &ops[0]);
    if (flags & MV_RPC_WAIT_FOR_READY)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;
    int t = 0;
    if (grpc_call_start_batch(call, ops, 6, &t, NULL) != GRPC_CALL_OK) {
        rc = -EIO;
        goto unref_call;
    }
    grpc_completion_queue_pluck(cq, &t, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    fill_status(st, code, details, error_string);
    rc = (int)code;
    if (code == GRPC_STATUS_OK && recv && resp) {
        int r = bb_read(recv, resp);
        if (r < 0)
            rc = r;
    } else if (code == GRPC_STATUS_OK && !recv) {
        rc = MV_RPC_INTERNAL;
        if (st) {
            st->code = MV_RPC_INTERNAL;
            snprintf(st->message, sizeof st->message, "no response message");
        }
    }
unref_call:
    grpc_slice_unref(details);
    if (error_string)
        gpr_free((void *)error_string);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_byte_buffer_destroy(send);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_call_unref(call);
destroy_cq:
    cq_drain_destroy(cq);
    return rc;
}

int mv_rpc_cstream_open(mv_rpc_channel *ch, const char *method, const void *req, size_t len,
                        int timeout_ms, mv_rpc_cstream **out)
{
    *out = NULL;
    mv_rpc_cstream *cs = calloc(1, sizeof *cs);
    if (!cs)
        return -ENOMEM;
    cs->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (!cs->cq)
        goto free_cs;
    grpc_slice mslice = grpc_slice_from_copied_string(method);
    cs->call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cs->cq, mslice, NULL,
                                        deadline_ms(timeout_ms), NULL);
    grpc_slice_unref(mslice);
    if (!cs->call)
        goto destroy_cq;
    grpc_metadata_array_init(&cs->md_initial);
    grpc_metadata_array_init(&cs->md_trailing);
    cs->details = grpc_empty_slice();
    cs->send_bb = bb_from(req, len);

    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &cs->md_trailing;
    ops[0].data.recv_status_on_client.status = &cs->status;
    ops[0].data.recv_status_on_client.status_details = &cs->details;
    ops[0].data.recv_status_on_client.error_string = &cs->error_string;
    if (grpc_call_start_batch(cs->call, ops, 1, &cs->status_tag, NULL) != GRPC_CALL_OK)
        goto unref_call;
    memset(ops, 0, sizeof ops);
    grpc_metadata auth_md;
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    add_auth(ch, &auth_md, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = cs->send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &cs->md_initial;
    if (grpc_call_start_batch(cs->call, ops, 4, &cs->start_tag, NULL) != GRPC_CALL_OK) {
        /* The status batch is outstanding: cancel and collect it. */
        grpc_call_cancel(cs->call, NULL);
        grpc_completion_queue_pluck(cs->cq, &cs->status_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
        goto unref_call;
    }
    *out = cs;
    return 0;
unref_call:
    grpc_metadata_array_destroy(&cs->md_initial);
    grpc_metadata_array_destroy(&cs->md_trailing);
    grpc_slice_unref(cs->details);
    if (cs->error_string)
        gpr_free((void *)cs->error_string);
    grpc_byte_buffer_destroy(cs->send_bb);
    grpc_call_unref(cs->call);
destroy_cq:
    cq_drain_destroy(cs->cq);
free_cs:
    free(cs);
    return -EIO;
}

static void cstream_status(mv_rpc_cstream *cs, mv_rpc_status *st)
{
    if (!cs->status_done) {
        grpc_completion_queue_pluck(cs->cq, &cs->status_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
        cs->status_done = 1;
    }
    fill_status(st, cs->status, cs->details, cs->error_string);
}

int mv_rpc_cstream_next(mv_rpc_cstream *cs, int wait_ms, mv_rpc_buf *msg, mv_rpc_status *st)
{
    msg->data = NULL;
    msg->len = 0;
    if (cs->ended) {
        cstream_status(cs, st);
        return 0;
    }
    if (!cs->recv_pending) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &cs->recv_bb;
        cs->recv_bb = NULL;
        if (grpc_call_start_batch(cs->call, &op, 1, &cs->recv_tag, NULL) != GRPC_CALL_OK) {
            cs->ended = 1;
            cstream_status(cs, st);
            return 0;
        }
        cs->recv_pending = 1;
    }
    gpr_timespec dl = wait_ms < 0 ? gpr_inf_future(GPR_CLOCK_REALTIME) : deadline_ms(wait_ms);
    if (wait_ms == 0)
        dl = gpr_now(GPR_CLOCK_MONOTONIC);
    grpc_event ev = grpc_completion_queue_pluck(cs->cq, &cs->recv_tag, dl, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return -ETIMEDOUT;
    cs->recv_pending = 0;
    if (!ev.success || !cs->recv_bb) {
        cs->ended = 1;
        cstream_status(cs, st);
        return 0;
    }
    int rc = bb_read(cs->recv_bb, msg);
    grpc_byte_buffer_destroy(cs->recv_bb);
    cs->recv_bb = NULL;
    return rc < 0 ? rc : 1;
}

void mv_rpc_cstream_cancel(mv_rpc_cstream *cs)
{
    grpc_call_cancel(cs->call, NULL);
}

void mv_rpc_cstream_close(mv_rpc_cstream *cs)
{
    if (!cs)
        return;
    grpc_call_cancel(cs->call, NULL);
    gpr_timespec inf = gpr_inf_future(GPR_CLOCK_REALTIME);
    if (cs->recv_pending) {
        grpc_completion_queue_pluck(cs->cq, &cs->recv_tag, inf, NULL);
        if (cs->recv_bb)
            grpc_byte_buffer_destroy(cs->recv_bb);
    }
    if (!cs->status_done)
        grpc_completion_queue_pluck(cs->cq, &cs->status_tag, inf, NULL);
    grpc_completion_queue_pluck(cs->cq, &cs->start_tag, inf, NULL);
    grpc_metadata_array_destroy(&cs->md_initial);
    grpc_metadata_array_destroy(&cs->md_trailing);
    grpc_slice_unref(cs->details);
    if (cs->error_string)
        gpr_free((void *)cs->error_string);
    grpc_byte_buffer_destroy(cs->send_bb);
    grpc_call_unref(cs->call);
    cq_drain_destroy(cs->cq);
    free(cs);
}
