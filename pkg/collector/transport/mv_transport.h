/* mv_transport: the interface a collector transport implements: a batch of reads of
 * (source, offset, length) into local buffers. libc only.
 *
 * The types keep the collector's mv_coll_ prefix: they are what mv_coll_add
 * takes. Implementations: the shm transport (pkg/collector/collect) and RDMA
 * READ (pkg/collector/rdmaread). A transport only moves bytes; what they mean is
 * the segment reader's business.
 */
#ifndef MV_TRANSPORT_H
#define MV_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One read request: copy `len` bytes at `off` of source `src` into `dst`
 * (8-aligned). The transport sets `status`: 0, or a negative errno
 * (-ENOENT/-EACCES: the segment is gone or revoked; -EIO: transient). */
typedef struct mv_coll_read {
    void *src;
    uint64_t off;
    uint32_t len;
    void *dst;
    int status;
} mv_coll_read;

typedef struct mv_coll_transport {
    const char *name;
    void *ctx;
    /* Performs all reads (in any order, possibly in parallel). */
    void (*read_many)(void *ctx, mv_coll_read *reqs, size_t n);
    /* Releases a source handle given to mv_coll_add. */
    void (*src_close)(void *ctx, void *src);
    /* Nonzero: read_many may run on several threads at once (each call with
     * its own requests and sources), e.g. from the collector's tick workers.
     * Zero (the default of an initializer that leaves it out): the collector
     * never enters read_many of this transport from two threads at once, but
     * successive calls may come from different threads. Last, so that an
     * initializer written for the fields above still means what it did. */
    int concurrent;
    /* Optional (NULL: not offered). Whether any of the n 8-byte words at offsets offs[] of
     * `src` differs from want[i], its value at an earlier read: 1 one differs, 0 all equal,
     * a negative errno when the source cannot be read. For transports that load a few words far
     * more cheaply than they copy a segment (shm): with adaptive sampling the collector probes each
     * backed-off segment every tick and reads it at once when the probe sees a change. */
    int (*probe)(void *ctx, void *src, const uint32_t *offs, const uint64_t *want, size_t n);
    /* Nonzero: read_many copies from memory this process maps, each copy complete when the
     * call returns (shm). The collector then reads and validates a few segments at a time,
     * so that each copy is still in cache when it is validated and analysed. Zero (RDMA): a
     * worker's whole share of a tick goes to one call, so that the reads overlap. */
    int local;
    /* Optional (NULL: not offered). Whether the object behind `src` changed under the reader in
     * a way its reads cannot see (shm: the file's size, inode or change time moved, e.g. a
     * truncation and a re-extension between two reads): 0 no; 1 yes, so the collector
     * validates the whole segment again (header and catalog) before it serves it; a negative
     * errno when the source can no longer be served as it was opened (its size differs from
     * the mapping's), with the reason in detail. Cheap enough to call about once a second per
     * segment. */
    int (*changed)(void *ctx, void *src, char *detail, size_t len);
} mv_coll_transport;

#ifdef __cplusplus
}
#endif
#endif
