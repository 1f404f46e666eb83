/* mv_rpc_peers: credentials of accepted unix-socket connections by descriptor (see the header
 * for the descriptor-reuse rules). */
#include "mv_rpc_peers.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* Descriptor numbers tracked: far above any RLIMIT_NOFILE the agent runs with (the table
 * grows with the highest descriptor seen, 32 bytes an entry). */
#define PEERS_FD_MAX (1 << 22)

typedef struct peer_entry {
    int used;
    dev_t dev;
    ino_t ino;
    mv_rpc_peer cred;
} peer_entry;

struct mv_rpc_peers {
    pthread_mutex_t mu;
    peer_entry *v; /* indexed by descriptor */
    size_t cap;
    size_t used;
};

int mv_rpc_peers_create(mv_rpc_peers **out)
{
    *out = NULL;
    mv_rpc_peers *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return 0;
}

void mv_rpc_peers_destroy(mv_rpc_peers *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p->v);
    free(p);
}

/* Makes room for index fd. Called with the lock held. */
static int grow(mv_rpc_peers *p, int fd)
{
    if ((size_t)fd < p->cap)
        return 0;
    size_t n = p->cap ? p->cap : 64;
    while (n <= (size_t)fd)
        n *= 2;
    peer_entry *v = realloc(p->v, n * sizeof *v);
    if (!v)
        return -ENOMEM;
    memset(v + p->cap, 0, (n - p->cap) * sizeof *v);
    p->v = v;
    p->cap = n;
    return 0;
}

int mv_rpc_peers_accepted(mv_rpc_peers *p, int fd, mv_rpc_peer *out)
{
    if (fd < 0 || fd >= PEERS_FD_MAX)
        return -ERANGE;
    struct ucred uc;
    socklen_t len = sizeof uc;
    struct stat sb;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 || fstat(fd, &sb) < 0)
        return -errno;
    if (len != sizeof uc || !S_ISSOCK(sb.st_mode))
        return -ENOTSOCK;
    peer_entry e = {.used = 1,
                    .dev = sb.st_dev,
                    .ino = sb.st_ino,
                    .cred = {.uid = (uint32_t)uc.uid, .gid = (uint32_t)uc.gid, .pid = uc.pid}};
    pthread_mutex_lock(&p->mu);
    int rc = grow(p, fd);
    if (rc == 0) {
        if (!p->v[fd].used)
            p->used++;
        p->v[fd] = e; /* a reused number: the newer connection replaces the closed one */
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == 0 && out)
        *out = e.cred;
    return rc;
}

/* N of "fd:N" (decimal, nothing after it), or -1. */
static int parse_fd_peer(const char *peer)
{
    if (!peer || strncmp(peer, "fd:", 3) != 0)
        return -1;
    const char *s = peer + 3;
    long n = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        n = n * 10 + (*s - '0');
        if (n >= PEERS_FD_MAX)
            return -1;
    }
    return (int)n;
}

int mv_rpc_peers_lookup(mv_rpc_peers *p, const char *peer, mv_rpc_peer *out)
{
    int fd = parse_fd_peer(peer);
    if (fd < 0)
        return -EINVAL;
    int rc = -ENOENT;
    pthread_mutex_lock(&p->mu);
    if ((size_t)fd < p->cap && p->v[fd].used) {
        /* The descriptor must still hold the socket recorded at accept. */
        struct stat sb;
        if (fstat(fd, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_dev == p->v[fd].dev &&
            sb.st_ino == p->v[fd].ino) {
            *out = p->v[fd].cred;
            rc = 0;
        } else {
            memset(&p->v[fd], 0, sizeof p->v[fd]); /* closed, or reused by something else */
            p->used--;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

size_t mv_rpc_peers_count(mv_rpc_peers *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->used;
    pthread_mutex_unlock(&p->mu);
    return n;
}
