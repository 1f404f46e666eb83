/* mv_rpc_server: gRPC core server: request slots, unary replies, dispatch, lifecycle
 * (see mv_rpc.h for the threading model). */
#include "mv_rpc_internal.h"

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
#include "mv_rpc_peers.h"
#include "mv_util.h"

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
    MV_WARN("rpc.request_failed", "method=%s err=%s", mv_log_q(sl->m->path),
            mv_log_q(grpc_call_error_to_string(e)));
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
        c->send = mv_rpc__bb_from(buf, len);
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
        MV_WARN("rpc.reply_failed", "err=%s", mv_log_q(grpc_call_error_to_string(e)));
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

int mv_rpc_call_peer(const mv_rpc_call *call, mv_rpc_peer *out)
{
    if (!call || !call->has_peer)
        return -ENOENT;
    *out = call->peer;
    return 0;
}

int mv_rpc_reply_error(mv_rpc_call *call, int code, const char *message)
{
    if (code == MV_RPC_OK)
        code = MV_RPC_UNKNOWN;
    return reply_common(call, code, message, NULL, 0);
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

/* The caller of a new call when it came over one of this server's unix sockets (its peer is
 * then "fd:N", see mv_rpc_peers.h). Looked up as soon as gRPC hands the call over, while
 * the server holds it: the connection's descriptor is still open then. 1 = *out filled. */
static int call_peer_lookup(const mv_rpc_server *s, grpc_call *call, mv_rpc_peer *out)
{
    if (!s->peers)
        return 0;
    char *peer = grpc_call_get_peer(call);
    int rc = peer ? mv_rpc_peers_lookup(s->peers, peer, out) : -EINVAL;
    if (rc == -ENOENT)
        MV_WARN("rpc.peer_unknown", "peer=%s effect=%s", mv_log_q(peer),
                mv_log_q("the call has no caller credentials"));
    gpr_free(peer);
    return rc == 0;
}

/* The scope a new call gets (MV_RPC_SCOPE_*), or 0 when it may not proceed: callers over a
 * unix socket are trusted (file permissions decide who reaches it); when a token is set,
 * others need "authorization: Bearer <token>" with one of them. */
static int call_scope(const mv_rpc_server *s, grpc_call *call, const grpc_metadata_array *md,
                      int unix_peer, int *remote)
{
    *remote = 0;
    if (unix_peer)
        return MV_RPC_SCOPE_ADMIN;
    char *peer = grpc_call_get_peer(call);
    int local = peer && strncmp(peer, "unix:", 5) == 0; /* gRPC's own unix listener */
    gpr_free(peer);
    if (local)
        return MV_RPC_SCOPE_ADMIN;
    *remote = 1;
    if (!s->token && !s->read_token)
        return MV_RPC_SCOPE_ADMIN;
    static const char prefix[] = "Bearer ";
    size_t plen = sizeof prefix - 1;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        size_t klen = GRPC_SLICE_LENGTH(m->key), vlen = GRPC_SLICE_LENGTH(m->value);
        const char *k = (const char *)GRPC_SLICE_START_PTR(m->key);
        const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
        if (klen != 13 || memcmp(k, "authorization", 13) != 0)
            continue;
        if (vlen < plen || memcmp(v, prefix, plen) != 0)
            return 0;
        /* Both compared, so timing does not tell which token matched. */
        int admin = s->token && bytes_equal(v + plen, vlen - plen, s->token, strlen(s->token));
        int read = s->read_token &&
                   bytes_equal(v + plen, vlen - plen, s->read_token, strlen(s->read_token));
        return admin ? MV_RPC_SCOPE_ADMIN : read ? MV_RPC_SCOPE_READ : 0;
    }
    return 0;
}

int mv_rpc_call_scope(const mv_rpc_call *call)
{
    return call ? call->scope : 0;
}

int mv_rpc_call_remote(const mv_rpc_call *call)
{
    return call ? call->remote : 1;
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
    mv_rpc_peer caller;
    int has_peer = call_peer_lookup(s, sl->call, &caller);
    int remote;
    int scope = call_scope(s, sl->call, &sl->md, has_peer, &remote);
    int authorized = scope != 0;
    if (!authorized) {
        char *peer = grpc_call_get_peer(sl->call);
        MV_WARN("rpc.unauthenticated", "method=%s peer=%s", mv_log_q(m->path),
                mv_log_q(peer ? peer : "?"));
        gpr_free(peer);
    }
    if (authorized && m->streaming) {
        mv_rpc__stream_start(s, sl);
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
            c->has_peer = has_peer;
            c->remote = remote;
            c->scope = scope;
            if (has_peer)
                c->peer = caller;
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
                                   "(the agent's --token-file or --admin-token-file)");
            else if (sl->payload && mv_rpc__bb_read(sl->payload, &req) < 0)
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
    mv_util_thread_name("mv-rpc-server");
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
            mv_rpc__stream_on_close(t->ctx);
            break;
        case TAG_STREAM_SEND:
            mv_rpc__stream_on_send(t->ctx, ev.success);
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
    s->queue_bytes =
        opts && opts->stream_queue_bytes ? opts->stream_queue_bytes : DEFAULT_QUEUE_BYTES;
    if (s->max_recv > INT32_MAX)
        s->max_recv = INT32_MAX;
    s->shutdown_tag.kind = TAG_SHUTDOWN;
    s->accept_wake[0] = s->accept_wake[1] = -1;
    pthread_mutex_init(&s->calls_mu, NULL);
    mv_rpc__grpc_init();
    grpc_arg a[1];
    grpc_channel_args args;
    s->server = grpc_server_create(mv_rpc__size_args(a, &args, s->max_recv), NULL);
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
    if (s->started)
        return -EADDRNOTAVAIL;
    if (strncmp(addr, "unix:", 5) == 0)
        return mv_rpc__unix_listen(s, addr + 5, NULL) < 0 ? -EADDRNOTAVAIL : 0;
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        MV_ERROR("rpc.listen_failed", "addr=%s", mv_log_q(addr));
        return -EADDRNOTAVAIL;
    }
    return port;
}

int mv_rpc_server_listen_unix(mv_rpc_server *s, const char *path, const mv_rpc_unix_perms *perms)
{
    if (s->started)
        return -EADDRNOTAVAIL;
    if (perms && (perms->mode < -1 || perms->mode > 0777 || perms->gid < -1 ||
                  perms->gid >= (int64_t)UINT32_MAX))
        return -EINVAL;
    return mv_rpc__unix_listen(s, path, perms);
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
    /* Connections on the unix sockets are handed to gRPC from now on (it needs the started
     * server's pollsets); clients that connected since the listen waited in the backlog. */
    int rc = mv_rpc__unix_start(s);
    if (rc < 0)
        MV_ERROR("rpc.accept_thread_failed", "err=%s", mv_log_q(strerror(-rc)));
    return rc;
}

void mv_rpc_server_destroy(mv_rpc_server *s)
{
    if (!s)
        return;
    atomic_store(&s->shutting_down, 1);
    mv_rpc__unix_stop(s); /* no connection is handed to gRPC after this */
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
    mv_rpc_peers_destroy(s->peers);
    free(s->token);
    free(s->read_token);
    free(s);
    grpc_shutdown();
}

static int set_token(mv_rpc_server *s, char **dst, const char *other, const char *token)
{
    if (s->started || !token || !*token || (other && strcmp(other, token) == 0))
        return -EINVAL;
    char *t = strdup(token);
    if (!t)
        return -ENOMEM;
    free(*dst);
    *dst = t;
    return 0;
}

int mv_rpc_server_set_token(mv_rpc_server *s, const char *token)
{
    return set_token(s, &s->token, s->read_token, token);
}

int mv_rpc_server_set_read_token(mv_rpc_server *s, const char *token)
{
    return set_token(s, &s->read_token, s->token, token);
}
