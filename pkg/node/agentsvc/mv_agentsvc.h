/* mv_agentsvc: the microview.v1.Agent gRPC service, binding an mv_rpc server to a
 * segment store.
 *
 * Ownership: the service borrows both the server and the store. Destroy order:
 * mv_rpc_server_destroy (ends every watch), then mv_agentsvc_destroy, then
 * mv_segstore_close.
 */
#ifndef MV_AGENTSVC_H
#define MV_AGENTSVC_H

#include <stdint.h>

#include "mv_rpc.h"
#include "mv_segstore.h"

#define MV_AGENTSVC_CREATE  "/microview.v1.Agent/CreateSegment"
#define MV_AGENTSVC_RELEASE "/microview.v1.Agent/ReleaseSegment"
#define MV_AGENTSVC_LIST    "/microview.v1.Agent/ListSegments"
#define MV_AGENTSVC_WATCH   "/microview.v1.Agent/WatchSegments"

/* CreateSegment hands the new file to its caller (mv_segstore_set_owner: chown, 0660), whose
 * uid and gid come from the unix socket's peer credentials (mv_rpc_call_peer); a root caller
 * keeps root:root, a caller without credentials (TCP) too. An owner named in the request
 * (owner_uid, owner_gid) is honoured only from a root caller or when it is the caller's own id;
 * otherwise nothing is created and the call fails with PERMISSION_DENIED naming the field.
 * Logged: segment.handed_over, segment.create_refused.
 *
 * ReleaseSegment, the one call that changes or removes an existing segment, is authorized by
 * the caller's peer credentials (mv_agentsvc_may_release): a unix-socket caller running as
 * root, or as the uid that owns the segment's file, may release it; anyone else gets
 * PERMISSION_DENIED naming the segment and the rule (logged segment.release_refused). A TCP
 * caller cannot be identified: its token's scope is its rule (mv_rpc_call_scope). The read
 * token (--token-file) allows ListSegments and WatchSegments only; CreateSegment and
 * ReleaseSegment need the admin scope (--admin-token-file, or a listener without any token)
 * and otherwise fail with PERMISSION_DENIED naming the scope (logged rpc.permission_denied).
 * An admin may release any segment. ListSegments and WatchSegments show
 * every segment to every caller: ids, paths, sizes, owner pids and labels are not secrets here
 * (the directory is world-listable, the collector publishes the labels on /metrics); what a
 * segment holds is guarded by its file's mode. */

typedef struct mv_agentsvc mv_agentsvc;

/* The release rule. `caller`: the unix-socket caller's credentials, NULL for a caller the
 * agent cannot identify (TCP). `file_uid`: the current owner of segment `id`'s file, or -1 when
 * the file could not be examined (`file_errno` says why). Returns 1 when the caller may
 * release the segment, 0 when it may not, with a message naming the segment and the rule in
 * `msg`. */
int mv_agentsvc_may_release(const mv_rpc_peer *caller, const char *id, int64_t file_uid,
                            int file_errno, char *msg, size_t msglen);

/* Checks the labels of a CreateSegmentRequest as sent (`req`, `len`: its protobuf bytes), before
 * they become C strings: a control byte (below 0x20, or 0x7f; NUL included) in a label name or
 * value is refused, not cut or passed on. Returns 0, or -EINVAL with the reason (the label's
 * index, name or value, the byte and its offset) in `err`. */
int mv_agentsvc_check_raw_labels(const uint8_t *req, size_t len, char *err, size_t errlen);

/* Serves an existing service on another (not yet started) server as well, e.g. one made to
 * replace a server whose unix socket was deleted. Returns 0 or a negative errno. */
int mv_agentsvc_attach(mv_rpc_server *srv, mv_agentsvc *svc);

/* Registers the Agent methods on `srv` (before mv_rpc_server_start).
 * Returns 0 or a negative errno. */
int mv_agentsvc_register(mv_rpc_server *srv, mv_segstore *store, mv_agentsvc **out);

/* ---- RDMA hook (optional) ----------------------------------------------------- */

/* What the RDMA exporter says about one segment. */
typedef struct mv_agentsvc_rdma_info {
    uint64_t addr;           /* remote address of the registered region */
    uint32_t rkey;           /* its remote key (remote read only) */
    uint64_t length;         /* bytes registered */
    uint32_t layout_version; /* segment format version */
    int readable;            /* nonzero: the fields above are valid */
    char reason[256];        /* why not readable, for logs and errors */
} mv_agentsvc_rdma_info;

/* Fills *out for `seg`. `may_register` is nonzero only while the store's watcher
 * lock is held for an ADDED event: the exporter may register the segment then
 * if it has not yet. Returns 0 (out filled) or a negative errno. */
typedef int (*mv_agentsvc_rdma_fn)(void *arg, const mv_segstore_seg *seg, int may_register,
                                   mv_agentsvc_rdma_info *out);

/* Fills the Segment messages' rdma_* fields through `fn` from now on. With
 * `require` set, CreateSegment fails (FAILED_PRECONDITION, with the reason) and
 * releases the segment when it is not RDMA-readable. May be called while serving
 * (an exporter that came up late); open watches learn the new rdma fields when
 * the store announces the segments again (mv_segstore_announce_all). `fn` and
 * `arg` must stay valid until mv_agentsvc_destroy. */
void mv_agentsvc_set_rdma(mv_agentsvc *svc, mv_agentsvc_rdma_fn fn, void *arg, int require);

/* Refuses every CreateSegment that comes over TCP from now on (PERMISSION_DENIED with `why`),
 * whatever the token: the Kubernetes mode's segments come from the device plugin's page pool.
 * Before serving. */
void mv_agentsvc_refuse_tcp_create(mv_agentsvc *svc, const char *why);

/* Frees the service. NULL-safe. */
void mv_agentsvc_destroy(mv_agentsvc *svc);

#endif
