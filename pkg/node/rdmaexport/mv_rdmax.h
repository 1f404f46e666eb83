/* mv_rdmax: the agent's RDMA exporter: registers every segment of the store for
 * remote READ and tells the Agent service each segment's (address, rkey, length).
 *
 * It subscribes to the segment store: ADDED maps the segment file read-write
 * (kernels before 6.2 cannot pin a read-only mapping; the agent never writes
 * through it) and registers it with mv_rdmatarget_register (remote read only);
 * REMOVED deregisters it, which revokes the rkey, then unmaps it; CHANGED (new
 * labels) keeps the registration and its rkey. A segment that
 * cannot be registered is still served (shm collectors keep working) and
 * reported as not RDMA-readable, with the reason logged once.
 *
 * Ownership: the exporter borrows the store (close the store after
 * mv_rdmax_destroy) and owns the rdma_cm target, the mappings and the regions.
 * Thread-safe.
 */
#ifndef MV_RDMAX_H
#define MV_RDMAX_H

#include <stddef.h>
#include <stdint.h>

#include "mv_agentsvc.h"
#include "mv_segstore.h"

typedef struct mv_rdmax mv_rdmax;

typedef struct mv_rdmax_opts {
    const char *bind_ip; /* address of an RDMA netdev (selects the device) */
    uint16_t port;       /* rdma_cm port; 0 = any (see mv_rdmax_port) */
    const char *token;   /* shared secret collectors present (1..MV_RDMA_TOKEN_MAX bytes) */
} mv_rdmax_opts;

/* Creates the rdma_cm target and subscribes to `store` (registering the
 * segments it already holds). Returns 0, or a negative errno with a message in
 * `err` when the target cannot be created (no device at that address, ...). */
int mv_rdmax_create(const mv_rdmax_opts *o, mv_segstore *store, mv_rdmax **out, char *err,
                    size_t errlen);
/* Unsubscribes, deregisters and unmaps every segment, closes the target.
 * NULL-safe. */
void mv_rdmax_destroy(mv_rdmax *x);

/* The rdma_cm port collectors connect to. */
uint16_t mv_rdmax_port(const mv_rdmax *x);
/* Segments currently registered. */
size_t mv_rdmax_registered(mv_rdmax *x);

/* The Agent service hook (mv_agentsvc_rdma_fn): `arg` is the exporter. */
int mv_rdmax_lookup(void *arg, const mv_segstore_seg *seg, int may_register,
                    mv_agentsvc_rdma_info *out);

#endif
