/* Unit tests for mv_sketch: relative-error quantiles against exact sorts, merge, limits. */
#include "mv_sketch.h"
#include "analytics_rng.h"
#include "mv_test.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SAMPLES 200000

static const double QS[] = {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0};
#define NQ (sizeof(QS) / sizeof(QS[0]))

typedef double (*gen_fn)(test_rng *r, size_t i);

static double gen_uniform(test_rng *r, size_t i)
{
    (void)i;
    return 1.0 + 999.0 * rng_unif(r);
}
static double gen_lognormal(test_rng *r, size_t i)
{
    (void)i;
    return exp(2.0 + 1.5 * rng_gauss(r));
}
static double gen_pareto(test_rng *r, size_t i)
{
    (void)i;
    return 1e-3 * pow(rng_unif(r), -1.0 / 1.1); /* tail index 1.1 */
}
static double gen_constant(test_rng *r, size_t i)
{
    (void)r;
    (void)i;
    return 42.125;
}
static double gen_negative(test_rng *r, size_t i)
{
    (void)i;
    return -exp(1.0 + 2.0 * rng_gauss(r));
}
static double gen_mixed(test_rng *r, size_t i)
{
    (void)i;
    double u = rng_unif(r);
    if (u < 0.05)
        return 0.0;
    double v = exp(3.0 * rng_gauss(r));
    return u < 0.45 ? -v : v;
}
static double gen_decades(test_rng *r, size_t i)
{
    (void)i;
    return pow(10.0, -9.0 + 18.0 * rng_unif(r)); /* 1e-9 .. 1e9 */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double exact_quantile(const double *sorted, size_t n, double q)
{
    return sorted[(size_t)floor(q * (double)(n - 1))];
}

/* Worst relative error over QS; fills the sketch from gen. */
static double check_distribution(gen_fn gen, uint64_t seed, double alpha, uint32_t buckets,
                                 mv_sketch **keep)
{
    mv_sketch_config cfg;
    mv_sketch *sk = NULL;
    test_rng r = {seed};
    double *v = malloc(sizeof(double) * N_SAMPLES);
    double worst = 0.0, sum = 0.0;

    mv_sketch_config_default(&cfg);
    cfg.alpha = alpha;
    cfg.max_buckets = buckets;
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
    CU_ASSERT_FATAL(v != NULL);
    for (size_t i = 0; i < N_SAMPLES; i++) {
        v[i] = gen(&r, i);
        sum += v[i];
        CU_ASSERT(mv_sketch_add(sk, v[i]) == 0);
    }
    qsort(v, N_SAMPLES, sizeof(double), cmp_double);
    CU_ASSERT(mv_sketch_count(sk) == N_SAMPLES);
    CU_ASSERT(mv_sketch_min(sk) == v[0]);
    CU_ASSERT(mv_sketch_max(sk) == v[N_SAMPLES - 1]);
    CU_ASSERT(fabs(mv_sketch_sum(sk) - sum) <= 1e-9 * fabs(sum) + 1e-9);
    for (size_t j = 0; j < NQ; j++) {
        double x = exact_quantile(v, N_SAMPLES, QS[j]);
        double y = mv_sketch_quantile(sk, QS[j]);
        double err = x == 0.0 ? fabs(y) : fabs(y - x) / fabs(x);
        if (err > worst)
            worst = err;
    }
    free(v);
    if (keep)
        *keep = sk;
    else
        mv_sketch_destroy(sk);
    return worst;
}

static void test_distributions(void)
{
    struct {
        const char *name;
        gen_fn gen;
    } dists[] = {{"uniform", gen_uniform},   {"lognormal", gen_lognormal}, {"pareto", gen_pareto},
                 {"constant", gen_constant}, {"negative", gen_negative},   {"mixed", gen_mixed},
                 {"decades", gen_decades}};
    const double alphas[] = {0.01, 0.02, 0.001};
    for (size_t a = 0; a < 3; a++) {
        for (size_t d = 0; d < sizeof(dists) / sizeof(dists[0]); d++) {
            double w = check_distribution(dists[d].gen, 1000 + d, alphas[a], 1u << 16, NULL);
            if (!(w <= alphas[a]))
                printf("\n%s alpha=%g worst=%.6g\n", dists[d].name, alphas[a], w);
            CU_ASSERT(w <= alphas[a]);
        }
    }
}

/* Every value is within alpha of its own bucket's value: the mapping proof, checked
 * densely across mantissas (s near 0 and 2/3 are where the cubic is tightest). */
static void test_single_values(void)
{
    mv_sketch *sk = NULL;
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &sk) == 0);
    test_rng r = {7};
    double worst = 0.0;
    for (int i = 0; i < 200000; i++) {
        double x = ldexp(1.0 + rng_unif(&r), (int)(rng_u64(&r) % 200) - 100);
        if (i % 4 == 0)
            x = ldexp(1.0 + (double)(i % 1000) / 1000.0, 3);
        mv_sketch_reset(sk);
        mv_sketch_add(sk, x);
        mv_sketch_add(sk, x * 1e6); /* keep min/max clamping from hiding errors */
        mv_sketch_add(sk, x * 1e-6);
        double y = mv_sketch_quantile(sk, 0.5);
        double e = fabs(y - x) / x;
        if (e > worst)
            worst = e;
    }
    CU_ASSERT(worst <= 0.01);
    CU_ASSERT(worst > 0.009); /* the bound is nearly tight: buckets are not oversized */
    mv_sketch_destroy(sk);
}

static void test_merge_equals_union(void)
{
    mv_sketch *a = NULL, *b = NULL, *u = NULL;
    test_rng r = {99};
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &a) == 0);
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &b) == 0);
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &u) == 0);
    for (int i = 0; i < 100000; i++) {
        double x = gen_mixed(&r, 0);
        mv_sketch_add(i % 3 ? a : b, x);
        mv_sketch_add(u, x);
    }
    CU_ASSERT(mv_sketch_merge(a, b) == 0);
    CU_ASSERT(mv_sketch_count(a) == mv_sketch_count(u));
    CU_ASSERT(mv_sketch_min(a) == mv_sketch_min(u));
    CU_ASSERT(mv_sketch_max(a) == mv_sketch_max(u));
    CU_ASSERT(mv_sketch_bucket_count(a) == mv_sketch_bucket_count(u));
    CU_ASSERT(fabs(mv_sketch_sum(a) - mv_sketch_sum(u)) <= 1e-9 * fabs(mv_sketch_sum(u)) + 1e-6);
    for (int q = 0; q <= 1000; q++)
        CU_ASSERT(mv_sketch_quantile(a, q / 1000.0) == mv_sketch_quantile(u, q / 1000.0));

    /* Different alpha: refused. */
    mv_sketch_config cfg;
    mv_sketch *c = NULL;
    mv_sketch_config_default(&cfg);
    cfg.alpha = 0.02;
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &c) == 0);
    CU_ASSERT(mv_sketch_merge(a, c) == -EINVAL);
    mv_sketch_destroy(c);
    mv_sketch_destroy(a);
    mv_sketch_destroy(b);
    mv_sketch_destroy(u);
}

static void test_bucket_limit(void)
{
    mv_sketch_config cfg;
    mv_sketch *sk = NULL;
    mv_sketch_config_default(&cfg);
    cfg.max_buckets = 256; /* ~7.3 octaves at alpha 0.01 */
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
    CU_ASSERT(mv_sketch_memory_bytes(&cfg) >= 2 * 8 * 256);
    CU_ASSERT(mv_sketch_memory_bytes(&cfg) < 2 * 8 * 256 + 1024); /* + page directories */

    /* Values 1 .. 1e6 (20 octaves) uniformly in log space. */
    test_rng r = {5};
    size_t n = 100000;
    double *v = malloc(sizeof(double) * n);
    CU_ASSERT_FATAL(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = pow(10.0, 6.0 * rng_unif(&r));
        mv_sketch_add(sk, v[i]);
    }
    qsort(v, n, sizeof(double), cmp_double);
    CU_ASSERT(mv_sketch_collapsed(sk));
    CU_ASSERT(mv_sketch_collapses(sk) > 0);
    CU_ASSERT(mv_sketch_bucket_count(sk) <= 256);
    CU_ASSERT(mv_sketch_memory_used(sk) <= mv_sketch_memory_bytes(&cfg));
    CU_ASSERT(mv_sketch_count(sk) == n);
    CU_ASSERT(mv_sketch_min(sk) == v[0]);
    /* The kept top ~7.3 octaves (above 1e6 / 2^7.3 ~ 6.3e3): still within alpha. */
    const double high[] = {0.75, 0.9, 0.99, 0.999, 1.0};
    for (size_t j = 0; j < 5; j++) {
        double x = exact_quantile(v, n, high[j]);
        double y = mv_sketch_quantile(sk, high[j]);
        CU_ASSERT(fabs(y - x) / x <= 0.01);
    }
    /* Low quantiles fell in the collapsed bucket: over-estimated, never below truth. */
    double x = exact_quantile(v, n, 0.1), y = mv_sketch_quantile(sk, 0.1);
    CU_ASSERT(y > x * 1.01);
    CU_ASSERT(y >= 5e3 && y <= 1e4);

    /* Reset keeps working and un-collapses. */
    mv_sketch_reset(sk);
    CU_ASSERT(!mv_sketch_collapsed(sk));
    CU_ASSERT(mv_sketch_count(sk) == 0);
    CU_ASSERT(isnan(mv_sketch_quantile(sk, 0.5)));
    mv_sketch_add(sk, 3.0);
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 0.5) - 3.0) <= 0.03);
    free(v);
    mv_sketch_destroy(sk);
}

/* The default sketch covers 1 ns .. 1 h within alpha without collapsing, a
 * steady value costs one page, and the memory used never passes the bound. */
static void test_sparse_range_and_memory(void)
{
    mv_sketch_config cfg;
    mv_sketch *sk = NULL;
    mv_sketch_config_default(&cfg);
    cfg.max_buckets = 1536; /* the collector's default */
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
    for (int i = 0; i < 1000; i++)
        mv_sketch_add(sk, 0.25);
    size_t one = mv_sketch_memory_used(sk);
    printf("\n  memory: one value %zu B, bound %zu B", one, mv_sketch_memory_bytes(&cfg));
    CU_ASSERT(one < 1024);
    mv_sketch_reset(sk);
    test_rng r = {31};
    size_t n = 200000;
    double *v = malloc(sizeof(double) * n), worst = 0;
    CU_ASSERT_FATAL(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = 1e-9 * pow(3.6e12, rng_unif(&r)); /* log-uniform 1 ns .. 1 h */
        if (i == 0)
            v[i] = 1e-9;
        if (i == 1)
            v[i] = 3600.0;
        mv_sketch_add(sk, v[i]);
    }
    qsort(v, n, sizeof(double), cmp_double);
    for (int q = 0; q <= 1000; q++) {
        double x = exact_quantile(v, n, q / 1000.0), y = mv_sketch_quantile(sk, q / 1000.0);
        if (fabs(y - x) / x > worst)
            worst = fabs(y - x) / x;
    }
    printf(", 1 ns .. 1 h: worst %.5f, %u buckets, %zu B used ", worst, mv_sketch_bucket_count(sk),
           mv_sketch_memory_used(sk));
    CU_ASSERT(worst <= 0.01);
    CU_ASSERT(!mv_sketch_collapsed(sk));
    CU_ASSERT(mv_sketch_memory_used(sk) <= mv_sketch_memory_bytes(&cfg));
    /* 24 decades: the budget runs out and the LOWEST buckets collapse, counted. */
    mv_sketch_reset(sk);
    for (size_t i = 0; i < n; i++) {
        v[i] = 1e-12 * pow(1e24, rng_unif(&r));
        mv_sketch_add(sk, v[i]);
    }
    qsort(v, n, sizeof(double), cmp_double);
    CU_ASSERT(mv_sketch_collapsed(sk) && mv_sketch_collapses(sk) > 0);
    CU_ASSERT(mv_sketch_memory_used(sk) <= mv_sketch_memory_bytes(&cfg));
    for (int q = 500; q <= 1000; q++) { /* the top 12 decades keep the bound */
        double x = exact_quantile(v, n, q / 1000.0), y = mv_sketch_quantile(sk, q / 1000.0);
        CU_ASSERT(fabs(y - x) / x <= 0.01);
    }
    double x = exact_quantile(v, n, 0.1), y = mv_sketch_quantile(sk, 0.1);
    CU_ASSERT(y > x); /* collapsed: over-estimated, never under */
    free(v);
    mv_sketch_destroy(sk);
}

/* Values over the whole double range, both signs, small budgets, resets and
 * merges: counts, min and max stay exact, memory stays within the bound, and
 * every quantile is within [min, max] and never below the truth's magnitude
 * ordering (the highest quantile keeps alpha: it is never collapsed). */
static void test_extreme_ranges(void)
{
    const uint32_t budgets[] = {16, 48, 256, 2048};
    test_rng r = {77};
    for (size_t b = 0; b < 4; b++) {
        mv_sketch_config cfg;
        mv_sketch *sk = NULL, *o = NULL;
        mv_sketch_config_default(&cfg);
        cfg.max_buckets = budgets[b];
        CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
        CU_ASSERT_FATAL(mv_sketch_create(&cfg, &o) == 0);
        for (int round = 0; round < 20; round++) {
            mv_sketch_reset(sk);
            uint64_t n = 0;
            double mx = -INFINITY;
            for (int i = 0; i < 2000; i++) {
                double x = ldexp(1.0 + rng_unif(&r), (int)(rng_u64(&r) % 2000) - 1000);
                if (rng_unif(&r) < 0.3)
                    x = -x;
                if (round % 3 == 0)
                    x = fabs(x) * 1e-3 + 1.0; /* sometimes a narrow range */
                CU_ASSERT(mv_sketch_add(sk, x) == 0);
                n++;
                if (x > mx)
                    mx = x;
            }
            if (round % 4 == 1) {
                mv_sketch_reset(o);
                for (int i = 0; i < 100; i++)
                    mv_sketch_add(o, ldexp(1.0, (int)(rng_u64(&r) % 600) - 300));
                CU_ASSERT(mv_sketch_merge(sk, o) == 0);
                n += 100;
                if (mv_sketch_max(o) > mx)
                    mx = mv_sketch_max(o);
            }
            CU_ASSERT(mv_sketch_count(sk) == n);
            CU_ASSERT(mv_sketch_max(sk) == mx);
            CU_ASSERT(mv_sketch_memory_used(sk) <= mv_sketch_memory_bytes(&cfg));
            double lo = mv_sketch_min(sk), prev = -INFINITY;
            for (int q = 0; q <= 20; q++) {
                double y = mv_sketch_quantile(sk, q / 20.0);
                CU_ASSERT(y >= lo && y <= mx);
                CU_ASSERT(y >= prev); /* monotone in q */
                prev = y;
            }
            double top = mv_sketch_quantile(sk, 1.0);
            CU_ASSERT(mx > 0 ? fabs(top - mx) <= 0.01 * fabs(mx) : top == mx);
        }
        mv_sketch_destroy(o);
        mv_sketch_destroy(sk);
    }
}

static void test_window_moves(void)
{
    /* Ranges that fit only after the window re-centres, in both directions. */
    mv_sketch_config cfg;
    mv_sketch *sk = NULL;
    mv_sketch_config_default(&cfg);
    cfg.max_buckets = 96; /* centred on 1.0 it spans +-1.37 octaves */
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
    double vals[] = {1.0, 1.5, 0.7, 2.2, 0.5, 2.6}; /* 2.38 octaves: ~83 keys */
    for (size_t i = 0; i < 6; i++)
        mv_sketch_add(sk, vals[i]);
    CU_ASSERT(!mv_sketch_collapsed(sk));
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 0.0) - 0.5) <= 0.005);
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 1.0) - 2.6) <= 0.026);
    double q = mv_sketch_quantile(sk, 0.4); /* rank 2 of sorted {0.5,0.7,1,1.5,2.2,2.6} */
    CU_ASSERT(fabs(q - 1.0) <= 0.01);
    mv_sketch_destroy(sk);
}

static void test_add_buckets(void)
{
    mv_sketch *sk = NULL;
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &sk) == 0);
    const double bounds[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0};
    const uint64_t counts[] = {10, 20, 30, 400, 300, 200, 30, 10}; /* total 1000 */
    CU_ASSERT(mv_sketch_add_buckets(sk, bounds, 7, counts, 123.5) == 0);
    CU_ASSERT(mv_sketch_count(sk) == 1000);
    CU_ASSERT(mv_sketch_sum(sk) == 123.5);
    /* Median (rank 499; cumulative 10, 30, 60, 460, 760) falls in (0.05, 0.1]:
     * representative 2 * 0.05 * 0.1 / 0.15 ~ 0.0667. */
    double m = mv_sketch_quantile(sk, 0.5);
    CU_ASSERT(m > 0.05 && m <= 0.1);
    CU_ASSERT(fabs(m - 2.0 * 0.05 * 0.1 / 0.15) <= 0.01 * 0.0667);
    /* Top bucket (> 1.0) is reported at its lower bound. */
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 1.0) - 1.0) <= 0.01);
    /* Bad bounds: nothing is added. */
    const double bad[] = {1.0, 0.5};
    const uint64_t c3[] = {1, 1, 1};
    CU_ASSERT(mv_sketch_add_buckets(sk, bad, 2, c3, NAN) == -EINVAL);
    CU_ASSERT(mv_sketch_count(sk) == 1000);
    /* Straddling zero and negative buckets. */
    const double b2[] = {-10.0, -1.0, 1.0, 10.0};
    const uint64_t c2[] = {0, 5, 10, 5, 0};
    mv_sketch_reset(sk);
    CU_ASSERT(mv_sketch_add_buckets(sk, b2, 4, c2, NAN) == 0);
    CU_ASSERT(mv_sketch_count(sk) == 20);
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 0.5)) <= 1e-12);
    CU_ASSERT(mv_sketch_quantile(sk, 0.0) < -1.0 && mv_sketch_quantile(sk, 0.0) > -10.0);
    mv_sketch_destroy(sk);
}

static void test_invalid(void)
{
    mv_sketch_config cfg;
    mv_sketch *sk = NULL;
    mv_sketch_config_default(&cfg);
    cfg.alpha = 0.0;
    CU_ASSERT(mv_sketch_create(&cfg, &sk) == -EINVAL);
    CU_ASSERT(sk == NULL);
    CU_ASSERT(mv_sketch_config_check(&cfg) != NULL);
    cfg.alpha = 0.01;
    cfg.max_buckets = 3;
    CU_ASSERT(mv_sketch_config_check(&cfg) != NULL);
    CU_ASSERT(mv_sketch_memory_bytes(&cfg) == 0);
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &sk) == 0);
    CU_ASSERT(mv_sketch_add(sk, NAN) == -EDOM);
    CU_ASSERT(mv_sketch_add(sk, INFINITY) == -EDOM);
    CU_ASSERT(mv_sketch_count(sk) == 0);
    CU_ASSERT(isnan(mv_sketch_min(sk)));
    CU_ASSERT(mv_sketch_add(sk, 1e-320) == 0); /* subnormal: kept as zero */
    CU_ASSERT(mv_sketch_add(sk, 1e300) == 0);
    CU_ASSERT(mv_sketch_add(sk, 1.7e308) == 0);
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 0.0)) <= 1e-300);
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 0.5) - 1e300) <= 1e298);
    CU_ASSERT(fabs(mv_sketch_quantile(sk, 1.0) - 1.7e308) <= 1.7e306);
    CU_ASSERT(isnan(mv_sketch_quantile(sk, 1.5)));
    mv_sketch_destroy(sk);
}

/* mv_sketch_quantiles (one walk) gives what mv_sketch_quantile gives for each q, over
 * both signs, zeros and a collapsed budget; it refuses unsorted or out-of-range qs. */
static void test_quantiles_one_walk(void)
{
    static const double qs[] = {0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0};
    const size_t nq = sizeof qs / sizeof qs[0];
    mv_sketch_config cfg;
    mv_sketch_config_default(&cfg);
    for (int pass = 0; pass < 3; pass++) {
        cfg.max_buckets = pass == 2 ? 64 : 2048; /* pass 2: collapses */
        mv_sketch *sk = NULL;
        CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
        test_rng r = {900 + (uint64_t)pass};
        double out[8];
        CU_ASSERT(mv_sketch_quantiles(sk, qs, nq, out) == 0);
        CU_ASSERT(isnan(out[0]) && isnan(out[7])); /* empty */
        for (int i = 0; i < 50000; i++) {
            double x = exp(3.0 * rng_gauss(&r));
            if (pass >= 1 && i % 3 == 0)
                x = -x;
            if (pass >= 1 && i % 17 == 0)
                x = 0.0;
            mv_sketch_add(sk, x);
        }
        CU_ASSERT(mv_sketch_quantiles(sk, qs, nq, out) == 0);
        for (size_t j = 0; j < nq; j++)
            CU_ASSERT(out[j] == mv_sketch_quantile(sk, qs[j]));
        if (pass == 2)
            CU_ASSERT(mv_sketch_collapsed(sk));
        static const double bad[] = {0.5, 0.4};
        CU_ASSERT(mv_sketch_quantiles(sk, bad, 2, out) == -EINVAL);
        static const double range[] = {1.5};
        CU_ASSERT(mv_sketch_quantiles(sk, range, 1, out) == -EINVAL);
        mv_sketch_destroy(sk);
    }
}

/* Directories are allocated with a sign's first value and widened as the values spread,
 * never collapsing within the promised span; a sign never seen costs nothing. */
static void test_lazy_directories(void)
{
    mv_sketch_config cfg;
    mv_sketch *sk = NULL;
    mv_sketch_config_default(&cfg);
    cfg.max_buckets = 1536;
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
    size_t empty = mv_sketch_memory_used(sk);
    mv_sketch_add(sk, 100.0);
    size_t one = mv_sketch_memory_used(sk);
    /* One directory of 4 slots and one page of 16 counts. */
    CU_ASSERT_EQUAL(one, empty + 4 * sizeof(uint16_t) + 16 * sizeof(uint64_t));
    mv_sketch_add(sk, 0.0); /* the zero bucket: no directory */
    CU_ASSERT_EQUAL(mv_sketch_memory_used(sk), one);
    for (int i = 0; i < 100; i++) /* 100 .. 130: a few pages, same directory */
        mv_sketch_add(sk, 100.0 + 0.3 * i);
    size_t narrow = mv_sketch_memory_used(sk);
    CU_ASSERT(narrow < 1024);
    /* 1 ns .. 1 h: the directory doubles up to its full span, nothing collapses. */
    for (int i = 0; i <= 1000; i++)
        mv_sketch_add(sk, 1e-9 * pow(3.6e12, i / 1000.0));
    CU_ASSERT(!mv_sketch_collapsed(sk));
    CU_ASSERT(mv_sketch_memory_used(sk) <= mv_sketch_memory_bytes(&cfg));
    size_t pos_only = mv_sketch_memory_used(sk);
    mv_sketch_add(sk, -5.0); /* the negative side's directory and first page */
    CU_ASSERT_EQUAL(mv_sketch_memory_used(sk),
                    pos_only + 4 * sizeof(uint16_t) + 16 * sizeof(uint64_t));
    /* Reset keeps what was allocated. */
    size_t before = mv_sketch_memory_used(sk);
    mv_sketch_reset(sk);
    CU_ASSERT_EQUAL(mv_sketch_memory_used(sk), before);
    mv_sketch_destroy(sk);
}

/* mv_sketch_add_many gives the contents sequential mv_sketch_add_n calls give - the same
 * buckets, count, sum, min, max - with repeated sketches, both signs, zeros, NaN and
 * growing directories, and reports the bytes the adds allocated. */
static void test_add_many_equals_adds(void)
{
    enum { NS = 7, N = 20000, B = 64 };
    mv_sketch_config cfg;
    mv_sketch_config_default(&cfg);
    cfg.max_buckets = 512;
    mv_sketch *a[NS], *b[NS];
    for (int i = 0; i < NS; i++) {
        CU_ASSERT_FATAL(mv_sketch_create(&cfg, &a[i]) == 0);
        CU_ASSERT_FATAL(mv_sketch_create(&cfg, &b[i]) == 0);
    }
    test_rng r = {77};
    mv_sketch_add_req req[B];
    size_t nb = 0, grown = 0, mem0 = 0, mem1 = 0;
    for (int i = 0; i < NS; i++)
        mem0 += mv_sketch_memory_used(b[i]);
    for (int i = 0; i < N; i++) {
        int k = (int)(rng_u64(&r) % NS);
        double x = pow(10.0, -6.0 + 12.0 * rng_unif(&r)) * (k % 3 == 0 ? -1.0 : 1.0);
        if (i % 101 == 0)
            x = 0.0;
        if (i % 997 == 0)
            x = NAN;
        uint64_t n = 1 + rng_u64(&r) % 5;
        mv_sketch_add_n(a[k], x, n);
        req[nb++] = (mv_sketch_add_req){.sk = b[k], .value = x, .count = n};
        if (nb == B || i == N - 1) {
            grown += mv_sketch_add_many(req, nb);
            nb = 0;
        }
    }
    for (int i = 0; i < NS; i++)
        mem1 += mv_sketch_memory_used(b[i]);
    CU_ASSERT_EQUAL(grown, mem1 - mem0);
    for (int i = 0; i < NS; i++) {
        CU_ASSERT_EQUAL(mv_sketch_count(a[i]), mv_sketch_count(b[i]));
        CU_ASSERT_EQUAL(mv_sketch_bucket_count(a[i]), mv_sketch_bucket_count(b[i]));
        CU_ASSERT(mv_sketch_sum(a[i]) == mv_sketch_sum(b[i]));
        CU_ASSERT(mv_sketch_min(a[i]) == mv_sketch_min(b[i]));
        CU_ASSERT(mv_sketch_max(a[i]) == mv_sketch_max(b[i]));
        CU_ASSERT_EQUAL(mv_sketch_collapses(a[i]), mv_sketch_collapses(b[i]));
        for (int q = 0; q <= 100; q++)
            CU_ASSERT(mv_sketch_quantile(a[i], q / 100.0) == mv_sketch_quantile(b[i], q / 100.0));
        mv_sketch_destroy(a[i]);
        mv_sketch_destroy(b[i]);
    }
}

/* mv_sketch_add_runs gives the contents sequential mv_sketch_add_n calls give - the same
 * buckets, count, sum to the bit, min, max, collapses and memory - with sketches repeated in
 * a batch, runs longer than the keys it computes ahead, empty runs, counts of 0 and of
 * 2^32 - 1, both signs, zeros, NaN and infinities, growing directories and, with a small
 * budget, collapsing buckets; and reports the bytes the adds allocated. */
static void test_add_runs_equals_adds(void)
{
    enum { NS = 7, N = 4000, B = 24, L = 13 };
    for (int budget = 0; budget < 2; budget++) {
        mv_sketch_config cfg;
        mv_sketch_config_default(&cfg);
        cfg.max_buckets = budget ? 64 : 512;
        mv_sketch *a[NS], *b[NS];
        for (int i = 0; i < NS; i++) {
            CU_ASSERT_FATAL(mv_sketch_create(&cfg, &a[i]) == 0);
            CU_ASSERT_FATAL(mv_sketch_create(&cfg, &b[i]) == 0);
        }
        test_rng r = {91 + (uint64_t)budget};
        static double v[B][L];
        static uint32_t c[B][L];
        mv_sketch_runs runs[B];
        size_t nb = 0, grown = 0, mem0 = 0, mem1 = 0, values = 0;
        for (int i = 0; i < NS; i++)
            mem0 += mv_sketch_memory_used(b[i]);
        for (int i = 0; i < N; i++) {
            int k = (int)(rng_u64(&r) % NS);
            uint32_t n = (uint32_t)(rng_u64(&r) % L); /* 0 .. 12: some longer than 8 */
            for (uint32_t j = 0; j < n; j++, values++) {
                double x = pow(10.0, -6.0 + 12.0 * rng_unif(&r)) * (k % 3 == 0 ? -1.0 : 1.0);
                if (values % 101 == 0)
                    x = 0.0;
                if (values % 997 == 0)
                    x = NAN;
                if (values % 499 == 0)
                    x = INFINITY;
                if (values % 7 == 0) /* a narrow band too: pages reused within a run */
                    x = 100.0 + (double)(rng_u64(&r) % 50);
                uint32_t m = (uint32_t)(1 + rng_u64(&r) % 5);
                if (values % 53 == 0)
                    m = 0;
                if (values % 211 == 0)
                    m = UINT32_MAX;
                v[nb][j] = x;
                c[nb][j] = m;
                mv_sketch_add_n(a[k], x, m);
            }
            runs[nb] = (mv_sketch_runs){.sk = b[k], .value = v[nb], .count = c[nb], .n = n};
            if (++nb == B || i == N - 1) {
                grown += mv_sketch_add_runs(runs, nb);
                nb = 0;
            }
        }
        for (int i = 0; i < NS; i++)
            mem1 += mv_sketch_memory_used(b[i]);
        CU_ASSERT_EQUAL(grown, mem1 - mem0);
        for (int i = 0; i < NS; i++) {
            CU_ASSERT_EQUAL(mv_sketch_count(a[i]), mv_sketch_count(b[i]));
            CU_ASSERT_EQUAL(mv_sketch_bucket_count(a[i]), mv_sketch_bucket_count(b[i]));
            double sa = mv_sketch_sum(a[i]), sb = mv_sketch_sum(b[i]);
            CU_ASSERT(memcmp(&sa, &sb, sizeof sa) == 0);
            CU_ASSERT(mv_sketch_min(a[i]) == mv_sketch_min(b[i]));
            CU_ASSERT(mv_sketch_max(a[i]) == mv_sketch_max(b[i]));
            CU_ASSERT_EQUAL(mv_sketch_collapses(a[i]), mv_sketch_collapses(b[i]));
            CU_ASSERT_EQUAL(mv_sketch_memory_used(a[i]), mv_sketch_memory_used(b[i]));
            if (budget)
                CU_ASSERT(mv_sketch_collapses(a[i]) > 0); /* the slow side was exercised */
            for (int q = 0; q <= 1000; q++)
                CU_ASSERT(mv_sketch_quantile(a[i], q / 1000.0) ==
                          mv_sketch_quantile(b[i], q / 1000.0));
            mv_sketch_destroy(a[i]);
            mv_sketch_destroy(b[i]);
        }
    }
}

/* ---- Native histograms ---------------------------------------------------------------------- */

/* histogram_quantile over a native histogram as Prometheus computes it: the bucket holding rank
 * q * count, linearly inside it; negative buckets (-U, -L], the zero bucket [-z, z] ([0, z]
 * without negative buckets), positive buckets (L, U]. */
static double native_quantile(const mv_sketch_nbucket *b, size_t n, uint64_t zero, int32_t schema,
                              double q)
{
    uint64_t count = zero;
    int neg = 0;
    for (size_t i = 0; i < n; i++) {
        count += b[i].count;
        neg |= b[i].negative != 0;
    }
    double rank = q * (double)count, cum = 0;
    double per = ldexp(1.0, -schema);
    for (size_t i = 0; i <= n; i++) {
        /* the zero bucket sits before the first positive bucket */
        int at_zero = i == n || !b[i].negative;
        if (at_zero && zero) {
            if (cum + (double)zero >= rank) {
                double lo = neg ? -MV_SKETCH_NATIVE_ZERO : 0, hi = MV_SKETCH_NATIVE_ZERO;
                return lo + (hi - lo) * (rank - cum) / (double)zero;
            }
            cum += (double)zero;
            zero = 0;
        }
        if (i == n)
            break;
        double up = exp2((double)b[i].index * per), low = exp2((double)(b[i].index - 1) * per);
        double lo = b[i].negative ? -up : low, hi = b[i].negative ? -low : up;
        if (cum + (double)b[i].count >= rank)
            return lo + (hi - lo) * (rank - cum) / (double)b[i].count;
        cum += (double)b[i].count;
    }
    return NAN;
}

/* Worst error of the native histogram's quantiles, as a fraction of the bound
 * eps = (1 + alpha) g - 1 (docs/exposition.md), against the exact quantiles (a value between
 * the two rank conventions' elements) and against the sketch's own; > 1: out of bound.
 * *worst_rel: the worst relative error against the exact quantiles. */
static double native_check(gen_fn gen, uint64_t seed, int32_t schema, double *worst_rel)
{
    enum { N = 50000 };
    const double alpha = 0.01;
    mv_sketch_config cfg = {.alpha = alpha, .max_buckets = 4096};
    mv_sketch *sk = NULL;
    CU_ASSERT_FATAL(mv_sketch_create(&cfg, &sk) == 0);
    double *v = malloc(sizeof(double) * N);
    CU_ASSERT_FATAL(v != NULL);
    test_rng r = {seed};
    for (size_t i = 0; i < N; i++) {
        v[i] = gen(&r, i);
        mv_sketch_add(sk, v[i]);
    }
    qsort(v, N, sizeof *v, cmp_double);
    size_t need = mv_sketch_to_native(sk, schema, NULL, 0, NULL);
    mv_sketch_nbucket *b = malloc(sizeof *b * (need + 1));
    uint64_t zero = 0;
    CU_ASSERT_FATAL(b != NULL);
    CU_ASSERT(mv_sketch_to_native(sk, schema, b, need, &zero) == need);
    uint64_t total = zero;
    for (size_t i = 0; i < need; i++) {
        total += b[i].count;
        if (i) /* value order, each bucket once */
            CU_ASSERT(b[i - 1].negative > b[i].negative ||
                      (b[i].negative ? b[i - 1].index > b[i].index : b[i - 1].index < b[i].index));
    }
    CU_ASSERT(total == N);
    double g = exp2(ldexp(1.0, -schema)), eps = (1 + alpha) * g - 1, worst = 0;
    *worst_rel = 0;
    for (int k = 1; k < 1000; k++) {
        double q = k / 1000.0;
        double y = native_quantile(b, need, zero, schema, q);
        size_t a = (size_t)floor(q * (N - 1)), c = (size_t)ceil(q * N) - 1;
        double lo = v[a < c ? a : c], hi = v[a < c ? c : a];
        double tol = MV_SKETCH_NATIVE_ZERO;
        double e = y < lo ? (lo - y - tol) / fabs(lo) : y > hi ? (y - hi - tol) / fabs(hi) : 0;
        /* the sketch's own, at either rank */
        double s0 = mv_sketch_quantile(sk, (a + 0.5) / (N - 1));
        double s1 = mv_sketch_quantile(sk, (c + 0.5) / (N - 1));
        double slo = s0 < s1 ? s0 : s1, shi = s0 < s1 ? s1 : s0;
        double es = y < slo   ? (slo - y - tol) / fabs(slo)
                    : y > shi ? (y - shi - tol) / fabs(shi)
                              : 0;
        if (e > *worst_rel)
            *worst_rel = e;
        if (e / eps > worst)
            worst = e / eps;
        if (es / eps > worst)
            worst = es / eps;
    }
    free(b);
    free(v);
    mv_sketch_destroy(sk);
    return worst;
}

static void test_native_mapping(void)
{
    const gen_fn gens[] = {gen_lognormal, gen_uniform, gen_negative,
                           gen_mixed,     gen_decades, gen_constant};
    for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
        for (int32_t schema = 3; schema <= 8; schema++) {
            double rel;
            double w = native_check(gens[i], 1000 + i, schema, &rel);
            if (w > 1)
                printf("generator %zu schema %d: %.3f of the bound\n", i, schema, (double)w);
            CU_ASSERT(w <= 1);
        }
    }
    /* The check can fail: at schema -2 (growth 16) the error is far above schema 6's bound. */
    double rel;
    native_check(gen_lognormal, 7, -2, &rel);
    CU_ASSERT(rel > 1.01 * exp2(1.0 / 64) - 1);
}

typedef struct walk_acc {
    double prev;
    uint64_t n, zero;
    int ok;
} walk_acc;

static int walk_fn(void *arg, const mv_sketch_bucket *b)
{
    walk_acc *a = arg;
    if (!(b->rep > a->prev) || b->count == 0)
        a->ok = 0;
    if (b->sign == 0) {
        a->zero += b->count;
    } else if (!(b->lo < b->hi && fabs(b->rep) >= b->lo && fabs(b->rep) <= b->hi &&
                 b->hi / b->lo <= 1.01 / 0.99 * (1 + 1e-12))) {
        a->ok = 0;
    }
    a->prev = b->rep;
    a->n += b->count;
    return 0;
}

static int stop_fn(void *arg, const mv_sketch_bucket *b)
{
    (void)b;
    return ++*(int *)arg == 2 ? 7 : 0;
}

static void test_native_foreach(void)
{
    mv_sketch *sk = NULL;
    CU_ASSERT_FATAL(mv_sketch_create(NULL, &sk) == 0);
    static const double vals[] = {-100, -100, -1, 0, 0, 0, 2, 2, 2, 1000};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        mv_sketch_add(sk, vals[i]);
    walk_acc a = {-INFINITY, 0, 0, 1};
    CU_ASSERT(mv_sketch_foreach(sk, walk_fn, &a) == 0);
    CU_ASSERT(a.ok);
    CU_ASSERT_EQUAL(a.n, 10);
    CU_ASSERT_EQUAL(a.zero, 3);
    int calls = 0;
    CU_ASSERT(mv_sketch_foreach(sk, stop_fn, &calls) == 7);
    CU_ASSERT_EQUAL(calls, 2);
    mv_sketch_nbucket nb[8];
    uint64_t zero = 0;
    size_t n = mv_sketch_to_native(sk, 6, nb, 8, &zero);
    CU_ASSERT_EQUAL(zero, 3);
    CU_ASSERT_EQUAL(n, 4); /* -100, -1, 2, 1000 */
    CU_ASSERT(n == 4 && nb[0].negative && nb[0].count == 2 && nb[1].negative && nb[1].count == 1 &&
              !nb[2].negative && nb[2].count == 3 && nb[3].count == 1);
    /* A short buffer: the count is still right. */
    CU_ASSERT_EQUAL(mv_sketch_to_native(sk, 6, nb, 2, &zero), 4);
    /* Magnitudes up to 2^-128 go to the native zero bucket (the sketch keeps them apart). */
    mv_sketch_reset(sk);
    mv_sketch_add_n(sk, 1e-40, 2);
    mv_sketch_add(sk, -1e-30);
    CU_ASSERT_EQUAL(mv_sketch_bucket_count(sk), 2);
    n = mv_sketch_to_native(sk, 6, nb, 8, &zero);
    CU_ASSERT(n == 1 && zero == 2 && nb[0].negative);
    /* Native bucket boundaries: 1 is the upper bound of bucket 0 at every schema. */
    for (int32_t s = -4; s <= 8; s++) {
        CU_ASSERT_EQUAL(mv_sketch_native_index(1.0, s), 0);
        CU_ASSERT_EQUAL(mv_sketch_native_index(nextafter(1.0, 2.0), s), 1);
        CU_ASSERT_EQUAL(mv_sketch_native_index(2.0, s), 1 << (s > 0 ? s : 0));
    }
    mv_sketch_destroy(sk);
}

int main(void)
{
    static const mv_test tests[] = {
        {"distributions within alpha", test_distributions},
        {"single values within alpha", test_single_values},
        {"merge equals union", test_merge_equals_union},
        {"bucket limit collapses lowest", test_bucket_limit},
        {"sparse store: range and memory", test_sparse_range_and_memory},
        {"extreme ranges, small budgets, merges", test_extreme_ranges},
        {"window moves", test_window_moves},
        {"explicit-bucket histogram delta", test_add_buckets},
        {"invalid input", test_invalid},
        {"several quantiles in one walk", test_quantiles_one_walk},
        {"directories allocated lazily, widened", test_lazy_directories},
        {"batched adds equal single adds", test_add_many_equals_adds},
        {"runs of adds equal single adds", test_add_runs_equals_adds},
        {"native histogram within its bound", test_native_mapping},
        {"bucket walk and native buckets", test_native_foreach},
    };
    int fails = MV_TEST_RUN("sketch", tests);
    return fails;
}
