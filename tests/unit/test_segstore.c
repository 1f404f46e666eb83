/* Unit tests of the agent's segment store on its own (no gRPC): the descriptor budget of the
 * owners' pidfds, reaper passes over owners known by pidfd and by pid number, the reaper thread
 * waking when an owner exits, and catalog.json validation. The agent service over its socket
 * is test_agent.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_segstore.h"
#include "mv_test.h"

static char *tmpdir;
static int dir_seq;

static double now_s(void)
{
    return (double)mv_test_mono_ms() / 1000.0;
}

/* Owners' pidfds leave descriptors for the rest of the agent: with a low RLIMIT_NOFILE,
 * more live owners than descriptors still get their segments (the later ones are watched by
 * pid number), and files can still be opened. */
static void test_owner_fds_within_limit(void)
{
    struct rlimit old, low;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_NOFILE, &old) == 0);
    low = old;
    low.rlim_cur = 256;
    if (old.rlim_cur < 256 || setrlimit(RLIMIT_NOFILE, &low) != 0) {
        mv_test_skip_case("descriptor budget (cannot set RLIMIT_NOFILE to 256)");
        return;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/fdlimit%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    int created = 0;
    char err[256];
    for (int i = 0; i < 320; i++)
        created +=
            mv_segstore_create(st, 4096, (uint32_t)getpid(), NULL, 0, NULL, err, sizeof err) == 0;
    CU_ASSERT_EQUAL(created, 320);
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CU_ASSERT(fd >= 0 && fd < 256);
    if (fd >= 0)
        close(fd);
    CU_ASSERT_EQUAL(mv_segstore_reap(st), 0); /* every owner (this process) is alive */
    mv_segstore_seg *v;
    size_t n = 0;
    CU_ASSERT_EQUAL(mv_segstore_list(st, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, 320);
    mv_segstore_segs_free(v, n);
    mv_segstore_close(st);
    setrlimit(RLIMIT_NOFILE, &old);
}

/* A pass over owners of which some are dead, watched by pidfd and (past the descriptor budget
 * of a low RLIMIT_NOFILE) by pid number: exactly the dead owners' segments go, and the pass
 * after the others die takes the rest. */
static void test_reap_some_owners(void)
{
    struct rlimit old, low;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_NOFILE, &old) == 0);
    low = old;
    low.rlim_cur = 256; /* pidfds for the first 64 segments, pid numbers for the rest */
    if (old.rlim_cur < 256 || setrlimit(RLIMIT_NOFILE, &low) != 0) {
        mv_test_skip_case("mixed reap (cannot set RLIMIT_NOFILE to 256)");
        return;
    }
    enum { OWNERS = 6, SEGS = 84 };
    pid_t owner[OWNERS];
    for (int k = 0; k < OWNERS; k++) {
        owner[k] = fork();
        if (owner[k] == 0) {
            for (;;)
                pause();
        }
        CU_ASSERT_FATAL(owner[k] > 0);
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/mixedreap%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    int created = 0;
    for (int i = 0; i < SEGS; i++) /* owners in turn: each has segments on both sides */
        created += mv_segstore_create(st, 4096, (uint32_t)owner[i % OWNERS], NULL, 0, NULL, err,
                                      sizeof err) == 0;
    CU_ASSERT_EQUAL(created, SEGS);
    CU_ASSERT_EQUAL(mv_segstore_reap(st), 0);
    const int dead[] = {1, 4};
    for (size_t d = 0; d < 2; d++) {
        kill(owner[dead[d]], SIGKILL);
        waitpid(owner[dead[d]], NULL, 0);
    }
    CU_ASSERT_EQUAL(mv_segstore_reap(st), 2 * SEGS / OWNERS);
    mv_segstore_seg *v;
    size_t n = 0;
    CU_ASSERT_EQUAL(mv_segstore_list(st, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, SEGS - 2 * SEGS / OWNERS);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT(v[i].owner_pid != (uint32_t)owner[1] && v[i].owner_pid != (uint32_t)owner[4]);
    mv_segstore_segs_free(v, n);
    CU_ASSERT_EQUAL(mv_segstore_reap(st), 0);
    for (int k = 0; k < OWNERS; k++) {
        if (k == 1 || k == 4)
            continue;
        kill(owner[k], SIGKILL);
        waitpid(owner[k], NULL, 0);
    }
    CU_ASSERT_EQUAL(mv_segstore_reap(st), SEGS - 2 * SEGS / OWNERS);
    CU_ASSERT_EQUAL(mv_segstore_list(st, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, 0);
    mv_segstore_segs_free(v, n);
    mv_segstore_close(st);
    setrlimit(RLIMIT_NOFILE, &old);
}

/* Whether the store lists a segment of owner `pid`. */
static int store_has_owner(mv_segstore *st, pid_t pid)
{
    mv_segstore_seg *v;
    size_t n = 0;
    if (mv_segstore_list(st, &v, &n, NULL) != 0)
        return -1;
    int found = 0;
    for (size_t i = 0; i < n; i++)
        found |= v[i].owner_pid == (uint32_t)pid;
    mv_segstore_segs_free(v, n);
    return found;
}

/* Seconds from killing `owner` (a child) until the store no longer lists its segment, or -1
 * when it is still listed after `limit` seconds. */
static double reaped_after(mv_segstore *st, pid_t owner, double limit)
{
    kill(owner, SIGKILL);
    waitpid(owner, NULL, 0);
    double t0 = now_s();
    while (now_s() - t0 < limit) {
        if (store_has_owner(st, owner) == 0)
            return now_s() - t0;
        usleep(10000);
    }
    return -1;
}

static pid_t idle_child(void)
{
    pid_t p = fork();
    if (p == 0) {
        for (;;)
            pause();
    }
    return p;
}

/* The reaper thread sleeps until an owner exits: with a 20 s interval a dead owner's segment
 * still goes at once. An owner it cannot get a pidfd for (RLIMIT_NOFILE 64: none at all)
 * turns it back to a pass every interval, and that segment goes within a few intervals,
 * long before the next full check (15 intervals). */
static void test_reap_on_exit(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/exitreap%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = 20000};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    pid_t owner = idle_child();
    CU_ASSERT_FATAL(owner > 0);
    CU_ASSERT_FATAL(mv_segstore_create(st, 4096, (uint32_t)owner, NULL, 0, NULL, err, sizeof err) ==
                    0);
    usleep(300000); /* the reaper is asleep by now */
    double t = reaped_after(st, owner, 5.0);
    printf("\n  pidfd owner reaped after %.3f s (interval 20 s)\n", t);
    CU_ASSERT(t >= 0 && t < 2.0);
    mv_segstore_close(st);

    struct rlimit old, low;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_NOFILE, &old) == 0);
    low = old;
    low.rlim_cur = 64; /* a quarter, at least 64, stays for the agent: no pidfd at all */
    if (old.rlim_cur < 64 || setrlimit(RLIMIT_NOFILE, &low) != 0) {
        mv_test_skip_case("reap by pid number (cannot set RLIMIT_NOFILE to 64)");
        return;
    }
    snprintf(dir, sizeof dir, "%s/exitreap%d", tmpdir, dir_seq++);
    o.reap_interval_ms = 200;
    int opened = mv_segstore_open(&o, &st) == 0;
    owner = opened ? idle_child() : -1;
    int created = owner > 0 && mv_segstore_create(st, 4096, (uint32_t)owner, NULL, 0, NULL, err,
                                                  sizeof err) == 0;
    setrlimit(RLIMIT_NOFILE, &old);
    CU_ASSERT_FATAL(opened && owner > 0);
    CU_ASSERT_FATAL(created);
    usleep(300000);
    t = reaped_after(st, owner, 5.0);
    printf("  pid-number owner reaped after %.3f s (interval 0.2 s, full check 3 s)\n", t);
    CU_ASSERT(t >= 0 && t < 1.5);
    mv_segstore_close(st);
}

static void test_catalog_parse(void)
{
    mv_segstore_seg *v;
    size_t n;
    uint64_t rev;
    char err[256];
    static const char good[] =
        "{\"version\":1,\"revision\":7,\"segments\":[{\"id\":\"seg-0123456789abcdef\","
        "\"path\":\"/etc/passwd\",\"size_bytes\":8192,\"owner_pid\":0,\"created_unix_ns\":5,"
        "\"labels\":[{\"name\":\"pod\",\"value\":\"a\"}]}]}\n";
    CU_ASSERT_EQUAL(
        mv_segstore_catalog_parse(good, strlen(good), "/d", &v, &n, &rev, err, sizeof err), 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(rev, 7);
    /* The path is derived from the directory, never taken from the file. */
    CU_ASSERT(n == 1 && strcmp(v[0].path, "/d/seg-0123456789abcdef") == 0);
    mv_segstore_segs_free(v, n);

    static const char *const bad[] = {
        "",
        "[]",
        "{\"version\":2,\"revision\":1,\"segments\":[]}",
        "{\"version\":1,\"revision\":-1,\"segments\":[]}",
        "{\"version\":1,\"revision\":1,\"segments\":[{\"id\":\"../../etc\",\"size_bytes\":4096,"
        "\"owner_pid\":0,\"created_unix_ns\":0}]}",
        "{\"version\":1,\"revision\":1,\"segments\":[{\"id\":\"seg-0123456789abcdef\","
        "\"size_bytes\":4097,\"owner_pid\":0,\"created_unix_ns\":0}]}",
        "{\"version\":1,\"revision\":1,\"segments\":[{\"id\":\"seg-0123456789abcdef\","
        "\"size_bytes\":4096,\"owner_pid\":-5,\"created_unix_ns\":0}]}",
        "{\"version\":1,\"revision\":1,\"segments\":[{\"id\":\"seg-0123456789abcdef\","
        "\"size_bytes\":4096,\"owner_pid\":0,\"created_unix_ns\":0,\"labels\":[{\"name\":\"1x\","
        "\"value\":\"v\"}]}]}",
        "{\"version\":1,\"revision\":1,\"segments\":[]} trailing",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc =
            mv_segstore_catalog_parse(bad[i], strlen(bad[i]), "/d", &v, &n, &rev, err, sizeof err);
        CU_ASSERT_EQUAL(rc, -EINVAL);
        if (rc == 0)
            mv_segstore_segs_free(v, n);
    }
}

/* A whole file into a malloc'd buffer (NUL-terminated); NULL if it cannot be read. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                break;
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

static size_t count_files(const char *dir, const char *prefix)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' | grep -c '^%s' || true", dir, prefix);
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    if (p) {
        if (fscanf(p, "%zu", &n) != 1)
            n = 0;
        pclose(p);
    }
    return n;
}

/* Every create is in catalog.journal (not in a rewritten catalog.json) as soon as it returns:
 * the bytes on disk while the store is still open rebuild the whole catalog. A torn last
 * record is dropped; a damaged one and what follows are set aside, the rest is served. */
static void test_journal_durable(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/journal%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    mv_segstore_label l = {"service", "journal"};
    char ids[3][32];
    for (int i = 0; i < 3; i++) {
        mv_segstore_seg seg;
        CU_ASSERT_FATAL(mv_segstore_create(st, 4096, 0, &l, 1, &seg, err, sizeof err) == 0);
        snprintf(ids[i], sizeof ids[i], "%s", seg.id);
        mv_segstore_seg_clear(&seg);
    }
    CU_ASSERT_EQUAL(mv_segstore_release(st, ids[1]), 0);
    size_t slen, jlen;
    snprintf(path, sizeof path, "%s/catalog.json", dir);
    char *snap = slurp(path, &slen);
    snprintf(path, sizeof path, "%s/catalog.journal", dir);
    char *jr = slurp(path, &jlen);
    CU_ASSERT_FATAL(snap != NULL && jr != NULL);
    CU_ASSERT(jlen > 0);
    /* The snapshot written at open has none of them. */
    CU_ASSERT_PTR_NULL(strstr(snap, ids[0]));
    mv_segstore_seg *v;
    size_t n, q;
    uint64_t rev;
    CU_ASSERT_EQUAL(
        mv_segstore_catalog_load_mem(snap, slen, (const uint8_t *)jr, jlen, dir, &v, &n, &rev, &q),
        0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(q, 0);
    CU_ASSERT_EQUAL(rev, 4);
    CU_ASSERT(n == 2 && strcmp(v[0].id, ids[0]) == 0 && strcmp(v[1].id, ids[2]) == 0);
    CU_ASSERT(n == 2 && v[0].nlabels == 1 && strcmp(v[0].labels[0].value, "journal") == 0);
    mv_segstore_segs_free(v, n);
    /* A torn tail (the last record cut short) is dropped: the earlier ones stand. */
    CU_ASSERT_EQUAL(mv_segstore_catalog_load_mem(snap, slen, (const uint8_t *)jr, jlen - 5, dir, &v,
                                                 &n, &rev, &q),
                    0);
    CU_ASSERT_EQUAL(n, 3); /* the release record was cut: seg 1 is back */
    CU_ASSERT_EQUAL(q, 0);
    mv_segstore_segs_free(v, n);
    /* A damaged first record: it and the rest are set aside, the snapshot is served. */
    jr[20] ^= 0x55;
    CU_ASSERT_EQUAL(
        mv_segstore_catalog_load_mem(snap, slen, (const uint8_t *)jr, jlen, dir, &v, &n, &rev, &q),
        0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(q, 1);
    mv_segstore_segs_free(v, n);
    free(snap);
    free(jr);
    /* A clean close folds the journal into the snapshot; a reopen serves the same. */
    mv_segstore_close(st);
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    CU_ASSERT_EQUAL(mv_segstore_list(st, &v, &n, &rev), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(rev, 4);
    mv_segstore_segs_free(v, n);
    mv_segstore_close(st);
}

/* Pod labels (the pod's Kubernetes labels, for selectors): checked like the API server's
 * labels, bounded, persisted through the journal and a reopen, and absent from an entry that has
 * none. */
static void test_pod_labels(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/podlabels%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    mv_segstore_label l = {"service", "web"};
    mv_segstore_seg seg;
    CU_ASSERT_FATAL(mv_segstore_create(st, 4096, 0, &l, 1, &seg, err, sizeof err) == 0);
    mv_segstore_label pl[] = {{"app.kubernetes.io/name", "checkout"}, {"tier", ""}};
    CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(st, seg.id, pl, 2, err, sizeof err), 1);
    CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(st, seg.id, pl, 2, err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(st, "seg-0000000000000000", pl, 2, err, sizeof err),
                    -ENOENT);
    static const struct {
        const char *k, *v, *why;
    } bad[] = {
        {"Bad.Prefix/x", "v", "key has a prefix that is not a lowercase DNS subdomain"},
        {"app", "has space", "value holds a byte other than"},
        {"app", "-x", "value must start and end with a letter or digit"},
        {"", "v", "key is empty"},
        {"a\x01", "v", "key holds a byte other than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mv_segstore_label b = {(char *)bad[i].k, (char *)bad[i].v};
        CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(st, seg.id, &b, 1, err, sizeof err), -EINVAL);
        if (!strstr(err, bad[i].why))
            fprintf(stderr, "pod label %s=%s: %s\n", bad[i].k, bad[i].v, err);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].why));
    }
    mv_segstore_label dup[] = {{"a", "1"}, {"a", "2"}};
    CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(st, seg.id, dup, 2, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "appears twice"));
    mv_segstore_label many[MV_SEGSTORE_POD_LABELS_MAX + 1];
    char keys[MV_SEGSTORE_POD_LABELS_MAX + 1][8];
    for (int i = 0; i <= MV_SEGSTORE_POD_LABELS_MAX; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        many[i] = (mv_segstore_label){keys[i], "v"};
    }
    CU_ASSERT_EQUAL(mv_segstore_set_pod_labels(st, seg.id, many, MV_SEGSTORE_POD_LABELS_MAX + 1,
                                               err, sizeof err),
                    -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 32"));
    /* The refused ones changed nothing: a reopen (journal, then snapshot) serves the good set. */
    for (int round = 0; round < 2; round++) {
        mv_segstore_close(st);
        CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
        mv_segstore_seg *v;
        size_t n;
        uint64_t rev;
        CU_ASSERT_FATAL(mv_segstore_list(st, &v, &n, &rev) == 0);
        CU_ASSERT_FATAL(n == 1);
        CU_ASSERT_EQUAL(v[0].npod_labels, 2);
        CU_ASSERT(v[0].npod_labels == 2 &&
                  strcmp(v[0].pod_labels[0].name, "app.kubernetes.io/name") == 0 &&
                  strcmp(v[0].pod_labels[0].value, "checkout") == 0 &&
                  strcmp(v[0].pod_labels[1].value, "") == 0);
        CU_ASSERT_EQUAL(v[0].nlabels, 1);
        mv_segstore_segs_free(v, n);
    }
    /* catalog.json refuses a bad pod label naming it. */
    static const char bad_cat[] =
        "{\"version\":1,\"revision\":1,\"segments\":[{\"id\":\"seg-0000000000000001\","
        "\"size_bytes\":4096,\"owner_pid\":0,\"created_unix_ns\":1,\"labels\":[],"
        "\"pod_labels\":[{\"name\":\"app\",\"value\":\"a b\"}]}]}";
    mv_segstore_seg *v = NULL;
    size_t n = 0;
    uint64_t rev;
    int rc =
        mv_segstore_catalog_parse(bad_cat, sizeof bad_cat - 1, dir, &v, &n, &rev, err, sizeof err);
    CU_ASSERT(rc < 0 || n == 0);
    mv_segstore_segs_free(v, n);
    mv_segstore_seg_clear(&seg);
    mv_segstore_close(st);
}

/* The journal is folded into the snapshot after as many records as the last snapshot had
 * entries, at least 1,024: after 1,030 creates on an empty store the journal holds 6 records
 * and catalog.json the first 1,024 segments. */
static void test_journal_compaction(void)
{
    /* On tmpfs where there is one: 1,030 fdatasyncs on a busy disk take seconds. */
    char dir[600], path[700], shm[] = "/dev/shm/mv-segstore-compact-XXXXXX";
    int on_shm = mkdtemp(shm) != NULL;
    if (on_shm)
        snprintf(dir, sizeof dir, "%s/store", shm);
    else
        snprintf(dir, sizeof dir, "%s/compact%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    int ok = 0;
    for (int i = 0; i < 1030; i++)
        ok += mv_segstore_create(st, 4096, 0, NULL, 0, NULL, err, sizeof err) == 0;
    CU_ASSERT_EQUAL(ok, 1030);
    uint64_t jb, sb;
    mv_segstore_catalog_written(st, &jb, &sb);
    printf("\n  1030 creates: %" PRIu64 " journal bytes, %" PRIu64 " snapshot bytes written\n", jb,
           sb);
    size_t jlen, slen;
    snprintf(path, sizeof path, "%s/catalog.journal", dir);
    char *jr = slurp(path, &jlen);
    snprintf(path, sizeof path, "%s/catalog.json", dir);
    char *snap = slurp(path, &slen);
    CU_ASSERT_FATAL(jr && snap);
    size_t records = 0;
    for (char *p = jr; (p = memmem(p, jlen - (size_t)(p - jr), "MVJ1", 4)); p += 4)
        records++;
    CU_ASSERT_EQUAL(records, 6);
    mv_segstore_seg *v;
    size_t n, q;
    uint64_t rev;
    CU_ASSERT_EQUAL(mv_segstore_catalog_load_mem(snap, slen, NULL, 0, dir, &v, &n, &rev, &q), 0);
    CU_ASSERT_EQUAL(n, 1024);
    mv_segstore_segs_free(v, n);
    free(jr);
    free(snap);
    mv_segstore_close(st);
    if (on_shm)
        mv_test_rmrf(shm);
}

/* A catalog.json with an entry that cannot be loaded (a label value over the limit) is served
 * without it: the agent starts, the good entry is there, the original bytes are kept aside. */
static void test_catalog_quarantine(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/quarantine%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    mv_segstore_seg seg;
    CU_ASSERT_FATAL(mv_segstore_create(st, 4096, 0, NULL, 0, &seg, err, sizeof err) == 0);
    mv_segstore_close(st);
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    snprintf(path, sizeof path, "%s/catalog.json", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fprintf(f,
            "{\"version\":1,\"revision\":9,\"segments\":["
            "{\"id\":\"seg-00000000000000aa\",\"size_bytes\":4096,\"owner_pid\":0,"
            "\"created_unix_ns\":1,\"labels\":[{\"name\":\"a\",\"value\":\"%s\"}]},"
            "{\"id\":\"%s\",\"size_bytes\":4096,\"owner_pid\":0,\"created_unix_ns\":1}]}\n",
            big, seg.id);
    fclose(f);
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    mv_segstore_seg *v;
    size_t n;
    uint64_t rev;
    CU_ASSERT_EQUAL(mv_segstore_list(st, &v, &n, &rev), 0);
    CU_ASSERT(n == 1 && strcmp(v[0].id, seg.id) == 0);
    mv_segstore_segs_free(v, n);
    CU_ASSERT_EQUAL(count_files(dir, "catalog.json.bad-"), 1);
    mv_segstore_close(st);
    mv_segstore_seg_clear(&seg);
}

/* A create whose journal record cannot be written fails with the reason, leaves no file and
 * no entry: RLIMIT_FSIZE stops the journal from growing by one more record. */
static void test_create_fails_when_not_durable(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/nodurable%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[256];
    mv_segstore_label l = {"service", "durable"};
    for (int i = 0; i < 40; i++)
        CU_ASSERT_FATAL(mv_segstore_create(st, 4096, 0, &l, 1, NULL, err, sizeof err) == 0);
    snprintf(path, sizeof path, "%s/catalog.journal", dir);
    struct stat sb;
    CU_ASSERT_FATAL(stat(path, &sb) == 0 && sb.st_size > 4096);
    size_t files = count_files(dir, "seg-");
    struct rlimit old, lim;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 20;
    signal(SIGXFSZ, SIG_IGN);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int rc = mv_segstore_create(st, 4096, 0, &l, 1, NULL, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    CU_ASSERT_EQUAL(rc, -EFBIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "catalog journal"));
    CU_ASSERT_EQUAL(count_files(dir, "seg-"), files);
    mv_segstore_seg *v;
    size_t n;
    CU_ASSERT_EQUAL(mv_segstore_list(st, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, 40);
    mv_segstore_segs_free(v, n);
    CU_ASSERT(stat(path, &sb) == 0 && (uint64_t)sb.st_size == (uint64_t)lim.rlim_cur - 20);
    mv_segstore_close(st);
}

/* Per-uid quotas count the segments of each uid; root is not held to them; the reserve holds
 * for everyone. */
static void test_quotas(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/quota%d", tmpdir, dir_seq++);
    mv_segstore_opts o = {.dir = dir,
                          .max_size = 1u << 20,
                          .reap_interval_ms = -1,
                          .max_segments_per_uid = 3,
                          .max_bytes_per_uid = 5 * 4096};
    mv_segstore *st;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    char err[320];
    for (int i = 0; i < 3; i++)
        CU_ASSERT(mv_segstore_create_for(st, 1000, 4096, 0, NULL, 0, NULL, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(mv_segstore_create_for(st, 1000, 4096, 0, NULL, 0, NULL, err, sizeof err),
                    -EDQUOT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "uid 1000 already owns 3 segments"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--max-segments-per-uid"));
    CU_ASSERT_EQUAL(mv_segstore_create_for(st, 1001, 3 * 4096, 0, NULL, 0, NULL, err, sizeof err),
                    0);
    CU_ASSERT_EQUAL(mv_segstore_create_for(st, 1001, 3 * 4096, 0, NULL, 0, NULL, err, sizeof err),
                    -EDQUOT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--max-bytes-per-uid"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "owns 12288 bytes"));
    for (int i = 0; i < 5; i++)
        CU_ASSERT(mv_segstore_create_for(st, 0, 4096, 0, NULL, 0, NULL, err, sizeof err) == 0);
    uint64_t c, b;
    mv_segstore_usage(st, 1000, &c, &b);
    CU_ASSERT(c == 3 && b == 3 * 4096);
    mv_segstore_close(st);
    /* A reserve of 99% of the filesystem refuses every create, naming the flags. */
    o.min_free_percent = 99;
    CU_ASSERT_FATAL(mv_segstore_open(&o, &st) == 0);
    CU_ASSERT_EQUAL(mv_segstore_create_for(st, 0, 4096, 0, NULL, 0, NULL, err, sizeof err),
                    -ENOSPC);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--min-free-percent 99"));
    mv_segstore_close(st);
}

int main(void)
{
    mv_log_init("test", MV_LOG_WARN);
    tmpdir = mv_test_tmpdir("segstore");
    if (!tmpdir)
        return 1;
    static const mv_test tests[] = {
        {"owners' pidfds leave descriptors for the rest", test_owner_fds_within_limit},
        {"a pass reaps exactly the dead owners (pidfds and pid numbers)", test_reap_some_owners},
        {"the reaper wakes when an owner exits, polls for pid-number owners", test_reap_on_exit},
        {"catalog.json validation", test_catalog_parse},
        {"every create is in the journal when it returns; torn and damaged records",
         test_journal_durable},
        {"the journal is folded into the snapshot after enough records", test_journal_compaction},
        {"a catalog entry that cannot be loaded is set aside, the rest served",
         test_catalog_quarantine},
        {"a create whose entry cannot be made durable fails and leaves no file",
         test_create_fails_when_not_durable},
        {"per-uid quotas and the disk reserve", test_quotas},
        {"pod labels: checked, bounded, persisted", test_pod_labels},
    };
    int fails = MV_TEST_RUN("segstore", tests);
    if (!fails)
        mv_test_rmrf(tmpdir);
    free(tmpdir);
    return fails;
}
