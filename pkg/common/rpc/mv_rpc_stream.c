/* mv_rpc_stream: server-streaming calls: queued writes, flow control, end of stream. */
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

/* ---- Server: streams ---------------------------------------------------------- */

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
    st->qbytes = 0;
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
        st->qbytes -= q->bytes;
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
        MV_WARN("rpc.stream_send_failed", "method=%s err=%s", mv_log_q(st->m->path),
                mv_log_q(grpc_call_error_to_string(e)));
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
    size_t bytes = grpc_byte_buffer_length(bb);
    if (st->qlen >= st->qcap || st->qbytes + bytes > st->qbytes_cap) {
        queue_drop(st);
        st->ending = 1;
        st->status_code = MV_RPC_RESOURCE_EXHAUSTED;
        st->status_msg = strdup("stream queue overflow: the client is too slow, resync");
        MV_WARN("rpc.stream_overflow", "method=%s cap_messages=%zu cap_bytes=%zu",
                mv_log_q(st->m->path), st->qcap, st->qbytes_cap);
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
    q->bytes = bytes;
    st->qbytes += bytes;
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
    return stream_queue(st, mv_rpc__bb_from(buf, len));
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

void mv_rpc__stream_start(mv_rpc_server *s, slot *sl)
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
    st->qbytes_cap = s->queue_bytes;
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
        mv_rpc__bb_read(sl->payload, &req);
    sl->m->stream(sl->m->arg, st, req.data, req.len);
    mv_rpc_buf_free(&req);
    return;
fail:
    MV_ERROR("rpc.stream_start_failed", "method=%s", mv_log_q(sl->m->path));
    grpc_metadata_array_destroy(&sl->md);
    grpc_call_cancel(sl->call, NULL);
    grpc_call_unref(sl->call);
}

void mv_rpc__stream_on_close(mv_rpc_stream *st)
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

void mv_rpc__stream_on_send(mv_rpc_stream *st, int ok)
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
