/* mv_discovery: follow an agent's segment catalog, with reconnects and resync. */
#ifndef MV_DISCOVERY_H
#define MV_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "mv_segment.h"

/* A segment announced by an agent. Strings are valid during the callback. */
typedef struct mv_disc_segment {
    const char *id;
    const char *path;
    uint64_t size;
    const mv_seg_label *labels;
    size_t nlabels;
    const mv_seg_label *pod_labels; /* the pod's Kubernetes labels, for selectors */
    size_t npod_labels;
    /* RDMA (remote collectors): meaningful when rdma_readable is nonzero. */
    uint64_t rdma_addr;
    uint32_t rdma_rkey;
    uint64_t rdma_length;
    uint32_t layout_version;
    int rdma_readable;
} mv_disc_segment;

typedef struct mv_disc_callbacks {
    void *arg;
    void (*added)(void *arg, const mv_disc_segment *s);
    void (*removed)(void *arg, const char *id);
    /* Optional. The agent changed a segment it still has (its labels, or its RDMA fields):
     * same id, path and size. Without it, the change arrives as removed then added. With it,
     * a removal reaches `removed` up to 200 ms later (the next event or 200 ms without one
     * tell a removal from the first half of a change). */
    void (*updated)(void *arg, const mv_disc_segment *s);
    /* After (re)connecting and receiving the full list: ids present now. The
     * consumer drops every other segment it got from this agent. */
    void (*synced)(void *arg, const char *const *ids, size_t n);
} mv_disc_callbacks;

typedef struct mv_disc mv_disc;

/* Starts a thread that watches the agent at `target` (e.g.
 * "unix:/run/microview/agent.sock"), reconnecting with exponential backoff
 * (100 ms .. 5 s) and logging each state change once. Free with
 * mv_disc_destroy, which stops the thread. */
int mv_disc_start(const char *target, const mv_disc_callbacks *cb, mv_disc **out);
/* Same, presenting `token` (copied; NULL = none) to the agent on every call, as
 * its TCP listener requires. */
int mv_disc_start_token(const char *target, const char *token, const mv_disc_callbacks *cb,
                        mv_disc **out);
void mv_disc_destroy(mv_disc *d);

#endif
