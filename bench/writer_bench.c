/* writer_bench.c: ns per update of libmicroview counters, gauges and histograms, 1 and 2 threads.
 */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "microview.h"

#define VALUES_LEN 1024 /* observation table for histograms, power of two */
#define NBOUNDS    16

enum op_kind {
    OP_COUNTER_INC,
    OP_COUNTER_ADD,
    OP_COUNTER_ADD_LOCAL,
    OP_GAUGE_SET,
    OP_GAUGE_ADD,
    OP_HISTOGRAM_OBSERVE,
    OP_COUNT_
};

static const char *const op_names[OP_COUNT_] = {
    "counter_inc", "counter_add", "counter_add_local",
    "gauge_set",   "gauge_add",   "histogram_observe",
};

/* How the second thread is placed: alone, on the same metric, on a metric
 * registered right after (neighbouring value slot), or one 64 bytes away. */
enum mode { MODE_1T, MODE_2T_SAME, MODE_2T_DIFF, MODE_2T_DIFF_PADDED, MODE_COUNT_ };

static const char *const mode_names[MODE_COUNT_] = {"1t", "2t_same", "2t_diff", "2t_diff_padded"};

typedef struct metrics {
    mv_counter c[3]; /* [0] shared, [1] neighbour slot, [2] 64 bytes further */
    mv_gauge g[3];
    mv_histogram *h[3];
} metrics;

static double g_values[VALUES_LEN];

typedef struct worker {
    pthread_t tid;
    pthread_barrier_t *start;
    enum op_kind op;
    mv_counter c;
    mv_gauge g;
    mv_histogram *h;
    uint64_t iters;
    uint64_t elapsed_ns;
} worker;

/* ---- The measured loops: one per operation, never inlined into the driver. */

static __attribute__((noinline)) void loop_counter_inc(mv_counter c, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mv_counter_inc(c);
        BENCH_CLOBBER();
    }
}

static __attribute__((noinline)) void loop_counter_add(mv_counter c, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mv_counter_add(c, 3);
        BENCH_CLOBBER();
    }
}

static __attribute__((noinline)) void loop_counter_add_local(mv_counter c, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mv_counter_add_local(c, 3);
        BENCH_CLOBBER();
    }
}

static __attribute__((noinline)) void loop_gauge_set(mv_gauge g, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mv_gauge_set(g, (double)i);
        BENCH_CLOBBER();
    }
}

static __attribute__((noinline)) void loop_gauge_add(mv_gauge g, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mv_gauge_add(g, 1.0);
        BENCH_CLOBBER();
    }
}

static __attribute__((noinline)) void loop_histogram_observe(mv_histogram *h, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mv_histogram_observe(h, g_values[i & (VALUES_LEN - 1)]);
        BENCH_CLOBBER();
    }
}

static void run_loop(const worker *w, uint64_t n)
{
    switch (w->op) {
    case OP_COUNTER_INC:
        loop_counter_inc(w->c, n);
        break;
    case OP_COUNTER_ADD:
        loop_counter_add(w->c, n);
        break;
    case OP_COUNTER_ADD_LOCAL:
        loop_counter_add_local(w->c, n);
        break;
    case OP_GAUGE_SET:
        loop_gauge_set(w->g, n);
        break;
    case OP_GAUGE_ADD:
        loop_gauge_add(w->g, n);
        break;
    case OP_HISTOGRAM_OBSERVE:
        loop_histogram_observe(w->h, n);
        break;
    case OP_COUNT_:
        break;
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    uint64_t t0 = bench_now_ns();
    run_loop(w, w->iters);
    w->elapsed_ns = bench_now_ns() - t0;
    return NULL;
}

/* Runs one timed round with `nthreads` workers; returns the slowest thread's
 * elapsed ns, or 0 if a thread could not be started. */
static uint64_t run_round(worker *ws, int nthreads)
{
    pthread_barrier_t start;
    uint64_t worst = 0;
    int started = 0;

    if (pthread_barrier_init(&start, NULL, (unsigned)nthreads) != 0)
        return 0;
    for (int i = 0; i < nthreads; i++) {
        ws[i].start = &start;
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "writer_bench: pthread_create failed\n");
            break;
        }
        started++;
    }
    if (started < nthreads) {
        /* The barrier never opens for the started threads; this cannot be
         * recovered in-process. */
        exit(1);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(ws[i].tid, NULL);
        if (ws[i].elapsed_ns > worst)
            worst = ws[i].elapsed_ns;
    }
    pthread_barrier_destroy(&start);
    return worst;
}

static uint64_t counter_value(mv_counter c)
{
    return __atomic_load_n(c.slot, __ATOMIC_RELAXED);
}

/* Sets up workers for (op, mode) on `m`. Returns the thread count, or 0 if the
 * combination is not meaningful (a single-writer add on a shared metric). */
static int setup_workers(worker *ws, const metrics *m, enum op_kind op, enum mode mode,
                         uint64_t iters)
{
    static const int second[MODE_COUNT_] = {0, 0, 1, 2};
    int n = mode == MODE_1T ? 1 : 2;

    if (op == OP_COUNTER_ADD_LOCAL && mode == MODE_2T_SAME)
        return 0;
    for (int i = 0; i < n; i++) {
        int k = i == 0 ? 0 : second[mode];
        memset(&ws[i], 0, sizeof ws[i]);
        ws[i].op = op;
        ws[i].c = m->c[k];
        ws[i].g = m->g[k];
        ws[i].h = m->h[k];
        ws[i].iters = iters;
    }
    return n;
}

/* Measures one (op, mode): a warm-up round of iters/10, then `runs` rounds.
 * Prints one parseable line. Returns 0, or -1 when a count check failed. */
static int bench_one(const metrics *m, enum op_kind op, enum mode mode, uint64_t iters, int runs)
{
    worker ws[2];
    double ns_per_op[32];
    int n, bad = 0;

    if ((n = setup_workers(ws, m, op, mode, iters / 10 ? iters / 10 : 1)) == 0) {
        printf("impl=libmicroview op=%s mode=%s threads=2 skipped=1 reason=single_writer_only\n",
               op_names[op], mode_names[mode]);
        return 0;
    }
    run_round(ws, n); /* warm-up */
    setup_workers(ws, m, op, mode, iters);
    for (int r = 0; r < runs; r++) {
        uint64_t before = counter_value(ws[0].c);
        uint64_t ns = run_round(ws, n);
        if (ns == 0)
            return -1;
        ns_per_op[r] = (double)ns / (double)iters;
        /* Atomic counters must not lose a single increment. */
        if (op == OP_COUNTER_INC || op == OP_COUNTER_ADD || op == OP_COUNTER_ADD_LOCAL) {
            uint64_t step = op == OP_COUNTER_INC ? 1 : 3;
            uint64_t got = counter_value(ws[0].c) - before;
            uint64_t want = (mode == MODE_2T_SAME ? 2 : 1) * iters * step;
            if (got != want) {
                fprintf(stderr, "writer_bench: %s %s lost updates: %llu != %llu\n", op_names[op],
                        mode_names[mode], (unsigned long long)got, (unsigned long long)want);
                bad = 1;
            }
        }
    }
    double med = bench_median(ns_per_op, (size_t)runs);
    printf("impl=libmicroview op=%s mode=%s threads=%d iters=%llu runs=%d ns_per_op=%.2f "
           "min=%.2f max=%.2f mops_total=%.1f\n",
           op_names[op], mode_names[mode], n, (unsigned long long)iters, runs, med, ns_per_op[0],
           ns_per_op[runs - 1], n * 1e3 / med);
    fflush(stdout);
    return bad ? -1 : 0;
}

static int register_metrics(mv_segment *s, metrics *m)
{
    double bounds[NBOUNDS];
    mv_label lab[3] = {{"id", "0"}, {"id", "1"}, {"id", "2"}};
    char pad[32];
    int rc;
    mv_counter unused;

    mv_exponential_buckets(1.0, 2.0, NBOUNDS, bounds);
    /* Slots 0 and 1 are neighbours (same cache line); 7 filler counters then
     * push slot 2 a full 64 bytes past slot 1. Same for the gauges. */
    for (int i = 0; i < 3; i++) {
        if (i == 2) {
            for (int f = 0; f < 7; f++) {
                snprintf(pad, sizeof pad, "bench_pad_%d", f);
                if ((rc = mv_counter_register(s, pad, NULL, NULL, NULL, 0, &unused)) != MV_OK)
                    return rc;
            }
        }
        if ((rc = mv_counter_register(s, "bench_counter_total", "bench", NULL, &lab[i], 1,
                                      &m->c[i])) != MV_OK)
            return rc;
    }
    for (int i = 0; i < 3; i++) {
        if (i == 2) {
            for (int f = 7; f < 14; f++) {
                snprintf(pad, sizeof pad, "bench_pad_%d", f);
                if ((rc = mv_counter_register(s, pad, NULL, NULL, NULL, 0, &unused)) != MV_OK)
                    return rc;
            }
        }
        if ((rc = mv_gauge_register(s, "bench_gauge", "bench", NULL, &lab[i], 1, &m->g[i])) !=
            MV_OK)
            return rc;
    }
    for (int i = 0; i < 3; i++) {
        if ((rc = mv_histogram_register(s, "bench_seconds", "bench", NULL, &lab[i], 1, bounds,
                                        NBOUNDS, &m->h[i])) != MV_OK)
            return rc;
    }
    return MV_OK;
}

static void usage(void)
{
    fprintf(stderr, "usage: writer_bench [--quick] [--iters N] [--hist-iters N] [--runs R]\n"
                    "                    [--op NAME] [--mode 1t|2t_same|2t_diff|2t_diff_padded]\n"
                    "  defaults: --iters 50000000 --hist-iters 20000000 --runs 5\n"
                    "  --quick:  --iters 5000000 --hist-iters 2000000 --runs 3\n");
}

int main(int argc, char **argv)
{
    uint64_t iters = 50000000, hist_iters = 20000000;
    int runs = 5, rc = 1;
    const char *only_op = NULL, *only_mode = NULL;
    char dir[256], path[300];
    mv_segment *seg = NULL;
    metrics m;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            iters = 5000000;
            hist_iters = 2000000;
            runs = 3;
        } else if (!strcmp(a, "--iters") && v) {
            iters = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--hist-iters") && v) {
            hist_iters = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--runs") && v) {
            runs = atoi(v);
            i++;
        } else if (!strcmp(a, "--op") && v) {
            only_op = v;
            i++;
        } else if (!strcmp(a, "--mode") && v) {
            only_mode = v;
            i++;
        } else {
            usage();
            return 2;
        }
    }
    if (runs < 1 || runs > 32 || iters < 10 || hist_iters < 10) {
        fprintf(stderr, "writer_bench: --runs must be 1..32 and iteration counts >= 10\n");
        return 2;
    }
    /* Observations spread evenly in log scale over 1 .. 2^17, so that all 16
     * finite buckets and +Inf receive values. Peers use the same formula. */
    for (int j = 0; j < VALUES_LEN; j++)
        g_values[j] = exp2((double)(j % 64) * 17.0 / 64.0);

    if (bench_make_tempdir(dir, sizeof dir) != 0) {
        fprintf(stderr, "writer_bench: cannot create a temp dir: %s\n", strerror(errno));
        return 1;
    }
    snprintf(path, sizeof path, "%s/writer.seg", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0) {
        fprintf(stderr, "writer_bench: cannot create %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto remove_dir;
    }
    close(fd);
    int err = mv_open(path, &seg);
    if (err != MV_OK) {
        fprintf(stderr, "writer_bench: mv_open %s: %s: %s\n", path, mv_strerror(err),
                mv_errdetail());
        goto remove_file;
    }
    if ((err = register_metrics(seg, &m)) != MV_OK) {
        fprintf(stderr, "writer_bench: register: %s: %s\n", mv_strerror(err), mv_errdetail());
        goto close_seg;
    }
    printf("# writer_bench segment=%s iters=%llu hist_iters=%llu runs=%d\n", path,
           (unsigned long long)iters, (unsigned long long)hist_iters, runs);
    rc = 0;
    for (int op = 0; op < OP_COUNT_; op++) {
        if (only_op && strcmp(only_op, op_names[op]) != 0)
            continue;
        for (int mode = 0; mode < MODE_COUNT_; mode++) {
            if (only_mode && strcmp(only_mode, mode_names[mode]) != 0)
                continue;
            uint64_t n = op == OP_HISTOGRAM_OBSERVE ? hist_iters : iters;
            if (bench_one(&m, (enum op_kind)op, (enum mode)mode, n, runs) != 0)
                rc = 1;
        }
    }

close_seg:
    mv_close(seg);
remove_file:
    unlink(path);
remove_dir:
    rmdir(dir);
    return rc;
}
