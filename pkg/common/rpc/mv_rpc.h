/* mv_rpc: a small wrapper over gRPC core's C API: server (unary and server-streaming
 * methods) and client (unary and server-streaming calls), with protobuf-c helpers.
 *
 * Threading model (server): one dedicated thread drains the server's completion
 * queue and runs every handler and close callback, so handlers must not block (in
 * particular they must not make synchronous RPCs to this same server). Replies and
 * stream writes may come from any thread. The server serves as soon as
 * mv_rpc_server_start returns, so a process may then make its own outgoing calls
 * (e.g. a registration that calls back into this server) from another thread.
 *
 * Threading model (client): a channel may be shared by threads; every call uses its
 * own completion queue.
 *
 * Ownership: buffers passed to handlers belong to the library and are valid only
 * during the call of the handler. mv_rpc_buf contents returned to callers are
 * malloc'd and freed with mv_rpc_buf_free.
 */
#ifndef MV_RPC_H
#define MV_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* gRPC status codes (same numbers as grpc_status_code). */
enum {
    MV_RPC_OK = 0,
    MV_RPC_CANCELLED = 1,
    MV_RPC_UNKNOWN = 2,
    MV_RPC_INVALID_ARGUMENT = 3,
    MV_RPC_DEADLINE_EXCEEDED = 4,
    MV_RPC_NOT_FOUND = 5,
    MV_RPC_ALREADY_EXISTS = 6,
    MV_RPC_PERMISSION_DENIED = 7,
    MV_RPC_RESOURCE_EXHAUSTED = 8,
    MV_RPC_FAILED_PRECONDITION = 9,
    MV_RPC_ABORTED = 10,
    MV_RPC_OUT_OF_RANGE = 11,
    MV_RPC_UNIMPLEMENTED = 12,
    MV_RPC_INTERNAL = 13,
    MV_RPC_UNAVAILABLE = 14,
    MV_RPC_DATA_LOSS = 15,
    MV_RPC_UNAUTHENTICATED = 16,
};

/* Short name of a status code ("UNAVAILABLE"). */
const char *mv_rpc_code_name(int code);

/* A malloc'd byte buffer. */
typedef struct mv_rpc_buf {
    uint8_t *data;
    size_t len;
} mv_rpc_buf;

void mv_rpc_buf_free(mv_rpc_buf *b); /* frees data, resets to {NULL, 0}; NULL-safe */

/* Final status of a client call. */
typedef struct mv_rpc_status {
    int code;          /* MV_RPC_* */
    char message[256]; /* details sent by the server or produced locally */
} mv_rpc_status;

/* ---- protobuf-c helpers ---------------------------------------------------- */

/* Packs `m` into a fresh buffer. Returns 0 or -ENOMEM. */
int mv_rpc_pack(const ProtobufCMessage *m, mv_rpc_buf *out);

/* Unpacks `len` bytes as message type `d`; refuses more than `cap` bytes
 * (0 = 4 MiB). Returns the message (free with protobuf_c_message_free_unpacked(m,
 * NULL)) or NULL if too big or malformed. */
ProtobufCMessage *mv_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *buf, size_t len,
                                size_t cap);

/* ---- Server ---------------------------------------------------------------- */

typedef struct mv_rpc_server mv_rpc_server;
typedef struct mv_rpc_call mv_rpc_call;     /* a unary call awaiting its reply */
typedef struct mv_rpc_stream mv_rpc_stream; /* a server-streaming call */

typedef struct mv_rpc_server_opts {
    size_t max_recv_bytes;     /* largest request accepted; 0 = 4 MiB */
    size_t stream_queue_cap;   /* messages queued per stream before overflow; 0 = 262144 */
    size_t stream_queue_bytes; /* payload bytes queued per stream before overflow; 0 = 64 MiB */
} mv_rpc_server_opts;

/* Unary handler: must reply to `call` exactly once, with mv_rpc_reply* (from
 * this or any thread, but before mv_rpc_server_destroy). */
typedef void (*mv_rpc_unary_fn)(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len);

/* Streaming handler: receives a stream handle holding one reference for the
 * handler, which must eventually be dropped with mv_rpc_stream_unref (any thread,
 * any time, also after the stream closed). */
typedef void (*mv_rpc_stream_fn)(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len);

/* Called once per stream, on the server thread, when the stream is over: the
 * client went away or cancelled, the server shut down, or the status we sent
 * was delivered. `cancelled` is nonzero in the first cases. Writes fail after. */
typedef void (*mv_rpc_close_fn)(void *arg, mv_rpc_stream *st, int cancelled);

/* Creates a server (opts may be NULL). Returns 0 or a negative errno. */
int mv_rpc_server_create(const mv_rpc_server_opts *opts, mv_rpc_server **out);

/* Adds "unix:/path" or "host:port" (port 0 = any free port). Before start.
 * Returns the TCP port bound (0 for unix sockets), or -EADDRNOTAVAIL.
 *
 * A unix socket is served by this library rather than by gRPC's own listener, so that every
 * call on it knows its caller (mv_rpc_call_peer): the socket is bound and listened on here,
 * each connection accepted by a thread of the server, its peer credentials (SO_PEERCRED)
 * recorded, and the connection handed to gRPC (grpc_server_add_channel_from_fd). The path is
 * handled as gRPC's listener did: a socket already at the path is unlinked before the bind
 * (a regular file there makes the listen fail), the socket file's mode is 0777 less the
 * process's umask, and the server unlinks it when destroyed (only if the path still names
 * the socket it bound). */
int mv_rpc_server_listen(mv_rpc_server *s, const char *addr);

/* Who may connect to a unix socket: the socket file's permission bits and group. Connecting
 * needs write permission on the file (root needs none). */
typedef struct mv_rpc_unix_perms {
    int mode;    /* 0..0777, or -1: 0777 less the process's umask (mv_rpc_server_listen's) */
    int64_t gid; /* a group, or -1: the process's effective group */
} mv_rpc_unix_perms;

/* Listens on the unix socket at `path` as mv_rpc_server_listen("unix:PATH") does, with the
 * socket file given `perms` (NULL: as mv_rpc_server_listen). They are applied after the bind
 * and before the listen, so no connection is taken under other permissions: the group first
 * (chown, which needs root, CAP_CHOWN, or a group the process is in), then the mode (chmod).
 * Returns 0, or a negative errno with the reason logged (rpc.listen_failed, naming the step). */
int mv_rpc_server_listen_unix(mv_rpc_server *s, const char *path, const mv_rpc_unix_perms *perms);

/* Registers a method by full path ("/microview.v1.Agent/ListSegments"). Before
 * start. `arg` is passed to the callbacks. Returns 0, -EINVAL or -ENOMEM. */
int mv_rpc_server_add_unary(mv_rpc_server *s, const char *path, mv_rpc_unary_fn fn, void *arg);
int mv_rpc_server_add_stream(mv_rpc_server *s, const char *path, mv_rpc_stream_fn fn,
                             mv_rpc_close_fn on_close, void *arg);

/* Token scopes of TCP callers. A unix-socket caller always has MV_RPC_SCOPE_ADMIN (the
 * socket's file permissions decide who reaches it; the handlers have its peer credentials). */
enum {
    MV_RPC_SCOPE_READ = 1,  /* presented the read token */
    MV_RPC_SCOPE_ADMIN = 2, /* presented the admin token, or no token is configured */
};

/* Requires a token from every caller that is not on a unix socket once either is set: such
 * calls must carry the metadata "authorization: Bearer <token>", or they end with
 * UNAUTHENTICATED before any handler runs. `token` (copied) grants MV_RPC_SCOPE_ADMIN,
 * mv_rpc_server_set_read_token's MV_RPC_SCOPE_READ; what a scope allows is the handlers'
 * decision (mv_rpc_call_scope). Without either, TCP callers get MV_RPC_SCOPE_ADMIN. Before
 * start. Returns 0, -EINVAL (empty, or the same as the other token) or -ENOMEM. */
int mv_rpc_server_set_token(mv_rpc_server *s, const char *token);
int mv_rpc_server_set_read_token(mv_rpc_server *s, const char *token);

/* TLS on a TCP listener, with gRPC core's own credentials (PEM files, read at the listen). */
typedef struct mv_rpc_tls_server_opts {
    const char *cert_file;      /* the server's certificate chain */
    const char *key_file;       /* its private key */
    const char *client_ca_file; /* NULL: no client certificates asked; else the CA that
                                 * must have signed one a client presents */
    int require_client_cert;    /* with client_ca_file: a client without a valid one is refused
                                 * in the handshake */
} mv_rpc_tls_server_opts;

/* Listens on TCP "host:port" with TLS as mv_rpc_server_listen does in plaintext. Returns the
 * port bound, or a negative errno with the reason in `err` (and logged). */
int mv_rpc_server_listen_tls(mv_rpc_server *s, const char *addr, const mv_rpc_tls_server_opts *tls,
                             char *err, size_t errlen);

/* Starts serving on a dedicated thread. Returns 0 or a negative errno. */
int mv_rpc_server_start(mv_rpc_server *s);

/* Cancels every open call (clients see UNAVAILABLE), waits for the queue to
 * drain, joins the thread and frees the server. NULL-safe. Stream handles the
 * handlers still hold stay valid until unref'd (writes fail). */
void mv_rpc_server_destroy(mv_rpc_server *s);

/* Who made a call on a unix socket, as the kernel recorded it when the caller connected
 * (SO_PEERCRED): not something the client claims. */
typedef struct mv_rpc_peer {
    uint32_t uid;
    uint32_t gid;
    int32_t pid; /* when it connected; the process may be gone since */
} mv_rpc_peer;

/* The credentials of the process that made `call` (a unary call, before its reply), when it
 * came over a unix socket this server listens on. Returns 0 with *out filled, or -ENOENT: a
 * TCP caller, or none could be recorded (the call is then as anonymous as a TCP one). */
int mv_rpc_call_peer(const mv_rpc_call *call, mv_rpc_peer *out);

/* The scope the token check granted `call` (MV_RPC_SCOPE_*), and whether it came over TCP
 * rather than one of this server's unix sockets (1) or not (0). */
int mv_rpc_call_scope(const mv_rpc_call *call);
int mv_rpc_call_remote(const mv_rpc_call *call);

/* Unary replies. Each returns 0 or a negative errno; the call is freed after. */
int mv_rpc_reply(mv_rpc_call *call, const void *buf, size_t len);
int mv_rpc_reply_msg(mv_rpc_call *call, const ProtobufCMessage *m);
int mv_rpc_reply_error(mv_rpc_call *call, int code, const char *message);

/* Queues a copy of `buf` on the stream (FIFO, one send in flight). Returns 0;
 * -EPIPE if the stream is over or ending; -ENOBUFS if the queue was full, in which
 * case the stream is ended with RESOURCE_EXHAUSTED (the client should resync). */
int mv_rpc_stream_write(mv_rpc_stream *st, const void *buf, size_t len);
int mv_rpc_stream_write_msg(mv_rpc_stream *st, const ProtobufCMessage *m);

/* Ends the stream with a status after the queued messages. Returns 0 or -EPIPE. */
int mv_rpc_stream_end(mv_rpc_stream *st, int code, const char *message);

/* Per-stream user pointer for the handler's own state. */
void mv_rpc_stream_set_user(mv_rpc_stream *st, void *user);
void *mv_rpc_stream_user(const mv_rpc_stream *st);

void mv_rpc_stream_unref(mv_rpc_stream *st);

/* ---- Client ---------------------------------------------------------------- */

typedef struct mv_rpc_channel mv_rpc_channel;
typedef struct mv_rpc_cstream mv_rpc_cstream;

/* Opens a channel to `target` ("unix:/path", "host:port"). Connects lazily.
 * `max_recv_bytes` 0 = 4 MiB. Returns 0 or a negative errno. */
int mv_rpc_channel_open(const char *target, size_t max_recv_bytes, mv_rpc_channel **out);
void mv_rpc_channel_close(mv_rpc_channel *ch); /* NULL-safe; no calls may be open */

/* TLS for a channel, with gRPC core's own credentials (PEM files, read at the open). */
typedef struct mv_rpc_tls_client_opts {
    const char *ca_file;     /* the CA that signed the server's certificate (required) */
    const char *cert_file;   /* a client certificate, or NULL (both or neither with key) */
    const char *key_file;    /* its private key */
    const char *server_name; /* the name the server's certificate must carry, NULL: the host
                              * of the target */
} mv_rpc_tls_client_opts;

/* As mv_rpc_channel_open over TLS ("host:port" targets only). A server whose certificate the
 * CA did not sign, or that speaks plaintext, fails every call with UNAVAILABLE. Returns 0, or
 * a negative errno with the reason in `err`. */
int mv_rpc_channel_open_tls(const char *target, size_t max_recv_bytes,
                            const mv_rpc_tls_client_opts *tls, mv_rpc_channel **out, char *err,
                            size_t errlen);

/* Sends "authorization: Bearer <token>" (copied) with every later call on the
 * channel. Not while calls are open. Returns 0, -EINVAL or -ENOMEM. */
int mv_rpc_channel_set_token(mv_rpc_channel *ch, const char *token);

/* Unary call; `timeout_ms` <= 0 means no deadline. On return *st holds the
 * final status and, if OK, *resp the reply (free with mv_rpc_buf_free). Returns
 * the status code (0 = OK) or a negative errno for local failures. */
int mv_rpc_unary(mv_rpc_channel *ch, const char *method, const void *req, size_t len,
                 int timeout_ms, mv_rpc_buf *resp, mv_rpc_status *st);

/* Flags for mv_rpc_unary_ex. WAIT_FOR_READY: wait (up to the deadline) for the
 * peer to appear instead of failing fast with UNAVAILABLE; keep the deadline short. */
#define MV_RPC_WAIT_FOR_READY 1u
int mv_rpc_unary_ex(mv_rpc_channel *ch, const char *method, const void *req, size_t len,
                    int timeout_ms, unsigned flags, mv_rpc_buf *resp, mv_rpc_status *st);

/* Starts a server-streaming call. `timeout_ms` <= 0: no deadline. Returns 0 or a
 * negative errno; call failures show up in mv_rpc_cstream_next. */
int mv_rpc_cstream_open(mv_rpc_channel *ch, const char *method, const void *req, size_t len,
                        int timeout_ms, mv_rpc_cstream **out);

/* Waits up to `wait_ms` (< 0 = forever) for the next message. Returns 1 with
 * *msg filled (free with mv_rpc_buf_free); 0 when the stream ended (*st holds the
 * status); -ETIMEDOUT if nothing arrived in time (call again). */
int mv_rpc_cstream_next(mv_rpc_cstream *cs, int wait_ms, mv_rpc_buf *msg, mv_rpc_status *st);

/* Cancels the call (thread-safe; the server sees the client go away). */
void mv_rpc_cstream_cancel(mv_rpc_cstream *cs);

/* Cancels if still open, waits for the call's operations and frees it. NULL-safe. */
void mv_rpc_cstream_close(mv_rpc_cstream *cs);

#endif
