/* analytics_bench: ns/sample and state bytes of the sketch, detectors and FD scorer. */
#include "mv_detect.h"
#include "mv_fd.h"
#include "mv_sketch.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* MV_BENCH_CPU_TIME=1: the thread's CPU clock (a machine shared with other
 * jobs then does not count their time slices as ours). */
static double now_ns(void)
{
    static int cpu = -1;
    struct timespec ts;
    if (cpu < 0)
        cpu = getenv("MV_BENCH_CPU_TIME") != NULL;
    clock_gettime(cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_state = 12345;
static double unif(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static volatile double sink;

static void bench_sketch(size_t n, const double *vals, size_t nv)
{
    mv_sketch *sk = NULL;
    if (mv_sketch_create(NULL, &sk) != 0)
        return;
    for (size_t i = 0; i < nv; i++) /* warm the window */
        mv_sketch_add(sk, vals[i]);
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        mv_sketch_add(sk, vals[i & (nv - 1)]);
    double t1 = now_ns();
    double tq0 = now_ns();
    for (int i = 0; i < 1000; i++)
        sink = mv_sketch_quantile(sk, 0.99);
    double tq1 = now_ns();
    printf("sketch_add        %8.2f ns/sample  state %zu bytes (alpha 0.01, 2048 buckets/sign)\n",
           (t1 - t0) / (double)n, mv_sketch_memory_bytes(NULL));
    printf("sketch_quantile   %8.1f ns/query   (%u non-empty buckets)\n", (tq1 - tq0) / 1000.0,
           mv_sketch_bucket_count(sk));
    mv_sketch *o = NULL;
    if (mv_sketch_create(NULL, &o) == 0) {
        for (size_t i = 0; i < nv; i++)
            mv_sketch_add(o, vals[i] * 1.5);
        double tm0 = now_ns();
        for (int i = 0; i < 1000; i++)
            mv_sketch_merge(sk, o);
        double tm1 = now_ns();
        printf("sketch_merge      %8.1f ns/merge\n", (tm1 - tm0) / 1000.0);
        mv_sketch_destroy(o);
    }
    mv_sketch_destroy(sk);
}

static void bench_detect(size_t n, const double *vals, size_t nv, const char *what)
{
    size_t series = 1024;
    mv_detect *d = NULL;
    if (mv_detect_create(NULL, series, &d) != 0)
        return;
    unsigned acc = 0;
    size_t calm = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        unsigned f = mv_detect_update(d, i & (series - 1), vals[i & (nv - 1)]);
        acc += f;
        calm += f == 0;
    }
    double t1 = now_ns();
    sink = acc;
    printf("detect_update     %8.2f ns/sample  state %zu bytes per series (%s; %.0f%% calm "
           "samples, the others warm-up, cool-down, moving or changes)\n",
           (t1 - t0) / (double)n,
           (mv_detect_memory_bytes(series) - mv_detect_memory_bytes(0)) / series, what,
           100.0 * (double)calm / (double)n);
    mv_detect_destroy(d);
}

static void bench_fd(uint32_t dim, size_t n)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, dim);
    cfg.threshold = 0.5;
    if (mv_fd_create(&cfg, &fd) != 0)
        return;
    size_t pool = 4096;
    double *x = malloc(sizeof(double) * dim * pool);
    double *dirs = malloc(sizeof(double) * dim * 4);
    if (x == NULL || dirs == NULL)
        goto out;
    for (uint32_t i = 0; i < dim * 4; i++)
        dirs[i] = unif() - 0.5;
    for (size_t t = 0; t < pool; t++) { /* rank-4 signal plus small noise */
        double c[4];
        for (int a = 0; a < 4; a++)
            c[a] = unif() - 0.5;
        for (uint32_t j = 0; j < dim; j++) {
            double v = 0.01 * (unif() - 0.5);
            for (int a = 0; a < 4; a++)
                v += c[a] * dirs[a * dim + j];
            x[t * dim + j] = v;
        }
    }
    mv_fd_result res;
    unsigned an = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        mv_fd_observe(fd, x + (i & (pool - 1)) * dim, &res);
        an += (unsigned)res.anomalous;
    }
    double t1 = now_ns();
    double ts0 = now_ns();
    for (size_t i = 0; i < n; i++)
        sink = mv_fd_score(fd, x + (i & (pool - 1)) * dim);
    double ts1 = now_ns();
    printf("fd_observe d=%-3u  %8.1f ns/sample  (score+update, ell=%u k=%u, %llu shrinks, %u "
           "flagged)  state %zu bytes\n",
           dim, (t1 - t0) / (double)n, cfg.ell, cfg.k, (unsigned long long)mv_fd_shrinks(fd), an,
           mv_fd_memory_bytes(&cfg));
    printf("fd_score   d=%-3u  %8.1f ns/sample  (score only)\n", dim, (ts1 - ts0) / (double)n);
out:
    free(x);
    free(dirs);
    mv_fd_destroy(fd);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 20000000;
    size_t nv = 1 << 16;
    double *vals = malloc(sizeof(double) * nv);
    if (vals == NULL)
        return 1;
    for (size_t i = 0; i < nv; i++) /* lognormal latencies around 1 ms */
        vals[i] = 1e-3 * exp(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()));
    bench_sketch(n, vals, nv);
    bench_detect(n, vals, nv, "lognormal latencies");
    double *noise = malloc(sizeof(double) * nv);
    if (noise) { /* stationary Gaussian noise: the steady state of most series */
        for (size_t i = 0; i < nv; i++)
            noise[i] = 100.0 + sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
        bench_detect(n, noise, nv, "stationary noise");
        free(noise);
    }
    bench_fd(16, n / 20);
    bench_fd(64, n / 40);
    free(vals);
    return 0;
}
