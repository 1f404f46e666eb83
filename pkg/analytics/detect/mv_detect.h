/* mv_detect: O(1)-state change detectors per metric and an adaptive read-interval controller. */
#ifndef MV_DETECT_H
#define MV_DETECT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * A mv_detect bank holds the state of n series (e.g. the metrics of one
 * segment), 48 bytes each (a 40-byte mv_detect_series and its change count),
 * allocated at create time; updates never allocate. Callers that keep
 * per-series records of their own (the collector's pipeline) embed an
 * mv_detect_series in them and call mv_detect_series_update with a
 * mv_detect_params made once from the config: same behaviour, no bank.
 *
 * Per series, each sample x is scored against the baseline learnt BEFORE it:
 *   z = (x - mean) / sigma               (EWMA mean and variance, weight lambda)
 *   S+ = max(0, S+ + z - k), S- = max(0, S- - z - k)   (two-sided CUSUM, sigma units)
 * After `warmup` samples, a change is reported when |z| > z_threshold or
 * S+ > h or S- > h, unless a cool-down from the previous change is running.
 * On a change the CUSUM resets, the change sample is left out of the baseline,
 * and the mean is re-learnt from the next samples (running average, then EWMA),
 * with no new change reported for `cooldown` samples. "Moving" means |z| >
 * moving_z or a CUSUM above h/2: useful to hold a fast read rate. While a
 * series is moving its baseline is held still, so a small shift or a ramp is
 * not absorbed before the CUSUM reaches h.
 *
 * The CUSUM sums are kept in float (they live in [0, h + |z|]; the rounding is
 * ~1e-7 relative, and the levels are compared against the largest float not
 * above them, so a float sum passes a level exactly when its value does);
 * mean and variance in double. Once a series is past warm-up, an update is a few flops
 * plus one sqrt and one division (two while it learns), inline
 * (mv_detect_series_update); warm-up, the first sample after a change, NaN/Inf and
 * changes take an out-of-line path.
 *
 * Measured with the defaults on unit-variance Gaussian noise (tests/unit/
 * test_detect.c, 200 trials each): no more than 5 false changes per 1e6
 * stationary samples (0-1 observed); steps of 2/3/8 sigma detected within
 * 25/12/2 samples; ramps of 0.01/0.03 sigma per sample within 250/90 samples.
 *
 * sigma is floored at max(sigma_floor_abs, sigma_floor_rel * |mean|) so a
 * constant series still reports a jump.
 *
 * Ownership: mv_detect_create allocates; mv_detect_destroy frees. Not
 * thread-safe per bank.
 */

enum {
    MV_DETECT_CHANGED = 1u << 0,  /* a change was detected at this sample */
    MV_DETECT_MOVING = 1u << 1,   /* unusual but not (yet) a change */
    MV_DETECT_WARMUP = 1u << 2,   /* still learning the baseline */
    MV_DETECT_COOLDOWN = 1u << 3, /* re-learning after a change */
    MV_DETECT_INVALID = 1u << 4,  /* NaN/Inf sample, ignored */
};

typedef struct mv_detect_config {
    double lambda;          /* EWMA weight, (0, 0.5]; default 0.01 */
    double z_threshold;     /* |z| alarm; default 6 */
    double cusum_k;         /* CUSUM slack, sigma units; default 0.5 */
    double cusum_h;         /* CUSUM alarm level, sigma units; default 14 */
    double moving_z;        /* |z| for MV_DETECT_MOVING; default 3 */
    double sigma_floor_abs; /* default 1e-12 */
    double sigma_floor_rel; /* default 1e-9 */
    uint32_t warmup;        /* samples before any alarm, at most 65535; default 50 */
    uint32_t cooldown;      /* samples without alarm after a change, at most 65535; default 20 */
} mv_detect_config;

typedef struct mv_detect mv_detect;

/* Where a series' sample count stops (warmup and cooldown are at most this). */
#define MV_DETECT_N_MAX 65535u

/* One series' state, for callers that embed it in their own records
 * (zero-initialised = no sample yet). 32 bytes: two to a cache line. */
typedef struct mv_detect_series {
    double mean;
    double var;          /* EWMA variance (not floored) */
    float splus, sminus; /* CUSUM sums, sigma units */
    uint32_t n_mean;     /* samples in the current learning phase (saturating); 0 = re-learn */
    uint16_t n;          /* samples seen (saturating at MV_DETECT_N_MAX, >= any warm-up) */
    uint16_t cooldown;   /* samples left without alarms */
} mv_detect_series;

/* A config prepared for mv_detect_series_update. */
typedef struct mv_detect_params {
    mv_detect_config cfg;
    double half_h;       /* cusum_h / 2 */
    float k_f;           /* cusum_k */
    float h_f, half_h_f; /* cusum_h and cusum_h / 2 rounded down to a float: for a float v,
                            v > h_f exactly when v > cusum_h */
    uint32_t n_lam;      /* learning samples after which the weight is lambda */
} mv_detect_params;

void mv_detect_config_default(mv_detect_config *cfg);
/* NULL if valid, else a sentence saying what to fix. */
const char *mv_detect_config_check(const mv_detect_config *cfg);
/* Bytes a bank of n series owns. */
size_t mv_detect_memory_bytes(size_t n_series);

/* Creates a bank of n_series detectors (cfg NULL = defaults). Returns 0,
 * -EINVAL (see mv_detect_config_check; n_series must be in [1, 1<<24]) or -ENOMEM. */
int mv_detect_create(const mv_detect_config *cfg, size_t n_series, mv_detect **out);
void mv_detect_destroy(mv_detect *d);

/* Feeds sample x of series i (i < n_series, else MV_DETECT_INVALID).
 * Returns a mask of MV_DETECT_* flags. */
unsigned mv_detect_update(mv_detect *d, size_t i, double x);

/* Prepares a config (NULL = defaults) for mv_detect_series_update. Returns 0
 * or -EINVAL (see mv_detect_config_check). */
int mv_detect_params_init(mv_detect_params *p, const mv_detect_config *cfg);

/* Out-of-line part of mv_detect_series_update (warm-up, cool-down, learning
 * phase, changes, invalid samples); same contract. */
unsigned mv_detect_series_update_slow(const mv_detect_params *p, mv_detect_series *s, double x);
/* The same with a floor of this sample's own under sigma (see
 * mv_detect_series_update_floor). */
unsigned mv_detect_series_update_slow_floor(const mv_detect_params *p, mv_detect_series *s,
                                            double x, double min_sigma);

/* Feeds sample x to one embedded series: exactly what mv_detect_update does
 * for a series of a bank (the caller counts MV_DETECT_CHANGED). */
#if defined(__GNUC__)
#define MV_DETECT_INLINE static inline __attribute__((always_inline))
#else
#define MV_DETECT_INLINE static inline
#endif
/* Internal to the update and its out-of-line part: one more sample in the learning and
 * sample counts (saturating); one learning step of the baseline with weight w. */
MV_DETECT_INLINE void mv_detect__count(mv_detect_series *s)
{
    if (s->n_mean < UINT32_MAX)
        s->n_mean++;
    if (s->n < MV_DETECT_N_MAX)
        s->n++;
}

MV_DETECT_INLINE void mv_detect__learn(mv_detect_series *s, double w, double dev)
{
    s->mean += w * dev;
    s->var = (1.0 - w) * (s->var + w * dev * dev);
    mv_detect__count(s);
}

/* mv_detect_series_update with a floor of this sample's own under sigma: sigma is at least
 * max(sigma_floor_abs, sigma_floor_rel |mean|, min_sigma). For a sample whose resolution is known
 * (a counter's rate over a span: one increment, or the read interval the increment fell in,
 * is what the same steady rate can differ by), so that a series that was exactly constant
 * does not report the next sample that lands one resolution step away. min_sigma <= 0: exactly
 * mv_detect_series_update. */
MV_DETECT_INLINE unsigned mv_detect_series_update_floor(const mv_detect_params *p,
                                                        mv_detect_series *s, double x,
                                                        double min_sigma)
{
    const mv_detect_config *c = &p->cfg;
    /* Warm-up, the first sample after a change (n_mean 0) and NaN/Inf take the out-of-line
     * path; so does a change, below. Cool-down and the learning phase stay inline: after
     * each change a series spends 1/lambda samples learning, and a series that changes
     * often spends most of its samples there. */
    if (__builtin_expect(s->n < c->warmup || s->n_mean == 0 || !(x - x == 0.0), 0))
        return mv_detect_series_update_slow_floor(p, s, x, min_sigma);
    double am = s->mean < 0 ? -s->mean : s->mean;
    double floor_s = c->sigma_floor_rel * am;
    if (floor_s < c->sigma_floor_abs)
        floor_s = c->sigma_floor_abs;
    if (floor_s < min_sigma)
        floor_s = min_sigma;
    double sigma = __builtin_sqrt(s->var);
    if (sigma < floor_s)
        sigma = floor_s;
    double dev = x - s->mean;
    double z = dev / sigma;
    unsigned flags = 0;
    if (__builtin_expect(s->cooldown != 0, 0)) {
        s->cooldown--; /* no alarm, no CUSUM: the baseline learns */
        flags = MV_DETECT_COOLDOWN;
    } else {
        float zf = (float)z;
        /* Branch-free: the signs of these depend on the noise, and a mispredicted
         * branch waiting on the division costs more than the whole update. */
        /* max(v, 0) as (v + |v|) / 2: exact, and arithmetic, so the compiler cannot turn
         * it back into a branch. */
        float vp = s->splus + zf - p->k_f;
        float vm = s->sminus - zf - p->k_f;
        float sp = 0.5f * (vp + __builtin_fabsf(vp));
        float sm = 0.5f * (vm + __builtin_fabsf(vm));
        double az = __builtin_fabs(z);
        if (__builtin_expect((az > c->z_threshold) | (sp > p->h_f) | (sm > p->h_f), 0))
            return mv_detect_series_update_slow_floor(p, s, x, min_sigma); /* a change: redone */
        s->splus = sp;
        s->sminus = sm;
        if (__builtin_expect((az > c->moving_z) | (sp > p->half_h_f) | (sm > p->half_h_f), 0)) {
            if (s->n_mean < p->n_lam && s->n < MV_DETECT_N_MAX)
                s->n++;              /* as the out-of-line path counts it while learning */
            return MV_DETECT_MOVING; /* baseline held still */
        }
        if (__builtin_expect(s->n_mean >= p->n_lam, 1)) { /* steady state: weight lambda */
            double lam = c->lambda;
            s->mean += lam * dev;
            s->var = (1.0 - lam) * (s->var + lam * dev * dev);
            return 0;
        }
    }
    /* Cool-down or learning: the running weight 1 / (n_mean + 1) until it reaches lambda
     * (from n_lam on, exactly lambda). */
    mv_detect__learn(s, s->n_mean < p->n_lam ? 1.0 / ((double)s->n_mean + 1.0) : c->lambda, dev);
    return flags;
}

MV_DETECT_INLINE unsigned mv_detect_series_update(const mv_detect_params *p, mv_detect_series *s,
                                                  double x)
{
    return mv_detect_series_update_floor(p, s, x, 0.0);
}

/* Feeds the same sample x to one embedded series k times in a row: exactly k calls of
 * mv_detect_series_update_floor, to the bit, in the state, in the flags (ORed) and in the
 * changes counted. The update is a function of the state and the sample alone, so a step
 * that leaves the state as it was (and reports no change) is a fixed point: every later step
 * with the same sample would do the same and return the same flags, and the run stops there
 * (a constant gauge, an idle counter's zero rate, once the baseline has settled: one step
 * instead of k). *changes gets the number of MV_DETECT_CHANGED steps added. *still (may be
 * NULL) is set to whether the run ended at a fixed point whose step returns no flag but
 * MV_DETECT_INVALID, found where x equals the mean to the bit (the only fixed points looked
 * for): as long as nothing else changes the state, any number of further steps with a sample
 * equal to the mean, to the bit, may then be skipped. k = 0: no step, *still = 0. */
MV_DETECT_INLINE unsigned mv_detect_series_update_run(const mv_detect_params *p,
                                                      mv_detect_series *s, double x,
                                                      double min_sigma, uint32_t k,
                                                      uint64_t *changes, int *still)
{
    unsigned flags = 0, f = 0;
    int fixed = 0;
    for (uint32_t i = 0; i < k; i++) {
        /* Only a sample equal to the mean, to the bit, is looked at as a fixed point (dev 0:
         * the baseline cannot move); another one may be one too, rarely, and then takes its
         * k steps. */
        if (__builtin_expect(memcmp(&x, &s->mean, sizeof x) != 0, 1)) {
            f = mv_detect_series_update_floor(p, s, x, min_sigma);
            flags |= f;
            if (__builtin_expect(f & MV_DETECT_CHANGED, 0))
                (*changes)++;
            continue;
        }
        mv_detect_series before = *s;
        f = mv_detect_series_update_floor(p, s, x, min_sigma);
        flags |= f;
        if (__builtin_expect(f & MV_DETECT_CHANGED, 0)) {
            (*changes)++;
            continue;
        }
        if (memcmp(&before, s, sizeof before) == 0) {
            fixed = 1;
            break;
        }
    }
    if (still)
        *still = fixed && (f & ~(unsigned)MV_DETECT_INVALID) == 0;
    return flags;
}

/* Feeds one sample per series (x[0..n_series)). Returns how many series
 * reported MV_DETECT_CHANGED; *moving (may be NULL) gets how many were
 * changed or moving. */
size_t mv_detect_update_all(mv_detect *d, const double *x, size_t *moving);

/* Forgets series i (e.g. its metric was replaced). */
void mv_detect_reset(mv_detect *d, size_t i);

/* Copies the whole state of series si of `src` into series di of `dst` (e.g.
 * when a bank is rebuilt for a new catalog and a metric keeps its identity).
 * Out-of-range indexes are ignored. The banks' configs should match. */
void mv_detect_copy(mv_detect *dst, size_t di, const mv_detect *src, size_t si);

uint64_t mv_detect_changes(const mv_detect *d, size_t i); /* changes since create/reset */
double mv_detect_mean(const mv_detect *d, size_t i);
double mv_detect_sigma(const mv_detect *d, size_t i);

/*
 * Adaptive read-interval controller for one segment. Each read reports
 * whether any of its metrics changed or moved:
 *   changed   -> interval = fast tick, calm counter cleared;
 *   moving    -> interval held, calm counter cleared;
 *   calm      -> after calm_reads calm reads in a row, interval *= factor
 *                (capped at max_interval), calm counter cleared.
 * Dither: above the fast tick, the interval returned by observe is shortened
 * by a random fraction in [0, jitter) (deterministic PRNG from `seed`), so
 * backed-off reads do not lock onto the phase of a periodic signal (a gauge
 * cycling every 10 ms read every 1000 ms exactly would always show the same
 * value). mv_detect_rate_interval gives the undithered interval.
 * Intervals are in nanoseconds. 72 bytes; no allocation after create.
 */
typedef struct mv_detect_rate_config {
    uint64_t fast_ns;    /* default 1 ms */
    uint64_t max_ns;     /* >= fast_ns; default 1 s */
    uint32_t calm_reads; /* default 8 */
    uint32_t factor;     /* >= 2; default 2 */
    double jitter;       /* in [0, 0.5]; default 0.25 */
    uint64_t seed;       /* dither PRNG seed; default 1 */
} mv_detect_rate_config;

typedef struct mv_detect_rate mv_detect_rate;

void mv_detect_rate_config_default(mv_detect_rate_config *cfg);
const char *mv_detect_rate_config_check(const mv_detect_rate_config *cfg);
int mv_detect_rate_create(const mv_detect_rate_config *cfg, mv_detect_rate **out);
void mv_detect_rate_destroy(mv_detect_rate *r);
/* Records one read's outcome; returns the interval until the next read. */
uint64_t mv_detect_rate_observe(mv_detect_rate *r, int changed, int moving);
uint64_t mv_detect_rate_interval(const mv_detect_rate *r);
uint64_t mv_detect_rate_reads(const mv_detect_rate *r);

#endif
