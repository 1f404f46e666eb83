/* mem_bench.c: the machine's memory, as the collector's tick meets it. The tick walks
 * ~20 MB of segments, pipeline records and sketches per millisecond (1,000 segments x 64
 * metrics), so its cost follows the latency of a cache line from beyond the last-level
 * cache and how many such loads a core keeps in flight. This prints both, so figures of
 * runs on different machines can be compared: the dependent-load latency at working sets
 * from 256 KiB to 64 MiB (one random line at a time, 4 KiB pages) and the time per line
 * with 1, 4 and 16 independent chains at 64 MiB (memory-level parallelism). */
#include "bench_util.h"

#include <sys/mman.h>

/* A random cyclic chain through the `n` lines of `p` (each line holds the next's address). */
static void make_chain(char *p, size_t n, uint64_t seed)
{
    uint32_t *order = malloc(n * sizeof *order);
    if (!order) {
        perror("mem_bench");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (size_t i = n - 1; i > 0; i--) { /* Fisher-Yates with a 64-bit LCG */
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t j = (size_t)((seed >> 33) % (i + 1));
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        *(char **)(void *)(p + (size_t)order[i] * 64) = p + (size_t)order[(i + 1) % n] * 64;
    free(order);
}

/* Nanoseconds per load with `k` chains walked together, starting `n / k` lines apart in the
 * chain (the median of 5 runs of `loads` loads). */
static double walk(char *p, size_t n, unsigned k, size_t loads)
{
    char *q[16];
    q[0] = p;
    for (unsigned c = 1; c < k; c++) { /* the chain's line n/k after the previous start */
        q[c] = q[c - 1];
        for (size_t s = 0; s < n / k; s++)
            q[c] = *(char **)(void *)q[c];
    }
    double t[5];
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = bench_now_ns();
        for (size_t i = 0; i < loads / k; i++)
            for (unsigned c = 0; c < k; c++)
                q[c] = *(char **)(void *)q[c];
        t[r] = (double)(bench_now_ns() - t0) / (double)(loads / k * k);
        for (unsigned c = 0; c < k; c++)
            BENCH_KEEP(q[c]);
    }
    return bench_median(t, 5);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: mem_bench [--quick]\n");
        return 2;
    }
    size_t loads = quick ? 200000 : 2000000;
    static const size_t sizes_kib[] = {256, 1024, 2048, 4096, 8192, 16384, 65536};
    printf("# mem_bench: dependent loads of random 64-byte lines, 4 KiB pages, median of 5\n");
    for (size_t i = 0; i < sizeof sizes_kib / sizeof *sizes_kib; i++) {
        size_t bytes = sizes_kib[i] << 10, n = bytes / 64;
        char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mem_bench: mmap");
            return 1;
        }
        madvise(p, bytes, MADV_NOHUGEPAGE); /* pages as the collector's heap mostly has them */
        make_chain(p, n, 0x9E3779B97F4A7C15ull + i);
        printf("bench=memory ws_kib=%zu chains=1 ns_per_line=%.1f\n", sizes_kib[i],
               walk(p, n, 1, loads));
        if (sizes_kib[i] == 65536)
            for (unsigned k = 4; k <= 16; k *= 4)
                printf("bench=memory ws_kib=%zu chains=%u ns_per_line=%.1f\n", sizes_kib[i], k,
                       walk(p, n, k, loads));
        fflush(stdout);
        munmap(p, bytes);
    }
    return 0;
}
