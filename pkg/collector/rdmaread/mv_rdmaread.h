/* mv_rdmaread_conn: the collector's end of the RDMA data path: one RC queue pair to an
 * agent's target, exposed as a transport of RDMA READs.
 *
 * mv_rdmaread_open connects one RC queue pair to a target; mv_rdmaread_transport
 * exposes it as an mv_coll_transport whose sources (mv_rdmaread_source_create) are
 * (remote address, rkey, length) triples. Reads are posted as linked RDMA READ
 * lists into a registered staging buffer and copied into each request's
 * destination. The transport only moves bytes; what they mean is the segment
 * reader's business.
 *
 * Error codes: int functions return 0 or a negative errno value and, where an
 * `err` buffer is taken, a sentence the operator can act on.
 */
#ifndef MV_RDMAREAD_H
#define MV_RDMAREAD_H

#include <stddef.h>
#include <stdint.h>

#include "mv_rdma.h"
#include "mv_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mv_rdmaread_conn mv_rdmaread_conn;

typedef struct mv_rdmaread_opts {
    const char *src_ip;          /* local address to bind (selects the local device); NULL = any */
    uint32_t connect_timeout_ms; /* address/route resolution and connect; default 3000 */
    uint32_t read_timeout_ms;    /* a read_many taking longer breaks the connection; 1000 */
    uint32_t sq_depth;           /* send queue entries (READs in flight); default 256 */
    size_t staging_initial;      /* staging buffer bytes at open; default 1 MiB */
    size_t staging_max;          /* cap for growth; larger ticks run in rounds; 64 MiB */
    uint32_t backoff_min_ms;     /* reconnect backoff after a failed attempt; 10 */
    uint32_t backoff_max_ms;     /* backoff cap; 5000 */
} mv_rdmaread_opts;

#define MV_RDMA_LAT_BUCKETS 32

typedef struct mv_rdmaread_stats {
    uint64_t reads;      /* READ work requests completed successfully */
    uint64_t bytes;      /* bytes they carried */
    uint64_t errors;     /* requests that ended with a nonzero status */
    uint64_t revoked;    /* of those, remote access errors (-EACCES) */
    uint64_t reconnects; /* successful reconnects after a break */
    uint64_t connect_failures;
    uint64_t ticks; /* read_many calls that posted at least one READ */
    /* Latency of each read_many (post of the first READ to the last
     * completion): bucket i counts ticks that took [2^i, 2^(i+1)) µs; bucket
     * 0 also takes < 1 µs and the last bucket everything above. */
    uint64_t tick_latency_us[MV_RDMA_LAT_BUCKETS];
    uint64_t last_tick_us;
    uint64_t tick_latency_sum_us; /* sum over all ticks (histogram _sum) */
    int connected;                /* 1 while the QP is usable */
    uint32_t initiator_depth;     /* negotiated READs in flight */
    size_t staging_bytes;         /* current staging buffer size */
} mv_rdmaread_stats;

void mv_rdmaread_opts_default(mv_rdmaread_opts *o);
/* Connects to the target at `agent_ip`:`port` with `token` (1 to
 * MV_RDMA_TOKEN_MAX bytes, copied). `opts` may be NULL. On success *out owns
 * the connection (event channel, PD, CQ, QP, staging buffer); close it with
 * mv_rdmaread_close after every source made from it was closed. Returns 0,
 * -ECONNREFUSED (rejected: wrong token or full; the reason is in `err`),
 * -ETIMEDOUT, -EHOSTUNREACH, -ENODEV or another -errno. */
int mv_rdmaread_open(const char *agent_ip, uint16_t port, const char *token,
                     const mv_rdmaread_opts *opts, mv_rdmaread_conn **out, char *err,
                     size_t errlen);
/* Disconnects and frees everything the connection owns. NULL is a no-op. */
void mv_rdmaread_close(mv_rdmaread_conn *c);
/* The connection as a transport for mv_coll_add; it lives as long as `c`.
 * read_many statuses: 0; -EACCES when the target answered with a remote
 * access error (the region was deregistered: drop that segment); -EIO for
 * anything else (READs flushed after another request's error, timeouts, a
 * broken connection waiting for its reconnect backoff); -EINVAL for a request
 * outside its source. After an error completion the connection is marked
 * broken and the next read_many reconnects first. Not thread-safe: call
 * read_many from one thread at a time. The transport is not `concurrent`, so
 * the collector serialises it; with several tick workers successive calls
 * come from different threads, which is fine: all state kept between calls
 * is in the connection (no thread-local state), handed over by that lock. */
const mv_coll_transport *mv_rdmaread_transport(mv_rdmaread_conn *c);
/* Makes a source for the transport: `len` bytes at `remote_addr` of the
 * target, readable with `rkey` (both from the agent's catalog). *src is
 * owned by whoever holds it (mv_coll_add takes it over) and freed by the
 * transport's src_close. Returns 0, -EINVAL or -ENOMEM. */
int mv_rdmaread_source_create(mv_rdmaread_conn *c, uint64_t remote_addr, uint32_t rkey,
                              uint64_t len, void **src);
/* Copies the counters (thread-safe against read_many). */
void mv_rdmaread_stats_get(mv_rdmaread_conn *c, mv_rdmaread_stats *out);
/* Facts about the local device of the current (or last) connection. */
void mv_rdmaread_info(mv_rdmaread_conn *c, mv_rdma_dev_info *out);

#ifdef __cplusplus
}
#endif
#endif
