/* mv_rdma: what both ends of the RDMA data path share: the connect handshake's wire
 * layout, the shared token file, device facts and address helpers.
 *
 * The target (agent) side is pkg/node/rdmatarget (mv_rdmatarget.h); the
 * initiator (collector) side is pkg/collector/rdmaread (mv_rdmaread.h). They never
 * include each other. The token they share is pkg/common/rdmatoken (libc only);
 * this module needs libibverbs.
 *
 * Error codes: int functions return 0 or a negative errno value and, where an
 * `err` buffer is taken, a sentence the operator can act on.
 */
#ifndef MV_RDMA_H
#define MV_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "mv_rdmatoken.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wire layout of the connect request's private data (collector -> agent):
 *   bytes 0..3  "MVR1"
 *   byte  4     token length n (1..MV_RDMA_TOKEN_MAX)
 *   bytes 5..   the token (n bytes); the transport may pad the rest with zeros.
 * The accept's private data (agent -> collector) is "MVR1" followed by one
 * byte: the agent device's responder resources (max_qp_rd_atom, capped 255).
 * A reject carries "MVR1" followed by a short reason text. */
#define MV_RDMA_WIRE_MAGIC "MVR1"

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

/* Bytes of the handshake header: MV_RDMA_WIRE_MAGIC and one byte. */
#define MV_RDMA_WIRE_HDR 5

struct ibv_context;
struct sockaddr;
struct sockaddr_storage;

/* Fills `ss` from a numeric IPv4/IPv6 address and a port. Returns 0 or -EINVAL. */
int mv_rdma_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss);
/* Prints `sa` as "ip:port" into buf ("?:0" for NULL or an unknown family). */
void mv_rdma_addr_str(const struct sockaddr *sa, char *buf, size_t len);
/* Fills `o` with facts about (ctx, port) and finds the GID that rdma_cm uses
 * for the local address `sa` (an IPv4 address appears as ::ffff:a.b.c.d;
 * RoCE v2 is preferred when both types carry it). */
void mv_rdma_fill_dev_info(struct ibv_context *ctx, uint8_t port, const struct sockaddr *sa,
                           mv_rdma_dev_info *o);

#ifdef __cplusplus
}
#endif
#endif
