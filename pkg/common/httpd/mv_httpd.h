/* mv_httpd: the project's one HTTP/1.1 server layer (libmicrohttpd), used by the collector and
 * the webhook: exact-path routes, limits, deadlines, TLS and gzip.
 *
 * Lifecycle: mv_httpd_create() -> mv_httpd_route()... -> mv_httpd_start() -> ... ->
 * mv_httpd_destroy(). Routes are fixed once started. mv_httpd_destroy() stops the server,
 * waits for running handlers to return, and frees everything.
 *
 * Requests: mv_httpd_route() serves GET and HEAD, mv_httpd_route_methods() also POST (the body,
 * up to max_body_bytes, is read before the handler runs: mv_httpd_body()). A method the route
 * does not serve gets 405 with "Allow"; a path without a route gets 404. HEAD runs the GET
 * handler; the body is not sent but Content-Length is. Every error the layer sends itself
 * (404, 405, 408-like closes excepted, 413, 414, 431, 500) has a short text body.
 *
 * Limits (each refusal is counted in mv_httpd_stats):
 *   - max_conns in all and max_conns_per_client from one client address: more are refused at
 *     accept;
 *   - request_deadline_s: an ABSOLUTE deadline: a connection must deliver a complete request
 *     (headers and body) within this many seconds of connecting or of its previous response,
 *     however slowly it trickles bytes, or it is closed (libmicrohttpd's own timeout, timeout_s,
 *     is an idle timeout that every byte resets). A sweeper thread checks 5 times a second and
 *     shuts the socket down;
 *   - max_request_bytes: per-connection memory (request line + headers + parsed arguments);
 *     a longer header gets 431, a longer request line 414, both with a body;
 *   - max_query_params: a request line with more query parameters gets 414 with a body (the
 *     arguments are not parsed, so they cannot exhaust the connection's memory);
 *   - max_body_bytes: a POST body over it gets 413 (at once when Content-Length says so; a
 *     chunked body is read and dropped up to 16 MiB, then the connection is closed).
 *
 * TLS: with tls_cert_file and tls_key_file set, the server speaks HTTPS only (GnuTLS through
 * libmicrohttpd) with the priority string tls_priorities (default MV_HTTPD_TLS_PRIORITIES:
 * TLS 1.2 and 1.3 only, AEAD ciphers, ECDHE). The key pair is re-read when its files change
 * (checked every tls_reload_ms; a Secret volume's symlink swap is noticed); a pair that does not
 * load keeps the previous one in use. Only one TLS server may exist in a process (GnuTLS's
 * certificate callback has no user pointer).
 *
 * Concurrency: handlers run on the server's pool threads (mv_httpd_config.threads), so the
 * same handler may run on several threads at once; a handler must protect shared state.
 * The request and response objects belong to one call and must not be kept after it.
 *
 * Responses: the handler sets a status (default 200), a content type, a body and extra
 * headers. Bodies handed over with mv_httpd_set_body() are owned and freed by the module.
 * When the body is larger than gzip_min_bytes (default 1 KiB) and the handler did not set
 * Content-Encoding, the module adds "Vary: Accept-Encoding" and, if the client's
 * Accept-Encoding allows gzip (q > 0), compresses the body and sets "Content-Encoding: gzip".
 * A handler returning a negative value produces a 500 with a short text body.
 */
#ifndef MV_HTTPD_H
#define MV_HTTPD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mv_httpd mv_httpd;
typedef struct mv_httpd_request mv_httpd_request;
typedef struct mv_httpd_response mv_httpd_response;

/* Returns 0 to send the response it filled, or a negative errno value for a 500. */
typedef int (*mv_httpd_handler)(void *arg, const mv_httpd_request *req, mv_httpd_response *resp);

/* Optional check run before every routed handler: returns 0 to go on to the handler, 1 when
 * it filled `resp` itself (e.g. 401/403: that response is sent and the handler is not run), or
 * a negative errno value for a 500. */
typedef int (*mv_httpd_authorize_fn)(void *arg, const mv_httpd_request *req,
                                     mv_httpd_response *resp);

/* TLS 1.2 and 1.3 only; AEAD ciphers (AES-GCM, ChaCha20-Poly1305) with ECDHE key exchange. */
#define MV_HTTPD_TLS_PRIORITIES                                                                    \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"            \
    "+CHACHA20-POLY1305:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA"

/* Route methods (mv_httpd_route_methods). */
#define MV_HTTPD_GET  1u /* GET and HEAD */
#define MV_HTTPD_POST 2u

typedef struct {
    const char *addr;                /* numeric IPv4/IPv6 address; "::" also accepts IPv4 */
    uint16_t port;                   /* 0 = ephemeral; see mv_httpd_port() */
    unsigned threads;                /* worker threads (thread pool size) */
    unsigned max_conns;              /* concurrent connections; more are refused */
    unsigned max_conns_per_client;   /* concurrent connections of one client address */
    size_t max_request_bytes;        /* per-connection memory, bounds request line + headers */
    unsigned timeout_s;              /* idle connection timeout (also for a request trickling in) */
    int gzip_level;                  /* zlib level 1..9 */
    size_t gzip_min_bytes;           /* compress only bodies larger than this */
    unsigned request_deadline_s;     /* absolute: a whole request within this (0 = none) */
    unsigned max_query_params;       /* query parameters per request line; more get 414 */
    size_t max_body_bytes;           /* POST bodies; larger ones get 413 */
    const char *tls_cert_file;       /* PEM certificate (chain): HTTPS when set with the key */
    const char *tls_key_file;        /* PEM private key matching it */
    const char *tls_priorities;      /* GnuTLS priority string; NULL = MV_HTTPD_TLS_PRIORITIES */
    unsigned tls_reload_ms;          /* how often the key pair files are checked; 0 = 1000 */
    mv_httpd_authorize_fn authorize; /* optional, see mv_httpd_authorize_fn */
    void *authorize_arg;
} mv_httpd_config;

/* Fills defaults: 127.0.0.1, port 0, 2 threads, 8192 connections of which at most 64 from
 * one client address, 32 KiB of connection memory, 64 query parameters, 10 s to deliver a
 * whole request, 10 s idle timeout, 1 MiB POST bodies, no TLS, gzip level 6 for bodies over
 * 1024 bytes. mv_httpd_start raises the open-files soft limit to fit max_conns (or lowers
 * max_conns, with a warning, when the hard limit is too small). Refused connections are
 * counted (mv_httpd_get_stats) and logged at most every 10 s (event
 * httpd.connection_refused), as are connections closed at the deadline (event
 * httpd.deadline_closed). */
void mv_httpd_config_default(mv_httpd_config *cfg);

/* Creates a server (not yet listening); with TLS, loads the key pair. Returns 0, -EINVAL (bad
 * address, limits or key pair, logged), -EBUSY (a TLS server already exists) or -ENOMEM. */
int mv_httpd_create(const mv_httpd_config *cfg, mv_httpd **out);

/* Routes GET and HEAD requests whose path equals `path` exactly (query string excluded) to
 * fn(arg, ...). Returns 0, -EEXIST, -EBUSY (already started), -EINVAL or -ENOMEM. */
int mv_httpd_route(mv_httpd *h, const char *path, mv_httpd_handler fn, void *arg);
/* The same for the methods in `methods` (MV_HTTPD_GET | MV_HTTPD_POST). */
int mv_httpd_route_methods(mv_httpd *h, const char *path, unsigned methods, mv_httpd_handler fn,
                           void *arg);

/* Binds and starts serving. Returns 0, -EADDRINUSE/-EACCES/-EIO (logged) or -EBUSY. */
int mv_httpd_start(mv_httpd *h);

/* The bound port (useful with port 0), or 0 if not started. */
uint16_t mv_httpd_port(const mv_httpd *h);

typedef struct mv_httpd_stats {
    uint64_t accepted;               /* connections served */
    uint64_t active;                 /* open now */
    uint64_t refused_client;         /* refused: the client held max_conns_per_client */
    uint64_t refused_limit;          /* refused: max_conns reached */
    uint64_t deadline_closed;        /* closed: no complete request within request_deadline_s */
    uint64_t rejected;               /* requests answered 4xx by the layer (404, 405, 413, 414) */
    uint64_t streams_open;           /* streamed responses being sent now */
    uint64_t streams_lifetime_ended; /* streams ended at their max_lifetime_s */
    uint64_t tls_reload_ok;          /* key pair reloads after its files changed */
    uint64_t tls_reload_failed;
    int64_t tls_not_after; /* expiry of the served certificate, Unix time (0: no TLS) */
} mv_httpd_stats;

void mv_httpd_get_stats(mv_httpd *h, mv_httpd_stats *out);

/* Checks the TLS key pair files now (a thread does this every tls_reload_ms). Returns 1 when
 * a new pair was loaded, 0 when nothing changed (or no TLS), or -EINVAL when the changed files
 * do not form a valid pair (the old pair stays in use; logged as tls.reload_failed). */
int mv_httpd_tls_check_reload(mv_httpd *h);

/* Stops (if started) and frees. NULL is ignored. */
void mv_httpd_destroy(mv_httpd *h);

/* ---- Request accessors (strings valid during the handler call) ---------------------- */
const char *mv_httpd_method(const mv_httpd_request *req); /* "GET" or "HEAD" */
const char *mv_httpd_path(const mv_httpd_request *req);
/* A query argument ("?key=value"), "" for "?key", NULL when absent. */
const char *mv_httpd_query(const mv_httpd_request *req, const char *key);
/* Calls fn(arg, key, value) for every query argument in order ("" for "?key"); stops at
 * the first nonzero return and returns it, else 0. */
int mv_httpd_query_each(const mv_httpd_request *req,
                        int (*fn)(void *arg, const char *key, const char *value), void *arg);
/* A request header, case-insensitive name; NULL when absent. */
const char *mv_httpd_header(const mv_httpd_request *req, const char *name);
/* The request body (POST routes; NUL-terminated, may hold NULs), "" with *len 0 when none. */
const char *mv_httpd_body(const mv_httpd_request *req, size_t *len);

/* ---- Response setters --------------------------------------------------------------- */
void mv_httpd_set_status(mv_httpd_response *resp, unsigned status);
/* Copies ct. Returns 0, -EINVAL (CR/LF in value) or -ENOMEM. */
int mv_httpd_set_content_type(mv_httpd_response *resp, const char *ct);
/* Takes ownership of a malloc'd body (freed by the module, also on error; NULL with len 0
 * clears). Replaces any previous body. Returns 0. */
int mv_httpd_set_body(mv_httpd_response *resp, char *body, size_t len);
/* Copies data into the body. Returns 0 or -ENOMEM. */
int mv_httpd_copy_body(mv_httpd_response *resp, const void *data, size_t len);
/* Adds a header (both strings copied; at most 16 headers; no CR/LF allowed).
 * Returns 0, -EINVAL, -ENOSPC or -ENOMEM. */
int mv_httpd_add_header(mv_httpd_response *resp, const char *name, const char *value);

/* ---- Streamed responses (Server-Sent Events) ---------------------------------------- */

/* A response whose body is produced over time (chunked, never gzipped). The request deadline
 * does not apply while it streams; instead each stream has its own bounded lifetime: the
 * layer ends it after max_lifetime_s, and the sweeper shuts its socket down 10 s later if it
 * is still open then (a client that stopped reading). libmicrohttpd's idle timeout
 * (timeout_s) closes a stream whose client reads nothing for that long, so a producer must
 * send something (a heartbeat) more often than that. A stream's socket send buffer is set
 * to 64 KiB, so the kernel holds little for a client that reads slowly. */
typedef struct mv_httpd_stream mv_httpd_stream;

/* Fills up to `max` bytes of the body: returns the count (> 0), 0 when there is nothing to
 * send now (the connection is parked, using no thread, until mv_httpd_stream_wake), or -1
 * to end the stream. Runs on a server thread; never concurrently for one stream. */
typedef long (*mv_httpd_stream_read_fn)(void *arg, char *buf, size_t max);

/* Makes `resp` a stream read through rd(arg, ...). fin(arg) runs once when the layer is done
 * with it (the connection closed, the stream ended, or the response was never sent); rd is
 * not called after. The handle is the caller's until mv_httpd_stream_release (wake may be
 * called until then, also after fin). Returns NULL (nothing kept, fin not called) on ENOMEM
 * or a max_lifetime_s of 0 or over 86400. */
mv_httpd_stream *mv_httpd_set_stream(mv_httpd_response *resp, mv_httpd_stream_read_fn rd,
                                     void (*fin)(void *arg), void *arg, unsigned max_lifetime_s);
/* Tells the layer there is something to send: a parked stream is resumed (rd is called
 * again soon), and a stream not parked does not park at its next empty read. Any thread. */
void mv_httpd_stream_wake(mv_httpd_stream *st);
/* Drops the caller's handle. */
void mv_httpd_stream_release(mv_httpd_stream *st);
/* The client's numeric address ("?" when unknown) into buf. */
void mv_httpd_client_addr(const mv_httpd_request *req, char *buf, size_t len);

/* Returns 1 if an Accept-Encoding header value allows gzip (q > 0 for gzip, x-gzip or *),
 * else 0. NULL means no. Exposed for tests. */
int mv_httpd_accepts_gzip(const char *accept_encoding);

#ifdef __cplusplus
}
#endif

#endif
