/* mv_webhook: the mutating admission webhook that turns a pod annotation into metrics pages.
 *
 * A pod asks for metrics memory with the annotation microview.io/metrics-memory (a Kubernetes
 * quantity of bytes) and optionally microview.io/metrics-containers (a comma list of container
 * names; the first container by default). On Pod CREATE the webhook answers the AdmissionReview
 * with a JSON Patch that sets requests and limits of the extended resource (microview.io/metrics)
 * to ceil(bytes / page_size) for each chosen container, or denies the pod with a message that
 * names the annotation, its value and the accepted form.
 *
 * Three layers, usable on their own:
 *   mv_wh_quantity_bytes()  the quantity grammar of k8s.io/apimachinery (ParseQuantity)
 *   mv_wh_review()          one AdmissionReview request body -> response body (no I/O)
 *   mv_wh_server_*          HTTPS on the shared HTTP layer (mv_httpd): /mutate, /healthz,
 *                           /metrics, and the key pair reloaded when its files change
 *   mv_wh_run()             the daemon's lifecycle: start, wait for a signal, stop
 */
#ifndef MV_WEBHOOK_H
#define MV_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MV_WH_BODY_MAX       (1u << 20) /* request bodies above 1 MiB get 413 */
#define MV_WH_ANN_MEMORY     "microview.io/metrics-memory"
#define MV_WH_ANN_CONTAINERS "microview.io/metrics-containers"
#define MV_WH_RESOURCE_MAX   253 /* longest extended resource name */

/* ---- Quantities --------------------------------------------------------------------------- */

/* Parses a Kubernetes quantity as ParseQuantity in k8s.io/apimachinery/pkg/api/resource accepts
 * it (sign, digits with an optional decimal point, then a binary SI suffix Ki..Ei, a decimal SI
 * suffix n u m k M G T P E, or an exponent e<int>/E<int>) and stores its value rounded up to a
 * whole number of bytes, as Quantity.Value() rounds. Returns 0, -EINVAL when the text is not a
 * quantity or is zero or negative, or -ERANGE when the value exceeds 2^63-1 bytes; `why` (may be
 * NULL) gets a short reason without the value. `*rounded` (may be NULL) is set to 1 when the
 * value had a fraction of a byte that was rounded up, else 0. `s` need not be NUL-terminated. */
int mv_wh_quantity_bytes(const char *s, size_t len, uint64_t *bytes, int *rounded, char *why,
                         size_t whylen);

/* ---- Decisions ---------------------------------------------------------------------------- */

typedef struct {
    uint64_t page_size;         /* bytes per page (the agent's page_size), multiple of 4096 */
    uint64_t max_pages_per_pod; /* pages of the resource one pod may hold in total */
    char resource_name[MV_WH_RESOURCE_MAX + 1]; /* the extended resource, microview.io/metrics */
} mv_wh_config;

/* Fills defaults: 4096-byte pages, 4096 pages per pod (the agent's default pool of 16 MiB),
 * resource microview.io/metrics. */
void mv_wh_config_default(mv_wh_config *c);

/* Checks a configuration. Returns 0 or -EINVAL with a reason in `err`. */
int mv_wh_config_check(const mv_wh_config *c, char *err, size_t errlen);

typedef enum {
    MV_WH_ALLOWED = 0, /* allowed without a patch (no annotation, not a Pod CREATE, or equal) */
    MV_WH_PATCHED = 1, /* allowed with a JSON Patch */
    MV_WH_DENIED = 2,  /* not allowed: the annotation cannot be honoured */
    MV_WH_ERROR = 3,   /* the request itself is malformed */
} mv_wh_result_kind;

/* The outcome of one review. Strings are owned by the result; free with mv_wh_result_free(). */
typedef struct {
    mv_wh_result_kind kind;
    unsigned http_status; /* 200 (body is an AdmissionReview), 400 or 413 (body is text) */
    char *body;           /* the HTTP response body, NUL-terminated */
    size_t body_len;
    const char *content_type; /* static string */
    char *patch;              /* the JSON Patch before base64 (PATCHED only), else NULL */
    char *message;            /* why the pod was denied or the request refused, else NULL */
    char uid[128];            /* request.uid ("" when it could not be read) */
    char namespace_[64];      /* request.namespace, for logs */
    char name[256];           /* metadata.name or generateName, for logs */
    uint64_t pages;           /* pages per chosen container (PATCHED or equal), else 0 */
    unsigned containers;      /* containers patched */
} mv_wh_result;

/* Reviews one AdmissionReview v1 request body of `len` bytes (need not be NUL-terminated).
 * Bodies over MV_WH_BODY_MAX give 413. Fills `out` in every case; returns 0, or -ENOMEM (then
 * `out` holds nothing to free). */
int mv_wh_review(const mv_wh_config *c, const char *body, size_t len, mv_wh_result *out);

/* Frees the strings of a result (not the struct). NULL is ignored. */
void mv_wh_result_free(mv_wh_result *r);

/* ---- HTTPS server --------------------------------------------------------------------------- */

typedef struct mv_wh_server mv_wh_server;

typedef struct {
    const char *listen;          /* "[HOST]:PORT": ":8443", "127.0.0.1:8443", "[::1]:0" */
    const char *cert_file;       /* PEM certificate (chain), re-read when it changes */
    const char *key_file;        /* PEM private key matching it */
    unsigned reload_interval_ms; /* how often the files are checked; 0 = 1000 */
    unsigned threads;            /* worker threads; 0 = 2 */
    mv_wh_config review;
} mv_wh_server_config;

/* Loads the key pair and prepares a server (not yet listening). Only one server may exist at a
 * time in a process (-EBUSY otherwise). Returns 0, -EINVAL (bad config or key pair, logged with
 * the reason) or -ENOMEM. Destroy with mv_wh_server_destroy(). */
int mv_wh_server_create(const mv_wh_server_config *cfg, mv_wh_server **out);

/* Binds, serves and starts watching the key pair files. Returns 0 or a negative errno
 * (logged). */
int mv_wh_server_start(mv_wh_server *s);

/* The bound port (useful with port 0), or 0 before start. */
uint16_t mv_wh_server_port(const mv_wh_server *s);

/* Checks the key pair files now (the watcher does this every reload_interval_ms). Returns 1
 * when a new pair was loaded, 0 when nothing changed, or -EINVAL when the changed files do not
 * form a valid pair (the old pair stays in use; logged). */
int mv_wh_server_check_reload(mv_wh_server *s);

/* Stops serving and frees everything. NULL is ignored. */
void mv_wh_server_destroy(mv_wh_server *s);

/* ---- Lifecycle ------------------------------------------------------------------------------ */

/* Runs the webhook as a daemon (microview-webhook), beside mv_collector_run and mv_agent_run:
 * blocks SIGTERM and SIGINT in every thread and ignores SIGPIPE, creates and starts the server,
 * waits for one of the two signals (logging webhook.stopping), then destroys the server. Call
 * mv_log_init() first. Returns the exit status: 0 after a signal, 1 when the server could not
 * be created or started (logged). */
int mv_wh_run(const mv_wh_server_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
