/* Unit tests for the callers' credentials on mv_rpc's unix sockets: the credential map
 * (mv_rpc_peers: accept, close, descriptor reuse), what a handler learns of its caller, the
 * socket file's handling, and the gRPC behaviour the map relies on (a held call keeps its
 * connection's descriptor open after the client left). Real sockets and gRPC in /tmp. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpc/support/alloc.h>

#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_rpc_internal.h" /* the server's map and a call's gRPC handle, for the gRPC checks */
#include "mv_rpc_peers.h"
#include "mv_test.h"

static char *tmpdir;
static int seq;

/* ---- Helpers ----------------------------------------------------------------------- */

static void sock_path(char *buf, size_t len)
{
    snprintf(buf, len, "%s/p%d.sock", tmpdir, seq++);
}

static int listen_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 8) < 0)
        return -1;
    return fd;
}

/* A child process that connects to `path` (as `uid` when >= 0 and we are root) and stays
 * until *release is closed. Returns its pid; *release is the pipe end to close. */
static pid_t connect_child(const char *path, int uid, int *release)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        if (uid >= 0 && geteuid() == 0 && (setgid((gid_t)uid) < 0 || setuid((uid_t)uid) < 0))
            _exit(3);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            _exit(4);
        char c;
        while (read(p[0], &c, 1) < 0 && errno == EINTR)
            ;
        _exit(0);
    }
    close(p[0]);
    *release = p[1];
    return pid;
}

/* accept with a bound wait (a child that could not connect must not hang the test). */
static int accept_bounded(int lfd)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) != 1)
        return -1;
    return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

static void reap(pid_t pid, int release)
{
    close(release);
    int status;
    waitpid(pid, &status, 0);
}

static void peer_name(int fd, char *buf, size_t len)
{
    snprintf(buf, len, "fd:%d", fd);
}

/* ---- The credential map ------------------------------------------------------------- */

static void test_map_accept_lookup(void)
{
    mv_rpc_peers *p;
    CU_ASSERT_FATAL(mv_rpc_peers_create(&p) == 0);
    int sv[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    mv_rpc_peer got, rec;
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, sv[0], &rec), 0);
    CU_ASSERT_EQUAL(rec.uid, (uint32_t)getuid());
    CU_ASSERT_EQUAL(rec.gid, (uint32_t)getgid());
    CU_ASSERT_EQUAL(rec.pid, (int32_t)getpid());
    char name[32];
    peer_name(sv[0], name, sizeof name);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), 0);
    CU_ASSERT(got.uid == rec.uid && got.gid == rec.gid && got.pid == rec.pid);
    CU_ASSERT_EQUAL(mv_rpc_peers_count(p), 1);
    /* The other end was never recorded. */
    peer_name(sv[1], name, sizeof name);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), -ENOENT);
    close(sv[0]);
    close(sv[1]);
    mv_rpc_peers_destroy(p);
}

static void test_map_peer_strings(void)
{
    mv_rpc_peers *p;
    CU_ASSERT_FATAL(mv_rpc_peers_create(&p) == 0);
    mv_rpc_peer got;
    static const char *const bad[] = {"unix:/run/microview/agent.sock",
                                      "ipv4:127.0.0.1:5000",
                                      "ipv6:[::1]:5000",
                                      "fd:",
                                      "fd:12x",
                                      "fd:-1",
                                      "fd: 3",
                                      "FD:3",
                                      "fd:99999999999999999999",
                                      ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, bad[i], &got), -EINVAL);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, NULL, &got), -EINVAL);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, "fd:3", &got), -ENOENT); /* nothing recorded */
    /* Not a socket, or beyond the table: refused at accept. */
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, fd, NULL), -ENOTSOCK);
    close(fd);
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, -1, NULL), -ERANGE);
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, 1 << 30, NULL), -ERANGE);
    CU_ASSERT_EQUAL(mv_rpc_peers_count(p), 0);
    mv_rpc_peers_destroy(p);
}

static void test_map_close(void)
{
    mv_rpc_peers *p;
    CU_ASSERT_FATAL(mv_rpc_peers_create(&p) == 0);
    int sv[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, sv[0], NULL), 0);
    char name[32];
    peer_name(sv[0], name, sizeof name);
    close(sv[0]);
    mv_rpc_peer got;
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), -ENOENT);
    CU_ASSERT_EQUAL(mv_rpc_peers_count(p), 0); /* the stale entry is dropped */
    close(sv[1]);
    mv_rpc_peers_destroy(p);
}

/* A closed connection's number taken by something not accepted here: a file, or another
 * socket (an outgoing connection). Neither inherits the credentials. */
static void test_map_reuse_by_other(void)
{
    mv_rpc_peers *p;
    CU_ASSERT_FATAL(mv_rpc_peers_create(&p) == 0);
    int sv[2], other[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, sv[0], NULL), 0);
    char name[32];
    peer_name(sv[0], name, sizeof name);
    int n = sv[0];
    close(sv[0]);
    int fd = open("/dev/null", O_RDONLY);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(dup2(fd, n) == n);
    close(fd);
    mv_rpc_peer got;
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), -ENOENT);
    /* Recorded again, then replaced by an unrecorded socket. */
    close(n);
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, other) == 0);
    CU_ASSERT_FATAL(dup2(other[0], n) == n);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), -ENOENT);
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, n, NULL), 0);
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CU_ASSERT_FATAL(dup2(sv[0], n) == n); /* closes the recorded one, same number */
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), -ENOENT);
    close(n);
    close(sv[0]);
    close(sv[1]);
    close(other[0]);
    close(other[1]);
    mv_rpc_peers_destroy(p);
}

/* A closed connection's number taken by a newer connection accepted here: the newer caller's
 * credentials replace the older ones (the children's pids tell them apart). */
static void test_map_reuse_by_accept(void)
{
    mv_rpc_peers *p;
    CU_ASSERT_FATAL(mv_rpc_peers_create(&p) == 0);
    char path[300];
    sock_path(path, sizeof path);
    int lfd = listen_unix(path);
    CU_ASSERT_FATAL(lfd >= 0);
    chmod(path, 0777); /* the uid-1000 child connects */
    int rel1, rel2;
    pid_t c1 = connect_child(path, 1000, &rel1);
    CU_ASSERT_FATAL(c1 > 0);
    int a1 = accept_bounded(lfd);
    CU_ASSERT_FATAL(a1 >= 0);
    mv_rpc_peer rec1, rec2, got;
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, a1, &rec1), 0);
    CU_ASSERT_EQUAL(rec1.pid, (int32_t)c1);
    if (geteuid() == 0)
        CU_ASSERT(rec1.uid == 1000 && rec1.gid == 1000);
    char name[32];
    peer_name(a1, name, sizeof name);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), 0);
    CU_ASSERT_EQUAL(got.pid, (int32_t)c1);
    close(a1);
    pid_t c2 = connect_child(path, -1, &rel2);
    CU_ASSERT_FATAL(c2 > 0);
    int a2 = accept_bounded(lfd);
    CU_ASSERT_FATAL(a2 >= 0);
    if (a2 != a1) { /* lowest free number: normally the same; make sure of it */
        CU_ASSERT_FATAL(dup2(a2, a1) == a1);
        close(a2);
        a2 = a1;
    }
    /* Before the newer connection is recorded, the number yields nothing... */
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), -ENOENT);
    /* ...and after, the newer caller. */
    CU_ASSERT_EQUAL(mv_rpc_peers_accepted(p, a2, &rec2), 0);
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(p, name, &got), 0);
    CU_ASSERT_EQUAL(got.pid, (int32_t)c2);
    CU_ASSERT_EQUAL(got.uid, (uint32_t)getuid());
    CU_ASSERT_EQUAL(mv_rpc_peers_count(p), 1);
    close(a2);
    reap(c2, rel2); /* first: the second child holds a copy of rel1 */
    reap(c1, rel1);
    close(lfd);
    unlink(path);
    mv_rpc_peers_destroy(p);
}

/* ---- The server --------------------------------------------------------------------- */

/* Replies "uid gid pid" of the caller, or "none". */
static void whoami(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    mv_rpc_peer p;
    char buf[64];
    int n = mv_rpc_call_peer(call, &p) == 0
                ? snprintf(buf, sizeof buf, "%u %u %d", p.uid, p.gid, p.pid)
                : snprintf(buf, sizeof buf, "none");
    mv_rpc_reply(call, buf, (size_t)n);
}

static void echo(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    mv_rpc_reply(call, req, len);
}

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static mv_rpc_call *held;

/* Keeps the call without replying (the test replies). */
static void hold(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    pthread_mutex_lock(&held_mu);
    held = call;
    pthread_mutex_unlock(&held_mu);
}

static int is_held(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&held_mu);
    int h = held != NULL;
    pthread_mutex_unlock(&held_mu);
    return h;
}

static mv_rpc_server *server_on(const char *addr, const char *token)
{
    mv_rpc_server *s;
    if (mv_rpc_server_create(NULL, &s) < 0)
        return NULL;
    if (mv_rpc_server_add_unary(s, "/t.T/Whoami", whoami, NULL) < 0 ||
        mv_rpc_server_add_unary(s, "/t.T/Echo", echo, NULL) < 0 ||
        mv_rpc_server_add_unary(s, "/t.T/Hold", hold, NULL) < 0 ||
        (token && mv_rpc_server_set_token(s, token) < 0) || mv_rpc_server_listen(s, addr) < 0 ||
        mv_rpc_server_start(s) < 0) {
        mv_rpc_server_destroy(s);
        return NULL;
    }
    return s;
}

static int call_text(const char *target, const char *method, char *out, size_t outlen)
{
    mv_rpc_channel *ch;
    if (mv_rpc_channel_open(target, 0, &ch) < 0)
        return -1;
    mv_rpc_buf resp;
    mv_rpc_status st;
    int rc = mv_rpc_unary(ch, method, "x", 1, 5000, &resp, &st);
    if (rc == MV_RPC_OK)
        snprintf(out, outlen, "%.*s", (int)resp.len, (const char *)resp.data);
    mv_rpc_buf_free(&resp);
    mv_rpc_channel_close(ch);
    return rc;
}

static void test_call_peer_unix_and_tcp(void)
{
    char path[300], addr[310], want[64], got[64] = "";
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    /* A token is set: unix-socket callers still need none. */
    mv_rpc_server *s = server_on(addr, "secret");
    CU_ASSERT_FATAL(s != NULL);
    snprintf(want, sizeof want, "%u %u %d", (unsigned)getuid(), (unsigned)getgid(), (int)getpid());
    for (int i = 0; i < 3; i++) { /* new connections (likely the same descriptor number) */
        CU_ASSERT_EQUAL(call_text(addr, "/t.T/Whoami", got, sizeof got), MV_RPC_OK);
        CU_ASSERT_STRING_EQUAL(got, want);
    }
    mv_rpc_server_destroy(s);

    /* TCP: no credentials (and the token applies). */
    mv_rpc_server *t;
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &t) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_unary(t, "/t.T/Whoami", whoami, NULL) == 0);
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    CU_ASSERT_FATAL(mv_rpc_server_listen(t, addr) == 0); /* the map exists, TCP is not in it */
    int port = mv_rpc_server_listen(t, "127.0.0.1:0");
    CU_ASSERT_FATAL(port > 0);
    CU_ASSERT_FATAL(mv_rpc_server_start(t) == 0);
    char tcp[64];
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", port);
    CU_ASSERT_EQUAL(call_text(tcp, "/t.T/Whoami", got, sizeof got), MV_RPC_OK);
    CU_ASSERT_STRING_EQUAL(got, "none");
    CU_ASSERT_EQUAL(call_text(addr, "/t.T/Whoami", got, sizeof got), MV_RPC_OK);
    CU_ASSERT_STRING_EQUAL(got, want);
    mv_rpc_server_destroy(t);
}

/* What mv_rpc_peers.h relies on: while the server holds a call, gRPC keeps the call's
 * connection descriptor open, even after the client went away, so a newer connection cannot
 * take its number. Once the call is answered and freed, the descriptor is closed. If a gRPC
 * upgrade breaks this, this test fails. */
static void test_held_call_keeps_descriptor(void)
{
    char path[300], addr[310], got[64];
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    mv_rpc_server *s = server_on(addr, NULL);
    CU_ASSERT_FATAL(s != NULL);
    mv_rpc_channel *ch;
    CU_ASSERT_FATAL(mv_rpc_channel_open(addr, 0, &ch) == 0);
    mv_rpc_buf resp;
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_unary(ch, "/t.T/Hold", "x", 1, 300, &resp, &st),
                    MV_RPC_DEADLINE_EXCEEDED);
    CU_ASSERT_FATAL(mv_test_wait_until(is_held, NULL, 5000));
    char *peer = grpc_call_get_peer(held->call);
    CU_ASSERT_FATAL(peer && strncmp(peer, "fd:", 3) == 0);
    int n = atoi(peer + 3);
    mv_rpc_peer p;
    CU_ASSERT_EQUAL(mv_rpc_call_peer(held, &p), 0);
    CU_ASSERT_EQUAL(p.pid, (int32_t)getpid());
    /* The client goes away; the server side sees the peer's end closed (POLLRDHUP: the
     * client's last frames may still sit unread in the socket, so a read alone can show
     * data rather than end-of-file). */
    mv_rpc_channel_close(ch);
    uint64_t t0 = mv_test_mono_ms();
    int eof = 0;
    for (;;) {
        struct pollfd pf = {.fd = n, .events = POLLRDHUP};
        eof = poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP));
        if (eof || mv_test_mono_ms() - t0 >= 5000)
            break;
        mv_test_sleep_ms(10);
    }
    CU_ASSERT(eof);
    mv_test_sleep_ms(200); /* let gRPC act on it: it shuts the transport down */
    /* A newer connection does not get the held call's number... */
    CU_ASSERT_EQUAL(call_text(addr, "/t.T/Echo", got, sizeof got), MV_RPC_OK);
    struct stat sb;
    CU_ASSERT_EQUAL(fstat(n, &sb), 0);
    CU_ASSERT(S_ISSOCK(sb.st_mode));
    /* ...and the number still holds the recorded socket. */
    mv_rpc_peer again;
    CU_ASSERT_EQUAL(mv_rpc_peers_lookup(s->peers, peer, &again), 0);
    CU_ASSERT_EQUAL(again.pid, p.pid);
    /* Answered and freed: the connection is gone and its entry found stale. */
    pthread_mutex_lock(&held_mu);
    mv_rpc_call *h = held;
    held = NULL;
    pthread_mutex_unlock(&held_mu);
    mv_rpc_reply(h, "late", 4);
    t0 = mv_test_mono_ms();
    int gone = 0;
    while (!gone && mv_test_mono_ms() - t0 < 5000) {
        gone = mv_rpc_peers_lookup(s->peers, peer, &again) == -ENOENT;
        if (!gone)
            mv_test_sleep_ms(10);
    }
    CU_ASSERT(gone);
    gpr_free(peer);
    mv_rpc_server_destroy(s);
}

/* The socket file, as gRPC's own listener handled it: a leftover socket is replaced, a
 * regular file is not, the mode follows the umask, the file goes with the server (but not a
 * socket that replaced it). */
static void test_socket_file(void)
{
    char path[300], addr[310];
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    int stale = listen_unix(path);
    CU_ASSERT_FATAL(stale >= 0);
    close(stale); /* a dead socket left by a previous run */
    mode_t old = umask(0);
    mv_rpc_server *s = server_on(addr, NULL);
    umask(old);
    CU_ASSERT_FATAL(s != NULL);
    struct stat sb;
    CU_ASSERT_FATAL(lstat(path, &sb) == 0);
    CU_ASSERT(S_ISSOCK(sb.st_mode));
    CU_ASSERT_EQUAL(sb.st_mode & 0777, 0777);
    char got[64];
    CU_ASSERT_EQUAL(call_text(addr, "/t.T/Echo", got, sizeof got), MV_RPC_OK);
    mv_rpc_server_destroy(s);
    CU_ASSERT_EQUAL(lstat(path, &sb), -1);

    old = umask(0077);
    s = server_on(addr, NULL);
    umask(old);
    CU_ASSERT_FATAL(s != NULL);
    CU_ASSERT_FATAL(lstat(path, &sb) == 0);
    CU_ASSERT_EQUAL(sb.st_mode & 0777, 0700);
    /* Replaced under the server (an operator's rm and another program's socket). */
    unlink(path);
    int other = listen_unix(path);
    CU_ASSERT_FATAL(other >= 0);
    mv_rpc_server_destroy(s);
    CU_ASSERT_EQUAL(lstat(path, &sb), 0);
    close(other);
    unlink(path);

    /* A regular file at the path is not removed: the listen fails. */
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    mv_rpc_server *f;
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &f) == 0);
    CU_ASSERT_EQUAL(mv_rpc_server_listen(f, addr), -EADDRNOTAVAIL);
    mv_rpc_server_destroy(f);
    CU_ASSERT(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    unlink(path);
}

/* The socket file's permissions when asked for (mv_rpc_server_listen_unix): mode and group
 * whatever the umask, applied before anyone can connect; a group that cannot be given fails
 * the listen and leaves no socket behind; nonsense is refused. */
static void test_socket_perms(void)
{
    char path[300], addr[310];
    sock_path(path, sizeof path);
    snprintf(addr, sizeof addr, "unix:%s", path);
    /* 0666 under umask 022 (which would give 0755). */
    mode_t old = umask(022);
    mv_rpc_server *s;
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &s) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_unary(s, "/t.T/Echo", echo, NULL) == 0);
    mv_rpc_unix_perms p = {.mode = 0666, .gid = -1};
    CU_ASSERT_EQUAL_FATAL(mv_rpc_server_listen_unix(s, path, &p), 0);
    CU_ASSERT_FATAL(mv_rpc_server_start(s) == 0);
    umask(old);
    struct stat sb;
    CU_ASSERT_FATAL(lstat(path, &sb) == 0);
    CU_ASSERT(S_ISSOCK(sb.st_mode));
    CU_ASSERT_EQUAL(sb.st_mode & 07777, 0666);
    CU_ASSERT_EQUAL(sb.st_gid, getegid());
    char got[64];
    CU_ASSERT_EQUAL(call_text(addr, "/t.T/Echo", got, sizeof got), MV_RPC_OK);
    mv_rpc_server_destroy(s);
    CU_ASSERT_EQUAL(lstat(path, &sb), -1);

    /* A group (root: any; others: their own) and a narrower mode than the umask's. */
    gid_t g = geteuid() == 0 ? 4242 : getegid();
    old = umask(0);
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &s) == 0);
    p = (mv_rpc_unix_perms){.mode = 0660, .gid = g};
    CU_ASSERT_EQUAL_FATAL(mv_rpc_server_listen_unix(s, path, &p), 0);
    umask(old);
    CU_ASSERT_FATAL(lstat(path, &sb) == 0);
    CU_ASSERT_EQUAL(sb.st_mode & 07777, 0660);
    CU_ASSERT_EQUAL(sb.st_gid, g);
    mv_rpc_server_destroy(s); /* never started: the listener goes all the same */
    CU_ASSERT_EQUAL(lstat(path, &sb), -1);

    /* Only a group: the mode stays the umask's. */
    old = umask(027);
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &s) == 0);
    p = (mv_rpc_unix_perms){.mode = -1, .gid = g};
    CU_ASSERT_EQUAL(mv_rpc_server_listen_unix(s, path, &p), 0);
    umask(old);
    CU_ASSERT(lstat(path, &sb) == 0 && (sb.st_mode & 07777) == 0750 && sb.st_gid == g);
    mv_rpc_server_destroy(s);

    /* Nonsense is refused before anything is made. */
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &s) == 0);
    mv_rpc_unix_perms bad[] = {{01777, -1}, {-2, -1}, {0660, -2}, {0660, (int64_t)UINT32_MAX}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(mv_rpc_server_listen_unix(s, path, &bad[i]), -EINVAL);
    CU_ASSERT_EQUAL(lstat(path, &sb), -1);
    mv_rpc_server_destroy(s);

    /* A group the process may not give (not root: one it is not in) fails the listen, and
     * the half-made socket is not left behind. */
    if (geteuid() != 0) {
        CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &s) == 0);
        p = (mv_rpc_unix_perms){.mode = 0660, .gid = 4242};
        CU_ASSERT_EQUAL(mv_rpc_server_listen_unix(s, path, &p), -EPERM);
        CU_ASSERT_EQUAL(lstat(path, &sb), -1);
        mv_rpc_server_destroy(s);
    }
}

int main(void)
{
    mv_log_init("test", MV_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    tmpdir = mv_test_tmpdir("rpcpeers");
    if (!tmpdir)
        return 1;
    chmod(tmpdir, 0755); /* the uid-1000 child connects in it */
    static const mv_test tests[] = {
        {"map: accept then look up", test_map_accept_lookup},
        {"map: only fd:N peers are looked up", test_map_peer_strings},
        {"map: a closed connection yields nothing", test_map_close},
        {"map: a number reused by a file or another socket yields nothing",
         test_map_reuse_by_other},
        {"map: a number reused by a newer accepted connection yields the newer caller",
         test_map_reuse_by_accept},
        {"server: a unix-socket call knows its caller, a TCP call does not",
         test_call_peer_unix_and_tcp},
        {"server: a held call keeps its connection's descriptor", test_held_call_keeps_descriptor},
        {"server: the socket file", test_socket_file},
        {"server: the socket file's mode and group", test_socket_perms},
    };
    int fails = MV_TEST_RUN("rpc_peers", tests);
    mv_test_rmrf(tmpdir);
    free(tmpdir);
    return fails;
}
