/* mv_rdma: the RDMA data path — agent-side registration and listener, collector-side READ
 * transport.
 *
 * Target (agent) side: mv_rdma_target_create binds an rdma_cm listener on one
 * local IP address, which selects the RDMA device, port and GID. One protection
 * domain is allocated on that device; every memory region registered with
 * mv_rdma_register and every queue pair of an accepted collector lives in it.
 * Regions are registered for remote READ only. A collector proves it may
 * connect by sending the shared token in the connect request's private data.
 * A thread owned by the target handles connection events.
 *
 * Initiator (collector) side: mv_rdma_conn_open connects one RC queue pair to
 * a target; mv_rdma_transport exposes it as an mv_coll_transport whose sources
 * (mv_rdma_source_create) are (remote address, rkey, length) triples. Reads are
 * posted as linked RDMA READ lists into a registered staging buffer and copied
 * into each request's destination. The transport only moves bytes; what they
 * mean is the segment reader's business.
 *
 * Error codes: int functions return 0 or a negative errno value and, where an
 * `err` buffer is taken, a sentence the operator can act on.
 */
#ifndef MV_RDMA_H
#define MV_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest token carried in the connect private data (RoCE/IB REQ messages
 * leave 56 bytes to the consumer; the header below takes 5 of them). */
#define MV_RDMA_TOKEN_MAX 48

/* Wire layout of the connect request's private data (collector -> agent):
 *   bytes 0..3  "MVR1"
 *   byte  4     token length n (1..MV_RDMA_TOKEN_MAX)
 *   bytes 5..   the token (n bytes); the transport may pad the rest with zeros.
 * The accept's private data (agent -> collector) is "MVR1" followed by one
 * byte: the agent device's responder resources (max_qp_rd_atom, capped 255).
 * A reject carries "MVR1" followed by a short reason text. */
#define MV_RDMA_WIRE_MAGIC "MVR1"

/* Reads a shared token from the file at `path` into `out` (NUL-terminated):
 * surrounding whitespace is trimmed; the rest must be 1..MV_RDMA_TOKEN_MAX
 * printable ASCII characters (it also travels as a gRPC header). Returns 0, or
 * -errno / -EINVAL with a message in `err`. */
int mv_rdma_token_load(const char *path, char *out, size_t outlen, char *err, size_t errlen);

/* Facts about the RDMA device an endpoint uses, for logs and health. */
typedef struct mv_rdma_dev_info {
    char device[64];              /* e.g. "mlx5_0", "rxe0" */
    uint8_t port_num;             /* 1-based */
    char port_state[16];          /* "ACTIVE", "DOWN", ... */
    char link_layer[16];          /* "Ethernet" (RoCE) or "InfiniBand" */
    int gid_index;                /* GID matching the bound address, -1 if none found */
    char gid[48];                 /* that GID, printed as an IPv6 address */
    char gid_type[16];            /* "RoCE v2", "RoCE v1", "IB" or "" */
    uint32_t max_qp_rd_atom;      /* READs this device answers per QP */
    uint32_t max_qp_init_rd_atom; /* READs this device may have outstanding per QP */
} mv_rdma_dev_info;

/* ---- Target (agent) side ------------------------------------------------------ */

typedef struct mv_rdma_target mv_rdma_target;
typedef struct mv_rdma_mr mv_rdma_mr;

typedef struct mv_rdma_target_opts {
    int backlog;              /* rdma_listen backlog; default 64 */
    uint32_t max_connections; /* further requests are rejected; default 64 */
} mv_rdma_target_opts;

/* Creates a target listening on `bind_ip`:`port` (port 0 = any free port, see
 * mv_rdma_target_port). `bind_ip` must be an address of an RDMA netdev (for
 * RoCE: the Ethernet interface the RDMA device sits on). `token` (1 to
 * MV_RDMA_TOKEN_MAX bytes, copied) must be presented by every collector.
 * `opts` may be NULL for defaults. On success *out owns the listener, the
 * protection domain and the event thread; free it with mv_rdma_target_destroy.
 * Returns 0, or -errno with a message in `err` (and in the log). */
int mv_rdma_target_create(const char *bind_ip, uint16_t port, const char *token,
                          const mv_rdma_target_opts *opts, mv_rdma_target **out, char *err,
                          size_t errlen);
/* Stops the event thread, disconnects every collector and destroys their QPs,
 * then the listener and the protection domain. Every mv_rdma_mr of this
 * target must have been deregistered before; if not, they are deregistered
 * here (and their handles become invalid). NULL is a no-op. */
void mv_rdma_target_destroy(mv_rdma_target *t);
/* The port the listener is bound to (useful with port 0). */
uint16_t mv_rdma_target_port(const mv_rdma_target *t);
/* Device facts; the struct is filled from data cached at create time. */
void mv_rdma_target_info(const mv_rdma_target *t, mv_rdma_dev_info *out);
/* Collectors currently connected (established). */
uint32_t mv_rdma_target_connections(const mv_rdma_target *t);

/* Registers [addr, addr+len) for remote READ only (never remote write, no
 * local write either). Kernels from 6.2 on can pin a PROT_READ mapping;
 * older ones (seen: 6.1) fail with -EFAULT, so map segments read-write on
 * such hosts. Pins the pages: the process needs CAP_IPC_LOCK or a memlock limit that
 * covers all its registrations; the limit is checked first. On success *out
 * is a handle to pass to mv_rdma_deregister and *rkey the key collectors use.
 * Returns 0, -EINVAL, -ENOMEM (memlock or memory; see `err`), -EPERM, -EFAULT
 * (see above) or another -errno from the device. Thread-safe. The memory must stay mapped
 * until mv_rdma_deregister returns. */
int mv_rdma_register(mv_rdma_target *t, void *addr, size_t len, mv_rdma_mr **out, uint32_t *rkey,
                     char *err, size_t errlen);
/* Deregisters a region: its rkey is revoked, and a collector's READ of it
 * fails with a remote access error from then on. Frees `mr`. NULL is a no-op.
 * Returns 0 or -errno (the handle is freed in any case). Thread-safe. */
int mv_rdma_deregister(mv_rdma_mr *mr);

/* ---- Initiator (collector) side ------------------------------------------------ */

typedef struct mv_rdma_conn mv_rdma_conn;

typedef struct mv_rdma_conn_opts {
    const char *src_ip;          /* local address to bind (selects the local device); NULL = any */
    uint32_t connect_timeout_ms; /* address/route resolution and connect; default 3000 */
    uint32_t read_timeout_ms;    /* a read_many taking longer breaks the connection; 1000 */
    uint32_t sq_depth;           /* send queue entries (READs in flight); default 256 */
    size_t staging_initial;      /* staging buffer bytes at open; default 1 MiB */
    size_t staging_max;          /* cap for growth; larger ticks run in rounds; 64 MiB */
    uint32_t backoff_min_ms;     /* reconnect backoff after a failed attempt; 10 */
    uint32_t backoff_max_ms;     /* backoff cap; 5000 */
} mv_rdma_conn_opts;

#define MV_RDMA_LAT_BUCKETS 32

typedef struct mv_rdma_conn_stats {
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
} mv_rdma_conn_stats;

void mv_rdma_conn_opts_default(mv_rdma_conn_opts *o);
/* Connects to the target at `agent_ip`:`port` with `token` (1 to
 * MV_RDMA_TOKEN_MAX bytes, copied). `opts` may be NULL. On success *out owns
 * the connection (event channel, PD, CQ, QP, staging buffer); close it with
 * mv_rdma_conn_close after every source made from it was closed. Returns 0,
 * -ECONNREFUSED (rejected: wrong token or full; the reason is in `err`),
 * -ETIMEDOUT, -EHOSTUNREACH, -ENODEV or another -errno. */
int mv_rdma_conn_open(const char *agent_ip, uint16_t port, const char *token,
                      const mv_rdma_conn_opts *opts, mv_rdma_conn **out, char *err, size_t errlen);
/* Disconnects and frees everything the connection owns. NULL is a no-op. */
void mv_rdma_conn_close(mv_rdma_conn *c);
/* The connection as a transport for mv_coll_add; it lives as long as `c`.
 * read_many statuses: 0; -EACCES when the target answered with a remote
 * access error (the region was deregistered: drop that segment); -EIO for
 * anything else (READs flushed after another request's error, timeouts, a
 * broken connection waiting for its reconnect backoff); -EINVAL for a request
 * outside its source. After an error completion the connection is marked
 * broken and the next read_many reconnects first. Not thread-safe: call
 * read_many from one thread at a time (the collector's tick thread). */
const mv_coll_transport *mv_rdma_transport(mv_rdma_conn *c);
/* Makes a source for the transport: `len` bytes at `remote_addr` of the
 * target, readable with `rkey` (both from the agent's catalog). *src is
 * owned by whoever holds it (mv_coll_add takes it over) and freed by the
 * transport's src_close. Returns 0, -EINVAL or -ENOMEM. */
int mv_rdma_source_create(mv_rdma_conn *c, uint64_t remote_addr, uint32_t rkey, uint64_t len,
                          void **src);
/* Copies the counters (thread-safe against read_many). */
void mv_rdma_conn_stats_get(mv_rdma_conn *c, mv_rdma_conn_stats *out);
/* Facts about the local device of the current (or last) connection. */
void mv_rdma_conn_info(mv_rdma_conn *c, mv_rdma_dev_info *out);

#ifdef __cplusplus
}
#endif
#endif
