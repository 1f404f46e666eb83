/* mv_rpc_internal: what the server, stream, client and shared files of pkg/common/rpc share.
 * Not part of the module's interface: include mv_rpc.h outside this directory. */
#ifndef MV_RPC_INTERNAL_H
#define MV_RPC_INTERNAL_H

#include "mv_rpc.h"

#include <pthread.h>
#include <stdatomic.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#define DEFAULT_MAX_RECV (4u << 20)
/* Per-stream queue bounds: a slow client cannot make the server hold more than this. The
 * message count is high enough for a whole catalog's initial list (65,536 segments, and
 * twice that when every segment is re-announced); the bytes bound the memory. */
#define DEFAULT_QUEUE_CAP   (1u << 18)
#define DEFAULT_QUEUE_BYTES (64u << 20)
#define REQUESTS_PER_METHOD 4

/* ---- Shared helpers (mv_rpc.c) -------------------------------------------------- */

/* A byte buffer holding a copy of buf. */
grpc_byte_buffer *mv_rpc__bb_from(const void *buf, size_t len);
/* Copies a received buffer into malloc'd memory. Returns 0 or -ENOMEM/-EPROTO. */
int mv_rpc__bb_read(grpc_byte_buffer *bb, mv_rpc_buf *out);
/* A deadline `ms` from now; <= 0 is none. */
gpr_timespec mv_rpc__deadline_ms(int ms);
/* Channel/server arguments capping received messages at max_recv bytes. */
grpc_channel_args *mv_rpc__size_args(grpc_arg *a, grpc_channel_args *args, size_t max_recv);

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
    int has_peer; /* peer holds the caller's credentials (a unix-socket call) */
    int remote;   /* not on one of this server's unix sockets */
    int scope;    /* MV_RPC_SCOPE_* granted by the token check */
    mv_rpc_peer peer;
    struct mv_rpc_call *prev, *next; /* srv->calls: not yet replied */
};

typedef struct qmsg {
    grpc_byte_buffer *bb;
    size_t bytes;
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
    size_t qbytes, qbytes_cap; /* payload bytes queued, and their bound */
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
    size_t queue_bytes;
    rpc_method *methods;
    pthread_mutex_t calls_mu;
    struct mv_rpc_call *calls;
    tag shutdown_tag;
    char *token;      /* admin token: when set, TCP callers must present a token */
    char *read_token; /* read token: when set, TCP callers must present a token */
    /* Unix sockets served by this library (mv_rpc_unix.c). */
    struct rpc_unix_listener *unix_listeners;
    struct mv_rpc_peers *peers; /* credentials of the connections accepted on them */
    grpc_server_credentials *unix_creds;
    pthread_t accept_thread;
    int accept_started;
    int accept_wake[2]; /* a pipe: written to stop the accept thread */
};

/* ---- Server streams (mv_rpc_stream.c), driven by the server's thread ------------ */

void mv_rpc__stream_start(mv_rpc_server *s, slot *sl);
void mv_rpc__stream_on_close(mv_rpc_stream *st);
void mv_rpc__stream_on_send(mv_rpc_stream *st, int ok);

/* ---- Unix-socket listeners (mv_rpc_unix.c) -------------------------------------- */

/* Binds and listens on `path` (before start), its file given `perms` (NULL: 0777 less the
 * umask, the process's group). Returns 0 or a negative errno (logged). */
int mv_rpc__unix_listen(mv_rpc_server *s, const char *path, const mv_rpc_unix_perms *perms);
/* Starts the accept thread (after grpc_server_start). Returns 0 or a negative errno. */
int mv_rpc__unix_start(mv_rpc_server *s);
/* Stops accepting, closes the listeners and unlinks their socket files (before the gRPC
 * server shuts down). Idempotent. */
void mv_rpc__unix_stop(mv_rpc_server *s);

/* ---- TLS credentials from PEM files (mv_rpc_tls.c) -------------------------------- */

/* NULL with the reason in `err` (a file unreadable or not PEM, a missing half). */
grpc_server_credentials *mv_rpc__tls_server_creds(const mv_rpc_tls_server_opts *o, char *err,
                                                  size_t errlen);
grpc_channel_credentials *mv_rpc__tls_channel_creds(const mv_rpc_tls_client_opts *o, char *err,
                                                    size_t errlen);

/* grpc_init() with gRPC core's logging routed into logfmt (first call installs it). */
void mv_rpc__grpc_init(void);

#endif
