/* Unit tests for mv_fd: covariance error bound, subspace scores separate normal from anomalous. */
#include "mv_fd.h"
#include "analytics_rng.h"
#include "mv_test.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest |eigenvalue| of a symmetric d x d matrix by power iteration. */
static double spectral_norm(const double *c, uint32_t d)
{
    double *v = malloc(sizeof(double) * d), *w = malloc(sizeof(double) * d);
    test_rng r = {17};
    double lam = 0.0;
    for (uint32_t i = 0; i < d; i++)
        v[i] = rng_gauss(&r);
    for (int it = 0; it < 3000; it++) {
        double n = 0.0;
        for (uint32_t i = 0; i < d; i++) {
            w[i] = 0.0;
            for (uint32_t j = 0; j < d; j++)
                w[i] += c[i * d + j] * v[j];
            n += w[i] * w[i];
        }
        n = sqrt(n);
        if (n == 0.0)
            break;
        lam = n;
        for (uint32_t i = 0; i < d; i++)
            v[i] = w[i] / n;
    }
    free(v);
    free(w);
    return lam;
}

static void check_bound(uint32_t n, uint32_t d, uint32_t ell, uint64_t seed)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, d);
    cfg.ell = ell;
    cfg.k = 1;
    CU_ASSERT_FATAL(mv_fd_create(&cfg, &fd) == 0);
    double *ata = calloc((size_t)d * d, sizeof(double));
    double *x = malloc(sizeof(double) * d);
    double *b = malloc(sizeof(double) * 2 * ell * d);
    double fro = 0.0;
    test_rng r = {seed};
    for (uint32_t t = 0; t < n; t++) {
        for (uint32_t j = 0; j < d; j++) /* decaying column scales: a real spectrum */
            x[j] = rng_gauss(&r) / (1.0 + j) + (j % 3 == 0 ? rng_gauss(&r) : 0.0);
        for (uint32_t i = 0; i < d; i++) {
            fro += x[i] * x[i];
            for (uint32_t j = 0; j < d; j++)
                ata[i * d + j] += x[i] * x[j];
        }
        CU_ASSERT(mv_fd_append(fd, x) == 0);
    }
    uint32_t rows = mv_fd_sketch(fd, b);
    CU_ASSERT(rows <= 2 * ell);
    for (uint32_t q = 0; q < rows; q++)
        for (uint32_t i = 0; i < d; i++)
            for (uint32_t j = 0; j < d; j++)
                ata[i * d + j] -= b[q * d + i] * b[q * d + j];
    double err = spectral_norm(ata, d);
    /* PSD: x^T (A^T A - B^T B) x >= 0 (up to rounding) on random directions. */
    test_rng rr = {seed + 1};
    double minq = 0.0;
    for (int t = 0; t < 200; t++) {
        double q = 0.0, nn = 0.0;
        for (uint32_t i = 0; i < d; i++)
            x[i] = rng_gauss(&rr), nn += x[i] * x[i];
        for (uint32_t i = 0; i < d; i++)
            for (uint32_t j = 0; j < d; j++)
                q += x[i] * ata[i * d + j] * x[j];
        if (q / nn < minq)
            minq = q / nn;
    }
    printf("\n  n=%u d=%u ell=%u: ||AtA-BtB|| = %.4g, bound ||A||_F^2/ell = %.4g, shrinks %llu", n,
           d, ell, err, fro / ell, (unsigned long long)mv_fd_shrinks(fd));
    CU_ASSERT(err <= fro / ell);
    CU_ASSERT(minq >= -1e-9 * fro);
    CU_ASSERT(mv_fd_shrinks(fd) > 0);
    free(ata);
    free(x);
    free(b);
    mv_fd_destroy(fd);
}

static void test_covariance_bound(void)
{
    check_bound(3000, 16, 4, 1);
    check_bound(3000, 32, 8, 2);
    check_bound(2000, 64, 8, 3);
    check_bound(1000, 6, 4, 4); /* d < 2 ell: rank-deficient buffer */
    check_bound(500, 10, 1, 5);
}

/* Exact before any shrink, and the Jacobi rotation preserves B^T B. */
static void test_exact_small(void)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, 5);
    cfg.ell = 3;
    cfg.k = 2;
    CU_ASSERT_FATAL(mv_fd_create(&cfg, &fd) == 0);
    test_rng r = {8};
    double rows[4][5], basis[2 * 5];
    for (int t = 0; t < 4; t++)
        for (int j = 0; j < 5; j++)
            rows[t][j] = rng_gauss(&r);
    CU_ASSERT(mv_fd_bootstrap(fd, &rows[0][0], 4) == 0);
    CU_ASSERT(mv_fd_shrinks(fd) == 0);
    CU_ASSERT(mv_fd_basis(fd, basis) == 2);
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++) {
            double s = 0.0;
            for (int j = 0; j < 5; j++)
                s += basis[a * 5 + j] * basis[c * 5 + j];
            CU_ASSERT(fabs(s - (a == c)) < 1e-12);
        }
    /* Every bootstrap row lies in the span of the 4 sketch rows: its score
     * against a full-rank basis would be 0; against k = 2 it is in [0, 1]. */
    double sk[6 * 5];
    uint32_t n = mv_fd_sketch(fd, sk);
    CU_ASSERT(n == 4);
    double g1 = 0.0, g2 = 0.0; /* trace of A^T A (normalised rows) vs B^T B */
    for (uint32_t t = 0; t < n; t++)
        for (int j = 0; j < 5; j++)
            g2 += sk[t * 5 + j] * sk[t * 5 + j];
    g1 = 4.0;
    CU_ASSERT(fabs(g1 - g2) < 1e-12);
    mv_fd_destroy(fd);
}

/* Samples: in-subspace = combination of r fixed directions plus small noise;
 * off-subspace = isotropic Gaussian. */
static void make_sample(test_rng *r, const double *dirs, uint32_t rank, uint32_t d, int off,
                        double *x)
{
    if (off) {
        for (uint32_t j = 0; j < d; j++)
            x[j] = rng_gauss(r);
        return;
    }
    for (uint32_t j = 0; j < d; j++)
        x[j] = 0.02 * rng_gauss(r);
    for (uint32_t a = 0; a < rank; a++) {
        double c = rng_gauss(r) * (3.0 - a);
        for (uint32_t j = 0; j < d; j++)
            x[j] += c * dirs[a * d + j];
    }
}

static void check_separation(uint32_t d, uint32_t ell, uint32_t k, uint32_t rank)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, d);
    cfg.ell = ell;
    cfg.k = k;
    cfg.threshold = 0.4;
    cfg.warmup = 200;
    CU_ASSERT_FATAL(mv_fd_create(&cfg, &fd) == 0);
    test_rng r = {1234 + d};
    double *dirs = malloc(sizeof(double) * rank * d), *x = malloc(sizeof(double) * d);
    for (uint32_t i = 0; i < rank * d; i++)
        dirs[i] = rng_gauss(&r);
    mv_fd_result res;
    /* Training stream with 1% anomalies mixed in. */
    uint32_t flagged_train = 0;
    for (int t = 0; t < 3000; t++) {
        int off = t > 300 && t % 100 == 0;
        make_sample(&r, dirs, rank, d, off, x);
        CU_ASSERT(mv_fd_observe(fd, x, &res) == 0);
        if (off) {
            CU_ASSERT(res.anomalous && !res.updated);
            flagged_train++;
        }
    }
    CU_ASSERT(flagged_train >= 25);
    CU_ASSERT(mv_fd_updates(fd) == mv_fd_seen(fd) - flagged_train);
    /* Held-out scores. */
    enum { M = 500 };
    double in[M], out[M];
    double in_max = 0.0, out_min = 1.0;
    for (int t = 0; t < M; t++) {
        make_sample(&r, dirs, rank, d, 0, x);
        in[t] = mv_fd_score(fd, x);
        make_sample(&r, dirs, rank, d, 1, x);
        out[t] = mv_fd_score(fd, x);
        if (in[t] > in_max)
            in_max = in[t];
        if (out[t] < out_min)
            out_min = out[t];
    }
    double pairs = 0.0;
    for (int a = 0; a < M; a++)
        for (int b = 0; b < M; b++)
            pairs += out[a] > in[b] ? 1.0 : (out[a] == in[b] ? 0.5 : 0.0);
    double auc = pairs / ((double)M * M);
    printf("\n  d=%u ell=%u k=%u rank=%u: AUC %.4f, max normal %.3f, min anomalous %.3f", d, ell, k,
           rank, auc, in_max, out_min);
    CU_ASSERT(auc >= 0.999);
    CU_ASSERT(in_max < cfg.threshold);
    CU_ASSERT(out_min > in_max);
    free(dirs);
    free(x);
    mv_fd_destroy(fd);
}

static void test_separation(void)
{
    check_separation(16, 4, 3, 3);
    check_separation(64, 8, 4, 4);
    check_separation(64, 8, 8, 3);
}

static void test_eta_and_warmup(void)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, 8);
    cfg.ell = 2;
    cfg.k = 1;
    cfg.threshold = 0.1;
    cfg.eta = 1.0;
    cfg.warmup = 10;
    CU_ASSERT_FATAL(mv_fd_create(&cfg, &fd) == 0);
    double e0[8] = {1, 0, 0, 0, 0, 0, 0, 0}, e1[8] = {0, 1, 0, 0, 0, 0, 0, 0};
    mv_fd_result res;
    for (int t = 0; t < 10; t++) {
        CU_ASSERT(mv_fd_observe(fd, e0, &res) == 0);
        CU_ASSERT(res.warming && res.updated && !res.anomalous);
    }
    CU_ASSERT(mv_fd_observe(fd, e1, &res) == 0);
    CU_ASSERT(!res.warming && res.anomalous && res.updated); /* eta = 1 */
    CU_ASSERT(fabs(res.score - 1.0) < 1e-12);
    CU_ASSERT(mv_fd_observe(fd, e0, &res) == 0);
    CU_ASSERT(res.score < 1e-12 && !res.anomalous);
    /* All-zero sample: score 0, not added; NaN: refused. */
    double z[8] = {0};
    uint64_t u = mv_fd_updates(fd);
    CU_ASSERT(mv_fd_observe(fd, z, &res) == 0);
    CU_ASSERT(res.score == 0.0 && !res.updated && mv_fd_updates(fd) == u);
    z[3] = NAN;
    CU_ASSERT(mv_fd_observe(fd, z, &res) == -EDOM);
    CU_ASSERT(isnan(mv_fd_score(fd, z)));
    CU_ASSERT(mv_fd_append(fd, z) == -EDOM);
    mv_fd_destroy(fd);
}

/* An idle start (all-zero samples) teaches nothing: the scorer stays in
 * warm-up until it has learnt from `warmup` non-zero samples, and then scores
 * in-subspace samples low at once (no basis-less 1.0 after an idle start). */
static void test_idle_start_is_warmup(void)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, 4); /* ell = k = 2, warm-up 4 */
    cfg.eta = 0.1;
    CU_ASSERT_FATAL(mv_fd_create(&cfg, &fd) == 0);
    double z[4] = {0}, x[4];
    mv_fd_result res;
    double v = 0;
    CU_ASSERT(isnan(mv_fd_score(fd, (double[4]){1, 2, 3, 4}))); /* no basis: no score */
    for (int t = 0; t < 30; t++) {
        CU_ASSERT(mv_fd_observe(fd, z, &res) == 0);
        CU_ASSERT(res.warming);
    }
    int warming = 0, high = 0;
    test_rng r = {5};
    for (int t = 0; t < 40; t++) {
        v = 1 + rng_unif(&r);
        x[0] = v, x[1] = 2 * v, x[2] = 3 * v + 0.01 * rng_gauss(&r), x[3] = 4 * v;
        CU_ASSERT(mv_fd_observe(fd, x, &res) == 0);
        warming += res.warming;
        high += !res.warming && res.score > 0.1;
    }
    printf("\n  idle start: %d warming steps, %d high scores after ", warming, high);
    CU_ASSERT(warming == (int)cfg.warmup);
    CU_ASSERT(high == 0);
    mv_fd_destroy(fd);
}

static void test_invalid(void)
{
    mv_fd_config cfg;
    mv_fd *fd = NULL;
    mv_fd_config_default(&cfg, 16);
    CU_ASSERT(cfg.ell == 4 && cfg.k == 4);
    CU_ASSERT(mv_fd_memory_bytes(&cfg) >= 8 * (2 * 4 * 16 + 4 * 16 + 16 + 8));
    cfg.k = 5;
    CU_ASSERT(mv_fd_config_check(&cfg) != NULL);
    CU_ASSERT(mv_fd_create(&cfg, &fd) == -EINVAL);
    CU_ASSERT(fd == NULL);
    CU_ASSERT(mv_fd_memory_bytes(&cfg) == 0);
    CU_ASSERT(mv_fd_create(NULL, &fd) == -EINVAL);
    mv_fd_config_default(&cfg, 0);
    CU_ASSERT(mv_fd_config_check(&cfg) != NULL);
}

int main(void)
{
    static const mv_test tests[] = {
        {"covariance error bound", test_covariance_bound},
        {"exact before shrink, orthonormal basis", test_exact_small},
        {"scores separate in- from off-subspace", test_separation},
        {"eta, warm-up, zero and NaN samples", test_eta_and_warmup},
        {"idle start is warm-up", test_idle_start_is_warmup},
        {"invalid config", test_invalid},
    };
    int fails = MV_TEST_RUN("fd", tests);
    return fails;
}
