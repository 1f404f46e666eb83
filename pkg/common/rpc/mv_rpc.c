/* mv_rpc: status names, protobuf packing and byte-buffer helpers shared by server and client. */
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
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "mv_log.h"

/* ---- Generic helpers ---------------------------------------------------------- */

/* gRPC core's own messages ("E1123 12:00:00 ... chttp2_server.cc:...") become one logfmt
 * line each, at the matching level, so `kubectl logs` stays parseable. */
static void grpc_log_to_logfmt(gpr_log_func_args *a)
{
    const char *file = a->file ? strrchr(a->file, '/') : NULL;
    file = file ? file + 1 : a->file ? a->file : "?";
    switch (a->severity) {
    case GPR_LOG_SEVERITY_ERROR:
        MV_ERROR("grpc.log", "source=%s:%d msg=%s", mv_log_q(file), a->line, mv_log_q(a->message));
        break;
    case GPR_LOG_SEVERITY_INFO:
        MV_INFO("grpc.log", "source=%s:%d msg=%s", mv_log_q(file), a->line, mv_log_q(a->message));
        break;
    default:
        MV_DEBUG("grpc.log", "source=%s:%d msg=%s", mv_log_q(file), a->line, mv_log_q(a->message));
        break;
    }
}

static pthread_once_t g_grpc_once = PTHREAD_ONCE_INIT;

static void grpc_once(void)
{
    gpr_set_log_function(grpc_log_to_logfmt);
}

void mv_rpc__grpc_init(void)
{
    pthread_once(&g_grpc_once, grpc_once);
    grpc_init();
}

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

grpc_byte_buffer *mv_rpc__bb_from(const void *buf, size_t len)
{
    grpc_slice s = grpc_slice_malloc(len);
    if (len)
        memcpy(GRPC_SLICE_START_PTR(s), buf, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Copies a received buffer into malloc'd memory. Returns 0 or -ENOMEM/-EPROTO. */
int mv_rpc__bb_read(grpc_byte_buffer *bb, mv_rpc_buf *out)
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

gpr_timespec mv_rpc__deadline_ms(int ms)
{
    if (ms <= 0)
        return gpr_inf_future(GPR_CLOCK_REALTIME);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

grpc_channel_args *mv_rpc__size_args(grpc_arg *a, grpc_channel_args *args, size_t max_recv)
{
    a[0].type = GRPC_ARG_INTEGER;
    a[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    a[0].value.integer = (int)max_recv;
    args->num_args = 1;
    args->args = a;
    return args;
}
