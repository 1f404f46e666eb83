/* mv_agent_run: the agent's start-up and shutdown, shared by the standalone and Kubernetes modes.
 */
#include "mv_agent.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_util.h"

/* Signals are taken synchronously by the main thread; they are blocked before
 * any thread starts so that every thread inherits the mask. A peer closing a
 * socket must not kill the process. */
static void signals_block(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The unix socket's identity, to notice it was deleted or replaced. */
typedef struct sock_id {
    int exists;
    dev_t dev;
    ino_t ino;
    mode_t mode; /* for the log */
    uid_t uid;
    gid_t gid;
} sock_id;

static sock_id sock_stat(const char *path)
{
    struct stat sb;
    sock_id id = {0, 0, 0, 0, 0, 0};
    if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode)) {
        id.exists = 1;
        id.dev = sb.st_dev;
        id.ino = sb.st_ino;
        id.mode = sb.st_mode;
        id.uid = sb.st_uid;
        id.gid = sb.st_gid;
    }
    return id;
}

/* The main thread sleeps until a signal or a change in the socket's directory (an entry
 * created, deleted or renamed, or the directory itself gone), and looks at the socket then
 * and every SOCK_CHECK_MS in any case (what inotify cannot see: a mount over the directory).
 * Without inotify or a signalfd it looks every FALLBACK_MS. */
#define SOCK_CHECK_MS 10000
#define FALLBACK_MS   1000

typedef struct sock_wait {
    int sig_fd; /* signalfd of `sigs`, or -1 */
    int ino_fd; /* inotify on the socket's directory, or -1 */
} sock_wait;

/* (Re)arms the watch on the directory of `path` (again after a rebuild: the directory may be
 * a new one). */
static void sock_wait_watch(sock_wait *w, const char *path)
{
    if (w->ino_fd >= 0)
        close(w->ino_fd);
    w->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    char dir[4096];
    const char *slash = strrchr(path, '/');
    int n = !slash ? mv_util_fmt(dir, sizeof dir, ".")
                   : mv_util_fmt(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path),
                                 path);
    uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                    IN_MOVE_SELF | IN_ONLYDIR;
    if (w->ino_fd >= 0 && n >= 0 && inotify_add_watch(w->ino_fd, dir, mask) >= 0)
        return;
    MV_DEBUG("agent.socket_watch_unavailable", "dir=%s err=%s", mv_log_q(dir),
             mv_log_q(strerror(errno)));
    if (w->ino_fd >= 0)
        close(w->ino_fd);
    w->ino_fd = -1;
}

/* Waits for a signal in `sigs` (returned) or a reason to look at the socket (0). */
static int sock_wait_next(sock_wait *w, sigset_t *sigs)
{
    if (w->sig_fd < 0) {
        struct timespec ts = {FALLBACK_MS / 1000, 0};
        int sig = sigtimedwait(sigs, NULL, &ts);
        return sig > 0 ? sig : 0;
    }
    struct pollfd p[2] = {{.fd = w->sig_fd, .events = POLLIN}, {.fd = w->ino_fd, .events = POLLIN}};
    if (poll(p, 2, w->ino_fd >= 0 ? SOCK_CHECK_MS : FALLBACK_MS) <= 0)
        return 0;
    if (p[0].revents & POLLIN) {
        struct signalfd_siginfo si;
        if (read(w->sig_fd, &si, sizeof si) == (ssize_t)sizeof si)
            return (int)si.ssi_signo;
    }
    _Alignas(struct inotify_event) char buf[4096];
    while ((p[1].revents & POLLIN) && read(w->ino_fd, buf, sizeof buf) > 0)
        ;
    return 0;
}

/* A server for `svc` on the unix socket (and TCP `tcp`, if any); the first call registers the
 * service, later ones (a replacement server) attach the same one. */
static int serve(const mv_agent_run_opts *o, mv_segstore *store, mv_agentsvc **svc,
                 mv_rpc_server **out)
{
    mv_rpc_server *srv = NULL;
    *out = NULL;
    if (mv_rpc_server_create(NULL, &srv) < 0)
        return -1;
    int rc = *svc ? mv_agentsvc_attach(srv, *svc) : mv_agentsvc_register(srv, store, svc);
    if (rc < 0 || (o->token && o->token[0] && mv_rpc_server_set_read_token(srv, o->token) < 0) ||
        (o->admin_token && o->admin_token[0] && mv_rpc_server_set_token(srv, o->admin_token) < 0)) {
        mv_rpc_server_destroy(srv);
        return -1;
    }
    *out = srv;
    return 0;
}

/* Listens and starts a server made by serve(). */
static int serve_start(const mv_agent_run_opts *o, mv_rpc_server *srv, const char *tcp,
                       int *tcp_port)
{
    if (mv_rpc_server_listen_unix(srv, o->socket_path, o->socket_perms) < 0)
        return -1;
    if (tcp && o->tls.cert_file) {
        char err[MV_ERR_MAX];
        if ((*tcp_port = mv_rpc_server_listen_tls(srv, tcp, &o->tls, err, sizeof err)) < 0)
            return -1;
    } else if (tcp && (*tcp_port = mv_rpc_server_listen(srv, tcp)) < 0) {
        return -1;
    }
    return mv_rpc_server_start(srv) < 0 ? -1 : 0;
}

/* The socket was deleted (or replaced): serve on a new one. Open watches end and their
 * clients reconnect; the TCP listener moves to the new server on the port it had. */
static mv_rpc_server *rebuild(const mv_agent_run_opts *o, const char *tcp, mv_segstore *store,
                              mv_agentsvc **svc, mv_rpc_server *old, int *tcp_port)
{
    char tcpaddr[300];
    if (tcp && *tcp_port > 0) {
        const char *colon = strrchr(tcp, ':');
        int hl = colon ? (int)(colon - tcp) : (int)strlen(tcp);
        mv_util_fmt(tcpaddr, sizeof tcpaddr, "%.*s:%d", hl, tcp, *tcp_port);
        tcp = tcpaddr;
    }
    mv_rpc_server_destroy(old);
    mv_rpc_server *srv;
    if (serve(o, store, svc, &srv) < 0)
        return NULL;
    if (serve_start(o, srv, tcp, tcp_port) < 0) {
        mv_rpc_server_destroy(srv);
        return NULL;
    }
    return srv;
}

int mv_agent_run(const mv_agent_run_opts *o, const mv_agent_mode *m)
{
    sigset_t sigs;
    signals_block(&sigs);

    int rc = 1;
    sock_wait w = {.sig_fd = -1, .ino_fd = -1};
    const char *tcp = o->tcp_listen && o->tcp_listen[0] ? o->tcp_listen : NULL;
    char unixaddr[4096 + 8];
    if (mv_util_fmt(unixaddr, sizeof unixaddr, "unix:%s", o->socket_path) < 0) {
        MV_ERROR("agent.config_invalid", "socket=%s err=%s", mv_log_q(o->socket_path),
                 mv_log_q("the socket path is too long"));
        return 1;
    }
    if (tcp && !o->tls.cert_file && !o->insecure_tcp) {
        MV_ERROR("agent.config_invalid", "listen=%s err=%s", mv_log_q(tcp),
                 mv_log_q("the TCP control plane needs TLS (a certificate and key) or an "
                          "explicit choice of plaintext (insecure listen)"));
        return 1;
    }
    if (tcp && !o->tls.cert_file)
        MV_WARN("agent.insecure_listen", "listen=%s risk=%s", mv_log_q(tcp),
                mv_log_q("plaintext TCP: tokens and segment metadata cross the network in "
                         "clear; anyone on the path can read and replay the token"));
    mv_segstore *store;
    if (mv_segstore_open(&o->store, &store) < 0)
        return 1;
    if (m->setup && m->setup(m->arg, store) < 0)
        goto close_store;
    mv_rpc_server *srv = NULL;
    mv_agentsvc *svc = NULL;
    if (serve(o, store, &svc, &srv) < 0)
        goto teardown;
    if (m->before_listen && m->before_listen(m->arg, svc) < 0)
        goto destroy_server;
    int tcp_port = 0;
    if (serve_start(o, srv, tcp, &tcp_port) < 0) {
        MV_ERROR("agent.listen_failed", "socket=%s listen=%s", mv_log_q(o->socket_path),
                 mv_log_q(tcp ? tcp : "off"));
        goto destroy_server;
    }
    if (m->started && m->started(m->arg, tcp_port) < 0)
        goto destroy_server;

    /* Wait for a signal; meanwhile make sure the control-plane socket still exists (an
     * operator's rm, a tmpfs cleaner): collectors and microviewctl need it. */
    w.sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
    sock_wait_watch(&w, o->socket_path);
    sock_id listening = sock_stat(o->socket_path);
    int sig = 0;
    for (;;) {
        sig = sock_wait_next(&w, &sigs);
        if (sig > 0)
            break;
        sock_id now = sock_stat(o->socket_path);
        if (now.exists && now.dev == listening.dev && now.ino == listening.ino)
            continue;
        MV_WARN("agent.socket_lost", "socket=%s found=%s action=%s", mv_log_q(o->socket_path),
                now.exists ? "another socket" : "nothing",
                mv_log_q("serving on a new socket; open watches reconnect"));
        mv_rpc_server *n = rebuild(o, tcp, store, &svc, srv, &tcp_port);
        srv = n;
        if (!n) {
            MV_ERROR("agent.socket_recreate_failed", "socket=%s", mv_log_q(o->socket_path));
            goto destroy_server;
        }
        sock_wait_watch(&w, o->socket_path);
        listening = sock_stat(o->socket_path);
        MV_INFO("agent.socket_recreated", "socket=%s mode=%04o uid=%u gid=%u tcp_port=%d",
                mv_log_q(o->socket_path), (unsigned)(listening.mode & 07777),
                (unsigned)listening.uid, (unsigned)listening.gid, tcp_port);
    }
    MV_INFO("agent.stopping", "signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
    if (m->stopping)
        m->stopping(m->arg);
destroy_server:
    if (w.sig_fd >= 0)
        close(w.sig_fd);
    if (w.ino_fd >= 0)
        close(w.ino_fd);
    mv_rpc_server_destroy(srv); /* ends every open watch before the service goes */
    if (m->after_server)
        m->after_server(m->arg); /* e.g. revokes every rkey */
    mv_agentsvc_destroy(svc);
teardown:
    if (m->teardown)
        m->teardown(m->arg);
close_store:
    mv_segstore_close(store);
    if (rc == 0)
        MV_INFO("agent.stopped", "mode=%s", o->mode);
    return rc;
}
