/* mv_agentsvc: the microview.v1.Agent gRPC service, binding an mv_rpc server to a
 * segment store.
 *
 * Ownership: the service borrows both the server and the store. Destroy order:
 * mv_rpc_server_destroy (ends every watch), then mv_agentsvc_destroy, then
 * mv_segstore_close.
 */
#ifndef MV_AGENTSVC_H
#define MV_AGENTSVC_H

#include "mv_rpc.h"
#include "mv_segstore.h"

#define MV_AGENTSVC_CREATE  "/microview.v1.Agent/CreateSegment"
#define MV_AGENTSVC_RELEASE "/microview.v1.Agent/ReleaseSegment"
#define MV_AGENTSVC_LIST    "/microview.v1.Agent/ListSegments"
#define MV_AGENTSVC_WATCH   "/microview.v1.Agent/WatchSegments"

typedef struct mv_agentsvc mv_agentsvc;

/* Registers the Agent methods on `srv` (before mv_rpc_server_start).
 * Returns 0 or a negative errno. */
int mv_agentsvc_register(mv_rpc_server *srv, mv_segstore *store, mv_agentsvc **out);

/* Frees the service. NULL-safe. */
void mv_agentsvc_destroy(mv_agentsvc *svc);

#endif
