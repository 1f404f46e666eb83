/* mv_detect: EWMA z-score + two-sided CUSUM change detection, adaptive read interval. */
#include "mv_detect.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mv_detect {
    mv_detect_params p;
    size_t n;
    mv_detect_series *s;
    uint64_t *changes;
};

void mv_detect_config_default(mv_detect_config *cfg)
{
    cfg->lambda = 0.01;
    cfg->z_threshold = 6.0;
    cfg->cusum_k = 0.5;
    cfg->cusum_h = 14.0;
    cfg->moving_z = 3.0;
    cfg->sigma_floor_abs = 1e-12;
    cfg->sigma_floor_rel = 1e-9;
    cfg->warmup = 50;
    cfg->cooldown = 20;
}

const char *mv_detect_config_check(const mv_detect_config *cfg)
{
    if (cfg == NULL)
        return NULL;
    if (!(cfg->lambda > 0.0 && cfg->lambda <= 0.5))
        return "lambda (EWMA weight) must be within (0, 0.5]";
    if (!(cfg->z_threshold > 0.0) || !(cfg->cusum_h > 0.0) || !(cfg->cusum_k >= 0.0) ||
        !(cfg->moving_z > 0.0))
        return "z_threshold, cusum_h and moving_z must be > 0 and cusum_k >= 0";
    if (!(cfg->sigma_floor_abs > 0.0) || !(cfg->sigma_floor_rel >= 0.0))
        return "sigma_floor_abs must be > 0 and sigma_floor_rel >= 0";
    if (cfg->warmup < 2 || cfg->warmup > MV_DETECT_N_MAX)
        return "warmup must be within [2, 65535] samples";
    if (cfg->cooldown > MV_DETECT_N_MAX)
        return "cooldown must be at most 65535 samples";
    return NULL;
}

size_t mv_detect_memory_bytes(size_t n_series)
{
    return sizeof(mv_detect) + n_series * (sizeof(mv_detect_series) + sizeof(uint64_t));
}

/* Weight of the next sample: running average first, then the EWMA weight. */
static inline double weight(const mv_detect_config *c, uint32_t n)
{
    double w = 1.0 / ((double)n + 1.0);
    return w > c->lambda ? w : c->lambda;
}

/* The largest float <= v: for a float f, f > v exactly when f > that float (no
 * float lies strictly between it and v). */
static float float_at_most(double v)
{
    float f = (float)v;
    if ((double)f > v)
        f = nextafterf(f, -INFINITY);
    return f;
}

int mv_detect_params_init(mv_detect_params *p, const mv_detect_config *cfg)
{
    mv_detect_config def;
    if (cfg == NULL) {
        mv_detect_config_default(&def);
        cfg = &def;
    }
    if (mv_detect_config_check(cfg) != NULL)
        return -EINVAL;
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->half_h = 0.5 * cfg->cusum_h;
    p->k_f = (float)cfg->cusum_k;
    p->h_f = float_at_most(cfg->cusum_h);
    p->half_h_f = float_at_most(p->half_h);
    /* The first learning count whose weight is exactly lambda (weight() of
     * every larger count is lambda too); the inline path starts there. */
    double guess = floor(1.0 / cfg->lambda);
    uint32_t n = guess > 4e9 ? 4000000000u : (uint32_t)guess;
    while (n > 0 && weight(cfg, n - 1) == cfg->lambda)
        n--;
    while (n < UINT32_MAX && weight(cfg, n) != cfg->lambda)
        n++;
    p->n_lam = n;
    return 0;
}

int mv_detect_create(const mv_detect_config *cfg, size_t n_series, mv_detect **out)
{
    mv_detect *d;

    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if ((cfg && mv_detect_config_check(cfg) != NULL) || n_series == 0 || n_series > (1u << 24))
        return -EINVAL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        goto fail_none;
    d->s = calloc(n_series, sizeof(*d->s));
    d->changes = calloc(n_series, sizeof(*d->changes));
    if (d->s == NULL || d->changes == NULL)
        goto fail_bank;
    mv_detect_params_init(&d->p, cfg);
    d->n = n_series;
    *out = d;
    return 0;

fail_bank:
    free(d->s);
    free(d->changes);
    free(d);
fail_none:
    return -ENOMEM;
}

void mv_detect_destroy(mv_detect *d)
{
    if (d == NULL)
        return;
    free(d->s);
    free(d->changes);
    free(d);
}

void mv_detect_reset(mv_detect *d, size_t i)
{
    if (i < d->n) {
        memset(&d->s[i], 0, sizeof(d->s[i]));
        d->changes[i] = 0;
    }
}

void mv_detect_copy(mv_detect *dst, size_t di, const mv_detect *src, size_t si)
{
    if (dst && src && di < dst->n && si < src->n) {
        dst->s[di] = src->s[si];
        dst->changes[di] = src->changes[si];
    }
}

unsigned mv_detect_series_update_slow(const mv_detect_params *p, mv_detect_series *s, double x)
{
    return mv_detect_series_update_slow_floor(p, s, x, 0.0);
}

unsigned mv_detect_series_update_slow_floor(const mv_detect_params *p, mv_detect_series *s,
                                            double x, double min_sigma)
{
    const mv_detect_config *c = &p->cfg;
    unsigned flags = 0;

    if (!isfinite(x))
        return MV_DETECT_INVALID;
    if (s->n == 0) {
        s->mean = x;
        s->var = 0.0;
        s->n = 1;
        s->n_mean = 1;
        return MV_DETECT_WARMUP;
    }
    double floor_s = c->sigma_floor_rel * fabs(s->mean);
    if (floor_s < c->sigma_floor_abs)
        floor_s = c->sigma_floor_abs;
    if (floor_s < min_sigma)
        floor_s = min_sigma;
    double sigma = sqrt(s->var);
    if (sigma < floor_s)
        sigma = floor_s;
    double dev = x - s->mean;
    double z = dev / sigma;

    int warm = s->n < c->warmup;
    if (warm) {
        flags |= MV_DETECT_WARMUP;
    } else if (s->cooldown > 0) {
        flags |= MV_DETECT_COOLDOWN;
        s->cooldown--;
    } else {
        float zf = (float)z;
        float sp = s->splus + zf - p->k_f;
        float sm = s->sminus - zf - p->k_f;
        s->splus = sp > 0.0f ? sp : 0.0f;
        s->sminus = sm > 0.0f ? sm : 0.0f;
        double az = fabs(z);
        if (az > c->z_threshold || s->splus > c->cusum_h || s->sminus > c->cusum_h) {
            flags |= MV_DETECT_CHANGED | MV_DETECT_MOVING;
            s->cooldown = (uint16_t)c->cooldown;
            s->splus = s->sminus = 0.0f;
            s->n_mean = 0; /* the next sample restarts the mean and the variance */
            if (s->n < MV_DETECT_N_MAX)
                s->n++;
            return flags;
        }
        if (az > c->moving_z || s->splus > p->half_h || s->sminus > p->half_h) {
            /* Keep the baseline still while evidence builds up, so a small
             * shift or a ramp is not absorbed before the CUSUM reaches h. */
            flags |= MV_DETECT_MOVING;
            if (s->n < MV_DETECT_N_MAX)
                s->n++;
            return flags;
        }
    }

    /* Baseline update. After a change (n_mean == 0) level AND scale are
     * learnt again from scratch: running mean and variance (Welford), then
     * the EWMA once 1/lambda samples are in. Keeping the old scale would test
     * the new level against it: a series that was constant (variance 0) and
     * turns noisy, or whose noise grows, would then alarm at every sample.
     * The mean and the variance share one learning count: both restart
     * together, so they always had the same number of samples. */
    if (s->n_mean == 0) {
        s->mean = x;
        s->var = 0.0;
        mv_detect__count(s);
    } else {
        mv_detect__learn(s, weight(c, s->n_mean), dev);
    }
    return flags;
}

unsigned mv_detect_update(mv_detect *d, size_t i, double x)
{
    if (i >= d->n)
        return MV_DETECT_INVALID;
    unsigned f = mv_detect_series_update(&d->p, &d->s[i], x);
    if (f & MV_DETECT_CHANGED)
        d->changes[i]++;
    return f;
}

size_t mv_detect_update_all(mv_detect *d, const double *x, size_t *moving)
{
    size_t changed = 0, mov = 0;
    for (size_t i = 0; i < d->n; i++) {
        unsigned f = mv_detect_update(d, i, x[i]);
        changed += (f & MV_DETECT_CHANGED) != 0;
        mov += (f & (MV_DETECT_CHANGED | MV_DETECT_MOVING)) != 0;
    }
    if (moving)
        *moving = mov;
    return changed;
}

uint64_t mv_detect_changes(const mv_detect *d, size_t i)
{
    return i < d->n ? d->changes[i] : 0;
}

double mv_detect_mean(const mv_detect *d, size_t i)
{
    return i < d->n && d->s[i].n ? d->s[i].mean : NAN;
}

double mv_detect_sigma(const mv_detect *d, size_t i)
{
    return i < d->n && d->s[i].n ? sqrt(d->s[i].var) : NAN;
}

/* ---- adaptive read interval ---- */

struct mv_detect_rate {
    mv_detect_rate_config cfg;
    uint64_t interval;
    uint64_t reads;
    uint64_t rng;
    uint32_t calm;
};

void mv_detect_rate_config_default(mv_detect_rate_config *cfg)
{
    cfg->fast_ns = 1000000ull;
    cfg->max_ns = 1000000000ull;
    cfg->calm_reads = 8;
    cfg->factor = 2;
    cfg->jitter = 0.25;
    cfg->seed = 1;
}

const char *mv_detect_rate_config_check(const mv_detect_rate_config *cfg)
{
    if (cfg == NULL)
        return NULL;
    if (cfg->fast_ns == 0 || cfg->max_ns < cfg->fast_ns)
        return "fast_ns must be > 0 and max_ns >= fast_ns";
    if (cfg->calm_reads == 0 || cfg->factor < 2)
        return "calm_reads must be >= 1 and factor >= 2";
    if (!(cfg->jitter >= 0.0 && cfg->jitter <= 0.5))
        return "jitter must be within [0, 0.5]";
    return NULL;
}

int mv_detect_rate_create(const mv_detect_rate_config *cfg, mv_detect_rate **out)
{
    mv_detect_rate_config def;
    mv_detect_rate *r;
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (cfg == NULL) {
        mv_detect_rate_config_default(&def);
        cfg = &def;
    }
    if (mv_detect_rate_config_check(cfg) != NULL)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->cfg = *cfg;
    r->interval = cfg->fast_ns;
    r->rng = cfg->seed;
    *out = r;
    return 0;
}

void mv_detect_rate_destroy(mv_detect_rate *r)
{
    free(r);
}

uint64_t mv_detect_rate_observe(mv_detect_rate *r, int changed, int moving)
{
    r->reads++;
    if (changed) {
        r->interval = r->cfg.fast_ns;
        r->calm = 0;
    } else if (moving) {
        r->calm = 0;
    } else if (++r->calm >= r->cfg.calm_reads) {
        r->calm = 0;
        if (r->interval > r->cfg.max_ns / r->cfg.factor)
            r->interval = r->cfg.max_ns;
        else
            r->interval *= r->cfg.factor;
    }
    if (r->interval <= r->cfg.fast_ns || r->cfg.jitter <= 0.0)
        return r->interval;
    /* splitmix64 step; 53 random bits -> [0, 1). */
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    uint64_t cut = (uint64_t)(u * r->cfg.jitter * (double)r->interval);
    uint64_t iv = r->interval - cut;
    return iv < r->cfg.fast_ns ? r->cfg.fast_ns : iv;
}

uint64_t mv_detect_rate_interval(const mv_detect_rate *r)
{
    return r->interval;
}

uint64_t mv_detect_rate_reads(const mv_detect_rate *r)
{
    return r->reads;
}
