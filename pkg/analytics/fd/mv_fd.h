/* mv_fd: Frequent Directions matrix sketch and the subspace anomaly scorer built on it. */
#ifndef MV_FD_H
#define MV_FD_H

#include <stddef.h>
#include <stdint.h>

/*
 * Sketch: B has 2*ell rows of d columns. Rows are appended; when B is full it
 * is rotated to its singular basis (one-sided Jacobi on the rows, written
 * here, no LAPACK), delta = sigma_ell^2 is subtracted from every squared
 * singular value, and rows whose value reaches zero are freed (at least
 * ell + 1 rows). Guarantee (Liberty 2013; Ghashami et al. 2016):
 *     0 <= x^T (A^T A - B^T B) x <= ||A||_F^2 / ell   for every unit x,
 * where A is the matrix of all rows appended so far.
 *
 * Scorer (mv_fd_observe): the sample is L2-normalised; its score is the norm
 * of its residual off the span of the top-k right singular vectors of the
 * sketch (a value in [0, 1]; 0 = inside the subspace). The first `warmup`
 * NON-ZERO samples always update the sketch, are never flagged and have no
 * score (NaN, `warming` set); all-zero samples (an idle pod) are not added
 * and do not count toward warm-up, so a scorer that has learnt nothing never
 * reports a score. After that a
 * sample with score > threshold is flagged anomalous and updates the sketch
 * only with probability eta (deterministic PRNG seeded by `seed`); other
 * samples update it. The top-k basis is refreshed at each shrink and at the
 * end of warm-up, so it can lag the sketch by at most ell + 1 updates.
 *
 * Cost: a score is 3d + 2kd flops. An update copies d doubles; every
 * ell + 1 updates a shrink runs Jacobi sweeps over (2 ell)^2 / 2 row pairs
 * (about 6d flops each, a few sweeps since old rows stay orthogonal), so the
 * amortised update cost is O(ell d) per sample. See docs/analytics.md for
 * measured ns/sample.
 *
 * Memory: mv_fd_memory_bytes(cfg) = 8 * (2 ell d + k d + d + 2 ell) + 4 * 2 ell plus a
 * fixed header. Nothing is allocated after create.
 *
 * Ownership: mv_fd_create allocates, mv_fd_destroy frees. Not thread-safe.
 */

typedef struct mv_fd mv_fd;

typedef struct mv_fd_config {
    uint32_t d;       /* columns (metrics per sample), in [1, 4096] */
    uint32_t ell;     /* sketch rows, in [1, 1024]; buffer holds 2*ell */
    uint32_t k;       /* scoring subspace rank, in [1, ell] */
    double threshold; /* anomaly score threshold in (0, 1]; default 0.5 */
    double eta;       /* update probability for anomalous samples, [0, 1]; default 0 */
    uint32_t warmup;  /* samples that always update; default 2 * ell */
    uint64_t seed;    /* PRNG seed for eta; default 1 */
} mv_fd_config;

typedef struct mv_fd_result {
    double score;  /* residual norm in [0, 1]; NaN while warming */
    int anomalous; /* score > threshold and warm-up over */
    int updated;   /* the sample went into the sketch */
    int warming;   /* still in warm-up */
} mv_fd_result;

/* Defaults for d columns: ell = max(2, floor(sqrt(d))), k = ell, threshold 0.5,
 * eta 0, warmup 2 * ell, seed 1. */
void mv_fd_config_default(mv_fd_config *cfg, uint32_t d);
const char *mv_fd_config_check(const mv_fd_config *cfg);
size_t mv_fd_memory_bytes(const mv_fd_config *cfg);

/* Returns 0, -EINVAL (see mv_fd_config_check) or -ENOMEM. */
int mv_fd_create(const mv_fd_config *cfg, mv_fd **out);
void mv_fd_destroy(mv_fd *fd);

/* Plain FD: appends row x[0..d) as given (not normalised). Returns 0 or
 * -EDOM if x has a NaN/Inf. */
int mv_fd_append(mv_fd *fd, const double *x);

/* Score of x against the current top-k basis (no update); NaN while no basis
 * exists yet, 0.0 for an all-zero x, NaN for a non-finite x. */
double mv_fd_score(const mv_fd *fd, const double *x);

/* Scorer step described above. Returns 0, or -EDOM for a non-finite x (res
 * untouched). An all-zero sample scores 0 and is not added. */
int mv_fd_observe(mv_fd *fd, const double *x, mv_fd_result *res);

/* Feeds n rows (row-major, n x d) of normal data, normalised, as warm-up
 * samples, then refreshes the basis. Returns 0 or -EDOM. */
int mv_fd_bootstrap(mv_fd *fd, const double *rows, size_t n);

/* Copies the sketch's non-zero rows (at most 2 ell, row-major) into out
 * (room for 2 ell * d doubles); returns the row count. B^T B is exactly
 * what the guarantee above is about. */
uint32_t mv_fd_sketch(const mv_fd *fd, double *out);

/* Copies the top-k basis (rows of length d) into out (room for k * d);
 * returns how many vectors are valid (0 before the first refresh). */
uint32_t mv_fd_basis(const mv_fd *fd, double *out);

uint64_t mv_fd_seen(const mv_fd *fd);    /* samples observed or appended */
uint64_t mv_fd_updates(const mv_fd *fd); /* rows that went into the sketch */
uint64_t mv_fd_shrinks(const mv_fd *fd);

#endif
