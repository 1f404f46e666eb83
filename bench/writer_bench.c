/* writer_bench.c: ns per update of libmicroview counters, gauges and histograms, 1 and 2 threads.
 */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/resource.h>
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

/* How the second thread is placed: alone, on the same metric, on a metric registered right
 * after (the neighbouring value slot: the next 64-byte line with libmicroview's default
 * placement, the same line with MICROVIEW_PLACEMENT=packed), or on a metric registered after
 * 7 more fillers (at least 64 bytes away with either placement). The _sharded modes: one
 * thread, or two on the same metric, registered with 2 shards (mv_set_shards, spec section
 * 5.2): each thread updates a shard of its own. */
enum mode {
    MODE_1T,
    MODE_2T_SAME,
    MODE_2T_DIFF,
    MODE_2T_DIFF_PADDED,
    MODE_1T_SHARDED,
    MODE_2T_SAME_SHARDED,
    MODE_COUNT_
};

static const char *const mode_names[MODE_COUNT_] = {
    "1t", "2t_same", "2t_diff", "2t_diff_padded", "1t_sharded", "2t_same_sharded"};

#define SHARDS 2 /* shards of the _sharded modes' metrics: one per thread */

typedef struct metrics {
    mv_counter c[4]; /* [0] shared, [1] neighbour slot, [2] 64 bytes further, [3] sharded */
    mv_gauge g[4];
    mv_histogram *h[4];
} metrics;

static double g_values[VALUES_LEN];
static const char *g_placement = "lines"; /* MICROVIEW_PLACEMENT as libmicroview reads it */

/* One timed chunk of a thread's loop: [t0, t1] in CLOCK_MONOTONIC ns, `ops` updates, and
 * whether the thread ran it without being switched out (its context-switch counts did not
 * move across the chunk). */
typedef struct chunk {
    uint64_t t0, t1;
    uint32_t ops;
    uint32_t clean;
} chunk;

typedef struct worker {
    pthread_t tid;
    pthread_barrier_t *start;
    enum op_kind op;
    mv_counter c;
    mv_gauge g;
    mv_histogram *h;
    uint64_t iters;
    uint64_t chunk_ops;
    uint64_t elapsed_ns;
    chunk *chunks; /* iters / chunk_ops rounded up */
    size_t nchunks;
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

static long switches(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return -1;
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* Runs the loop in chunks, timing each and noting whether the thread was switched out
 * during it. The chunk bookkeeping (two clock reads and two getrusage calls per chunk) is
 * outside the chunks' intervals; it adds a few percent at most to the wall figure of the
 * fastest operations. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    uint64_t t0 = bench_now_ns();
    w->nchunks = 0;
    for (uint64_t done = 0; done < w->iters;) {
        uint64_t k = w->iters - done < w->chunk_ops ? w->iters - done : w->chunk_ops;
        long s0 = switches();
        uint64_t a = bench_now_ns();
        run_loop(w, k);
        uint64_t b = bench_now_ns();
        long s1 = switches();
        w->chunks[w->nchunks++] = (chunk){a, b, (uint32_t)k, s0 >= 0 && s0 == s1};
        done += k;
    }
    w->elapsed_ns = bench_now_ns() - t0;
    return NULL;
}

/* Whether thread `o`'s clean chunks cover [t0, t1] without a gap longer than `slack` ns
 * (the bookkeeping between two chunks): i.e. the other thread ran all the time. *from is
 * the first of o's chunks that may overlap; calls must come with increasing t0. */
static bool covered(const worker *o, size_t *from, uint64_t t0, uint64_t t1, uint64_t slack)
{
    while (*from < o->nchunks && o->chunks[*from].t1 <= t0)
        (*from)++;
    uint64_t reach = t0; /* covered up to here */
    for (size_t i = *from; i < o->nchunks && reach < t1; i++) {
        const chunk *c = &o->chunks[i];
        if (c->t0 > reach + slack || !c->clean)
            return false;
        reach = c->t1;
    }
    return reach >= t1;
}

/* Appends ns/op of every chunk that ran uncontested by the scheduler to `out` (capacity
 * `cap`): with one thread, its clean chunks; with two, the clean chunks of either thread
 * during which the other thread was running too (co-running chunks). Returns how many
 * were added; *ops gets the updates they hold. */
static size_t clean_chunks(const worker *ws, int n, double *out, size_t cap, uint64_t *ops)
{
    size_t k = 0;
    for (int t = 0; t < n; t++) {
        size_t from = 0;
        for (size_t i = 0; i < ws[t].nchunks && k < cap; i++) {
            const chunk *c = &ws[t].chunks[i];
            if (!c->clean || (n == 2 && !covered(&ws[1 - t], &from, c->t0, c->t1, 20000)))
                continue;
            out[k++] = (double)(c->t1 - c->t0) / c->ops;
            *ops += c->ops;
        }
    }
    return k;
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
    return mv_counter_value(c);
}

/* Sets up workers for (op, mode) on `m`. Returns the thread count, or 0 if the
 * combination is not meaningful (a single-writer add on a shared metric). */
static int setup_workers(worker *ws, const metrics *m, enum op_kind op, enum mode mode,
                         uint64_t iters)
{
    static const int first[MODE_COUNT_] = {0, 0, 0, 0, 3, 3};
    static const int second[MODE_COUNT_] = {0, 0, 1, 2, 3, 3};
    int n = mode == MODE_1T || mode == MODE_1T_SHARDED ? 1 : 2;

    if (op == OP_COUNTER_ADD_LOCAL && (mode == MODE_2T_SAME || mode == MODE_2T_SAME_SHARDED))
        return 0;
    for (int i = 0; i < n; i++) {
        int k = i == 0 ? first[mode] : second[mode];
        memset(&ws[i], 0, sizeof ws[i]);
        ws[i].op = op;
        ws[i].c = m->c[k];
        ws[i].g = m->g[k];
        ws[i].h = m->h[k];
        ws[i].iters = iters;
    }
    return n;
}

/* Figures of one (op, mode) row. */
typedef struct row {
    bool done;
    double wall;       /* median over rounds of the slowest thread's ns/op */
    double clean;      /* median ns/op over clean (co-running) chunks, 0 if none */
    double clean_frac; /* share of all updates that were in clean chunks */
    size_t nclean;     /* clean chunks */
} row;

/* Enough clean chunks to trust their median (a few hundred microseconds of co-running). */
#define MIN_CLEAN_CHUNKS 20

/* The figures a 2t row (a) is compared with its 1t row (b) on:
 *   "clean": both have enough clean chunks: the clean-chunk medians;
 *   "busy":  the 1t row has clean chunks but the 2t row too few: its threads seldom ran at
 *            the same moment (a machine shared with other jobs), so its wall figure
 *            measures the scheduler and no goal can be judged; ratios use the wall figures;
 *   "wall":  not even the 1t row has clean chunks (the context-switch counts are not
 *            available): the wall-clock medians are all there is. */
static const char *basis(const row *a, const row *b)
{
    if (a->nclean >= MIN_CLEAN_CHUNKS && b->nclean >= MIN_CLEAN_CHUNKS)
        return "clean";
    return b->nclean >= MIN_CLEAN_CHUNKS ? "busy" : "wall";
}

static double figure(const row *r, const char *basis_name)
{
    return strcmp(basis_name, "clean") == 0 ? r->clean : r->wall;
}

static const char *met(const char *basis_name, bool ok)
{
    return strcmp(basis_name, "busy") == 0 ? "unknown" : ok ? "yes" : "no";
}

/* Chunk length in updates: tens of microseconds to a few milliseconds per chunk. */
static uint64_t chunk_ops_for(enum op_kind op)
{
    return op == OP_HISTOGRAM_OBSERVE ? 1u << 11 : 1u << 14;
}

/* Measures one (op, mode): a warm-up round of iters/10, then `runs` rounds.
 * Prints one parseable line and fills *out. Returns 0, or -1 when a count check failed. */
static int bench_one(const metrics *m, enum op_kind op, enum mode mode, uint64_t iters, int runs,
                     const row *one, row *out)
{
    worker ws[2];
    double ns_per_op[32];
    int n, bad = 0;
    uint64_t cops = chunk_ops_for(op);
    size_t per_thread = (size_t)((iters + cops - 1) / cops);
    size_t cap = 2 * per_thread * (size_t)runs, nclean = 0;
    uint64_t clean_ops = 0;
    double *clean = malloc(cap * sizeof *clean);
    chunk *buf = malloc(2 * per_thread * sizeof *buf);

    memset(out, 0, sizeof *out);
    if (!clean || !buf) {
        fprintf(stderr, "writer_bench: out of memory\n");
        free(clean);
        free(buf);
        return -1;
    }
    if ((n = setup_workers(ws, m, op, mode, iters / 10 ? iters / 10 : 1)) == 0) {
        printf("impl=libmicroview op=%s mode=%s threads=2 skipped=1 reason=single_writer_only\n",
               op_names[op], mode_names[mode]);
        free(clean);
        free(buf);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        ws[i].chunk_ops = cops;
        ws[i].chunks = buf + (size_t)i * per_thread;
    }
    run_round(ws, n); /* warm-up */
    setup_workers(ws, m, op, mode, iters);
    for (int i = 0; i < n; i++) {
        ws[i].chunk_ops = cops;
        ws[i].chunks = buf + (size_t)i * per_thread;
    }
    for (int r = 0; r < runs; r++) {
        uint64_t before = counter_value(ws[0].c);
        uint64_t ns = run_round(ws, n);
        if (ns == 0) {
            free(clean);
            free(buf);
            return -1;
        }
        ns_per_op[r] = (double)ns / (double)iters;
        nclean += clean_chunks(ws, n, clean + nclean, cap - nclean, &clean_ops);
        /* Atomic counters must not lose a single increment. */
        if (op == OP_COUNTER_INC || op == OP_COUNTER_ADD || op == OP_COUNTER_ADD_LOCAL) {
            uint64_t step = op == OP_COUNTER_INC ? 1 : 3;
            uint64_t got = counter_value(ws[0].c) - before;
            int same = mode == MODE_2T_SAME || mode == MODE_2T_SAME_SHARDED; /* both on c */
            uint64_t want = (same ? 2u : 1u) * iters * step;
            if (got != want) {
                fprintf(stderr, "writer_bench: %s %s lost updates: %llu != %llu\n", op_names[op],
                        mode_names[mode], (unsigned long long)got, (unsigned long long)want);
                bad = 1;
            }
        }
    }
    out->done = true;
    out->wall = bench_median(ns_per_op, (size_t)runs);
    out->clean = nclean ? bench_median(clean, nclean) : 0;
    out->clean_frac = (double)clean_ops / ((double)iters * n * runs);
    out->nclean = nclean;
    char ratio[64] = "";
    if (mode != MODE_1T && mode != MODE_1T_SHARDED && one->done) {
        const char *b = basis(out, one);
        snprintf(ratio, sizeof ratio, " ratio_to_1t=%.2f ratio_basis=%s",
                 figure(out, b) / figure(one, b), b);
    }
    printf("impl=libmicroview op=%s mode=%s threads=%d iters=%llu runs=%d ns_per_op=%.2f "
           "min=%.2f max=%.2f mops_total=%.1f clean_ns_per_op=%.2f clean_frac=%.2f "
           "clean_chunks=%zu placement=%s%s\n",
           op_names[op], mode_names[mode], n, (unsigned long long)iters, runs, out->wall,
           ns_per_op[0], ns_per_op[runs - 1], n * 1e3 / out->wall, out->clean, out->clean_frac,
           nclean, g_placement, ratio);
    /* Goal: two threads on two different metrics cost at most 1.3x one thread. (The other
     * half of the goal, every 2t row at or below client_golang's, needs the peer's figures:
     * bench/run.sh prints it.) */
    if (mode == MODE_2T_DIFF && one->done) {
        const char *b = basis(out, one);
        double q = figure(out, b) / figure(one, b);
        /* No ns_per_op key: bench/run.sh's tables take every line with op= and ns_per_op=
         * for a result row. */
        printf("goal=writer_2t check=2t_diff_vs_1t op=%s mode=2t_diff target=<=1.30 figure=%.2f "
               "basis=%s ns=%.2f ns_1t=%.2f placement=%s met=%s\n",
               op_names[op], q, b, figure(out, b), figure(one, b), g_placement, met(b, q <= 1.3));
    }
    fflush(stdout);
    free(clean);
    free(buf);
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
    /* Slots 0 and 1 are neighbours (the same cache line when packed); 7 filler counters
     * then push slot 2 at least 64 bytes past slot 1. Same for the gauges. */
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
    /* The sharded ones (id="sharded"), each on lines of its own. */
    mv_label sh = {"id", "sharded"};
    if ((rc = mv_set_shards(s, SHARDS)) != MV_OK ||
        (rc = mv_counter_register(s, "bench_counter_total", "bench", NULL, &sh, 1, &m->c[3])) !=
            MV_OK ||
        (rc = mv_gauge_register(s, "bench_gauge", "bench", NULL, &sh, 1, &m->g[3])) != MV_OK ||
        (rc = mv_histogram_register(s, "bench_seconds", "bench", NULL, &sh, 1, bounds, NBOUNDS,
                                    &m->h[3])) != MV_OK)
        return rc;
    return mv_set_shards(s, 1);
}

/* Whether `name` is one of the comma-separated names in `list`. */
static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

static void usage(void)
{
    fprintf(stderr, "usage: writer_bench [--quick] [--iters N] [--hist-iters N] [--runs R]\n"
                    "                    [--op NAME[,NAME...]] [--mode MODE[,MODE...]]\n"
                    "  modes: 1t 2t_same 2t_diff 2t_diff_padded 1t_sharded 2t_same_sharded (2t\n"
                    "  rows print their ratio to 1t when 1t is run too; _sharded: the metric has\n"
                    "  2 shards, one per thread)\n"
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
    const char *pl = getenv(MICROVIEW_ENV_PLACEMENT);
    g_placement = pl && !strcmp(pl, "packed") ? "packed" : "lines";
    printf("# writer_bench segment=%s iters=%llu hist_iters=%llu runs=%d placement=%s "
           "shards_of_sharded_rows=%d\n",
           path, (unsigned long long)iters, (unsigned long long)hist_iters, runs, g_placement,
           SHARDS);
    /* Where the second thread's metric is, in bytes from the first one's value word. */
    printf("# slot distances: counter 2t_diff %td 2t_diff_padded %td, gauge %td %td\n",
           (char *)m.c[1].slot - (char *)m.c[0].slot, (char *)m.c[2].slot - (char *)m.c[0].slot,
           (char *)m.g[1].slot - (char *)m.g[0].slot, (char *)m.g[2].slot - (char *)m.g[0].slot);
    rc = 0;
    for (int op = 0; op < OP_COUNT_; op++) {
        row rows[MODE_COUNT_] = {{0}};
        if (only_op && !in_list(only_op, op_names[op]))
            continue;
        for (int mode = 0; mode < MODE_COUNT_; mode++) {
            if (only_mode && !in_list(only_mode, mode_names[mode]))
                continue;
            uint64_t n = op == OP_HISTOGRAM_OBSERVE ? hist_iters : iters;
            if (bench_one(&m, (enum op_kind)op, (enum mode)mode, n, runs, &rows[0], &rows[mode]) !=
                0)
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
