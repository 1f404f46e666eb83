/* mv_sketch: DDSketch-style quantile sketch with a cubic log2 approximation for the keys. */
#include "mv_sketch.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cubic approximation of log2(1 + s) on [0, 1]; see the header for the proof. */
#define P_C1         (10.0 / 7.0)
#define P_C2         (-3.0 / 5.0)
#define P_C3         (6.0 / 35.0)
#define P_MIN_SLOPE  (10.0 / 7.0) /* min over [0,1] of (1 + s) P'(s) */
#define ALPHA_SHRINK (1.0 - 1e-7)
#define KEY_SPAN     1100 /* e + P(s) lies in [-1022, 1024] for normal doubles */

/* One sign's dense window of buckets: counts[i] holds key lo + i. */
typedef struct store {
    uint64_t *counts;
    uint32_t cap;
    int32_t lo;   /* key of counts[0] */
    int32_t kmin; /* lowest non-empty key (valid when total > 0) */
    int32_t kmax; /* highest non-empty key */
    uint64_t total;
} store;

struct mv_sketch {
    double alpha;
    double mult;   /* M: keys per unit of e + P(s) */
    double bias_d; /* keeps M * (e + P(s)) + bias positive so truncation floors */
    int32_t bias;
    int collapsed;
    uint64_t count;
    uint64_t zero_count;
    double sum;
    double min;
    double max;
    store pos;
    store neg;
};

void mv_sketch_config_default(mv_sketch_config *cfg)
{
    cfg->alpha = 0.01;
    cfg->max_buckets = 2048;
}

const char *mv_sketch_config_check(const mv_sketch_config *cfg)
{
    if (cfg == NULL)
        return NULL;
    if (!(cfg->alpha >= 1e-4 && cfg->alpha <= 0.5))
        return "alpha (relative accuracy) must be within [1e-4, 0.5]";
    if (cfg->max_buckets < 16 || cfg->max_buckets > (1u << 20))
        return "max_buckets must be within [16, 1048576]";
    return NULL;
}

size_t mv_sketch_memory_bytes(const mv_sketch_config *cfg)
{
    mv_sketch_config def;
    if (cfg == NULL) {
        mv_sketch_config_default(&def);
        cfg = &def;
    }
    if (mv_sketch_config_check(cfg) != NULL)
        return 0;
    return sizeof(mv_sketch) + 2 * sizeof(uint64_t) * (size_t)cfg->max_buckets;
}

static void store_clear(store *st)
{
    memset(st->counts, 0, sizeof(uint64_t) * st->cap);
    st->lo = 0;
    st->kmin = 0;
    st->kmax = 0;
    st->total = 0;
}

int mv_sketch_create(const mv_sketch_config *cfg, mv_sketch **out)
{
    mv_sketch_config def;
    mv_sketch *sk;
    uint64_t *mem;

    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (cfg == NULL) {
        mv_sketch_config_default(&def);
        cfg = &def;
    }
    if (mv_sketch_config_check(cfg) != NULL)
        return -EINVAL;
    sk = calloc(1, sizeof(*sk));
    if (sk == NULL)
        goto fail_none;
    mem = calloc(2 * (size_t)cfg->max_buckets, sizeof(uint64_t));
    if (mem == NULL)
        goto fail_sketch;

    double a = cfg->alpha * ALPHA_SHRINK;
    double gamma_ln = log1p(2.0 * a / (1.0 - a)); /* ln((1 + a) / (1 - a)) */
    sk->alpha = cfg->alpha;
    sk->mult = 1.0 / (P_MIN_SLOPE * gamma_ln);
    sk->bias = (int32_t)ceil(KEY_SPAN * sk->mult) + 1;
    sk->bias_d = (double)sk->bias;
    sk->pos.counts = mem;
    sk->pos.cap = cfg->max_buckets;
    sk->neg.counts = mem + cfg->max_buckets;
    sk->neg.cap = cfg->max_buckets;
    mv_sketch_reset(sk);
    *out = sk;
    return 0;

fail_sketch:
    free(sk);
fail_none:
    return -ENOMEM;
}

void mv_sketch_destroy(mv_sketch *sk)
{
    if (sk == NULL)
        return;
    free(sk->pos.counts); /* one block holds both stores */
    free(sk);
}

void mv_sketch_reset(mv_sketch *sk)
{
    store_clear(&sk->pos);
    store_clear(&sk->neg);
    sk->collapsed = 0;
    sk->count = 0;
    sk->zero_count = 0;
    sk->sum = 0.0;
    sk->min = INFINITY;
    sk->max = -INFINITY;
}

/* Key of a positive normal double: floor(M * (e + P(s))). */
static inline int32_t key_of(const mv_sketch *sk, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof(bits));
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &mbits, sizeof(m));
    double s = m - 1.0;
    double f = (double)e + ((P_C3 * s + P_C2) * s + P_C1) * s;
    return (int32_t)(f * sk->mult + sk->bias_d) - sk->bias;
}

/* Inverse of P on [0, 1] by bisection (query path only). */
static double p_inverse(double t)
{
    double a = 0.0, b = 1.0;
    for (int i = 0; i < 64; i++) {
        double mid = 0.5 * (a + b);
        if (((P_C3 * mid + P_C2) * mid + P_C1) * mid < t)
            a = mid;
        else
            b = mid;
    }
    return 0.5 * (a + b);
}

/* Smallest x whose e + P(s) equals f. */
static double f_inverse(double f)
{
    double e = floor(f);
    if (e >= 1024.0)
        return DBL_MAX;
    return ldexp(1.0 + p_inverse(f - e), (int)e);
}

/* Value reported for a key: 2 lo hi / (lo + hi), within alpha of [lo, hi]. */
static double key_value(const mv_sketch *sk, int32_t key)
{
    double lo = f_inverse((double)key / sk->mult);
    double hi = f_inverse((double)(key + 1) / sk->mult);
    return 2.0 / (1.0 / lo + 1.0 / hi); /* same value, no overflow near DBL_MAX */
}

/* Moves the window so that keys [nlo, nhi] fit, collapsing the lowest keys if
 * they cannot. Returns the key a count for `key` must go to. */
static int32_t store_make_room(mv_sketch *sk, store *st, int32_t key)
{
    if (st->total == 0) {
        st->lo = key - (int32_t)(st->cap / 2);
        st->kmin = st->kmax = key;
        return key;
    }
    int32_t nlo = key < st->kmin ? key : st->kmin;
    int32_t nhi = key > st->kmax ? key : st->kmax;
    int64_t width = (int64_t)nhi - nlo + 1;
    int32_t new_lo;
    if (width <= (int64_t)st->cap) {
        /* Re-centre: equal slack on both sides of the occupied range. */
        new_lo = nlo - (int32_t)(((int64_t)st->cap - width) / 2);
    } else {
        new_lo = nhi - (int32_t)st->cap + 1;
        sk->collapsed = 1;
    }
    if (new_lo != st->lo) {
        uint64_t *c = st->counts;
        uint32_t cap = st->cap;
        if (new_lo > st->lo) {
            uint64_t shift = (uint64_t)((int64_t)new_lo - st->lo);
            uint64_t folded = 0;
            uint32_t keep = 0;
            if (shift < cap) {
                for (uint32_t i = 0; i < (uint32_t)shift; i++)
                    folded += c[i];
                keep = cap - (uint32_t)shift;
                memmove(c, c + shift, sizeof(uint64_t) * keep);
            } else {
                for (uint32_t i = 0; i < cap; i++)
                    folded += c[i];
            }
            memset(c + keep, 0, sizeof(uint64_t) * (cap - keep));
            c[0] += folded;
        } else {
            uint64_t shift = (uint64_t)((int64_t)st->lo - new_lo);
            /* Only happens when the occupied range fits after the move. */
            uint32_t keep = shift < cap ? cap - (uint32_t)shift : 0;
            if (keep > 0)
                memmove(c + shift, c, sizeof(uint64_t) * keep);
            memset(c, 0, sizeof(uint64_t) * (cap - keep < shift ? cap - keep : shift));
        }
        st->lo = new_lo;
    }
    if (st->kmin < new_lo)
        st->kmin = new_lo;
    if (key < new_lo)
        key = new_lo;
    if (key < st->kmin)
        st->kmin = key;
    if (key > st->kmax)
        st->kmax = key;
    return key;
}

static inline void store_add(mv_sketch *sk, store *st, int32_t key, uint64_t n)
{
    uint32_t i = (uint32_t)key - (uint32_t)st->lo;
    if (i < st->cap && st->total != 0) {
        st->counts[i] += n;
        if (key < st->kmin)
            st->kmin = key;
        if (key > st->kmax)
            st->kmax = key;
    } else {
        key = store_make_room(sk, st, key);
        st->counts[(uint32_t)key - (uint32_t)st->lo] += n;
    }
    st->total += n;
}

int mv_sketch_add_n(mv_sketch *sk, double x, uint64_t n)
{
    if (!isfinite(x))
        return -EDOM;
    if (n == 0)
        return 0;
    if (x > MV_SKETCH_MIN_INDEXABLE)
        store_add(sk, &sk->pos, key_of(sk, x), n);
    else if (x < -MV_SKETCH_MIN_INDEXABLE)
        store_add(sk, &sk->neg, key_of(sk, -x), n);
    else
        sk->zero_count += n;
    sk->count += n;
    sk->sum += n == 1 ? x : x * (double)n;
    if (x < sk->min)
        sk->min = x;
    if (x > sk->max)
        sk->max = x;
    return 0;
}

int mv_sketch_add(mv_sketch *sk, double x)
{
    return mv_sketch_add_n(sk, x, 1);
}

int mv_sketch_add_buckets(mv_sketch *sk, const double *bounds, size_t nbounds,
                          const uint64_t *counts, double sum)
{
    if (sk == NULL || counts == NULL || (nbounds > 0 && bounds == NULL))
        return -EINVAL;
    for (size_t i = 0; i < nbounds; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return -EINVAL;
    }
    double before = sk->sum;
    for (size_t i = 0; i <= nbounds; i++) {
        if (counts[i] == 0)
            continue;
        double rep;
        if (nbounds == 0) {
            rep = isfinite(sum) ? sum / (double)counts[i] : 0.0;
        } else if (i == 0) {
            rep = bounds[0];
        } else if (i == nbounds) {
            rep = bounds[nbounds - 1];
        } else {
            double lo = bounds[i - 1], hi = bounds[i];
            if (lo >= 0.0 || hi <= 0.0)
                rep = 2.0 * lo * (hi / (lo + hi)); /* same sign: lo + hi != 0 */
            else
                rep = 0.5 * (lo + hi);
        }
        if (!isfinite(rep))
            rep = i == 0 ? bounds[0] : bounds[i - 1];
        int rc = mv_sketch_add_n(sk, rep, counts[i]);
        if (rc != 0)
            return rc;
    }
    if (isfinite(sum))
        sk->sum = before + sum;
    return 0;
}

static int store_merge(mv_sketch *dst, store *d, const store *s)
{
    if (s->total == 0)
        return 0;
    /* Highest keys first so a collapsing destination settles its window once. */
    for (int32_t k = s->kmax; k >= s->kmin; k--) {
        uint64_t n = s->counts[(uint32_t)k - (uint32_t)s->lo];
        if (n != 0)
            store_add(dst, d, k, n);
    }
    return 0;
}

int mv_sketch_merge(mv_sketch *dst, const mv_sketch *src)
{
    if (dst == NULL || src == NULL || dst->mult != src->mult)
        return -EINVAL;
    if (src->count == 0)
        return 0;
    store_merge(dst, &dst->pos, &src->pos);
    store_merge(dst, &dst->neg, &src->neg);
    dst->zero_count += src->zero_count;
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    if (src->collapsed)
        dst->collapsed = 1;
    return 0;
}

double mv_sketch_quantile(const mv_sketch *sk, double q)
{
    if (sk->count == 0 || !(q >= 0.0 && q <= 1.0))
        return NAN;
    uint64_t rank = (uint64_t)floor(q * (double)(sk->count - 1));
    uint64_t seen = 0;
    double v = 0.0;
    const store *st = &sk->neg;
    int found = 0;
    if (st->total > rank) {
        /* Most negative first: highest magnitude key first. */
        for (int32_t k = st->kmax; k >= st->kmin; k--) {
            seen += st->counts[(uint32_t)k - (uint32_t)st->lo];
            if (seen > rank) {
                v = -key_value(sk, k);
                found = 1;
                break;
            }
        }
    } else {
        seen = st->total;
    }
    if (!found) {
        seen += sk->zero_count;
        if (seen > rank) {
            v = 0.0;
        } else {
            st = &sk->pos;
            for (int32_t k = st->kmin; k <= st->kmax; k++) {
                seen += st->counts[(uint32_t)k - (uint32_t)st->lo];
                if (seen > rank) {
                    v = key_value(sk, k);
                    break;
                }
            }
        }
    }
    /* The true quantile lies in [min, max]; clamping never adds error. */
    if (v < sk->min)
        v = sk->min;
    if (v > sk->max)
        v = sk->max;
    return v;
}

uint64_t mv_sketch_count(const mv_sketch *sk)
{
    return sk->count;
}

double mv_sketch_sum(const mv_sketch *sk)
{
    return sk->sum;
}

double mv_sketch_min(const mv_sketch *sk)
{
    return sk->count ? sk->min : NAN;
}

double mv_sketch_max(const mv_sketch *sk)
{
    return sk->count ? sk->max : NAN;
}

double mv_sketch_alpha(const mv_sketch *sk)
{
    return sk->alpha;
}

static uint32_t store_nonempty(const store *st)
{
    uint32_t n = 0;
    if (st->total == 0)
        return 0;
    for (int32_t k = st->kmin; k <= st->kmax; k++)
        n += st->counts[(uint32_t)k - (uint32_t)st->lo] != 0;
    return n;
}

uint32_t mv_sketch_bucket_count(const mv_sketch *sk)
{
    return store_nonempty(&sk->pos) + store_nonempty(&sk->neg) + (sk->zero_count != 0);
}

int mv_sketch_collapsed(const mv_sketch *sk)
{
    return sk->collapsed;
}
