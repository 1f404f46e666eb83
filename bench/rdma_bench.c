/* rdma_bench: the collector's RDMA read path (segments/s, bytes/s, per-tick latency) on one device.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "mv_collect.h"
#include "mv_log.h"
#include "mv_rdmatarget.h"
#include "mv_rdmaread.h"
#include "mv_segment.h"

#define TOKEN    "bench-token"
#define MAX_QPS  16
#define MAX_SEGS 4096

typedef struct region {
    void *buf;
    mv_rdmatarget_mr *mr;
    uint32_t rkey;
} region;

typedef struct worker {
    mv_rdmaread_conn *conn;
    void **srcs;
    mv_coll_read *reqs;
    size_t n;
    double seconds;
    uint64_t segs, bytes;
    pthread_t th;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    const mv_coll_transport *t = mv_rdmaread_transport(w->conn);
    uint64_t t0 = bench_now_ns(), end = t0 + (uint64_t)(w->seconds * 1e9);
    while (bench_now_ns() < end) {
        t->read_many(t->ctx, w->reqs, w->n);
        for (size_t i = 0; i < w->n; i++)
            if (w->reqs[i].status == 0) {
                w->segs++;
                w->bytes += w->reqs[i].len;
            }
    }
    w->seconds = (bench_now_ns() - t0) / 1e9;
    return NULL;
}

static int open_conns(const char *ip, uint16_t port, mv_rdmaread_conn **c, int q)
{
    mv_rdmaread_opts o;
    mv_rdmaread_opts_default(&o);
    o.staging_max = 256u << 20;
    char err[256];
    for (int i = 0; i < q; i++)
        if (mv_rdmaread_open(ip, port, TOKEN, &o, &c[i], err, sizeof err) != 0) {
            fprintf(stderr, "rdma_bench: connect: %s\n", err);
            return -1;
        }
    return 0;
}

/* Reads `nseg` segments of `size` bytes spread over `q` QPs (one thread each) for
 * `seconds`; prints one result row. */
static int run_bw(const char *ip, mv_rdmatarget *t, size_t size, size_t nseg, int q, double seconds)
{
    region *r = calloc(nseg, sizeof *r);
    worker w[MAX_QPS];
    mv_rdmaread_conn *c[MAX_QPS] = {0};
    char err[256];
    int rc = -1;
    memset(w, 0, sizeof w);
    for (size_t i = 0; i < nseg; i++) {
        if (posix_memalign(&r[i].buf, 4096, size))
            goto out;
        memset(r[i].buf, (int)i, size);
        if (mv_rdmatarget_register(t, r[i].buf, size, &r[i].mr, &r[i].rkey, err, sizeof err)) {
            fprintf(stderr, "rdma_bench: register: %s\n", err);
            goto out;
        }
    }
    if (open_conns(ip, mv_rdmatarget_port(t), c, q))
        goto out;
    for (int k = 0; k < q; k++) {
        worker *wk = &w[k];
        size_t from = nseg * (size_t)k / (size_t)q, to = nseg * (size_t)(k + 1) / (size_t)q;
        wk->conn = c[k];
        wk->n = to - from;
        wk->seconds = seconds;
        wk->srcs = calloc(wk->n, sizeof *wk->srcs);
        wk->reqs = calloc(wk->n, sizeof *wk->reqs);
        for (size_t i = 0; i < wk->n; i++) {
            region *ri = &r[from + i];
            mv_rdmaread_source_create(c[k], (uintptr_t)ri->buf, ri->rkey, size, &wk->srcs[i]);
            if (posix_memalign(&wk->reqs[i].dst, 64, size))
                goto out;
            wk->reqs[i].src = wk->srcs[i];
            wk->reqs[i].len = (uint32_t)size;
        }
    }
    for (int k = 0; k < q; k++)
        pthread_create(&w[k].th, NULL, worker_main, &w[k]);
    uint64_t segs = 0, bytes = 0;
    double secs = 0;
    for (int k = 0; k < q; k++) {
        pthread_join(w[k].th, NULL);
        segs += w[k].segs;
        bytes += w[k].bytes;
        secs = w[k].seconds > secs ? w[k].seconds : secs;
    }
    printf("collector_read size=%zu qps=%d segments=%zu segs_per_s=%.0f MBps=%.2f\n", size, q, nseg,
           segs / secs, bytes / secs / 1e6);
    rc = 0;
out:
    for (int k = 0; k < q; k++) {
        for (size_t i = 0; w[k].reqs && i < w[k].n; i++) {
            free(w[k].reqs[i].dst);
            free(w[k].srcs[i]);
        }
        free(w[k].reqs);
        free(w[k].srcs);
        mv_rdmaread_close(c[k]);
    }
    for (size_t i = 0; i < nseg; i++) {
        mv_rdmatarget_deregister(r[i].mr);
        free(r[i].buf);
    }
    free(r);
    return rc;
}

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, bench_cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

/* Per-tick latency for `nseg` formatted segments of `size` bytes on one QP:
 * (1) one batched read_many of every segment; (2) the collector table's tick
 * (read + validate), as mv_collect drives the transport today. */
static int run_tick(const char *ip, mv_rdmatarget *t, size_t size, size_t nseg, int ticks)
{
    region *r = calloc(nseg, sizeof *r);
    void **srcs = calloc(nseg, sizeof *srcs);
    mv_coll_read *reqs = calloc(nseg, sizeof *reqs);
    double *lat = calloc((size_t)ticks, sizeof *lat);
    mv_rdmaread_conn *c = NULL;
    mv_coll *table = NULL;
    char err[256];
    int rc = -1;
    uint32_t vsize, csize;
    mv_seg_default_layout(size, &vsize, &csize);
    for (size_t i = 0; i < nseg; i++) {
        mv_seg_error e;
        if (posix_memalign(&r[i].buf, 4096, size))
            goto out;
        memset(r[i].buf, 0, size);
        if (mv_seg_format(r[i].buf, size, vsize, &e) != MV_SEG_OK) {
            fprintf(stderr, "rdma_bench: mv_seg_format failed\n");
            goto out;
        }
        if (mv_rdmatarget_register(t, r[i].buf, size, &r[i].mr, &r[i].rkey, err, sizeof err)) {
            fprintf(stderr, "rdma_bench: register: %s\n", err);
            goto out;
        }
    }
    if (open_conns(ip, mv_rdmatarget_port(t), &c, 1))
        goto out;
    for (size_t i = 0; i < nseg; i++) {
        mv_rdmaread_source_create(c, (uintptr_t)r[i].buf, r[i].rkey, size, &srcs[i]);
        if (posix_memalign(&reqs[i].dst, 64, size))
            goto out;
        reqs[i].src = srcs[i];
        reqs[i].len = (uint32_t)size;
    }
    const mv_coll_transport *tr = mv_rdmaread_transport(c);
    for (int k = 0; k < ticks; k++) {
        uint64_t t0 = bench_now_ns();
        tr->read_many(tr->ctx, reqs, nseg);
        lat[k] = (bench_now_ns() - t0) / 1e3;
    }
    printf("tick_batched segments=%zu size=%zu p50_us=%.0f p99_us=%.0f\n", nseg, size,
           pct(lat, (size_t)ticks, 0.5), pct(lat, (size_t)ticks, 0.99));

    mv_coll_opts co;
    mv_coll_opts_default(&co);
    if (mv_coll_create(&co, &table))
        goto out;
    for (size_t i = 0; i < nseg; i++) {
        char id[32];
        void *src;
        snprintf(id, sizeof id, "s%zu", i);
        mv_rdmaread_source_create(c, (uintptr_t)r[i].buf, r[i].rkey, size, &src);
        mv_coll_add(table, id, size, NULL, 0, tr, src);
    }
    mv_coll_tick(table); /* first tick parses every catalog */
    for (int k = 0; k < ticks; k++) {
        uint64_t t0 = bench_now_ns();
        mv_coll_tick(table);
        lat[k] = (bench_now_ns() - t0) / 1e3;
    }
    mv_coll_snap *s = mv_coll_snapshot(table);
    size_t ok = 0;
    for (size_t i = 0; s && i < mv_coll_snap_count(s); i++)
        ok += mv_coll_snap_seg(s, i)->state == MV_COLL_OK;
    mv_coll_snap_free(s);
    printf("tick_table segments=%zu size=%zu valid=%zu p50_us=%.0f p99_us=%.0f\n", nseg, size, ok,
           pct(lat, (size_t)ticks, 0.5), pct(lat, (size_t)ticks, 0.99));
    rc = 0;
out:
    mv_coll_destroy(table);
    for (size_t i = 0; i < nseg; i++) {
        free(reqs[i].dst);
        free(srcs[i]);
    }
    mv_rdmaread_close(c);
    for (size_t i = 0; i < nseg; i++) {
        mv_rdmatarget_deregister(r[i].mr);
        free(r[i].buf);
    }
    free(r);
    free(srcs);
    free(reqs);
    free(lat);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: rdma_bench IP [SECONDS [MAX_QPS [TICK_SEGMENTS]]]\n"
                        "  IP: an address of the RDMA netdev (target and reader both use it)\n");
        return 2;
    }
    const char *ip = argv[1];
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    int maxq = argc > 3 ? atoi(argv[3]) : 4;
    size_t tick_segs = argc > 4 ? (size_t)atoi(argv[4]) : 1000;
    if (seconds <= 0 || maxq < 1 || maxq > MAX_QPS || tick_segs < 1 || tick_segs > MAX_SEGS) {
        fprintf(stderr, "rdma_bench: bad arguments\n");
        return 2;
    }
    mv_log_init("rdma_bench", MV_LOG_WARN);
    mv_rdmatarget *t;
    char err[256];
    mv_rdmatarget_opts to = {.max_connections = 64};
    if (mv_rdmatarget_create(ip, 0, TOKEN, &to, &t, err, sizeof err)) {
        fprintf(stderr, "rdma_bench: %s\n", err);
        return 1;
    }
    const size_t sizes[] = {1024, 4096, 65536};
    int rc = 0;
    for (size_t s = 0; s < 3 && rc == 0; s++) {
        size_t nseg = sizes[s] >= 65536 ? 64 : 256;
        for (int q = 1; q <= maxq && rc == 0; q *= 2)
            rc = run_bw(ip, t, sizes[s], nseg, q, seconds);
    }
    if (rc == 0)
        rc = run_tick(ip, t, 4096, tick_segs, 50);
    mv_rdmatarget_destroy(t);
    return rc ? 1 : 0;
}
