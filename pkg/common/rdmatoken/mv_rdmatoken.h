/* mv_rdmatoken: the shared token both ends of the RDMA data path prove themselves with: how long
 * it may be and how its file is read. libc only (microviewctl and the collector read it without
 * libibverbs); the handshake that carries it is in pkg/common/rdma (mv_rdma.h).
 */
#ifndef MV_RDMATOKEN_H
#define MV_RDMATOKEN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest token carried in the connect private data (RoCE/IB REQ messages
 * leave 56 bytes to the consumer; the handshake's header takes 5 of them). */
#define MV_RDMA_TOKEN_MAX 48

/* Reads a shared token from the file at `path` into `out` (NUL-terminated):
 * surrounding whitespace is trimmed; the rest must be 1..MV_RDMA_TOKEN_MAX
 * printable ASCII characters (it also travels as a gRPC header). Returns 0, or
 * -errno / -EINVAL with a message in `err`. */
int mv_rdmatoken_load(const char *path, char *out, size_t outlen, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
