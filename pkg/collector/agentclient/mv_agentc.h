/* mv_agentc: client of the microview-agent control-plane API (microview.v1.Agent),
 * used by the collector and microviewctl.
 *
 * A handle may be used by one thread at a time (the last error message is kept
 * per handle); open one handle per thread for concurrent use.
 *
 * Ownership: segments returned are owned by the caller: free one with
 * mv_agentc_segment_clear, an array with mv_agentc_segments_free. Segments passed
 * to the watch callback are valid only during the callback.
 */
#ifndef MV_AGENTC_H
#define MV_AGENTC_H

#include <stddef.h>
#include <stdint.h>

#define MV_AGENTC_DEFAULT_TARGET "unix:/run/microview/agent.sock"

enum { MV_AGENTC_ADDED = 1, MV_AGENTC_REMOVED = 2, MV_AGENTC_SYNCED = 3, MV_AGENTC_IDLE = 4 };

typedef struct mv_agentc mv_agentc;

#define MV_AGENTC_POD_LABELS_MAX 32

typedef struct mv_agentc_label {
    char *name, *value;
} mv_agentc_label;

typedef struct mv_agentc_segment {
    char *id, *path;
    uint64_t size;
    uint32_t owner_pid;
    uint64_t created_ns;
    size_t nlabels;
    mv_agentc_label *labels;
    /* The pod's Kubernetes labels (for label selectors; not series labels): at most
     * MV_AGENTC_POD_LABELS_MAX, each a valid Kubernetes label key and value (others left out). */
    size_t npod_labels;
    mv_agentc_label *pod_labels;
    uint64_t revision; /* catalog revision of the event or reply that carried it */
    /* RDMA: valid when rdma_readable is nonzero (the agent registered the segment). */
    uint64_t rdma_addr;
    uint32_t rdma_rkey;
    uint64_t rdma_length;
    uint32_t layout_version;
    int rdma_readable;
} mv_agentc_segment;

/* Opens a client for `target` ("unix:/run/microview/agent.sock", a bare absolute
 * path, or "host:port"). Connects lazily. Returns 0, -EINVAL or -ENOMEM. */
int mv_agentc_open(const char *target, mv_agentc **out);
void mv_agentc_close(mv_agentc *c); /* NULL-safe */

/* TLS to agents' TCP listeners (their --tls-cert), for the whole process: every handle opened
 * afterwards on a "host:port" target uses it (unix sockets stay plaintext). Files are read
 * at each open (a rotated certificate is picked up on reconnect). */
typedef struct mv_agentc_tls {
    const char *ca_file;     /* the CA that signed the agent's certificate (required) */
    const char *cert_file;   /* client certificate (an agent with --tls-client-ca), or NULL */
    const char *key_file;    /* its key */
    const char *server_name; /* name the agent's certificate must carry; NULL: the host */
} mv_agentc_tls;

/* Checks the files are readable and keeps the settings. 0 or a negative errno with the
 * reason in `err`. */
int mv_agentc_set_tls(const mv_agentc_tls *tls, char *err, size_t errlen);

/* Human-readable reason of the last failure on this handle ("" if none). */
const char *mv_agentc_error(const mv_agentc *c);

/* Sends `token` (copied) as "authorization: Bearer <token>" with every call, as
 * an agent's TCP listener requires. Before the first call. 0, -EINVAL, -ENOMEM. */
int mv_agentc_set_token(mv_agentc *c, const char *token);

/* The calls below return 0 or a negative errno mapped from the gRPC status:
 * -ECONNREFUSED (agent not reachable), -EINVAL (bad argument), -ENOENT (unknown
 * id), -ENOSPC (out of resources), -ETIMEDOUT, -EPROTO (bad reply), -EACCES
 * (missing or wrong token, or an owner the caller may not name), -EIO. */

/* label_kv: name0, value0, name1, value1, ... (2 * nlabels strings). */
int mv_agentc_create(mv_agentc *c, uint64_t size, uint32_t owner_pid, const char *const *label_kv,
                     size_t nlabels, mv_agentc_segment *out);

/* The user and group a created segment file is handed to; -1 = not named. Unnamed, the agent
 * hands it to the caller on its unix socket (a root caller keeps root). It honours a named
 * id only from a root caller or when it is the caller's own, else the call fails with
 * -EACCES and the agent's reason. */
typedef struct mv_agentc_owner {
    int64_t uid, gid;
} mv_agentc_owner;

/* mv_agentc_create naming the owner (`owner` NULL: none named). */
int mv_agentc_create_owned(mv_agentc *c, uint64_t size, uint32_t owner_pid,
                           const char *const *label_kv, size_t nlabels,
                           const mv_agentc_owner *owner, mv_agentc_segment *out);
int mv_agentc_release(mv_agentc *c, const char *id);
int mv_agentc_list(mv_agentc *c, mv_agentc_segment **out, size_t *n, uint64_t *revision);

void mv_agentc_segment_clear(mv_agentc_segment *s);
void mv_agentc_segments_free(mv_agentc_segment *v, size_t n);

/* Blocking watch; calls cb for each event (for SYNCED the segment has id == NULL
 * and only `revision` set) until
 * the stream ends, an error, or *stop becomes nonzero (checked at least every
 * 200 ms). Returns 0 on stop, negative on error (including the agent ending the
 * stream, e.g. -ENOSPC when this watcher fell behind: list again and re-watch). */
int mv_agentc_watch(mv_agentc *c, void (*cb)(void *arg, int event, const mv_agentc_segment *s),
                    void *arg, const volatile int *stop);
/* The same, and cb(arg, MV_AGENTC_IDLE, NULL) after every 200 ms without an event, so that
 * the caller can act on what it held back waiting for the next event. */
int mv_agentc_watch_idle(mv_agentc *c, void (*cb)(void *arg, int event, const mv_agentc_segment *s),
                         void *arg, const volatile int *stop);

#endif
