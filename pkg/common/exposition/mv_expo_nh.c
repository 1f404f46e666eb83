/* mv_expo_nh: native (exponential-bucket) histograms for the protobuf exposition and remote
 * write 2.0: bucket indices, classic-to-native mapping, resolution reduction, spans/deltas. */
#include "mv_expo_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int32_t clamp_schema(int32_t s)
{
    return s < MV_EXPO_NH_SCHEMA_MIN   ? MV_EXPO_NH_SCHEMA_MIN
           : s > MV_EXPO_NH_SCHEMA_MAX ? MV_EXPO_NH_SCHEMA_MAX
                                       : s;
}

double mv_expo_nh_upper(int32_t idx, int32_t schema)
{
    schema = clamp_schema(schema);
    if (schema <= 0) {
        int64_t e = (int64_t)idx * ((int64_t)1 << -schema);
        if (e > 2000)
            return INFINITY;
        if (e < -2000)
            return 0;
        return ldexp(1, (int)e);
    }
    int32_t per = 1 << schema;
    /* idx = q per + r with 0 <= r < per: upper = 2^q 2^(r / per) (r / per is exact). */
    int32_t q = idx >= 0 ? idx / per : -((-idx + per - 1) / per);
    int32_t r = idx - q * per;
    if (q > 2000)
        return INFINITY;
    if (q < -2000)
        return 0;
    return ldexp(exp2((double)r / per), q);
}

int32_t mv_expo_nh_index(double x, int32_t schema)
{
    schema = clamp_schema(schema);
    int e;
    double f = frexp(x, &e); /* x = f 2^e, f in [0.5, 1) */
    double l = (double)(e - 1) + log2(2 * f);
    double t = ceil(ldexp(l, schema));
    if (t > INT32_MAX / 2)
        t = INT32_MAX / 2;
    if (t < INT32_MIN / 2)
        t = INT32_MIN / 2;
    int32_t idx = (int32_t)t;
    /* log2 rounds: settle on the bucket whose bounds hold x exactly. */
    while (idx > INT32_MIN / 2 && mv_expo_nh_upper(idx - 1, schema) >= x)
        idx--;
    while (idx < INT32_MAX / 2 && mv_expo_nh_upper(idx, schema) < x)
        idx++;
    return idx;
}

int32_t mv_expo_nh_schema_for_gamma(double gamma)
{
    if (!(gamma > 1))
        return MV_EXPO_NH_SCHEMA_MAX;
    double lg = log2(gamma); /* growth 2^(2^-s) <= gamma  <=>  2^-s <= lg  <=>  s >= -log2 lg */
    double s = ceil(-log2(lg) - 1e-12);
    if (s > MV_EXPO_NH_SCHEMA_MAX)
        return MV_EXPO_NH_SCHEMA_MAX;
    if (s < MV_EXPO_NH_SCHEMA_MIN)
        return MV_EXPO_NH_SCHEMA_MIN;
    return (int32_t)s;
}

void mv_expo_nh_begin(mv_expo_nh *h, int32_t schema)
{
    h->schema = clamp_schema(schema);
    if (!(h->zero_threshold > 0) || isinf(h->zero_threshold))
        h->zero_threshold = MV_EXPO_NH_ZERO_THRESHOLD;
    h->zero_count = 0;
    h->nb = 0;
    h->nspan[0] = h->nspan[1] = 0;
    h->ndelta[0] = h->ndelta[1] = 0;
}

void mv_expo_nh_free(mv_expo_nh *h)
{
    if (!h)
        return;
    free(h->b);
    for (int i = 0; i < 2; i++) {
        free(h->span[i]);
        free(h->delta[i]);
    }
    memset(h, 0, sizeof *h);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Adds n observations to the bucket (idx, neg). */
static int add_bucket(mv_expo_nh *h, int32_t idx, uint32_t neg, uint64_t n)
{
    /* Consecutive adds often hit one bucket (classic buckets narrower than native ones). */
    if (h->nb && h->b[h->nb - 1].idx == idx && h->b[h->nb - 1].neg == neg) {
        h->b[h->nb - 1].n += n;
        return 0;
    }
    if (grow((void **)&h->b, &h->bcap, h->nb + 1, sizeof *h->b))
        return -ENOMEM;
    h->b[h->nb++] = (mv_expo_nh_bkt){idx, neg, n};
    return 0;
}

int mv_expo_nh_add_bucket(mv_expo_nh *h, int32_t idx, int neg, uint64_t n)
{
    return n ? add_bucket(h, idx, neg != 0, n) : 0;
}

/* Where a value goes in h (its schema and zero threshold). */
static mv_expo__nh_slot slot_of(const mv_expo_nh *h, double v)
{
    if (isnan(v))
        return (mv_expo__nh_slot){0, MV_EXPO__NH_SKIP, 0};
    double a = fabs(v);
    if (a <= h->zero_threshold)
        return (mv_expo__nh_slot){0, MV_EXPO__NH_ZERO, 0};
    int32_t idx = isinf(a) ? INT32_MAX / 2 : mv_expo_nh_index(a, h->schema);
    return (mv_expo__nh_slot){idx, MV_EXPO__NH_BUCKET, v < 0};
}

static int add_slot(mv_expo_nh *h, mv_expo__nh_slot sl, uint64_t n)
{
    if (n == 0 || sl.kind == MV_EXPO__NH_SKIP)
        return 0;
    if (sl.kind == MV_EXPO__NH_ZERO) {
        h->zero_count += n;
        return 0;
    }
    return add_bucket(h, sl.idx, sl.neg, n);
}

int mv_expo_nh_add(mv_expo_nh *h, double v, uint64_t n)
{
    if (isnan(v) || n == 0)
        return 0;
    return add_slot(h, slot_of(h, v), n);
}

/* The representative value of classic bucket i (0..nb) of bounds[0..nb). */
static double classic_rep(const double *bounds, size_t nb, size_t i)
{
    if (nb == 0)
        return 0; /* only the +Inf bucket: nothing known */
    if (i == nb)
        return nextafter(bounds[nb - 1], INFINITY); /* (b, +Inf): just above the last bound */
    if (i == 0)
        return bounds[0]; /* (-Inf, b0] */
    double lo = bounds[i - 1], hi = bounds[i];
    if (lo > 0 || hi < 0)
        return 2 / (1 / lo + 1 / hi); /* harmonic mean: the bucket's centre in ratio */
    if (lo == 0)
        return hi;
    return lo / 2 + hi / 2; /* straddling zero */
}

static int bounds_ok(const double *bounds, size_t nb)
{
    for (size_t i = 0; i < nb; i++)
        if (!isfinite(bounds[i]) || (i && !(bounds[i] > bounds[i - 1])))
            return 0;
    return 1;
}

int mv_expo__nh_classic_map(const mv_expo_nh *h, const double *bounds, size_t nb,
                            mv_expo__nh_slot *map)
{
    if (!bounds_ok(bounds, nb))
        return -EINVAL;
    for (size_t i = 0; i <= nb; i++)
        map[i] = slot_of(h, classic_rep(bounds, nb, i));
    return 0;
}

int mv_expo__nh_add_mapped(mv_expo_nh *h, const mv_expo__nh_slot *map, size_t nb,
                           const uint64_t *cum)
{
    uint64_t prev = 0;
    for (size_t i = 0; i <= nb; i++) {
        uint64_t c = cum[i] > prev ? cum[i] - prev : 0; /* a torn or hostile decrease: 0 */
        if (cum[i] > prev)
            prev = cum[i];
        int rc = add_slot(h, map[i], c);
        if (rc)
            return rc;
    }
    return 0;
}

int mv_expo_nh_add_classic(mv_expo_nh *h, const double *bounds, size_t nb, const uint64_t *cum)
{
    if (!bounds_ok(bounds, nb))
        return -EINVAL;
    uint64_t prev = 0;
    for (size_t i = 0; i <= nb; i++) {
        uint64_t c = cum[i] > prev ? cum[i] - prev : 0; /* a torn or hostile decrease: 0 */
        if (cum[i] > prev)
            prev = cum[i];
        if (!c)
            continue;
        int rc = add_slot(h, slot_of(h, classic_rep(bounds, nb, i)), c);
        if (rc)
            return rc;
    }
    return 0;
}

static int bkt_cmp(const void *x, const void *y)
{
    const mv_expo_nh_bkt *a = x, *b = y;
    if (a->neg != b->neg)
        return a->neg < b->neg ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Sorts and merges equal buckets in place. */
static void merge(mv_expo_nh *h)
{
    size_t sorted = 1; /* classic buckets come in order: no sort needed then */
    while (sorted < h->nb && bkt_cmp(&h->b[sorted - 1], &h->b[sorted]) < 0)
        sorted++;
    if (sorted < h->nb)
        qsort(h->b, h->nb, sizeof *h->b, bkt_cmp);
    size_t o = 0;
    for (size_t i = 0; i < h->nb; i++) {
        if (o && h->b[o - 1].idx == h->b[i].idx && h->b[o - 1].neg == h->b[i].neg)
            h->b[o - 1].n += h->b[i].n;
        else
            h->b[o++] = h->b[i];
    }
    h->nb = o;
}

static int32_t floor_half(int32_t v)
{
    return v >= 0 ? v >> 1 : -((-v + 1) >> 1);
}

int mv_expo_nh_finish(mv_expo_nh *h, uint32_t max_buckets)
{
    if (!max_buckets)
        max_buckets = MV_EXPO_NH_MAX_BUCKETS;
    merge(h);
    while (h->nb > max_buckets && h->schema > MV_EXPO_NH_SCHEMA_MIN) {
        for (size_t i = 0; i < h->nb; i++)
            h->b[i].idx = floor_half(h->b[i].idx - 1) + 1;
        h->schema--;
        merge(h); /* still sorted: the map is monotonic */
    }
    for (int sign = 0; sign < 2; sign++) {
        h->nspan[sign] = h->ndelta[sign] = 0;
        int64_t prev = 0;
        int32_t last = 0;
        for (size_t i = 0; i < h->nb; i++) {
            const mv_expo_nh_bkt *b = &h->b[i];
            if ((int)b->neg != sign)
                continue;
            int64_t gap = h->ndelta[sign] ? (int64_t)b->idx - last - 1 : 0;
            if (!h->ndelta[sign] || gap > 2) {
                if (grow((void **)&h->span[sign], &h->scap[sign], h->nspan[sign] + 1,
                         sizeof(mv_expo_nh_span)))
                    return -ENOMEM;
                h->span[sign][h->nspan[sign]++] =
                    (mv_expo_nh_span){h->ndelta[sign] ? (int32_t)gap : b->idx, 0};
                gap = 0;
            }
            /* A gap of one or two empty buckets costs less as zero counts than as a span. */
            if (grow((void **)&h->delta[sign], &h->dcap[sign], h->ndelta[sign] + (size_t)gap + 1,
                     sizeof(int64_t)))
                return -ENOMEM;
            for (int64_t g = 0; g < gap; g++) {
                h->delta[sign][h->ndelta[sign]++] = -prev;
                prev = 0;
            }
            int64_t cnt = b->n > INT64_MAX ? INT64_MAX : (int64_t)b->n;
            h->delta[sign][h->ndelta[sign]++] = cnt - prev;
            prev = cnt;
            h->span[sign][h->nspan[sign] - 1].length += (uint32_t)gap + 1;
            last = b->idx;
        }
    }
    return 0;
}
