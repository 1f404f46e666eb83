/* libFuzzer driver: the protobuf exposition writer and native histograms of mv_expo. The input is
 * a program of families and samples (types, suffixes, label bytes, bucket bounds, counts and
 * values taken from the bytes); the body must stay within the cap and decode with protobuf-c,
 * every native histogram must hold the counts it was given, and a histogram's value message
 * packed alone (mv_expo_pb_histogram, the exposition cache's way) must be the rendered one; the
 * same for a gauge histogram series (mv_expo_native, mv_expo_pb_native). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_expo.h"
#include "prometheus/client/metrics.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *p, *end;
} rd;

static uint8_t u8(rd *r)
{
    return r->p < r->end ? *r->p++ : 0;
}

static uint64_t u64(rd *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | u8(r);
    return v;
}

static double dbl(rd *r)
{
    uint64_t b = u64(r);
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* A NUL-terminated string of up to 15 input bytes in buf. */
static const char *str(rd *r, char *buf)
{
    size_t n = u8(r) & 15;
    size_t i = 0;
    for (; i < n && r->p < r->end; i++)
        buf[i] = (char)(*r->p++ ? r->p[-1] : 'x');
    buf[i] = '\0';
    return buf;
}

static void check_nh(rd *r)
{
    mv_expo_nh h = {0};
    mv_expo_nh_begin(&h, (int8_t)u8(r));
    size_t nb = u8(r) & 31;
    double bounds[32];
    uint64_t cum[33];
    uint64_t total = 0;
    for (size_t i = 0; i < nb; i++)
        bounds[i] = dbl(r);
    for (size_t i = 0; i <= nb; i++) {
        cum[i] = u8(r);
        if (i)
            cum[i] += cum[i - 1];
    }
    int rc = mv_expo_nh_add_classic(&h, bounds, nb, cum);
    if (rc == 0)
        total = cum[nb];
    else
        mv_expo_nh_begin(&h, h.schema);
    size_t nv = u8(r) & 15;
    for (size_t i = 0; i < nv; i++) {
        double v = dbl(r);
        uint64_t n = u8(r);
        if (mv_expo_nh_add(&h, v, n) == 0 && !isnan(v))
            total += n;
    }
    if (mv_expo_nh_finish(&h, u8(r)) == 0) {
        if (h.schema < MV_EXPO_NH_SCHEMA_MIN || h.schema > MV_EXPO_NH_SCHEMA_MAX)
            abort();
        uint64_t got = h.zero_count;
        for (int s = 0; s < 2; s++) {
            uint64_t len = 0;
            for (size_t i = 0; i < h.nspan[s]; i++)
                len += h.span[s][i].length;
            if (len != h.ndelta[s])
                abort();
            int64_t c = 0;
            for (size_t i = 0; i < h.ndelta[s]; i++) {
                c += h.delta[s][i];
                if (c < 0)
                    abort();
                got += (uint64_t)c;
            }
        }
        if (got != total)
            abort();
    }
    mv_expo_nh_free(&h);
}

/* A histogram series rendered through samples, and its value message packed alone by
 * mv_expo_pb_histogram (twice: the second from the remembered bounds), must agree. */
static void check_parts(rd *r)
{
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
    if (!e)
        return;
    int8_t schema = (int8_t)u8(r);
    mv_expo_set_native(e, schema == 99 ? MV_EXPO_NH_OFF : schema, u8(r));
    size_t n = 1 + (u8(r) & 15);
    double le[16];
    uint64_t cum[16];
    for (size_t i = 0; i < n; i++) {
        le[i] = i + 1 < n ? dbl(r) : INFINITY;
        cum[i] = u8(r) & 1 ? u64(r) : u8(r);
    }
    double sum = dbl(r);
    uint64_t count = u64(r);
    mv_expo_label l = {"pod", "p"};
    int ok = mv_expo_family(e, "h", MV_EXPO_HISTOGRAM, NULL, NULL) == 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = mv_expo_sample_u64(e, "_bucket", &l, 1, NULL, 0, "le", le[i], cum[i], MV_EXPO_NO_TS) ==
             0;
    ok = ok && mv_expo_sample(e, "_sum", &l, 1, NULL, 0, NULL, 0, sum, MV_EXPO_NO_TS) == 0;
    ok = ok && mv_expo_sample_u64(e, "_count", &l, 1, NULL, 0, NULL, 0, count, MV_EXPO_NO_TS) == 0;
    ok = ok && mv_expo_finish(e) == 0 && !mv_expo_truncated(e);
    size_t len, o = 0;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    uint64_t fl = 0;
    for (int sh = 0; ok && o < len && sh < 64; sh += 7) {
        fl |= (uint64_t)(d[o] & 0x7f) << sh;
        if (!(d[o++] & 0x80))
            break;
    }
    Io__Prometheus__Client__MetricFamily *f =
        ok && fl == len - o ? io__prometheus__client__metric_family__unpack(NULL, fl, d + o) : NULL;
    if (f && f->n_metric == 1 && f->metric[0]->histogram) {
        size_t want_len =
            io__prometheus__client__histogram__get_packed_size(f->metric[0]->histogram);
        uint8_t *want = malloc(want_len + 1);
        if (want) {
            io__prometheus__client__histogram__pack(f->metric[0]->histogram, want);
            for (int k = 0; k < 2; k++) {
                const uint8_t *got;
                size_t got_len;
                if (mv_expo_pb_histogram(e, le, cum, n, sum, count, &got, &got_len) != 0)
                    abort();
                if (got_len != want_len || memcmp(got, want, got_len) != 0)
                    abort();
            }
            free(want);
        }
    } else if (ok) {
        abort(); /* a valid series renders as one histogram */
    }
    if (f)
        io__prometheus__client__metric_family__free_unpacked(f, NULL);
    mv_expo_destroy(e);
}

/* Reads a delimited MetricFamily at the start of d (NULL if it does not decode). */
static Io__Prometheus__Client__MetricFamily *first_family(const uint8_t *d, size_t len)
{
    size_t o = 0;
    uint64_t fl = 0;
    for (int sh = 0; o < len && sh < 64; sh += 7) {
        fl |= (uint64_t)(d[o] & 0x7f) << sh;
        if (!(d[o++] & 0x80))
            break;
    }
    return fl == len - o ? io__prometheus__client__metric_family__unpack(NULL, fl, d + o) : NULL;
}

/* A gauge histogram series from fuzzed native buckets: when written, it decodes as one
 * GAUGE_HISTOGRAM whose buckets hold the counts given, and its value message packed alone
 * (mv_expo_pb_native) is the rendered one. */
static void check_native(rd *r)
{
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
    if (!e)
        return;
    mv_expo_set_native(e, 6, u8(r));
    mv_expo_nh_bkt b[32];
    size_t nb = u8(r) & 31;
    uint64_t total = 0;
    for (size_t i = 0; i < nb; i++) {
        int32_t idx = (int16_t)(u8(r) << 8 | u8(r));
        b[i] = (mv_expo_nh_bkt){.idx = idx, .neg = u8(r) & 1, .n = u8(r)};
        total += b[i].n;
    }
    mv_expo_native_in in = {.schema = (int8_t)u8(r) % 12,
                            .zero_count = u8(r),
                            .b = b,
                            .nb = nb,
                            .count = u64(r),
                            .sum = dbl(r)};
    total += in.zero_count;
    mv_expo_label l = {"pod", "p"};
    int ok = mv_expo_family(e, "g", MV_EXPO_GAUGE_HISTOGRAM, NULL, NULL) == 0 &&
             mv_expo_native(e, &l, 1, NULL, 0, &in, MV_EXPO_NO_TS) == 0 && mv_expo_finish(e) == 0 &&
             !mv_expo_truncated(e);
    if (!ok) {
        mv_expo_destroy(e);
        return;
    }
    size_t len;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    Io__Prometheus__Client__MetricFamily *f = first_family(d, len);
    if (!f || f->type != IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE_HISTOGRAM || f->n_metric != 1 ||
        !f->metric[0]->histogram)
        abort();
    const Io__Prometheus__Client__Histogram *h = f->metric[0]->histogram;
    uint64_t got = h->zero_count;
    int64_t c = 0;
    for (size_t i = 0; i < h->n_positive_delta; i++)
        got += (uint64_t)(c += h->positive_delta[i]);
    c = 0;
    for (size_t i = 0; i < h->n_negative_delta; i++)
        got += (uint64_t)(c += h->negative_delta[i]);
    if (got != total)
        abort();
    size_t want_len = io__prometheus__client__histogram__get_packed_size(h);
    uint8_t *want = malloc(want_len + 1);
    if (want) {
        io__prometheus__client__histogram__pack(h, want);
        const uint8_t *part;
        size_t part_len;
        if (mv_expo_pb_native(e, &in, &part, &part_len) != 0 || part_len != want_len ||
            memcmp(part, want, want_len) != 0)
            abort();
        free(want);
    }
    io__prometheus__client__metric_family__free_unpacked(f, NULL);
    mv_expo_destroy(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, data + size};
    check_nh(&r);
    rd r2 = {data, data + size}; /* the same bytes read as a histogram series */
    check_parts(&r2);
    rd r3 = {data, data + size}; /* and as a gauge histogram series */
    check_native(&r3);
    size_t cap = 64 + (u8(&r) * 37u);
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, cap);
    if (!e)
        return 0;
    int8_t schema = (int8_t)u8(&r);
    uint8_t maxb = u8(&r);
    mv_expo_set_native(e, schema == 99 ? MV_EXPO_NH_OFF : schema, maxb);
    static const char *const sfx[] = {NULL, "_bucket", "_sum", "_count", "_created"};
    static const char *const fams[] = {"a", "b_total", "c_seconds", "d:e"};
    while (r.p < r.end) {
        uint8_t op = u8(&r);
        if ((op & 7) == 0) {
            char help[16], unit[16];
            mv_expo_family(e, fams[op >> 3 & 3], (mv_expo_type)((op >> 5) % 6), str(&r, help),
                           str(&r, unit));
        } else {
            char n0[16], v0[16], v1[16];
            mv_expo_label l[2] = {{str(&r, n0), str(&r, v0)}, {"pod", str(&r, v1)}};
            const char *suffix = sfx[(op >> 3) % 5];
            const char *extra = (op & 0x80) ? ((op & 0x40) ? "le" : "quantile") : NULL;
            double x = dbl(&r);
            if (op & 1)
                mv_expo_sample_u64(e, suffix, l, 2, NULL, 0, extra, x, u64(&r), (int64_t)u64(&r));
            else
                mv_expo_sample(e, suffix, l + 1, 1, l, op & 2 ? 1 : 0, extra, x, dbl(&r),
                               MV_EXPO_NO_TS);
        }
    }
    mv_expo_finish(e);
    size_t len;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    if (len > cap)
        abort();
    /* Every family decodes. */
    size_t o = 0;
    while (o < len) {
        uint64_t l = 0;
        int sh = 0;
        while (o < len && (d[o] & 0x80) && sh < 63) {
            l |= (uint64_t)(d[o++] & 0x7f) << sh;
            sh += 7;
        }
        if (o >= len)
            abort();
        l |= (uint64_t)d[o++] << sh;
        if (l > len - o)
            abort();
        Io__Prometheus__Client__MetricFamily *f =
            io__prometheus__client__metric_family__unpack(NULL, l, d + o);
        if (!f)
            abort();
        io__prometheus__client__metric_family__free_unpacked(f, NULL);
        o += l;
    }
    mv_expo_destroy(e);
    return 0;
}
