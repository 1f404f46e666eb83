/* bench_util.h: small timing, statistics and temp-dir helpers shared by the C benchmarks. */
#ifndef MV_BENCH_UTIL_H
#define MV_BENCH_UTIL_H

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Stops the compiler from caching memory across this point or deleting a
 * loop whose only effect is on memory it cannot see being read. */
#define BENCH_CLOBBER() __asm__ __volatile__("" ::: "memory")

/* Makes `v` look used so the computation producing it is kept. */
#define BENCH_KEEP(v) __asm__ __volatile__("" : : "r"(v) : "memory")

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Heap bytes in use (glibc's allocator; 0 where mallinfo2 is missing): small chunks in use
 * plus the blocks it mmapped (>= 128 KiB). */
static inline uint64_t bench_heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of `n` values (sorts them in place). */
static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Creates a fresh directory for benchmark files, on tmpfs when available.
 * Writes its path into `out` (size `cap`). Returns 0 or -1. */
static inline int bench_make_tempdir(char *out, size_t cap)
{
    const char *bases[3] = {"/dev/shm", getenv("TMPDIR"), "/tmp"};
    for (size_t i = 0; i < 3; i++) {
        if (!bases[i] || access(bases[i], W_OK) != 0)
            continue;
        if ((size_t)snprintf(out, cap, "%s/mvbench.XXXXXX", bases[i]) >= cap)
            continue;
        if (mkdtemp(out))
            return 0;
    }
    return -1;
}

#endif
