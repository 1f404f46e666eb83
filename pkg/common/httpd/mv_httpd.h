/* mv_httpd: a small HTTP/1.1 server (libmicrohttpd) routing exact paths to handlers.
 *
 * Lifecycle: mv_httpd_create() -> mv_httpd_route()... -> mv_httpd_start() -> ... ->
 * mv_httpd_destroy(). Routes are fixed once started. mv_httpd_destroy() stops the server,
 * waits for running handlers to return, and frees everything.
 *
 * Requests: only GET and HEAD are served (others get 405 with "Allow: GET, HEAD"); a path
 * without a route gets 404 with a short text body. HEAD runs the GET handler; the body is
 * not sent but Content-Length is.
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

typedef struct {
    const char *addr;              /* numeric IPv4/IPv6 address; "::" also accepts IPv4 */
    uint16_t port;                 /* 0 = ephemeral; see mv_httpd_port() */
    unsigned threads;              /* worker threads (thread pool size) */
    unsigned max_conns;            /* concurrent connections; more are refused */
    unsigned max_conns_per_client; /* concurrent connections of one client address */
    size_t max_request_bytes;      /* per-connection memory, bounds request line + headers */
    unsigned timeout_s;            /* idle connection timeout (also for a request trickling in) */
    int gzip_level;                /* zlib level 1..9 */
    size_t gzip_min_bytes;         /* compress only bodies larger than this */
} mv_httpd_config;

/* Fills defaults: 127.0.0.1, port 0, 2 threads, 1024 connections of which at most 64 from
 * one client address, 16 KiB requests, 10 s idle timeout, gzip level 6 for bodies over
 * 1024 bytes. mv_httpd_start raises the open-files soft limit to fit max_conns (or lowers
 * max_conns, with a warning, when the hard limit is too small). Refused connections are
 * counted (mv_httpd_get_stats) and logged at most every 10 s (event
 * httpd.connection_refused). */
void mv_httpd_config_default(mv_httpd_config *cfg);

/* Creates a server (not yet listening). Returns 0, -EINVAL (bad address or limits, logged)
 * or -ENOMEM. */
int mv_httpd_create(const mv_httpd_config *cfg, mv_httpd **out);

/* Routes requests whose path equals `path` exactly (query string excluded) to fn(arg, ...).
 * Returns 0, -EEXIST, -EBUSY (already started), -EINVAL or -ENOMEM. */
int mv_httpd_route(mv_httpd *h, const char *path, mv_httpd_handler fn, void *arg);

/* Binds and starts serving. Returns 0, -EADDRINUSE/-EACCES/-EIO (logged) or -EBUSY. */
int mv_httpd_start(mv_httpd *h);

/* The bound port (useful with port 0), or 0 if not started. */
uint16_t mv_httpd_port(const mv_httpd *h);

typedef struct mv_httpd_stats {
    uint64_t accepted;       /* connections served */
    uint64_t active;         /* open now */
    uint64_t refused_client; /* refused: the client held max_conns_per_client */
    uint64_t refused_limit;  /* refused: max_conns reached */
} mv_httpd_stats;

void mv_httpd_get_stats(mv_httpd *h, mv_httpd_stats *out);

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

/* Returns 1 if an Accept-Encoding header value allows gzip (q > 0 for gzip, x-gzip or *),
 * else 0. NULL means no. Exposed for tests. */
int mv_httpd_accepts_gzip(const char *accept_encoding);

#ifdef __cplusplus
}
#endif

#endif
