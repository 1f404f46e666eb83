/* mv_rpc_unix: the server's own unix-socket listeners: bind and listen, one accept thread,
 * peer credentials recorded per connection (mv_rpc_peers), connections handed to gRPC. */
#include "mv_rpc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>

#include "mv_log.h"
#include "mv_rpc_peers.h"
#include "mv_util.h"

struct rpc_unix_listener {
    int fd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    dev_t dev; /* the socket file bound, to unlink only that one */
    ino_t ino;
    struct rpc_unix_listener *next;
};

/* Gives the socket file just bound at `path` (identity *sb) its group and mode. Returns 0 or
 * -errno with the step that failed in *step. */
static int set_perms(const char *path, const struct stat *sb, const mv_rpc_unix_perms *p,
                     const char **step)
{
    *step = "chown";
    if (p->gid >= 0 && lchown(path, (uid_t)-1, (gid_t)p->gid) < 0)
        return -errno;
    *step = "chmod";
    /* chmod follows a symlink: make sure the path still names the socket just bound. */
    struct stat now;
    if (lstat(path, &now) < 0)
        return -errno;
    if (!S_ISSOCK(now.st_mode) || now.st_dev != sb->st_dev || now.st_ino != sb->st_ino)
        return -ESTALE;
    if (p->mode >= 0 && chmod(path, (mode_t)p->mode) < 0)
        return -errno;
    return 0;
}

int mv_rpc__unix_listen(mv_rpc_server *s, const char *path, const mv_rpc_unix_perms *perms)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof sa.sun_path) {
        MV_ERROR("rpc.listen_failed", "addr=%s err=%s", mv_log_q(path),
                 mv_log_q("unix socket path empty or too long"));
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, path, len + 1);
    if (!s->peers && mv_rpc_peers_create(&s->peers) < 0)
        return -ENOMEM;
    struct rpc_unix_listener *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    memcpy(l->path, path, len + 1);
    /* As gRPC's listener: a socket left at the path (a previous run) is replaced. */
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
        unlink(path);
    int rc = 0;
    const char *step = "bind";
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&sa, sizeof sa) < 0 || lstat(path, &sb) < 0)
        rc = -errno;
    int bound = rc == 0;
    /* Permissions before listen(): until then a connect is refused, so no caller gets in
     * under the umask's mode. */
    if (rc == 0 && perms)
        rc = set_perms(path, &sb, perms, &step);
    if (rc == 0) {
        step = "listen";
        if (listen(l->fd, SOMAXCONN) < 0)
            rc = -errno;
    }
    if (rc < 0) {
        char mode[16] = "umask";
        if (perms && perms->mode >= 0)
            snprintf(mode, sizeof mode, "%04o", (unsigned)perms->mode);
        MV_ERROR("rpc.listen_failed", "addr=%s step=%s mode=%s gid=%lld err=%s", mv_log_q(path),
                 step, mode, perms ? (long long)perms->gid : -1LL, mv_log_q(strerror(-rc)));
        if (l->fd >= 0)
            close(l->fd);
        struct stat now; /* our socket file is not left behind with the wrong permissions */
        if (bound && lstat(path, &now) == 0 && S_ISSOCK(now.st_mode) && now.st_dev == sb.st_dev &&
            now.st_ino == sb.st_ino)
            unlink(path);
        free(l);
        return rc;
    }
    l->dev = sb.st_dev;
    l->ino = sb.st_ino;
    l->next = s->unix_listeners;
    s->unix_listeners = l;
    return 0;
}

/* Records the caller and hands the connection to gRPC, which owns (and closes) it after. */
static void hand_over(mv_rpc_server *s, int fd)
{
    mv_rpc_peer cred;
    int rc = mv_rpc_peers_accepted(s->peers, fd, &cred);
    if (rc < 0) {
        /* Refused rather than served without an identity. */
        MV_WARN("rpc.accept_refused", "fd=%d err=%s", fd, mv_log_q(strerror(-rc)));
        close(fd);
        return;
    }
    MV_DEBUG("rpc.accepted", "fd=%d uid=%u gid=%u pid=%d", fd, cred.uid, cred.gid, cred.pid);
    grpc_server_add_channel_from_fd(s->server, fd, s->unix_creds);
}

static void *accept_main(void *arg)
{
    mv_util_thread_name("mv-rpc-accept");
    mv_rpc_server *s = arg;
    size_t n = 1;
    for (struct rpc_unix_listener *l = s->unix_listeners; l; l = l->next)
        n++;
    struct pollfd *pfd = calloc(n, sizeof *pfd);
    if (!pfd) {
        MV_ERROR("rpc.oom", "what=accept_thread");
        return NULL;
    }
    pfd[0].fd = s->accept_wake[0];
    pfd[0].events = POLLIN;
    size_t i = 1;
    for (struct rpc_unix_listener *l = s->unix_listeners; l; l = l->next, i++) {
        pfd[i].fd = l->fd;
        pfd[i].events = POLLIN;
    }
    for (;;) {
        int backoff_ms = -1;
        int r = poll(pfd, n, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            MV_ERROR("rpc.accept_stopped", "err=%s", mv_log_q(strerror(errno)));
            break;
        }
        if (pfd[0].revents)
            break; /* mv_rpc_server_destroy */
        for (i = 1; i < n; i++) {
            if (!pfd[i].revents)
                continue;
            for (;;) {
                int fd = accept4(pfd[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd >= 0) {
                    hand_over(s, fd);
                    continue;
                }
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    /* The connection waits in the backlog; try again shortly. */
                    MV_WARN("rpc.accept_failed", "err=%s retry_ms=100", mv_log_q(strerror(errno)));
                    backoff_ms = 100;
                }
                break; /* EAGAIN: drained; ECONNABORTED, EINTR...: poll again */
            }
        }
        if (backoff_ms > 0) { /* wait without polling the listeners (they stay readable) */
            if (poll(pfd, 1, backoff_ms) > 0)
                break;
        }
    }
    free(pfd);
    return NULL;
}

int mv_rpc__unix_start(mv_rpc_server *s)
{
    if (!s->unix_listeners)
        return 0;
    s->unix_creds = grpc_insecure_server_credentials_create();
    if (pipe2(s->accept_wake, O_CLOEXEC) < 0) {
        int e = errno;
        s->accept_wake[0] = s->accept_wake[1] = -1;
        return -e;
    }
    int e = pthread_create(&s->accept_thread, NULL, accept_main, s);
    if (e)
        return -e;
    s->accept_started = 1;
    return 0;
}

void mv_rpc__unix_stop(mv_rpc_server *s)
{
    if (s->accept_started) {
        ssize_t w;
        do
            w = write(s->accept_wake[1], "x", 1);
        while (w < 0 && errno == EINTR);
        pthread_join(s->accept_thread, NULL);
        s->accept_started = 0;
    }
    for (int i = 0; i < 2; i++)
        if (s->accept_wake[i] >= 0) {
            close(s->accept_wake[i]);
            s->accept_wake[i] = -1;
        }
    while (s->unix_listeners) {
        struct rpc_unix_listener *l = s->unix_listeners;
        s->unix_listeners = l->next;
        close(l->fd);
        struct stat sb; /* as gRPC did, but only the socket this server bound */
        if (lstat(l->path, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_dev == l->dev &&
            sb.st_ino == l->ino)
            unlink(l->path);
        free(l);
    }
    if (s->unix_creds) {
        grpc_server_credentials_release(s->unix_creds);
        s->unix_creds = NULL;
    }
}
