/* verbs: the collector's --transport verbs wiring: one RDMA connection and one
 * catalog watch per agent, segments added to the table as RDMA sources, and the
 * read statistics rendered as metrics.
 *
 * Ownership: verbs_agents_create copies the targets and the token; the set
 * borrows the table, which must outlive it (destroy the set after the table's
 * tick thread stopped, i.e. after mv_coll_destroy... see main.c for the order).
 */
#ifndef MV_COLLECTOR_VERBS_H
#define MV_COLLECTOR_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"

typedef struct verbs_agents verbs_agents;

typedef struct verbs_opts {
    const char *const *targets; /* "IP:PORT" of each agent's TCP control plane */
    size_t ntargets;
    const char *token;  /* shared token (control plane and rdma_cm) */
    uint16_t rdma_port; /* the agents' rdma_cm port */
    const char *src_ip; /* local address for RDMA connections; NULL = routed */
} verbs_opts;

/* Validates the targets and starts one catalog watch per agent. RDMA
 * connections are opened when an agent announces its first readable segment,
 * and retried by verbs_agents_poll. Returns 0 or -1 (message logged). */
int verbs_agents_create(const verbs_opts *o, mv_coll *coll, verbs_agents **out);
/* Stops the watches. The table must not be ticking any more (the RDMA sources
 * it holds refer to the connections closed here). NULL-safe. */
void verbs_agents_stop(verbs_agents *v);
void verbs_agents_destroy(verbs_agents *v);
/* Retries connections and segment additions that failed; call every ~0.5 s. */
void verbs_agents_poll(verbs_agents *v);
/* Renders per-agent and per-segment read statistics as metric families
 * (before the main exposition, which finishes the body). */
int verbs_agents_render(verbs_agents *v, mv_expo *e, const mv_coll_snap *snap);

#endif
