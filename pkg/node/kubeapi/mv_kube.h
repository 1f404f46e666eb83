/* mv_kube: a minimal Kubernetes API server client (libcurl): GET one pod with
 * the service-account bearer token, pod JSON parsing (json-c), and parsing of the
 * `microview.io/labels` annotation.
 *
 * The token file is re-read every `token_reread_s` seconds and right after a 401,
 * since projected service-account tokens rotate. Thread-safe: each request uses
 * its own curl handle; the token is guarded by a lock.
 *
 * Ownership: mv_kube_pod and mv_kube_kv arrays returned to callers are malloc'd;
 * free them with mv_kube_pod_clear / mv_kube_kvs_free.
 */
#ifndef MV_KUBE_H
#define MV_KUBE_H

#include <stddef.h>
#include <stdint.h>

#define MV_KUBE_ANNOTATION      "microview.io/labels"
#define MV_KUBE_BODY_MAX        (4u << 20) /* bytes of one API answer accepted */
#define MV_KUBE_KV_MAX          256        /* labels or annotations kept per pod */
#define MV_KUBE_POD_LABELS_MAX  13         /* labels a pod may ask for (16 minus identity) */
#define MV_KUBE_LABEL_VALUE_MAX 255

typedef struct mv_kube_kv {
    char *key;
    char *value;
} mv_kube_kv;

/* A container's own securityContext ids: -1 = not set there. */
typedef struct mv_kube_container {
    char *name;
    int64_t run_as_user, run_as_group;
} mv_kube_container;

typedef struct mv_kube_pod {
    char *namespace_;
    char *name;
    char *uid;
    char *node_name;
    size_t nlabels;
    mv_kube_kv *labels;
    size_t nannotations;
    mv_kube_kv *annotations;
    /* spec.securityContext (-1 = not set) and every container and init container. */
    int64_t run_as_user, run_as_group, fs_group;
    size_t ncontainers;
    mv_kube_container *containers;
} mv_kube_pod;

/* The user and group a container's processes run as, as far as the pod spec says:
 * uid = the container's runAsUser, else the pod's; gid = the container's runAsGroup, else the
 * pod's, else the pod's fsGroup (which Kubernetes adds to the container's groups). -1 where
 * the spec names none (the image's USER then decides, which the agent cannot see). */
void mv_kube_pod_owner(const mv_kube_pod *p, const char *container, int64_t *uid, int64_t *gid);

typedef struct mv_kube_opts {
    const char *url;        /* "https://10.0.0.1:443" or "http://127.0.0.1:8080" */
    const char *token_file; /* NULL = no Authorization header */
    const char *ca_file;    /* NULL = system CAs */
    int token_reread_s;     /* 0 = 60 */
    int timeout_ms;         /* per request; 0 = 5000 */
} mv_kube_opts;

typedef struct mv_kube mv_kube;

/* Copies the options. Call from one thread before any other thread uses curl.
 * Returns 0, -EINVAL (bad URL) or -ENOMEM. */
int mv_kube_create(const mv_kube_opts *o, mv_kube **out);
void mv_kube_destroy(mv_kube *k); /* NULL-safe */

/* GET /api/v1/namespaces/{ns}/pods/{name}. Returns 0; -ENOENT (404); -EACCES
 * (401/403); -EIO (unreachable, 5xx, bad body) with a reason in `err`. */
int mv_kube_get_pod(mv_kube *k, const char *ns, const char *name, mv_kube_pod *out, char *err,
                    size_t errlen);

/* Parses a Pod object (untrusted JSON). Returns 0 or -EINVAL with a reason. */
int mv_kube_parse_pod(const char *json, size_t len, mv_kube_pod *out, char *err, size_t errlen);

void mv_kube_pod_clear(mv_kube_pod *p);

/* The value of annotation `key`, or NULL. */
const char *mv_kube_pod_annotation(const mv_kube_pod *p, const char *key);

/* Parses "name=value,name2=value2" (the microview.io/labels annotation). Entries
 * are trimmed of spaces; an invalid entry (bad name, reserved name such as
 * namespace/pod/container, name starting with "__", a value that is not UTF-8 or
 * is longer than 255 bytes, a duplicate, or past MV_KUBE_POD_LABELS_MAX) is
 * skipped and described by one call of `on_invalid` (may be NULL). Returns the
 * number of labels kept (>= 0) or -ENOMEM. */
int mv_kube_parse_labels(const char *s, mv_kube_kv **out, size_t *n,
                         void (*on_invalid)(void *arg, const char *entry, const char *why),
                         void *arg);

void mv_kube_kvs_free(mv_kube_kv *v, size_t n);

#endif
