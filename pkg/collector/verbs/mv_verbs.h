/* mv_verbs: the collector's --transport verbs: one RDMA connection (pkg/collector/rdmaread) and
 * one catalog watch per agent, segments added to the table as RDMA sources, and the read
 * statistics rendered as metrics.
 *
 * Ownership: mv_verbs_create copies the targets and the token; the set borrows
 * the table. Order at shutdown: mv_verbs_stop (no more catalog events), then
 * mv_coll_destroy (the table's RDMA sources refer to the connections), then
 * mv_verbs_destroy (closes the connections).
 */
#ifndef MV_VERBS_H
#define MV_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"

typedef struct mv_verbs mv_verbs;

typedef struct mv_verbs_opts {
    const char *const *targets; /* "IP:PORT" of each agent's TCP control plane */
    size_t ntargets;
    const char *token;  /* shared token (control plane and rdma_cm) */
    uint16_t rdma_port; /* the agents' rdma_cm port */
    const char *src_ip; /* local address for RDMA connections; NULL = routed */
} mv_verbs_opts;

/* Validates the targets and starts one catalog watch per agent. RDMA
 * connections are opened when an agent announces its first readable segment,
 * and retried by mv_verbs_poll. Returns 0 or -1 (message logged). */
int mv_verbs_create(const mv_verbs_opts *o, mv_coll *coll, mv_verbs **out);
/* Stops the watches. The table must not be ticking any more (the RDMA sources
 * it holds refer to the connections closed here). NULL-safe. */
void mv_verbs_stop(mv_verbs *v);
void mv_verbs_destroy(mv_verbs *v);
/* Retries connections and segment additions that failed; call every ~0.5 s. */
void mv_verbs_poll(mv_verbs *v);
/* Renders per-agent and per-segment read statistics as metric families
 * (before the main exposition, which finishes the body). Returns 0, -ENOMEM or
 * the first error of the renderer (-ENOSPC: body cap reached). */
int mv_verbs_render(mv_verbs *v, mv_expo *e, const mv_coll_snap *snap);

#endif
