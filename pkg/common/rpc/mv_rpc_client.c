/* mv_rpc_client: channels, unary calls and server-streaming calls from the client side. */
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

/* Opens a channel with `creds` (released here); `name` overrides the TLS target name. */
static int channel_open(const char *target, size_t max_recv_bytes, grpc_channel_credentials *creds,
                        const char *name, mv_rpc_channel **out)
{
    mv_rpc_channel *c = calloc(1, sizeof *c);
    if (!c) {
        grpc_channel_credentials_release(creds);
        return -ENOMEM;
    }
    grpc_arg a[2];
    grpc_channel_args args;
    if (!max_recv_bytes)
        max_recv_bytes = DEFAULT_MAX_RECV;
    if (max_recv_bytes > INT32_MAX)
        max_recv_bytes = INT32_MAX;
    mv_rpc__size_args(a, &args, max_recv_bytes);
    if (name && *name) {
        a[1].type = GRPC_ARG_STRING;
        a[1].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        a[1].value.string = (char *)name;
        args.num_args = 2;
    }
    c->ch = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    if (!c->ch) {
        free(c);
        return -EINVAL;
    }
    *out = c;
    return 0;
}

int mv_rpc_channel_open(const char *target, size_t max_recv_bytes, mv_rpc_channel **out)
{
    *out = NULL;
    if (!target || !*target)
        return -EINVAL;
    mv_rpc__grpc_init();
    int rc = channel_open(target, max_recv_bytes, grpc_insecure_credentials_create(), NULL, out);
    if (rc < 0)
        grpc_shutdown();
    return rc;
}

int mv_rpc_channel_open_tls(const char *target, size_t max_recv_bytes,
                            const mv_rpc_tls_client_opts *tls, mv_rpc_channel **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    if (!target || !*target || strncmp(target, "unix:", 5) == 0) {
        snprintf(err, errlen, "TLS is for TCP targets (HOST:PORT)");
        return -EINVAL;
    }
    mv_rpc__grpc_init();
    grpc_channel_credentials *creds = mv_rpc__tls_channel_creds(tls, err, errlen);
    int rc = creds ? channel_open(target, max_recv_bytes, creds, tls->server_name, out) : -EINVAL;
    if (rc < 0) {
        if (creds)
            snprintf(err, errlen, "cannot open a channel to %s", target);
        grpc_shutdown();
    }
    return rc;
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
                                               NULL, mv_rpc__deadline_ms(timeout_ms), NULL);
    grpc_slice_unref(mslice);
    if (!call) {
        rc = -ENOMEM;
        goto destroy_cq;
    }
    grpc_metadata_array md_initial, md_trailing;
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    grpc_byte_buffer *send = mv_rpc__bb_from(req, len), *recv = NULL;
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
        int r = mv_rpc__bb_read(recv, resp);
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

/* Releases what a started stream call holds (the call, its metadata and buffers). */
static void cstream_release_call(mv_rpc_cstream *cs)
{
    grpc_metadata_array_destroy(&cs->md_initial);
    grpc_metadata_array_destroy(&cs->md_trailing);
    grpc_slice_unref(cs->details);
    if (cs->error_string)
        gpr_free((void *)cs->error_string);
    grpc_byte_buffer_destroy(cs->send_bb);
    grpc_call_unref(cs->call);
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
                                        mv_rpc__deadline_ms(timeout_ms), NULL);
    grpc_slice_unref(mslice);
    if (!cs->call)
        goto destroy_cq;
    grpc_metadata_array_init(&cs->md_initial);
    grpc_metadata_array_init(&cs->md_trailing);
    cs->details = grpc_empty_slice();
    cs->send_bb = mv_rpc__bb_from(req, len);

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
    cstream_release_call(cs);
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
    gpr_timespec dl =
        wait_ms < 0 ? gpr_inf_future(GPR_CLOCK_REALTIME) : mv_rpc__deadline_ms(wait_ms);
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
    int rc = mv_rpc__bb_read(cs->recv_bb, msg);
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
    cstream_release_call(cs);
    cq_drain_destroy(cs->cq);
    free(cs);
}
