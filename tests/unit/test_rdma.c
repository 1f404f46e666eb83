/* Unit tests for mv_rdma on a real (or Soft-RoCE) device; exits 77 (skipped) without one. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_log.h"
#include "mv_rdmatarget.h"
#include "mv_rdmaread.h"
#include "mv_test.h"

#define TOKEN   "test-token-0123456789"
#define BUF_LEN 8192

static char g_ip[INET6_ADDRSTRLEN];

/* ---- Helpers ---------------------------------------------------------------------- */

/* Returns nonzero if rdma_cm binds `ip` to an RDMA device. */
static int ip_has_device(const char *ip)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    struct sockaddr_in sin;
    int ok = 0;

    if (!ch)
        return 0;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    if (inet_pton(AF_INET, ip, &sin.sin_addr) == 1 &&
        rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0) {
        ok = rdma_bind_addr(id, (struct sockaddr *)&sin) == 0 && id->verbs != NULL;
        rdma_destroy_id(id);
    }
    rdma_destroy_event_channel(ch);
    return ok;
}

/* Picks an IPv4 address of an RDMA netdev: $MV_RDMA_TEST_IP, else the first
 * non-loopback interface address that rdma_cm binds to a device. */
static int find_ip(void)
{
    const char *env = getenv("MV_RDMA_TEST_IP");
    struct ifaddrs *ifa, *i;

    if (env && *env) {
        snprintf(g_ip, sizeof g_ip, "%s", env);
        return ip_has_device(g_ip);
    }
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, g_ip, sizeof g_ip);
        if (ip_has_device(g_ip))
            break;
        g_ip[0] = 0;
    }
    freeifaddrs(ifa);
    return g_ip[0] != 0;
}

static unsigned char *make_buf(unsigned seed)
{
    unsigned char *b;
    CU_ASSERT_FATAL(posix_memalign((void **)&b, 4096, BUF_LEN) == 0);
    for (size_t i = 0; i < BUF_LEN; i++)
        b[i] = (unsigned char)(i * 31u + seed * 7u + (i >> 8));
    return b;
}

static mv_rdmatarget *new_target(void)
{
    mv_rdmatarget *t = NULL;
    char err[256] = "";
    int rc = mv_rdmatarget_create(g_ip, 0, TOKEN, NULL, &t, err, sizeof err);
    if (rc)
        fprintf(stderr, "target: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    CU_ASSERT_FATAL(mv_rdmatarget_port(t) != 0);
    return t;
}

static mv_rdmaread_conn *new_conn(mv_rdmatarget *t, const mv_rdmaread_opts *o)
{
    mv_rdmaread_conn *c = NULL;
    char err[256] = "";
    int rc = mv_rdmaread_open(g_ip, mv_rdmatarget_port(t), TOKEN, o, &c, err, sizeof err);
    if (rc)
        fprintf(stderr, "conn: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    return c;
}

static void reg(mv_rdmatarget *t, void *buf, size_t len, mv_rdmatarget_mr **mr, uint32_t *rkey)
{
    char err[256] = "";
    int rc = mv_rdmatarget_register(t, buf, len, mr, rkey, err, sizeof err);
    if (rc)
        fprintf(stderr, "register: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
}

/* Waits (bounded) until the target has seen `n` established collectors. */
static int wait_connections(mv_rdmatarget *t, uint32_t n)
{
    struct timespec ts = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 1000; i++) {
        if (mv_rdmatarget_connections(t) == n)
            return 1;
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* ---- Tests ------------------------------------------------------------------------ */

static void test_device_info(void)
{
    mv_rdmatarget *t = new_target();
    mv_rdma_dev_info di;

    mv_rdmatarget_info(t, &di);
    printf("\n  device=%s port=%u state=%s link=%s gid_index=%d gid=%s type=%s "
           "max_qp_rd_atom=%u\n",
           di.device, di.port_num, di.port_state, di.link_layer, di.gid_index, di.gid, di.gid_type,
           di.max_qp_rd_atom);
    CU_ASSERT(di.device[0] != 0);
    CU_ASSERT(di.port_num >= 1);
    CU_ASSERT(di.max_qp_rd_atom > 0);
    CU_ASSERT(di.gid_index >= 0);
    mv_rdmatarget_destroy(t);
}

static void test_bad_arguments(void)
{
    mv_rdmatarget *t = NULL;
    mv_rdmaread_conn *c = NULL;
    char err[256];
    char long_token[MV_RDMA_TOKEN_MAX + 2];

    memset(long_token, 'x', sizeof long_token - 1);
    long_token[sizeof long_token - 1] = 0;
    CU_ASSERT(mv_rdmatarget_create(g_ip, 0, "", NULL, &t, err, sizeof err) == -EINVAL);
    CU_ASSERT(mv_rdmatarget_create(g_ip, 0, long_token, NULL, &t, err, sizeof err) == -EINVAL);
    CU_ASSERT(mv_rdmatarget_create("not-an-ip", 0, TOKEN, NULL, &t, err, sizeof err) == -EINVAL);
    CU_ASSERT(t == NULL);
    CU_ASSERT(mv_rdmaread_open("not-an-ip", 1, TOKEN, NULL, &c, err, sizeof err) == -EINVAL);
    CU_ASSERT(c == NULL);
}

static void test_read_two_buffers(void)
{
    mv_rdmatarget *t = new_target();
    unsigned char *a = make_buf(1), *b = make_buf(2);
    unsigned char da[BUF_LEN], db[1000];
    mv_rdmatarget_mr *ma, *mb;
    uint32_t ka, kb;
    void *sa, *sb;
    mv_rdmaread_stats st;

    reg(t, a, BUF_LEN, &ma, &ka);
    reg(t, b, BUF_LEN, &mb, &kb);
    CU_ASSERT(ka != kb);
    mv_rdmaread_conn *c = new_conn(t, NULL);
    CU_ASSERT(wait_connections(t, 1));
    const mv_coll_transport *tr = mv_rdmaread_transport(c);
    CU_ASSERT_STRING_EQUAL(tr->name, "rdma");
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)a, ka, BUF_LEN, &sa) == 0);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)b, kb, BUF_LEN, &sb) == 0);

    memset(da, 0, sizeof da);
    memset(db, 0, sizeof db);
    mv_coll_read rq[3] = {
        {.src = sa, .off = 0, .len = BUF_LEN, .dst = da},
        {.src = sb, .off = 512, .len = sizeof db, .dst = db},
        {.src = sb, .off = BUF_LEN - 8, .len = 16, .dst = db}, /* past the end */
    };
    tr->read_many(tr->ctx, rq, 3);
    CU_ASSERT(rq[0].status == 0);
    CU_ASSERT(rq[1].status == 0);
    CU_ASSERT(rq[2].status == -EINVAL);
    CU_ASSERT(memcmp(da, a, BUF_LEN) == 0);
    CU_ASSERT(memcmp(db, b + 512, sizeof db) == 0);

    /* A change on the target side shows in the next read. */
    a[100] ^= 0xff;
    tr->read_many(tr->ctx, rq, 1);
    CU_ASSERT(rq[0].status == 0);
    CU_ASSERT(memcmp(da, a, BUF_LEN) == 0);

    mv_rdmaread_stats_get(c, &st);
    CU_ASSERT(st.connected == 1);
    CU_ASSERT(st.reads == 3);
    CU_ASSERT(st.bytes == 2 * BUF_LEN + sizeof db);
    CU_ASSERT(st.errors == 1);
    CU_ASSERT(st.ticks == 2);
    CU_ASSERT(st.initiator_depth >= 1);
    uint64_t hist = 0;
    for (int i = 0; i < MV_RDMA_LAT_BUCKETS; i++)
        hist += st.tick_latency_us[i];
    CU_ASSERT(hist == 2);

    tr->src_close(tr->ctx, sa);
    tr->src_close(tr->ctx, sb);
    mv_rdmaread_close(c);
    CU_ASSERT(wait_connections(t, 0));
    CU_ASSERT(mv_rdmatarget_deregister(ma) == 0);
    CU_ASSERT(mv_rdmatarget_deregister(mb) == 0);
    mv_rdmatarget_destroy(t);
    free(a);
    free(b);
}

static void test_wrong_token_refused(void)
{
    mv_rdmatarget *t = new_target();
    mv_rdmaread_conn *c = NULL;
    char err[256] = "";
    int rc =
        mv_rdmaread_open(g_ip, mv_rdmatarget_port(t), "not-the-token", NULL, &c, err, sizeof err);
    CU_ASSERT(rc == -ECONNREFUSED);
    CU_ASSERT(c == NULL);
    CU_ASSERT(strstr(err, "bad token") != NULL);
    if (!strstr(err, "bad token"))
        fprintf(stderr, "reject message: %s\n", err);
    /* A prefix of the right token is not the token either. */
    rc = mv_rdmaread_open(g_ip, mv_rdmatarget_port(t), "test-token", NULL, &c, err, sizeof err);
    CU_ASSERT(rc == -ECONNREFUSED);
    CU_ASSERT(mv_rdmatarget_connections(t) == 0);
    mv_rdmatarget_destroy(t);
}

static void test_revoked_segment(void)
{
    mv_rdmatarget *t = new_target();
    unsigned char *a = make_buf(3), *b = make_buf(4);
    unsigned char da[BUF_LEN], db[BUF_LEN];
    mv_rdmatarget_mr *ma, *mb;
    uint32_t ka, kb;
    void *sa, *sb;
    mv_rdmaread_stats st;

    reg(t, a, BUF_LEN, &ma, &ka);
    reg(t, b, BUF_LEN, &mb, &kb);
    mv_rdmaread_conn *c = new_conn(t, NULL);
    const mv_coll_transport *tr = mv_rdmaread_transport(c);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)a, ka, BUF_LEN, &sa) == 0);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)b, kb, BUF_LEN, &sb) == 0);

    mv_coll_read rq[2] = {
        {.src = sb, .off = 0, .len = BUF_LEN, .dst = db},
        {.src = sa, .off = 0, .len = BUF_LEN, .dst = da},
    };
    tr->read_many(tr->ctx, rq, 2);
    CU_ASSERT(rq[0].status == 0 && rq[1].status == 0);

    CU_ASSERT(mv_rdmatarget_deregister(ma) == 0);
    memset(db, 0, sizeof db);
    tr->read_many(tr->ctx, rq, 2);
    CU_ASSERT(rq[1].status == -EACCES);
    /* b was posted before a: RC completes in order, so it arrived intact. */
    CU_ASSERT(rq[0].status == 0);
    CU_ASSERT(memcmp(db, b, BUF_LEN) == 0);
    mv_rdmaread_stats_get(c, &st);
    CU_ASSERT(st.connected == 0);
    CU_ASSERT(st.revoked == 1);

    /* The next read reconnects and reads the other segment fine. */
    memset(db, 0, sizeof db);
    b[7] ^= 0x5a;
    tr->read_many(tr->ctx, rq, 1);
    CU_ASSERT(rq[0].status == 0);
    CU_ASSERT(memcmp(db, b, BUF_LEN) == 0);
    mv_rdmaread_stats_get(c, &st);
    CU_ASSERT(st.connected == 1);
    CU_ASSERT(st.reconnects == 1);

    /* Revoked first in the list: the other one is flushed (-EIO), then fine. */
    mv_coll_read rq2[2] = {
        {.src = sa, .off = 0, .len = BUF_LEN, .dst = da},
        {.src = sb, .off = 0, .len = BUF_LEN, .dst = db},
    };
    tr->read_many(tr->ctx, rq2, 2);
    CU_ASSERT(rq2[0].status == -EACCES);
    CU_ASSERT(rq2[1].status == -EIO || rq2[1].status == 0);
    tr->read_many(tr->ctx, &rq2[1], 1);
    CU_ASSERT(rq2[1].status == 0);
    mv_rdmaread_stats_get(c, &st);
    CU_ASSERT(st.reconnects == 2);
    CU_ASSERT(st.revoked == 2);

    tr->src_close(tr->ctx, sa);
    tr->src_close(tr->ctx, sb);
    mv_rdmaread_close(c);
    CU_ASSERT(mv_rdmatarget_deregister(mb) == 0);
    mv_rdmatarget_destroy(t);
    free(a);
    free(b);
}

/* Many small reads (more than the send queue holds), a staging buffer that
 * must grow, and a cap that forces several rounds. */
static void test_many_reads_and_rounds(void)
{
    enum { BIG = 256 * 1024, N = 600, LEN = 400 };
    mv_rdmatarget *t = new_target();
    unsigned char *big, *dst;
    mv_rdmatarget_mr *m;
    uint32_t k;
    void *s;
    mv_rdmaread_opts o;
    mv_rdmaread_stats st;
    mv_coll_read *rq;

    CU_ASSERT_FATAL(posix_memalign((void **)&big, 4096, BIG) == 0);
    for (size_t i = 0; i < BIG; i++)
        big[i] = (unsigned char)(i ^ (i >> 9) ^ (i >> 17));
    reg(t, big, BIG, &m, &k);

    mv_rdmaread_opts_default(&o);
    o.sq_depth = 64;
    o.staging_initial = 4096;
    o.staging_max = 64 * 1024; /* N * 448 bytes needs ~4 rounds */
    mv_rdmaread_conn *c = new_conn(t, &o);
    const mv_coll_transport *tr = mv_rdmaread_transport(c);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)big, k, BIG, &s) == 0);

    dst = calloc(N, LEN);
    rq = calloc(N, sizeof *rq);
    CU_ASSERT_FATAL(dst && rq);
    for (size_t i = 0; i < N; i++) {
        rq[i].src = s;
        rq[i].off = (i * 4099u) % (BIG - LEN);
        rq[i].len = LEN;
        rq[i].dst = dst + i * LEN;
    }
    tr->read_many(tr->ctx, rq, N);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++)
        bad += rq[i].status != 0 || memcmp(rq[i].dst, big + rq[i].off, LEN) != 0;
    CU_ASSERT(bad == 0);
    mv_rdmaread_stats_get(c, &st);
    CU_ASSERT(st.reads == N);
    CU_ASSERT(st.staging_bytes == 64 * 1024);

    /* A single read larger than the cap is refused, the others still work. */
    mv_coll_read two[2] = {
        {.src = s, .off = 0, .len = 128 * 1024, .dst = NULL},
        {.src = s, .off = 0, .len = LEN, .dst = dst},
    };
    unsigned char *huge = malloc(128 * 1024);
    two[0].dst = huge;
    tr->read_many(tr->ctx, two, 2);
    CU_ASSERT(two[0].status == -EINVAL);
    CU_ASSERT(two[1].status == 0 && memcmp(dst, big, LEN) == 0);
    free(huge);

    tr->src_close(tr->ctx, s);
    mv_rdmaread_close(c);
    CU_ASSERT(mv_rdmatarget_deregister(m) == 0);
    mv_rdmatarget_destroy(t);
    free(rq);
    free(dst);
    free(big);
}

/* With a memlock limit below the region size (and no CAP_IPC_LOCK) the
 * registration fails with a message naming the fix. */
static void test_memlock_message(void)
{
    struct rlimit old, low;
    mv_rdmatarget *t = new_target();
    unsigned char *buf;
    mv_rdmatarget_mr *m = NULL;
    uint32_t k;
    char err[256] = "";
    size_t len = 4u << 20;

    CU_ASSERT_FATAL(getrlimit(RLIMIT_MEMLOCK, &old) == 0);
    CU_ASSERT_FATAL(posix_memalign((void **)&buf, 4096, len) == 0);
    memset(buf, 1, len);
    low = old;
    low.rlim_cur = 64 * 1024;
    CU_ASSERT_FATAL(setrlimit(RLIMIT_MEMLOCK, &low) == 0);
    int rc = mv_rdmatarget_register(t, buf, len, &m, &k, err, sizeof err);
    CU_ASSERT(setrlimit(RLIMIT_MEMLOCK, &old) == 0);
    if (rc == 0) {
        printf("\n  (registered anyway: the process has CAP_IPC_LOCK)\n");
        CU_ASSERT(mv_rdmatarget_deregister(m) == 0);
    } else {
        CU_ASSERT(rc == -ENOMEM);
        CU_ASSERT(strstr(err, "ulimit -l") != NULL);
    }
    mv_rdmatarget_destroy(t);
    free(buf);
}

/* The agent goes away and comes back on the same port: reads fail with -EIO
 * while it is gone (with backoff) and work again once it is back. */
static void test_agent_restart(void)
{
    mv_rdmatarget *t = new_target();
    uint16_t port = mv_rdmatarget_port(t);
    unsigned char *a = make_buf(5), da[BUF_LEN];
    mv_rdmatarget_mr *m;
    uint32_t k;
    void *s;
    mv_rdmaread_opts o;
    mv_rdmaread_stats st;
    char err[256] = "";
    struct timespec ts = {0, 2 * 1000 * 1000};

    reg(t, a, BUF_LEN, &m, &k);
    mv_rdmaread_opts_default(&o);
    o.backoff_min_ms = 1;
    o.backoff_max_ms = 20;
    o.connect_timeout_ms = 2000;
    mv_rdmaread_conn *c = new_conn(t, &o);
    const mv_coll_transport *tr = mv_rdmaread_transport(c);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)a, k, BUF_LEN, &s) == 0);
    mv_coll_read rq = {.src = s, .off = 0, .len = BUF_LEN, .dst = da};
    tr->read_many(tr->ctx, &rq, 1);
    CU_ASSERT(rq.status == 0);

    CU_ASSERT(mv_rdmatarget_deregister(m) == 0);
    mv_rdmatarget_destroy(t);
    /* Gone: the read fails (disconnect or access error), never hangs. */
    tr->read_many(tr->ctx, &rq, 1);
    CU_ASSERT(rq.status == -EIO || rq.status == -EACCES);
    tr->read_many(tr->ctx, &rq, 1);
    CU_ASSERT(rq.status != 0);

    /* Back on the same port, with the buffer registered again (new rkey). */
    int rc = mv_rdmatarget_create(g_ip, port, TOKEN, NULL, &t, err, sizeof err);
    if (rc)
        fprintf(stderr, "target again: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    reg(t, a, BUF_LEN, &m, &k);
    tr->src_close(tr->ctx, s);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)a, k, BUF_LEN, &s) == 0);
    rq.src = s;
    memset(da, 0, sizeof da);
    rq.status = -1;
    for (int i = 0; i < 500 && rq.status != 0; i++) {
        tr->read_many(tr->ctx, &rq, 1);
        if (rq.status != 0)
            nanosleep(&ts, NULL);
    }
    CU_ASSERT(rq.status == 0);
    CU_ASSERT(memcmp(da, a, BUF_LEN) == 0);
    mv_rdmaread_stats_get(c, &st);
    CU_ASSERT(st.reconnects == 1);
    CU_ASSERT(st.connect_failures >= 1);

    tr->src_close(tr->ctx, s);
    mv_rdmaread_close(c);
    CU_ASSERT(mv_rdmatarget_deregister(m) == 0);
    mv_rdmatarget_destroy(t);
    free(a);
}

/* The whole data path: a pod writes a segment with libmicroview, the agent
 * registers the file's mapping, the collector's table reads it
 * over RDMA and validates it. */
static void test_collector_table_over_rdma(void)
{
    char dir[] = "/tmp/mv-test-rdma-XXXXXX", path[64];
    const size_t size = 16384;
    mv_segment *seg;
    mv_counter ctr;
    mv_rdmatarget_mr *m;
    uint32_t k;
    void *src, *map;
    mv_coll_opts co;
    mv_coll *table;

    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/pod.seg", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, (off_t)size) == 0);
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "reqs_total", "r", NULL, NULL, 0, &ctr) == MV_OK);
    mv_counter_add(ctr, 41);
    /* Read-write: kernels before 6.2 cannot pin a read-only mapping. The
     * registration is still remote-read-only. */
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    close(fd);

    mv_rdmatarget *t = new_target();
    reg(t, map, size, &m, &k);
    mv_rdmaread_conn *c = new_conn(t, NULL);
    mv_coll_opts_default(&co);
    CU_ASSERT_FATAL(mv_coll_create(&co, &table) == 0);
    CU_ASSERT_FATAL(mv_rdmaread_source_create(c, (uintptr_t)map, k, size, &src) == 0);
    mv_seg_label l = {"pod", "p1"};
    CU_ASSERT_FATAL(mv_coll_add(table, "p1", size, &l, 1, mv_rdmaread_transport(c), src) == 0);

    for (int round = 0; round < 2; round++) {
        mv_coll_tick(table);
        mv_coll_snap *s = mv_coll_snapshot(table);
        CU_ASSERT_FATAL(mv_coll_snap_count(s) == 1);
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, 0);
        CU_ASSERT_STRING_EQUAL(v->transport, "rdma");
        CU_ASSERT_EQUAL(v->state, MV_COLL_OK);
        int found = 0;
        for (size_t i = 0; v->cat && v->hot && i < mv_seg_catalog_count(v->cat); i++) {
            const mv_seg_metric *mt = mv_seg_catalog_metric(v->cat, i);
            if (strcmp(mt->name, "reqs_total") == 0) {
                CU_ASSERT_EQUAL(mv_seg_read_counter(v->hot, mt), 41u + (unsigned)round);
                found = 1;
            }
        }
        CU_ASSERT(found);
        mv_coll_snap_free(s);
        mv_counter_inc(ctr);
    }

    mv_coll_destroy(table); /* closes the source */
    mv_rdmaread_close(c);
    CU_ASSERT(mv_rdmatarget_deregister(m) == 0);
    mv_rdmatarget_destroy(t);
    munmap(map, size);
    mv_close(seg);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    struct ibv_device **devs;
    int ndev = 0;

    devs = ibv_get_device_list(&ndev);
    if (devs)
        ibv_free_device_list(devs);
    if (!devs || ndev == 0) {
        printf("SKIPPED: no RDMA device (ibv_get_device_list found none; on a Linux host: "
               "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <if>)\n");
        return 77;
    }
    if (!find_ip()) {
        printf("SKIPPED: no RDMA device (%d device(s), but no IPv4 address rdma_cm binds to one; "
               "set MV_RDMA_TEST_IP)\n",
               ndev);
        return 77;
    }
    mv_log_init("test_rdma", getenv("MV_LOG_DEBUG") ? MV_LOG_DEBUG : MV_LOG_INFO);
    printf("test_rdma: using %s\n", g_ip);

    static const mv_test tests[] = {
        {"device info", test_device_info},
        {"bad arguments", test_bad_arguments},
        {"read two buffers", test_read_two_buffers},
        {"wrong token is refused", test_wrong_token_refused},
        {"revoked segment: -EACCES, then reconnect", test_revoked_segment},
        {"many reads, staging growth and rounds", test_many_reads_and_rounds},
        {"memlock message", test_memlock_message},
        {"agent restart: backoff, reconnect", test_agent_restart},
        {"collector table over RDMA", test_collector_table_over_rdma},
    };
    int failed = MV_TEST_RUN("rdma", tests);
    return failed;
}
