/* Tests for the agent: segment store + Agent service + agent client, in-process
 * over a unix socket in a temporary directory. The store's own reaper and catalog checks,
 * without the service, are test_segstore.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <linux/sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "microview/v1/agent.pb-c.h"
#include "mv_agentc.h"
#include "mv_agentsvc.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_segment.h"
#include "mv_segstore.h"
#include "mv_test.h"

static char tmpdir[256];
static int dir_seq;

typedef struct agent {
    char dir[400];
    char target[500];
    mv_segstore *store;
    mv_rpc_server *srv;
    mv_agentsvc *svc;
    mv_agentc *cli;
} agent;

static const mv_rpc_unix_perms *start_perms; /* the socket's, for the next agent_start */

static void agent_start(agent *a, const char *dir, int reap_ms)
{
    if (dir != a->dir) {
        memset(a, 0, sizeof *a);
        if (dir)
            snprintf(a->dir, sizeof a->dir, "%s", dir);
        else
            snprintf(a->dir, sizeof a->dir, "%s/agent%d/run", tmpdir, dir_seq++);
    }
    snprintf(a->target, sizeof a->target, "unix:%s/agent.sock", a->dir);
    mv_segstore_opts o = {.dir = a->dir, .max_size = 1u << 20, .reap_interval_ms = reap_ms};
    CU_ASSERT_FATAL(mv_segstore_open(&o, &a->store) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &a->srv) == 0);
    CU_ASSERT_FATAL(mv_agentsvc_register(a->srv, a->store, &a->svc) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_listen_unix(a->srv, a->target + 5, start_perms) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_start(a->srv) == 0);
    CU_ASSERT_FATAL(mv_agentc_open(a->target, &a->cli) == 0);
}

static void agent_stop(agent *a)
{
    mv_agentc_close(a->cli);
    mv_rpc_server_destroy(a->srv);
    mv_agentsvc_destroy(a->svc);
    mv_segstore_close(a->store);
    a->cli = NULL;
    a->srv = NULL;
    a->svc = NULL;
    a->store = NULL;
}

static int file_size(const char *path, off_t *size)
{
    struct stat sb;
    if (stat(path, &sb) < 0)
        return -errno;
    *size = sb.st_size;
    return 0;
}

/* Reads a segment file and validates it with the format's reader. */
static int segment_valid(const char *path, uint64_t size)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    uint8_t *buf = aligned_alloc(8, size);
    ssize_t r = buf ? pread(fd, buf, size, 0) : -1;
    close(fd);
    int ok = 0;
    if (r == (ssize_t)size) {
        mv_seg_catalog *cat = NULL;
        mv_seg_error err;
        ok = mv_seg_catalog_parse(buf, size, size, &cat, &err) == MV_SEG_OK &&
             mv_seg_catalog_count(cat) == 0 && mv_seg_catalog_segment_size(cat) == size;
        mv_seg_catalog_free(cat);
    }
    free(buf);
    return ok;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int list_has(agent *a, const char *id)
{
    mv_agentc_segment *v;
    size_t n;
    if (mv_agentc_list(a->cli, &v, &n, NULL) < 0)
        return -1;
    int found = 0;
    for (size_t i = 0; i < n; i++)
        found |= strcmp(v[i].id, id) == 0;
    mv_agentc_segments_free(v, n);
    return found;
}

/* ---- Tests --------------------------------------------------------------------------- */

static void test_create_list_release(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    const char *labels[] = {"namespace", "default", "pod", "web-0"};
    mv_agentc_segment seg;
    int rc = mv_agentc_create(a.cli, 10000, 0, labels, 2, &seg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(seg.size, 12288); /* rounded up to 4 KiB */
    CU_ASSERT_EQUAL(strncmp(seg.id, "seg-", 4), 0);
    CU_ASSERT_EQUAL(strlen(seg.id), 20);
    CU_ASSERT_EQUAL(seg.nlabels, 2);
    CU_ASSERT(seg.nlabels == 2 && strcmp(seg.labels[1].value, "web-0") == 0);
    CU_ASSERT(seg.created_ns > 0);
    off_t sz = 0;
    CU_ASSERT_EQUAL(file_size(seg.path, &sz), 0);
    CU_ASSERT_EQUAL(sz, 12288);
    CU_ASSERT(segment_valid(seg.path, seg.size));
    struct stat sb;
    CU_ASSERT(stat(seg.path, &sb) == 0 && (sb.st_mode & 0777) == 0660);

    mv_agentc_segment *v;
    size_t n;
    uint64_t rev = 0;
    CU_ASSERT_EQUAL(mv_agentc_list(a.cli, &v, &n, &rev), 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT(rev >= 1);
    CU_ASSERT(n == 1 && strcmp(v[0].id, seg.id) == 0 && strcmp(v[0].path, seg.path) == 0);
    mv_agentc_segments_free(v, n);

    CU_ASSERT_EQUAL(mv_agentc_release(a.cli, seg.id), 0);
    CU_ASSERT_EQUAL(file_size(seg.path, &sz), -ENOENT);
    CU_ASSERT_EQUAL(list_has(&a, seg.id), 0);
    mv_agentc_segment_clear(&seg);
    agent_stop(&a);
}

/* The pod's labels set in the store reach the client with the segment (ListSegments), apart
 * from its identity labels. */
static void test_pod_labels_listed(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    const char *labels[] = {"namespace", "shop", "pod", "checkout-1"};
    mv_agentc_segment seg;
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create(a.cli, 4096, 0, labels, 2, &seg), 0);
    mv_segstore_label pl[] = {{"app.kubernetes.io/name", "checkout"}, {"tier", "web"}};
    char err[256];
    CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(a.store, seg.id, pl, 2, err, sizeof err), 1);
    mv_agentc_segment *v;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(mv_agentc_list(a.cli, &v, &n, NULL), 0);
    CU_ASSERT_FATAL(n == 1);
    CU_ASSERT_EQUAL(v[0].nlabels, 2);
    CU_ASSERT_EQUAL(v[0].npod_labels, 2);
    CU_ASSERT(v[0].npod_labels == 2 &&
              strcmp(v[0].pod_labels[0].name, "app.kubernetes.io/name") == 0 &&
              strcmp(v[0].pod_labels[0].value, "checkout") == 0 &&
              strcmp(v[0].pod_labels[1].name, "tier") == 0);
    mv_agentc_segments_free(v, n);
    mv_agentc_segment_clear(&seg);
    agent_stop(&a);
}

static void test_bad_requests(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    mv_agentc_segment seg;
    CU_ASSERT_EQUAL(mv_agentc_create(a.cli, 0, 0, NULL, 0, &seg), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "size_bytes"));
    CU_ASSERT_EQUAL(mv_agentc_create(a.cli, (2u << 20), 0, NULL, 0, &seg), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "outside"));
    const char *bad[] = {"__reserved", "x"};
    CU_ASSERT_EQUAL(mv_agentc_create(a.cli, 4096, 0, bad, 1, &seg), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "label"));
    CU_ASSERT_EQUAL(mv_agentc_release(a.cli, "seg-0000000000000000"), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "no segment"));
    /* Nothing was left behind by the failures. */
    mv_agentc_segment *v;
    size_t n = 99;
    CU_ASSERT_EQUAL(mv_agentc_list(a.cli, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, 0);
    mv_agentc_segments_free(v, n);
    agent_stop(&a);
}

/* A control byte in a label name or value is refused with INVALID_ARGUMENT naming the byte,
 * never cut at a NUL or passed on; nothing is created. The requests are written as bytes:
 * protobuf-c would stop a C string at its NUL. */
static void test_label_control_bytes(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    mv_rpc_channel *ch;
    CU_ASSERT_FATAL(mv_rpc_channel_open(a.target, 0, &ch) == 0);
    /* size_bytes=4096, labels=[{name, value}] */
    static const uint8_t nul_name[] = {0x08, 0x80, 0x20, 0x1a, 8, 0x0a, 3,
                                       'a',  0,    'b',  0x12, 1, 'x'};
    static const uint8_t nul_value[] = {0x08, 0x80, 0x20, 0x1a, 8, 0x0a, 1,
                                        'a',  0x12, 3,    'x',  0, 'y'};
    static const uint8_t nl_value[] = {0x08, 0x80, 0x20, 0x1a, 8,    0x0a, 1,
                                       'a',  0x12, 3,    'x',  '\n', 'y'};
    static const uint8_t del_value[] = {0x08, 0x80, 0x20, 0x1a, 7,   0x0a,
                                        1,    'a',  0x12, 2,    'x', 0x7f};
    static const uint8_t ok[] = {0x08, 0x80, 0x20, 0x1a, 8, 0x0a, 1, 'a', 0x12, 3, 'x', ' ', 'y'};
    const struct {
        const uint8_t *b;
        size_t n;
        const char *want;
    } cases[] = {
        {nul_name, sizeof nul_name, "label 0: name has control byte 0x00 at offset 1"},
        {nul_value, sizeof nul_value, "label 0: value has control byte 0x00 at offset 1"},
        {nl_value, sizeof nl_value, "label 0: value has control byte 0x0a at offset 1"},
        {del_value, sizeof del_value, "label 0: value has control byte 0x7f at offset 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mv_rpc_buf resp = {0};
        mv_rpc_status st;
        int code = mv_rpc_unary(ch, MV_AGENTSVC_CREATE, cases[i].b, cases[i].n, 5000, &resp, &st);
        CU_ASSERT_EQUAL(code, MV_RPC_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(st.message, cases[i].want));
        if (!strstr(st.message, cases[i].want))
            printf("\n  case %zu: %s\n", i, st.message);
        mv_rpc_buf_free(&resp);
    }
    mv_agentc_segment *v;
    size_t n = 99;
    CU_ASSERT_EQUAL(mv_agentc_list(a.cli, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, 0);
    mv_agentc_segments_free(v, n);
    /* A value with a space and no control byte is taken as sent. */
    mv_rpc_buf resp = {0};
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_unary(ch, MV_AGENTSVC_CREATE, ok, sizeof ok, 5000, &resp, &st), 0);
    Microview__V1__Segment *s = microview__v1__segment__unpack(NULL, resp.len, resp.data);
    CU_ASSERT_FATAL(s != NULL);
    CU_ASSERT(s->n_labels == 1 && strcmp(s->labels[0]->value, "x y") == 0);
    microview__v1__segment__free_unpacked(s, NULL);
    mv_rpc_buf_free(&resp);
    mv_rpc_channel_close(ch);
    agent_stop(&a);
}

/* Who a created segment file belongs to: the caller on the unix socket (root keeps root),
 * an owner named by a root caller or the caller's own ids, and no named owner from a caller
 * the agent cannot identify (TCP). The uid-1000 caller is tests/integration/test_agent_owner.sh. */
static void test_segment_owner(void)
{
    agent a;
    memset(&a, 0, sizeof a);
    snprintf(a.dir, sizeof a.dir, "%s/agent%d/run", tmpdir, dir_seq++);
    snprintf(a.target, sizeof a.target, "unix:%s/agent.sock", a.dir);
    mv_segstore_opts o = {.dir = a.dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    CU_ASSERT_FATAL(mv_segstore_open(&o, &a.store) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &a.srv) == 0);
    CU_ASSERT_FATAL(mv_agentsvc_register(a.srv, a.store, &a.svc) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_listen(a.srv, a.target) == 0);
    int port = mv_rpc_server_listen(a.srv, "127.0.0.1:0");
    CU_ASSERT_FATAL(port > 0);
    CU_ASSERT_FATAL(mv_rpc_server_start(a.srv) == 0);
    CU_ASSERT_FATAL(mv_agentc_open(a.target, &a.cli) == 0);
    uid_t me = geteuid();
    gid_t mygid = getegid();
    struct stat sb;
    mv_agentc_segment seg;

    /* No owner named: the caller's ids (root: root's, as before). */
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create(a.cli, 4096, 0, NULL, 0, &seg), 0);
    CU_ASSERT(stat(seg.path, &sb) == 0 && sb.st_uid == me && sb.st_gid == mygid &&
              (sb.st_mode & 0777) == 0660);
    mv_agentc_segment_clear(&seg);
    /* The caller's own ids named: honoured. */
    mv_agentc_owner own = {(int64_t)me, (int64_t)mygid};
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &own, &seg), 0);
    CU_ASSERT(stat(seg.path, &sb) == 0 && sb.st_uid == me && sb.st_gid == mygid);
    mv_agentc_segment_clear(&seg);
    if (me == 0) {
        /* Root names another user (and keeps the root group), then a user and a group. */
        mv_agentc_owner u = {1000, -1}, ug = {1000, 1001};
        CU_ASSERT_EQUAL_FATAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &u, &seg), 0);
        CU_ASSERT(stat(seg.path, &sb) == 0 && sb.st_uid == 1000 && sb.st_gid == 0 &&
                  (sb.st_mode & 0777) == 0660);
        mv_agentc_segment_clear(&seg);
        CU_ASSERT_EQUAL_FATAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &ug, &seg), 0);
        CU_ASSERT(stat(seg.path, &sb) == 0 && sb.st_uid == 1000 && sb.st_gid == 1001);
        mv_agentc_segment_clear(&seg);
    } else {
        mv_agentc_owner other = {(int64_t)me + 1, -1}, og = {-1, (int64_t)mygid + 1};
        CU_ASSERT_EQUAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &other, &seg), -EACCES);
        CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "owner_uid"));
        CU_ASSERT_EQUAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &og, &seg), -EACCES);
        CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "owner_gid"));
    }
    /* Over TCP the agent does not know the caller: no owner may be named, none is taken. */
    char tcp[64];
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", port);
    mv_agentc *t;
    CU_ASSERT_FATAL(mv_agentc_open(tcp, &t) == 0);
    CU_ASSERT_EQUAL(mv_agentc_create_owned(t, 4096, 0, NULL, 0, &own, &seg), -EACCES);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(t), "owner_uid"));
    mv_agentc_owner gonly = {-1, (int64_t)mygid};
    CU_ASSERT_EQUAL(mv_agentc_create_owned(t, 4096, 0, NULL, 0, &gonly, &seg), -EACCES);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(t), "owner_gid"));
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create(t, 4096, 0, NULL, 0, &seg), 0);
    CU_ASSERT(stat(seg.path, &sb) == 0 && sb.st_uid == me && (sb.st_mode & 0777) == 0660);
    mv_agentc_segment_clear(&seg);
    mv_agentc_close(t);
    /* Refused calls left nothing behind. */
    mv_agentc_segment *v;
    size_t n = 0;
    CU_ASSERT_EQUAL(mv_agentc_list(a.cli, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, me == 0 ? 5 : 3);
    mv_agentc_segments_free(v, n);
    agent_stop(&a);
}

/* The release rule itself: root and the file's owner may, others may not, with the segment
 * and the rule named; an unknown owner is root's business; a TCP caller is not checked. */
static void test_release_rule(void)
{
    char msg[320];
    const char *id = "seg-0123456789abcdef";
    mv_rpc_peer root = {0, 0, 10}, u1000 = {1000, 1000, 11}, u1001 = {1001, 1001, 12};
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&u1000, id, 1000, 0, msg, sizeof msg), 1);
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&root, id, 1000, 0, msg, sizeof msg), 1);
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&root, id, 0, 0, msg, sizeof msg), 1);
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&root, id, -1, ENOENT, msg, sizeof msg), 1);
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(NULL, id, 1000, 0, msg, sizeof msg), 1);
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(NULL, id, -1, ENOENT, msg, sizeof msg), 1);

    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&u1001, id, 1000, 0, msg, sizeof msg), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "segment seg-0123456789abcdef belongs to uid 1000"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "a caller running as uid 1001 may release only the "
                                       "segments whose file it owns; only root may release "
                                       "another user's segment"));
    /* The gid is not enough: the group of a file is shared, its owner is not. */
    mv_rpc_peer g1000 = {1001, 1000, 13};
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&g1000, id, 1000, 0, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&u1000, id, 0, 0, msg, sizeof msg), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "belongs to uid 0"));
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&u1000, id, -1, ENOENT, msg, sizeof msg), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "segment seg-0123456789abcdef: its file cannot be "
                                       "examined (No such file or directory)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "only root may release it"));
    /* uid 4294967295 is no one's: not a match for an unknown owner (-1). */
    mv_rpc_peer nobody = {UINT32_MAX, UINT32_MAX, 14};
    CU_ASSERT_EQUAL(mv_agentsvc_may_release(&nobody, id, -1, EIO, msg, sizeof msg), 0);
}

/* `test_agent --release-as-child TARGET ID`: what the child of release_as() runs, a fresh
 * process (exec'd after fork) under another uid. Prints "RC MESSAGE". */
static int release_child(const char *target, const char *id)
{
    mv_agentc *c;
    if (mv_agentc_open(target, &c) < 0) {
        printf("-999 cannot open %s\n", target);
        return 1;
    }
    int rc = mv_agentc_release(c, id);
    printf("%d %s\n", rc, rc ? mv_agentc_error(c) : "");
    mv_agentc_close(c);
    return 0;
}

/* Releases segment `id` from a process running as uid:gid `uid` (root only). Returns what
 * mv_agentc_release returned there (-999: the child did not run), its message in `msg`. */
static int release_as(int uid, const agent *a, const char *id, char *msg, size_t msglen)
{
    int p[2];
    msg[0] = 0;
    if (pipe(p) < 0)
        return -999;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        if (setgroups(0, NULL) < 0 || setgid((gid_t)uid) < 0 || setuid((uid_t)uid) < 0)
            _exit(3);
        /* A cross-built test runs under an emulator (MV_TEST_EMULATOR, set by ctest), which
         * the kernel does not know: the new program must be started through it. */
        const char *emu = getenv("MV_TEST_EMULATOR");
        if (emu && *emu) {
            char self[4096];
            ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
            if (n <= 0)
                _exit(126);
            self[n] = 0;
            execl(emu, emu, self, "--release-as-child", a->target, id, (char *)NULL);
        } else {
            execl("/proc/self/exe", "test_agent", "--release-as-child", a->target, id,
                  (char *)NULL);
        }
        _exit(127);
    }
    close(p[1]);
    char buf[1024];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 &&
           ((r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0)
            n += (size_t)r;
    buf[n] = 0;
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    int rc = -999;
    int used = 0;
    if (sscanf(buf, "%d %n", &rc, &used) < 1)
        return -999;
    snprintf(msg, msglen, "%s", buf + used);
    return rc;
}

static int listed(agent *a, const char *id)
{
    mv_agentc_segment *v;
    size_t n = 0;
    int found = 0;
    if (mv_agentc_list(a->cli, &v, &n, NULL) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        found |= strcmp(v[i].id, id) == 0;
    mv_agentc_segments_free(v, n);
    return found;
}

/* Release over the unix socket, end to end: the owner may, root may, another user may not
 * (PERMISSION_DENIED naming the segment and the rule), also after an agent restart; a segment
 * whose file is gone is root's to release. Other users are child processes (root only). */
static void test_release_authorized(void)
{
    agent a;
    mv_rpc_unix_perms open_to_all = {.mode = 0666, .gid = -1};
    start_perms = &open_to_all;
    agent_start(&a, NULL, -1);
    uid_t me = geteuid();
    mv_agentc_segment seg;
    char msg[1024];

    /* The caller's own segment. */
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create(a.cli, 4096, 0, NULL, 0, &seg), 0);
    CU_ASSERT_EQUAL(mv_agentc_release(a.cli, seg.id), 0);
    CU_ASSERT_EQUAL(listed(&a, seg.id), 0);
    mv_agentc_segment_clear(&seg);

    /* A file deleted under the agent: the owner is unknown, only root may release it. */
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create(a.cli, 4096, 0, NULL, 0, &seg), 0);
    CU_ASSERT_FATAL(unlink(seg.path) == 0);
    if (me == 0) {
        CU_ASSERT_EQUAL(mv_agentc_release(a.cli, seg.id), 0);
    } else {
        CU_ASSERT_EQUAL(mv_agentc_release(a.cli, seg.id), -EACCES);
        CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(a.cli), "its file cannot be examined"));
        CU_ASSERT_EQUAL(listed(&a, seg.id), 1);
    }
    mv_agentc_segment_clear(&seg);
    /* An unknown id is still NOT_FOUND, not a refusal. */
    CU_ASSERT_EQUAL(mv_agentc_release(a.cli, "seg-0000000000000000"), -ENOENT);

    if (me != 0) {
        agent_stop(&a);
        start_perms = NULL;
        return;
    }
    /* Root hands a segment to uid 1000; uid 1001 may not release it, uid 1000 may. */
    mv_agentc_owner u1000 = {1000, 1000};
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &u1000, &seg), 0);
    int rc = release_as(1001, &a, seg.id, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -EACCES);
    char want[128];
    snprintf(want, sizeof want, "segment %s belongs to uid 1000", seg.id);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "a caller running as uid 1001 may release only"));
    CU_ASSERT_EQUAL(listed(&a, seg.id), 1);
    CU_ASSERT_EQUAL(access(seg.path, F_OK), 0);
    /* After a restart the rule is the same: it reads the file's owner, which outlives the agent. */
    agent_stop(&a);
    agent_start(&a, a.dir, -1);
    CU_ASSERT_EQUAL(release_as(1001, &a, seg.id, msg, sizeof msg), -EACCES);
    CU_ASSERT_EQUAL(listed(&a, seg.id), 1);
    CU_ASSERT_EQUAL(release_as(1000, &a, seg.id, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(listed(&a, seg.id), 0);
    CU_ASSERT_EQUAL(access(seg.path, F_OK), -1);
    mv_agentc_segment_clear(&seg);
    /* Root releases another user's segment; uid 1000 may not release root's. */
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create_owned(a.cli, 4096, 0, NULL, 0, &u1000, &seg), 0);
    CU_ASSERT_EQUAL(mv_agentc_release(a.cli, seg.id), 0);
    mv_agentc_segment_clear(&seg);
    CU_ASSERT_EQUAL_FATAL(mv_agentc_create(a.cli, 4096, 0, NULL, 0, &seg), 0);
    CU_ASSERT_EQUAL(release_as(1000, &a, seg.id, msg, sizeof msg), -EACCES);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "belongs to uid 0"));
    CU_ASSERT_EQUAL(listed(&a, seg.id), 1);
    mv_agentc_segment_clear(&seg);
    agent_stop(&a);
    start_perms = NULL;
}

static void test_unreachable(void)
{
    mv_agentc *c;
    char target[400];
    snprintf(target, sizeof target, "%s/nowhere.sock", tmpdir);
    CU_ASSERT_FATAL(mv_agentc_open(target, &c) == 0);
    mv_agentc_segment *v;
    size_t n;
    CU_ASSERT_EQUAL(mv_agentc_list(c, &v, &n, NULL), -ECONNREFUSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_agentc_error(c), "is microview-agent running?"));
    mv_agentc_close(c);
}

/* Watch events collected by a watcher thread. */
typedef struct watcher {
    agent *a;
    pthread_t th;
    volatile int stop;
    int rc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ev[64];
    char id[64][24];
    int n;
} watcher;

static void on_event(void *arg, int event, const mv_agentc_segment *s)
{
    watcher *w = arg;
    pthread_mutex_lock(&w->mu);
    if (w->n < 64) {
        w->ev[w->n] = event;
        snprintf(w->id[w->n], sizeof w->id[0], "%s", s->id ? s->id : "");
        w->n++;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *watch_main(void *arg)
{
    watcher *w = arg;
    mv_agentc *c;
    if (mv_agentc_open(w->a->target, &c) < 0) {
        w->rc = -1;
        return NULL;
    }
    w->rc = mv_agentc_watch(c, on_event, w, &w->stop);
    mv_agentc_close(c);
    return NULL;
}

/* Waits (bounded) for at least n events. */
static int wait_events(watcher *w, int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&w->mu);
    while (w->n < n && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
        ;
    int got = w->n;
    pthread_mutex_unlock(&w->mu);
    return got;
}

static void test_watch(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    mv_agentc_segment s1, s2;
    CU_ASSERT_FATAL(mv_agentc_create(a.cli, 4096, 0, NULL, 0, &s1) == 0);

    watcher w;
    memset(&w, 0, sizeof w);
    w.a = &a;
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    CU_ASSERT_FATAL(pthread_create(&w.th, NULL, watch_main, &w) == 0);
    CU_ASSERT_EQUAL(wait_events(&w, 2), 2);
    CU_ASSERT_EQUAL(w.ev[0], MV_AGENTC_ADDED);
    CU_ASSERT_STRING_EQUAL(w.id[0], s1.id);
    CU_ASSERT_EQUAL(w.ev[1], MV_AGENTC_SYNCED);

    CU_ASSERT_FATAL(mv_agentc_create(a.cli, 8192, 0, NULL, 0, &s2) == 0);
    CU_ASSERT_EQUAL(wait_events(&w, 3), 3);
    CU_ASSERT_EQUAL(w.ev[2], MV_AGENTC_ADDED);
    CU_ASSERT_STRING_EQUAL(w.id[2], s2.id);

    CU_ASSERT_EQUAL(mv_agentc_release(a.cli, s1.id), 0);
    CU_ASSERT_EQUAL(wait_events(&w, 4), 4);
    CU_ASSERT_EQUAL(w.ev[3], MV_AGENTC_REMOVED);
    CU_ASSERT_STRING_EQUAL(w.id[3], s1.id);

    w.stop = 1;
    double t0 = now_s();
    pthread_join(w.th, NULL);
    CU_ASSERT(now_s() - t0 < 1.0); /* stop is noticed within the poll period */
    CU_ASSERT_EQUAL(w.rc, 0);
    mv_agentc_segment_clear(&s1);
    mv_agentc_segment_clear(&s2);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    agent_stop(&a);
}

static void test_watch_survives_agent_stop(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    watcher w;
    memset(&w, 0, sizeof w);
    w.a = &a;
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    CU_ASSERT_FATAL(pthread_create(&w.th, NULL, watch_main, &w) == 0);
    CU_ASSERT_EQUAL(wait_events(&w, 1), 1); /* SYNCED */
    double t0 = now_s();
    agent_stop(&a); /* the server shuts down with the watch open */
    CU_ASSERT(now_s() - t0 < 1.0);
    pthread_join(w.th, NULL);
    CU_ASSERT(w.rc < 0); /* the watcher learns the stream is gone */
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}

/* A child process that waits to be killed, and a segment created for it as owner. */
static pid_t owned_segment(agent *a, mv_agentc_segment *seg)
{
    pid_t child = fork();
    CU_ASSERT_FATAL(child >= 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    CU_ASSERT_FATAL(mv_agentc_create(a->cli, 4096, (uint32_t)child, NULL, 0, seg) == 0);
    return child;
}

static void test_reap_dead_owner(void)
{
    agent a;
    agent_start(&a, NULL, 100);
    mv_agentc_segment seg;
    pid_t child = owned_segment(&a, &seg);
    /* Alive owner: kept across several reap intervals (a pass is run directly too). */
    CU_ASSERT_EQUAL(mv_segstore_reap(a.store), 0);
    CU_ASSERT_EQUAL(list_has(&a, seg.id), 1);

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    double deadline = now_s() + 2.0; /* 20 reap intervals */
    int present = 1;
    while (present == 1 && now_s() < deadline) {
        present = list_has(&a, seg.id);
        if (present == 1)
            usleep(20000);
    }
    CU_ASSERT_EQUAL(present, 0);
    off_t sz;
    CU_ASSERT_EQUAL(file_size(seg.path, &sz), -ENOENT);
    mv_agentc_segment_clear(&seg);
    agent_stop(&a);
}

/* A process with pid `pid` (clone3's set_tid: root, Linux 5.5) that waits to be killed, or
 * -errno. */
static pid_t spawn_with_pid(pid_t pid)
{
#if defined(SYS_clone3) && defined(CLONE_ARGS_SIZE_VER1)
    pid_t want[1] = {pid};
    struct clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.exit_signal = SIGCHLD;
    ca.set_tid = (uint64_t)(uintptr_t)want;
    ca.set_tid_size = 1;
    long r = syscall(SYS_clone3, &ca, sizeof ca);
    if (r == 0) {
        for (;;)
            pause();
    }
    return r < 0 ? -errno : (pid_t)r;
#else
    (void)pid;
    return -ENOSYS;
#endif
}

/* A dead owner whose pid went to another process: the segment is still reaped (the store
 * knows its owner by a pidfd, not by number). */
static void test_reap_reused_pid(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    mv_agentc_segment seg;
    pid_t owner = owned_segment(&a, &seg);
    CU_ASSERT_EQUAL(mv_segstore_reap(a.store), 0);
    kill(owner, SIGKILL);
    waitpid(owner, NULL, 0);
    pid_t other = spawn_with_pid(owner);
    if (other < 0) {
        mv_test_skip_case("pid reuse (a process given pid %d by clone3's set_tid: %s; needs "
                          "root and Linux 5.5)",
                          (int)owner, strerror((int)-other));
    } else {
        CU_ASSERT_EQUAL(other, owner);
        CU_ASSERT_EQUAL(kill(other, 0), 0); /* the number is in use again */
        CU_ASSERT_EQUAL(mv_segstore_reap(a.store), 1);
        CU_ASSERT_EQUAL(list_has(&a, seg.id), 0);
        kill(other, SIGKILL);
        waitpid(other, NULL, 0);
    }
    mv_agentc_segment_clear(&seg);
    agent_stop(&a);
}

static void test_restart_keeps_catalog(void)
{
    agent a;
    agent_start(&a, NULL, -1);
    const char *labels[] = {"pod", "p1"};
    mv_agentc_segment s1, s2;
    CU_ASSERT_FATAL(mv_agentc_create(a.cli, 4096, 0, labels, 1, &s1) == 0);
    CU_ASSERT_FATAL(mv_agentc_create(a.cli, 4096, 0, NULL, 0, &s2) == 0);
    uint64_t rev1;
    mv_agentc_segment *v;
    size_t n;
    CU_ASSERT_EQUAL(mv_agentc_list(a.cli, &v, &n, &rev1), 0);
    mv_agentc_segments_free(v, n);
    agent_stop(&a);

    /* Same directory: same catalog. */
    agent_start(&a, a.dir, -1);
    uint64_t rev2;
    CU_ASSERT_EQUAL(mv_agentc_list(a.cli, &v, &n, &rev2), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(rev2, rev1);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].id, s1.id) == 0 && v[i].nlabels == 1 &&
            strcmp(v[i].labels[0].value, "p1") == 0 && v[i].created_ns == s1.created_ns)
            found = 1;
    CU_ASSERT(found);
    mv_agentc_segments_free(v, n);
    agent_stop(&a);

    /* A segment whose file vanished is dropped on reload; a stray file is kept. */
    CU_ASSERT_EQUAL(unlink(s2.path), 0);
    char stray[600];
    snprintf(stray, sizeof stray, "%s/stray", a.dir);
    FILE *f = fopen(stray, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    agent_start(&a, a.dir, -1);
    CU_ASSERT_EQUAL(list_has(&a, s1.id), 1);
    CU_ASSERT_EQUAL(list_has(&a, s2.id), 0);
    CU_ASSERT_EQUAL(access(stray, F_OK), 0);
    agent_stop(&a);
    mv_agentc_segment_clear(&s1);
    mv_agentc_segment_clear(&s2);
}

static void test_proto_unpack_cap(void)
{
    Microview__V1__ReleaseSegmentRequest r = MICROVIEW__V1__RELEASE_SEGMENT_REQUEST__INIT;
    r.id = "seg-0123456789abcdef";
    mv_rpc_buf b;
    CU_ASSERT_FATAL(mv_rpc_pack(&r.base, &b) == 0);
    ProtobufCMessage *m =
        mv_rpc_unpack(&microview__v1__release_segment_request__descriptor, b.data, b.len, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(((Microview__V1__ReleaseSegmentRequest *)m)->id, r.id);
    protobuf_c_message_free_unpacked(m, NULL);
    CU_ASSERT_PTR_NULL(
        mv_rpc_unpack(&microview__v1__release_segment_request__descriptor, b.data, b.len, 4));
    static const uint8_t junk[] = {0x0a, 0x7f, 'x'}; /* length runs past the end */
    CU_ASSERT_PTR_NULL(
        mv_rpc_unpack(&microview__v1__release_segment_request__descriptor, junk, sizeof junk, 0));
    mv_rpc_buf_free(&b);
}

int main(int argc, char **argv)
{
    mv_log_init("test", MV_LOG_WARN);
    if (argc == 4 && strcmp(argv[1], "--release-as-child") == 0)
        return release_child(argv[2], argv[3]);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mv-agent-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    chmod(tmpdir, 0755); /* the other users' children connect in it */
    static const mv_test tests[] = {
        {"pod labels reach the client with the segment", test_pod_labels_listed},
        {"create, list, release", test_create_list_release},
        {"bad requests get clear errors", test_bad_requests},
        {"control bytes in labels refused, not cut", test_label_control_bytes},
        {"segment owner: the caller, a named owner, refusals", test_segment_owner},
        {"release rule: root or the file's owner", test_release_rule},
        {"release over the socket: owner, root, others refused, after a restart too",
         test_release_authorized},
        {"agent not reachable", test_unreachable},
        {"watch: ADDED, SYNCED, ADDED, REMOVED", test_watch},
        {"watch ends when the agent stops", test_watch_survives_agent_stop},
        {"dead owner's segment is reaped", test_reap_dead_owner},
        {"dead owner's segment is reaped when its pid is reused", test_reap_reused_pid},
        {"restart keeps the catalog", test_restart_keeps_catalog},
        {"protobuf unpack with a cap", test_proto_unpack_cap},
    };
    int fails = MV_TEST_RUN("agent", tests);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!fails && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return fails;
}
