/* mv_rdmatarget: the agent's end of the RDMA data path: an rdma_cm listener and
 * remote-read-only registrations of segment memory.
 *
 * mv_rdmatarget_create binds an rdma_cm listener on one local IP address,
 * which selects the RDMA device, port and GID. One protection domain is
 * allocated on that device; every memory region registered with
 * mv_rdmatarget_register and every queue pair of an accepted collector lives in it.
 * Regions are registered for remote READ only. A collector proves it may
 * connect by sending the shared token in the connect request's private data
 * (layout in mv_rdma.h). A thread owned by the target handles connection events.
 *
 * Error codes: int functions return 0 or a negative errno value and, where an
 * `err` buffer is taken, a sentence the operator can act on.
 */
#ifndef MV_RDMATARGET_H
#define MV_RDMATARGET_H

#include <stddef.h>
#include <stdint.h>

#include "mv_rdma.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mv_rdmatarget mv_rdmatarget;
typedef struct mv_rdmatarget_mr mv_rdmatarget_mr;

typedef struct mv_rdmatarget_opts {
    int backlog;              /* rdma_listen backlog; default 64 */
    uint32_t max_connections; /* further requests are rejected; default 64 */
} mv_rdmatarget_opts;

/* Creates a target listening on `bind_ip`:`port` (port 0 = any free port, see
 * mv_rdmatarget_port). `bind_ip` must be an address of an RDMA netdev (for
 * RoCE: the Ethernet interface the RDMA device sits on). `token` (1 to
 * MV_RDMA_TOKEN_MAX bytes, copied) must be presented by every collector.
 * `opts` may be NULL for defaults. On success *out owns the listener, the
 * protection domain and the event thread; free it with mv_rdmatarget_destroy.
 * Returns 0, or -errno with a message in `err` (and in the log). */
int mv_rdmatarget_create(const char *bind_ip, uint16_t port, const char *token,
                         const mv_rdmatarget_opts *opts, mv_rdmatarget **out, char *err,
                         size_t errlen);
/* Stops the event thread, disconnects every collector and destroys their QPs,
 * then the listener and the protection domain. Every mv_rdmatarget_mr of this
 * target must have been deregistered before; if not, they are deregistered
 * here (and their handles become invalid). NULL is a no-op. */
void mv_rdmatarget_destroy(mv_rdmatarget *t);
/* The port the listener is bound to (useful with port 0). */
uint16_t mv_rdmatarget_port(const mv_rdmatarget *t);
/* Device facts; the struct is filled from data cached at create time. */
void mv_rdmatarget_info(const mv_rdmatarget *t, mv_rdma_dev_info *out);
/* Collectors currently connected (established). */
uint32_t mv_rdmatarget_connections(const mv_rdmatarget *t);

/* Registers [addr, addr+len) for remote READ only (never remote write, no
 * local write either). Kernels from 6.2 on can pin a PROT_READ mapping;
 * older ones (seen: 6.1) fail with -EFAULT, so map segments read-write on
 * such hosts. Pins the pages: the process needs CAP_IPC_LOCK or a memlock limit that
 * covers all its registrations; the limit is checked first. On success *out
 * is a handle to pass to mv_rdmatarget_deregister and *rkey the key collectors use.
 * Returns 0, -EINVAL, -ENOMEM (memlock or memory; see `err`), -EPERM, -EFAULT
 * (see above) or another -errno from the device. Thread-safe. The memory must stay mapped
 * until mv_rdmatarget_deregister returns. */
int mv_rdmatarget_register(mv_rdmatarget *t, void *addr, size_t len, mv_rdmatarget_mr **out,
                           uint32_t *rkey, char *err, size_t errlen);
/* Deregisters a region: its rkey is revoked, and a collector's READ of it
 * fails with a remote access error from then on. Frees `mr`. NULL is a no-op.
 * Returns 0 or -errno (the handle is freed in any case). Thread-safe. */
int mv_rdmatarget_deregister(mv_rdmatarget_mr *mr);

#ifdef __cplusplus
}
#endif
#endif
