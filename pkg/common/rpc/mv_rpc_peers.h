/* mv_rpc_peers: the credentials of the connections a server accepted on its unix sockets,
 * keyed by the connection's file descriptor: what maps a call back to its caller.
 *
 * gRPC core's C API has no peer-credential accessor. A connection that the server accepted
 * itself and handed to gRPC with grpc_server_add_channel_from_fd is named "fd:N" by gRPC
 * (grpc_call_get_peer), N being the descriptor it was given. The accept thread records the
 * kernel's SO_PEERCRED for N, with the socket's identity (device and inode of the open file),
 * before gRPC sees the connection; a call's handler looks "fd:N" up.
 *
 * Descriptor reuse: gRPC closes N when the connection is over, and the next descriptor opened
 * in the process may get the same number. An entry is therefore checked at lookup: N must
 * still be open and be the very socket recorded (fstat: same device and inode; a live socket's
 * inode is unique); a number reused by anything else (a file, an outgoing connection, a socket
 * accepted elsewhere) is refused and the stale entry dropped. A number reused by a connection
 * accepted here is recorded anew, replacing the entry.
 *
 * The remaining window would be a call looked up after its own connection was closed and its
 * number went to a newer connection accepted here: it would get the newer caller's
 * credentials. It cannot happen with gRPC core as built on Debian 12 (1.51): the server looks
 * a call up as soon as gRPC hands it over, while it holds a reference to the call; the call
 * holds its HTTP/2 stream, the stream holds the chttp2 transport, and the transport closes its
 * descriptor only in its destructor (close_transport_locked only shuts the socket down), so N
 * stays open, and cannot be reused, while any call of that connection is alive. The
 * credentials are read once there and kept with the call (mv_rpc_call_peer). So the window is
 * closed, not merely narrow. It rests on that gRPC behaviour, which tests/unit/test_rpc_peers.c
 * checks ("a held call keeps its connection's descriptor"): a gRPC that closed descriptors
 * earlier fails the suite instead of misattributing calls.
 *
 * Thread-safe. Exposed (outside mv_rpc) for the unit tests. */
#ifndef MV_RPC_PEERS_H
#define MV_RPC_PEERS_H

#include <stddef.h>

#include "mv_rpc.h"

typedef struct mv_rpc_peers mv_rpc_peers;

/* Returns 0 or -ENOMEM. */
int mv_rpc_peers_create(mv_rpc_peers **out);
void mv_rpc_peers_destroy(mv_rpc_peers *p); /* NULL-safe */

/* Records the connected unix socket `fd` just accepted: reads its SO_PEERCRED and identity,
 * replacing whatever an earlier connection with the same descriptor number left. Fills *out
 * (may be NULL). Returns 0, -ENOMEM, -ERANGE (descriptor number beyond what is tracked) or
 * the -errno of getsockopt/fstat (e.g. -ENOTSOCK). */
int mv_rpc_peers_accepted(mv_rpc_peers *p, int fd, mv_rpc_peer *out);

/* The credentials recorded for the connection gRPC names `peer` ("fd:N"). Returns 0 with
 * *out filled; -EINVAL when `peer` is not of that form (a TCP peer "ipv4:..."); -ENOENT when
 * nothing is recorded for N or N no longer holds the socket recorded (see above). */
int mv_rpc_peers_lookup(mv_rpc_peers *p, const char *peer, mv_rpc_peer *out);

/* Entries held (recorded and not yet found stale): for tests. */
size_t mv_rpc_peers_count(mv_rpc_peers *p);

#endif
