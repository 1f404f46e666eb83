/* mv_fd: Frequent Directions with a one-sided Jacobi SVD, and residual-norm anomaly scores. */
#include "mv_fd.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JACOBI_MAX_SWEEPS 40
#define JACOBI_TOL        1e-13
#define JACOBI_ABS_TOL    1e-15

struct mv_fd {
    mv_fd_config cfg;
    uint32_t rows; /* 2 * ell */
    uint32_t used; /* rows of b in use (the rest are zero) */
    uint32_t nbasis;
    double *b;     /* rows x d */
    double *basis; /* k x d, orthonormal */
    double *xn;    /* d: normalised sample */
    double *norm2; /* rows: squared row norms after rotation */
    uint32_t *rot; /* rows: pair visit (orthogonalize) at which the row last rotated */
    uint64_t seen;
    uint64_t updates;
    uint64_t shrinks;
    uint64_t sweeps;
    uint64_t rng;
};

void mv_fd_config_default(mv_fd_config *cfg, uint32_t d)
{
    uint32_t ell = (uint32_t)floor(sqrt((double)d));
    if (ell < 2)
        ell = 2;
    cfg->d = d;
    cfg->ell = ell;
    cfg->k = ell;
    cfg->threshold = 0.5;
    cfg->eta = 0.0;
    cfg->warmup = 2 * ell;
    cfg->seed = 1;
}

const char *mv_fd_config_check(const mv_fd_config *cfg)
{
    if (cfg == NULL)
        return "config is required (mv_fd_config_default fills one)";
    if (cfg->d < 1 || cfg->d > 4096)
        return "d (columns) must be within [1, 4096]";
    if (cfg->ell < 1 || cfg->ell > 1024)
        return "ell (sketch rows) must be within [1, 1024]";
    if (cfg->k < 1 || cfg->k > cfg->ell)
        return "k (subspace rank) must be within [1, ell]";
    if (!(cfg->threshold > 0.0 && cfg->threshold <= 1.0))
        return "threshold must be within (0, 1]";
    if (!(cfg->eta >= 0.0 && cfg->eta <= 1.0))
        return "eta must be within [0, 1]";
    return NULL;
}

size_t mv_fd_memory_bytes(const mv_fd_config *cfg)
{
    if (mv_fd_config_check(cfg) != NULL)
        return 0;
    size_t rows = 2 * (size_t)cfg->ell, d = cfg->d;
    return sizeof(mv_fd) + sizeof(double) * (rows * d + (size_t)cfg->k * d + d + rows) +
           sizeof(uint32_t) * rows;
}

int mv_fd_create(const mv_fd_config *cfg, mv_fd **out)
{
    mv_fd *fd;
    double *mem;

    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (mv_fd_config_check(cfg) != NULL)
        return -EINVAL;
    size_t rows = 2 * (size_t)cfg->ell, d = cfg->d;
    fd = calloc(1, sizeof(*fd));
    if (fd == NULL)
        goto fail_none;
    mem = calloc(rows * d + (size_t)cfg->k * d + d + rows, sizeof(double));
    if (mem == NULL)
        goto fail_handle;
    fd->rot = calloc(rows, sizeof(uint32_t));
    if (fd->rot == NULL) {
        free(mem);
        goto fail_handle;
    }
    fd->cfg = *cfg;
    fd->rows = (uint32_t)rows;
    fd->b = mem;
    fd->basis = fd->b + rows * d;
    fd->xn = fd->basis + (size_t)cfg->k * d;
    fd->norm2 = fd->xn + d;
    fd->rng = cfg->seed;
    *out = fd;
    return 0;

fail_handle:
    free(fd);
fail_none:
    return -ENOMEM;
}

void mv_fd_destroy(mv_fd *fd)
{
    if (fd == NULL)
        return;
    free(fd->b); /* one block holds the double arrays */
    free(fd->rot);
    free(fd);
}

#if defined(__GNUC__)
typedef double fd_v2 __attribute__((vector_size(16)));
#endif

/* The products are taken four at a time where the compiler has vectors, and added one by one
 * in column order: the same sum to the bit as one column at a time. */
static double dot(const double *a, const double *b, uint32_t n)
{
    double s = 0.0;
    uint32_t i = 0;
#if defined(__GNUC__)
    for (; i + 4 <= n; i += 4) {
        fd_v2 a0, a1, b0, b1;
        memcpy(&a0, a + i, sizeof a0);
        memcpy(&a1, a + i + 2, sizeof a1);
        memcpy(&b0, b + i, sizeof b0);
        memcpy(&b1, b + i + 2, sizeof b1);
        fd_v2 p0 = a0 * b0, p1 = a1 * b1;
        s += p0[0];
        s += p0[1];
        s += p1[0];
        s += p1[1];
    }
#endif
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static uint64_t next_rand(mv_fd *fd)
{
    uint64_t z = (fd->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Rotates rows bp and bq (distinct rows), two columns at a time where the compiler has
 * vectors: the same IEEE operations on each column as one at a time, so the same result to
 * the bit. */
static void rotate(double *restrict bp, double *restrict bq, uint32_t d, double c, double s)
{
    uint32_t j = 0;
#if defined(__GNUC__)
    fd_v2 cv = {c, c}, sv = {s, s};
    for (; j + 2 <= d; j += 2) {
        fd_v2 u, v;
        memcpy(&u, bp + j, sizeof u);
        memcpy(&v, bq + j, sizeof v);
        fd_v2 nu = cv * u - sv * v, nv = sv * u + cv * v;
        memcpy(bp + j, &nu, sizeof nu);
        memcpy(bq + j, &nv, sizeof nv);
    }
#endif
    for (; j < d; j++) {
        double u = bp[j], v = bq[j];
        bp[j] = c * u - s * v;
        bq[j] = s * u + c * v;
    }
}

/* Rotates the used rows of b so they are mutually orthogonal (one-sided
 * Jacobi / Hestenes). Rotations are orthogonal, so B^T B is unchanged. Then
 * sorts rows by norm, largest first, and fills norm2.
 *
 * A pair that did not rotate at its visit in the previous sweep, and neither of whose rows
 * has rotated since, would compute the same gamma from the same rows and norms and again
 * not rotate: it is passed over. The result is the same to the bit; late sweeps, where a
 * few rows still rotate, cost the pairs of those rows only. Visits are numbered (vis) in
 * sweep order, npairs per sweep; rot[r] is the visit at which row r last rotated. */
static void orthogonalize(mv_fd *fd)
{
    uint32_t n = fd->used, d = fd->cfg.d;
    double *b = fd->b;
    double *nrm = fd->norm2; /* squared norms, kept current through rotations */
    uint32_t *rot = fd->rot;
    uint32_t npairs = n > 1 ? n * (n - 1) / 2 : 0, vis = npairs; /* < 2^21 pairs, 40 sweeps */
    for (uint32_t i = 0; i < n; i++) {
        nrm[i] = dot(b + (size_t)i * d, b + (size_t)i * d, d);
        rot[i] = vis; /* the first sweep visits every pair */
    }
    for (int sweep = 0; sweep < JACOBI_MAX_SWEEPS; sweep++) {
        int rotated = 0;
        for (uint32_t p = 0; p + 1 < n; p++) {
            double *bp = b + (size_t)p * d;
            for (uint32_t q = p + 1; q < n; q++) {
                double *bq = b + (size_t)q * d;
                /* This pair's previous visit was vis - npairs (vis counts this one). */
                if (++vis - npairs > rot[p] && vis - npairs > rot[q])
                    continue; /* no rotation then, and the same rows now */
                double alpha = nrm[p], beta = nrm[q];
                if (alpha == 0.0 || beta == 0.0)
                    continue;
                double gamma = dot(bp, bq, d);
                /* Converged for this pair: orthogonal relative to the pair's
                 * norms, or to rounding level of the larger row (a tiny row
                 * next to a large one cannot be made more orthogonal). */
                if (fabs(gamma) <= JACOBI_TOL * sqrt(alpha) * sqrt(beta) ||
                    fabs(gamma) <= JACOBI_ABS_TOL * (alpha > beta ? alpha : beta))
                    continue;
                rotated = 1;
                double zeta = (beta - alpha) / (2.0 * gamma);
                double tn = (zeta >= 0.0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
                double c = 1.0 / sqrt(1.0 + tn * tn), s = c * tn;
                rotate(bp, bq, d, c, s);
                /* The rotation zeroes gamma: norms move by tn * gamma. */
                nrm[p] = alpha - tn * gamma;
                nrm[q] = beta + tn * gamma;
                if (nrm[p] < 0.0)
                    nrm[p] = 0.0;
                rot[p] = rot[q] = vis;
            }
        }
        if (!rotated)
            break;
        fd->sweeps++;
    }
    for (uint32_t i = 0; i < n; i++)
        fd->norm2[i] = dot(b + (size_t)i * d, b + (size_t)i * d, d);
    /* Selection sort of rows by norm (n is small). */
    for (uint32_t i = 0; i + 1 < n; i++) {
        uint32_t m = i;
        for (uint32_t j = i + 1; j < n; j++)
            if (fd->norm2[j] > fd->norm2[m])
                m = j;
        if (m != i) {
            double t = fd->norm2[i];
            fd->norm2[i] = fd->norm2[m];
            fd->norm2[m] = t;
            double *ri = b + (size_t)i * d, *rm = b + (size_t)m * d;
            for (uint32_t j = 0; j < d; j++) {
                double v = ri[j];
                ri[j] = rm[j];
                rm[j] = v;
            }
        }
    }
}

/* Copies the top-k directions of the (orthogonalized, sorted) rows. */
static void take_basis(mv_fd *fd)
{
    uint32_t d = fd->cfg.d, nb = 0;
    double top = fd->used ? fd->norm2[0] : 0.0;
    for (uint32_t i = 0; i < fd->used && nb < fd->cfg.k; i++) {
        if (!(fd->norm2[i] > 1e-24 * top) || fd->norm2[i] == 0.0)
            break;
        double inv = 1.0 / sqrt(fd->norm2[i]);
        const double *r = fd->b + (size_t)i * d;
        double *v = fd->basis + (size_t)nb * d;
        for (uint32_t j = 0; j < d; j++)
            v[j] = r[j] * inv;
        nb++;
    }
    fd->nbasis = nb;
}

static void refresh(mv_fd *fd)
{
    orthogonalize(fd);
    take_basis(fd);
}

/* The FD shrink: subtract delta = sigma_ell^2 from every squared singular value. */
static void shrink(mv_fd *fd)
{
    uint32_t d = fd->cfg.d, ell = fd->cfg.ell;
    refresh(fd);
    double delta = fd->used >= ell ? fd->norm2[ell - 1] : 0.0;
    double top = fd->norm2[0];
    uint32_t keep = 0;
    for (uint32_t i = 0; i < fd->used; i++) {
        double *r = fd->b + (size_t)i * d;
        double n2 = fd->norm2[i] - delta;
        if (n2 > 1e-24 * top && fd->norm2[i] > 0.0) {
            double f = sqrt(n2 / fd->norm2[i]);
            for (uint32_t j = 0; j < d; j++)
                r[j] *= f;
            fd->norm2[i] = n2;
            keep = i + 1;
        } else {
            memset(r, 0, sizeof(double) * d);
            fd->norm2[i] = 0.0;
        }
    }
    /* Rows are sorted, so the kept ones lead; at least ell + 1 rows are free
     * when delta was taken from row ell - 1. Rank-deficient buffers keep
     * their non-zero rows, freeing the rest. */
    if (keep > fd->rows - 1)
        keep = fd->rows - 1; /* unreachable: row ell - 1 always drops to zero */
    fd->used = keep;
    fd->shrinks++;
}

static int finite_row(const double *x, uint32_t d)
{
    for (uint32_t j = 0; j < d; j++)
        if (!isfinite(x[j]))
            return 0;
    return 1;
}

static void append_row(mv_fd *fd, const double *x)
{
    uint32_t d = fd->cfg.d;
    if (fd->used == fd->rows)
        shrink(fd);
    memcpy(fd->b + (size_t)fd->used * d, x, sizeof(double) * d);
    fd->used++;
    fd->updates++;
}

int mv_fd_append(mv_fd *fd, const double *x)
{
    if (!finite_row(x, fd->cfg.d))
        return -EDOM;
    fd->seen++;
    append_row(fd, x);
    return 0;
}

/* Residual norm of unit vector u off the basis. */
static double residual(const mv_fd *fd, const double *u)
{
    uint32_t d = fd->cfg.d;
    if (fd->nbasis == 0)
        return NAN; /* nothing learnt: no score */
    double proj = 0.0;
    for (uint32_t i = 0; i < fd->nbasis; i++) {
        double c = dot(fd->basis + (size_t)i * d, u, d);
        proj += c * c;
    }
    double r2 = 1.0 - proj;
    return r2 > 0.0 ? sqrt(r2) : 0.0;
}

/* Normalises x into fd->xn; returns its norm (0 for all-zero, NaN if not finite). */
static double normalise(const mv_fd *fd, const double *x, double *xn)
{
    uint32_t d = fd->cfg.d;
    double n2 = dot(x, x, d);
    if (!isfinite(n2))
        return NAN;
    if (n2 == 0.0)
        return 0.0;
    double inv = 1.0 / sqrt(n2);
    if (!isfinite(inv)) /* subnormal norm: rescale first */
        return 0.0;
    for (uint32_t j = 0; j < d; j++)
        xn[j] = x[j] * inv;
    return sqrt(n2);
}

double mv_fd_score(const mv_fd *fd, const double *x)
{
    double n = normalise(fd, x, fd->xn);
    if (isnan(n))
        return NAN;
    if (n == 0.0)
        return 0.0;
    return residual(fd, fd->xn);
}

int mv_fd_observe(mv_fd *fd, const double *x, mv_fd_result *res)
{
    mv_fd_result r = {0};
    double n = normalise(fd, x, fd->xn);
    if (isnan(n))
        return -EDOM;
    fd->seen++;
    /* Warm-up counts only rows that went into the sketch: an all-zero sample
     * (an idle pod) teaches nothing, and without a basis there is no score. */
    int warming = fd->updates < fd->cfg.warmup || fd->nbasis == 0;
    if (n == 0.0) {
        r.warming = warming;
        if (res)
            *res = r;
        return 0;
    }
    if (warming) {
        r.warming = 1;
        r.updated = 1;
        r.score = NAN;
        append_row(fd, fd->xn);
        if (fd->updates >= fd->cfg.warmup)
            refresh(fd);
    } else {
        r.score = residual(fd, fd->xn);
        r.anomalous = r.score > fd->cfg.threshold;
        if (!r.anomalous)
            r.updated = 1;
        else if (fd->cfg.eta > 0.0)
            r.updated = (double)(next_rand(fd) >> 11) * (1.0 / 9007199254740992.0) < fd->cfg.eta;
        if (r.updated)
            append_row(fd, fd->xn);
    }
    if (res)
        *res = r;
    return 0;
}

int mv_fd_bootstrap(mv_fd *fd, const double *rows, size_t n)
{
    uint32_t d = fd->cfg.d;
    for (size_t i = 0; i < n; i++)
        if (!finite_row(rows + i * d, d))
            return -EDOM;
    for (size_t i = 0; i < n; i++) {
        double nn = normalise(fd, rows + i * d, fd->xn);
        fd->seen++;
        if (nn > 0.0)
            append_row(fd, fd->xn);
    }
    refresh(fd);
    return 0;
}

uint32_t mv_fd_sketch(const mv_fd *fd, double *out)
{
    memcpy(out, fd->b, sizeof(double) * (size_t)fd->used * fd->cfg.d);
    return fd->used;
}

uint32_t mv_fd_basis(const mv_fd *fd, double *out)
{
    memcpy(out, fd->basis, sizeof(double) * (size_t)fd->nbasis * fd->cfg.d);
    return fd->nbasis;
}

uint64_t mv_fd_seen(const mv_fd *fd)
{
    return fd->seen;
}

uint64_t mv_fd_updates(const mv_fd *fd)
{
    return fd->updates;
}

uint64_t mv_fd_shrinks(const mv_fd *fd)
{
    return fd->shrinks;
}
