/* Unit tests for mv_expo's protobuf exposition (delimited MetricFamily) and native histograms:
 * bucket indices at every schema, the classic-to-native mapping, resolution reduction, span
 * and delta encoding, and a render decoded back with protobuf-c. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_expo.h"
#include "mv_log.h"
#include "mv_sketch.h"
#include "mv_test.h"
#include "prometheus/client/metrics.pb-c.h"

static void test_index(void)
{
    uint64_t r = 88172645463325252ull;
    for (int32_t s = MV_EXPO_NH_SCHEMA_MIN; s <= MV_EXPO_NH_SCHEMA_MAX; s++) {
        /* Bucket boundaries: 1 is one at every schema, and 2 is one (bucket 2^s at s >= 0). */
        CU_ASSERT_EQUAL(mv_expo_nh_index(1.0, s), 0);
        if (s >= 0)
            CU_ASSERT_EQUAL(mv_expo_nh_index(2.0, s), 1 << s);
        for (int i = 0; i < 20000; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            double x = ldexp((double)(r >> 11) / 9007199254740992.0 + 0.5, (int)(r % 200) - 100);
            int32_t idx = mv_expo_nh_index(x, s);
            if (!(mv_expo_nh_upper(idx - 1, s) < x && x <= mv_expo_nh_upper(idx, s))) {
                CU_FAIL("value outside its bucket");
                printf("schema %d x %.17g idx %d\n", s, x, idx);
                return;
            }
        }
    }
    /* Schema choice: buckets no wider than the sketch's gamma. */
    CU_ASSERT_EQUAL(mv_expo_nh_schema_for_gamma(1.01 / 0.99), 6); /* alpha 1 % */
    CU_ASSERT_EQUAL(mv_expo_nh_schema_for_gamma(exp2(1.0 / 32)), 5);
    CU_ASSERT_EQUAL(mv_expo_nh_schema_for_gamma(2.0), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_schema_for_gamma(1.0 + 1e-9), 8);
}

static void test_spans(void)
{
    mv_expo_nh h = {0};
    mv_expo_nh_begin(&h, 0); /* schema 0: bucket i is (2^(i-1), 2^i] */
    /* Buckets 1, 2, 5, 10 with 3, 1, 2, 4; one negative; zero. */
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, 1.5, 3), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, 3, 1), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, 20, 2), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, 1000, 4), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, -0.75, 5), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, 0, 7), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_add(&h, NAN, 7), 0);
    CU_ASSERT_EQUAL(mv_expo_nh_finish(&h, 0), 0);
    CU_ASSERT_EQUAL(h.schema, 0);
    CU_ASSERT_EQUAL(h.zero_count, 7);
    CU_ASSERT_EQUAL(h.nspan[0], 2);
    CU_ASSERT_EQUAL(h.span[0][0].offset, 1);
    CU_ASSERT_EQUAL(h.span[0][0].length, 5); /* buckets 3 and 4 empty: kept as zeros */
    CU_ASSERT_EQUAL(h.span[0][1].offset, 4); /* 6..9 empty */
    CU_ASSERT_EQUAL(h.span[0][1].length, 1);
    int64_t want[] = {3, -2, -1, 0, 2, 2};
    CU_ASSERT_EQUAL(h.ndelta[0], 6);
    for (size_t i = 0; i < 6 && i < h.ndelta[0]; i++)
        CU_ASSERT_EQUAL(h.delta[0][i], want[i]);
    CU_ASSERT_EQUAL(h.nspan[1], 1);
    CU_ASSERT_EQUAL(h.span[1][0].offset, 0); /* 0.75 is in (0.5, 1] */
    CU_ASSERT_EQUAL(h.ndelta[1], 1);
    CU_ASSERT_EQUAL(h.delta[1][0], 5);
    mv_expo_nh_free(&h);
}

static void test_reduce(void)
{
    mv_expo_nh h = {0};
    mv_expo_nh_begin(&h, 8);
    uint64_t total = 0;
    for (int i = 0; i < 400; i++) { /* 400 buckets of schema 8 */
        double x = mv_expo_nh_upper(i - 50, 8) * 0.9999999;
        CU_ASSERT_EQUAL(mv_expo_nh_add(&h, x, (uint64_t)i + 1), 0);
        total += (uint64_t)i + 1;
    }
    CU_ASSERT_EQUAL(mv_expo_nh_finish(&h, 160), 0);
    CU_ASSERT_EQUAL(h.schema, 6); /* 400 -> 200 -> 100 buckets */
    uint64_t sum = 0;
    size_t nb = 0;
    int64_t c = 0;
    for (size_t i = 0; i < h.ndelta[0]; i++) {
        c += h.delta[0][i];
        CU_ASSERT(c >= 0);
        sum += (uint64_t)c;
        nb += c > 0;
    }
    CU_ASSERT_EQUAL(sum, total);
    CU_ASSERT(nb <= 160);
    /* The first bucket of schema 8, -50, lands in ((-50 - 1) >> 2) + 1 = -12 of schema 6. */
    CU_ASSERT_EQUAL(h.span[0][0].offset, -12);
    mv_expo_nh_free(&h);
}

/* Decodes the delimited families of a body. */
static size_t decode(const uint8_t *d, size_t len, Io__Prometheus__Client__MetricFamily **out,
                     size_t max)
{
    size_t n = 0, o = 0;
    while (o < len && n < max) {
        uint64_t l = 0;
        int sh = 0;
        while (o < len && (d[o] & 0x80)) {
            l |= (uint64_t)(d[o++] & 0x7f) << sh;
            sh += 7;
        }
        if (o >= len)
            return 0;
        l |= (uint64_t)d[o++] << sh;
        if (l > len - o)
            return 0;
        out[n] = io__prometheus__client__metric_family__unpack(NULL, l, d + o);
        if (!out[n])
            return 0;
        n++;
        o += l;
    }
    return o == len ? n : 0;
}

static void test_render(void)
{
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(mv_expo_get_format(e), MV_EXPO_PROTOBUF);
    mv_expo_label id[] = {{"namespace", "shop"}, {"pod", "web-1"}};
    mv_expo_label bad[] = {{"path", "/a\xff"}};
    CU_ASSERT_EQUAL(mv_expo_family(e, "req_total", MV_EXPO_COUNTER, "Requests.", NULL), 0);
    CU_ASSERT_EQUAL(mv_expo_sample_u64(e, NULL, id, 2, NULL, 0, NULL, 0, 42, MV_EXPO_NO_TS), 0);
    CU_ASSERT_EQUAL(mv_expo_sample_u64(e, NULL, id, 2, bad, 1, NULL, 0, 7, 1700000000123), 0);
    CU_ASSERT_EQUAL(mv_expo_family(e, "temp", MV_EXPO_GAUGE, NULL, NULL), 0);
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, id, 2, NULL, 0, NULL, 0, -1.5, MV_EXPO_NO_TS), 0);
    CU_ASSERT_EQUAL(mv_expo_family(e, "lat_window", MV_EXPO_SUMMARY, "Window.", NULL), 0);
    for (int s = 0; s < 2; s++) {
        mv_expo_label pod[] = {{"pod", s ? "b" : "a"}};
        CU_ASSERT_EQUAL(
            mv_expo_sample(e, NULL, pod, 1, NULL, 0, "quantile", 0.5, 1 + s, MV_EXPO_NO_TS), 0);
        CU_ASSERT_EQUAL(
            mv_expo_sample(e, NULL, pod, 1, NULL, 0, "quantile", 0.99, 10 + s, MV_EXPO_NO_TS), 0);
        CU_ASSERT_EQUAL(mv_expo_sample(e, "_sum", pod, 1, NULL, 0, NULL, 0, 100, MV_EXPO_NO_TS), 0);
        CU_ASSERT_EQUAL(
            mv_expo_sample_u64(e, "_count", pod, 1, NULL, 0, NULL, 0, 50, MV_EXPO_NO_TS), 0);
    }
    /* A histogram whose bounds are schema-6 boundaries: 2^(k/64), k = 0..9. */
    CU_ASSERT_EQUAL(mv_expo_family(e, "lat_seconds", MV_EXPO_HISTOGRAM, "Latency.", "seconds"), 0);
    uint64_t cum = 0;
    for (int k = 0; k <= 10; k++) {
        cum += (uint64_t)k + 1;
        CU_ASSERT_EQUAL(mv_expo_sample_u64(e, "_bucket", id, 2, NULL, 0, "le",
                                           k < 10 ? exp2(k / 64.0) : INFINITY, cum, MV_EXPO_NO_TS),
                        0);
    }
    CU_ASSERT_EQUAL(mv_expo_sample(e, "_sum", id, 2, NULL, 0, NULL, 0, 70.5, MV_EXPO_NO_TS), 0);
    CU_ASSERT_EQUAL(mv_expo_sample_u64(e, "_count", id, 2, NULL, 0, NULL, 0, cum, MV_EXPO_NO_TS),
                    0);
    CU_ASSERT_EQUAL(mv_expo_sample_u64(e, "_created", id, 2, NULL, 0, NULL, 0, 1, MV_EXPO_NO_TS),
                    0);
    /* Errors are those of the text formats. */
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, id, 2, NULL, 0, NULL, 0, 1, MV_EXPO_NO_TS), -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_finish(e), 0);
    size_t len;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    Io__Prometheus__Client__MetricFamily *f[8] = {0};
    size_t nf = decode(d, len, f, 8);
    CU_ASSERT_EQUAL_FATAL(nf, 4);
    CU_ASSERT_STRING_EQUAL(f[0]->name, "req_total");
    CU_ASSERT_STRING_EQUAL(f[0]->help, "Requests.");
    CU_ASSERT_EQUAL(f[0]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__COUNTER);
    CU_ASSERT_EQUAL_FATAL(f[0]->n_metric, 2);
    CU_ASSERT_EQUAL(f[0]->metric[0]->counter->value, 42);
    CU_ASSERT_EQUAL(f[0]->metric[0]->n_label, 2);
    CU_ASSERT_STRING_EQUAL(f[0]->metric[0]->label[1]->value, "web-1");
    CU_ASSERT_STRING_EQUAL(f[0]->metric[1]->label[2]->value, "/a\xEF\xBF\xBD");
    CU_ASSERT(f[0]->metric[1]->has_timestamp_ms && f[0]->metric[1]->timestamp_ms == 1700000000123);
    CU_ASSERT_EQUAL(f[1]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE);
    CU_ASSERT_EQUAL(f[1]->metric[0]->gauge->value, -1.5);
    CU_ASSERT_EQUAL(f[2]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__SUMMARY);
    CU_ASSERT_EQUAL_FATAL(f[2]->n_metric, 2);
    const Io__Prometheus__Client__Summary *s = f[2]->metric[1]->summary;
    CU_ASSERT_EQUAL_FATAL(s->n_quantile, 2);
    CU_ASSERT_EQUAL(s->quantile[1]->quantile, 0.99);
    CU_ASSERT_EQUAL(s->quantile[1]->value, 11);
    CU_ASSERT_EQUAL(s->sample_count, 50);
    CU_ASSERT_STRING_EQUAL(f[2]->metric[1]->label[0]->value, "b");
    CU_ASSERT_EQUAL(f[3]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__HISTOGRAM);
    CU_ASSERT_STRING_EQUAL(f[3]->unit, "seconds");
    CU_ASSERT_EQUAL_FATAL(f[3]->n_metric, 1);
    const Io__Prometheus__Client__Histogram *h = f[3]->metric[0]->histogram;
    CU_ASSERT_EQUAL(h->n_bucket, 10); /* classic buckets kept, +Inf implied by the count */
    CU_ASSERT_EQUAL(h->sample_count, cum);
    CU_ASSERT_EQUAL(h->sample_sum, 70.5);
    CU_ASSERT(h->has_schema && h->schema == 6);
    /* Native: bucket k holds (2^((k-1)/64), 2^(k/64)] = classic bucket k's count k + 1 for
     * k = 1..9; classic bucket 0 (-Inf, 1] goes to native 0; the +Inf bucket (11) above. */
    CU_ASSERT_EQUAL_FATAL(h->n_positive_span, 1);
    CU_ASSERT_EQUAL(h->positive_span[0]->offset, 0);
    CU_ASSERT_EQUAL(h->positive_span[0]->length, 11);
    int64_t c = 0;
    for (size_t i = 0; i < h->n_positive_delta; i++) {
        c += h->positive_delta[i];
        CU_ASSERT_EQUAL(c, (int64_t)i + 1);
    }
    CU_ASSERT_EQUAL(h->zero_count, 0);
    CU_ASSERT_EQUAL(h->n_negative_span, 0);
    for (size_t i = 0; i < nf; i++)
        io__prometheus__client__metric_family__free_unpacked(f[i], NULL);

    /* Classic only when native histograms are off. */
    mv_expo_set_native(e, MV_EXPO_NH_OFF, 0);
    mv_expo_reset(e, MV_EXPO_PROTOBUF);
    CU_ASSERT_EQUAL(mv_expo_family(e, "h", MV_EXPO_HISTOGRAM, NULL, NULL), 0);
    CU_ASSERT_EQUAL(mv_expo_sample_u64(e, "_bucket", NULL, 0, NULL, 0, "le", INFINITY, 3, -1), 0);
    CU_ASSERT_EQUAL(mv_expo_sample(e, "_sum", NULL, 0, NULL, 0, NULL, 0, 1, -1), 0);
    CU_ASSERT_EQUAL(mv_expo_sample_u64(e, "_count", NULL, 0, NULL, 0, NULL, 0, 3, -1), 0);
    CU_ASSERT_EQUAL(mv_expo_finish(e), 0);
    d = (const uint8_t *)mv_expo_data(e, &len);
    CU_ASSERT_EQUAL_FATAL(decode(d, len, f, 8), 1);
    CU_ASSERT(!f[0]->metric[0]->histogram->has_schema);
    CU_ASSERT(f[0]->metric[0]->has_timestamp_ms && f[0]->metric[0]->timestamp_ms == -1);
    io__prometheus__client__metric_family__free_unpacked(f[0], NULL);
    mv_expo_destroy(e);
}

static void test_cap(void)
{
    /* A family that does not fit is dropped whole; what is kept still decodes. */
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 200);
    CU_ASSERT_EQUAL(mv_expo_family(e, "a", MV_EXPO_GAUGE, NULL, NULL), 0);
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, 1, MV_EXPO_NO_TS), 0);
    CU_ASSERT_EQUAL(mv_expo_family(e, "b", MV_EXPO_GAUGE, NULL, NULL), 0);
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++)
        rc = mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, i, MV_EXPO_NO_TS);
    if (rc == 0)
        rc = mv_expo_finish(e);
    CU_ASSERT_EQUAL(rc, -ENOSPC);
    CU_ASSERT(mv_expo_truncated(e));
    size_t len;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    Io__Prometheus__Client__MetricFamily *f[4];
    CU_ASSERT_EQUAL_FATAL(decode(d, len, f, 4), 1);
    CU_ASSERT_STRING_EQUAL(f[0]->name, "a");
    io__prometheus__client__metric_family__free_unpacked(f[0], NULL);
    mv_expo_destroy(e);
}

/* A family fits when its length prefix and message fit, to the byte. */
static void test_cap_exact(void)
{
    size_t full = 0;
    for (int k = 0; k < 3; k++) {
        size_t cap = k == 0 ? 1 << 20 : k == 1 ? full : full - 1;
        mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, cap);
        mv_expo_label l = {"pod", "web-1"};
        CU_ASSERT_EQUAL(mv_expo_family(e, "g", MV_EXPO_GAUGE, "Some help.", NULL), 0);
        for (int i = 0; i < 20; i++)
            mv_expo_sample(e, NULL, &l, 1, NULL, 0, NULL, 0, i * 0.5, MV_EXPO_NO_TS);
        mv_expo_finish(e);
        size_t len;
        mv_expo_data(e, &len);
        if (k == 0)
            full = len;
        CU_ASSERT_EQUAL(len, k == 2 ? 0 : full);
        CU_ASSERT_EQUAL(mv_expo_truncated(e), k == 2);
        mv_expo_destroy(e);
    }
    CU_ASSERT(full > MV_EXPO_CAP_MIN);
}

/* mv_expo_pb_histogram / mv_expo_pb_summary give the value message a render of the same
 * samples holds, with the renderer's native-histogram settings. */
static void test_parts(void)
{
    static const double le[] = {0.001, 0.01, 0.1, 1, INFINITY};
    static const uint64_t cum[] = {2, 2, 300, 4000, 4100};
    static const int32_t schemas[] = {6, 0, MV_EXPO_NH_OFF};
    for (size_t k = 0; k < 3; k++) {
        mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
        mv_expo_set_native(e, schemas[k], 2);
        mv_expo_label l = {"pod", "web-1"};
        CU_ASSERT_EQUAL(mv_expo_family(e, "h", MV_EXPO_HISTOGRAM, NULL, NULL), 0);
        for (int i = 0; i < 5; i++)
            mv_expo_sample_u64(e, "_bucket", &l, 1, NULL, 0, "le", le[i], cum[i], MV_EXPO_NO_TS);
        mv_expo_sample(e, "_sum", &l, 1, NULL, 0, NULL, 0, 812.5, MV_EXPO_NO_TS);
        mv_expo_sample_u64(e, "_count", &l, 1, NULL, 0, NULL, 0, 4100, MV_EXPO_NO_TS);
        CU_ASSERT_EQUAL(mv_expo_family(e, "s", MV_EXPO_SUMMARY, NULL, NULL), 0);
        static const double q[] = {0.5, 0.99};
        static const double qv[] = {0.25, 7e-3};
        for (int i = 0; i < 2; i++)
            mv_expo_sample(e, NULL, &l, 1, NULL, 0, "quantile", q[i], qv[i], MV_EXPO_NO_TS);
        mv_expo_sample(e, "_sum", &l, 1, NULL, 0, NULL, 0, 3.5, MV_EXPO_NO_TS);
        mv_expo_sample_u64(e, "_count", &l, 1, NULL, 0, NULL, 0, 1ull << 40, MV_EXPO_NO_TS);
        mv_expo_finish(e);
        size_t len;
        const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
        Io__Prometheus__Client__MetricFamily *f[2];
        CU_ASSERT_EQUAL_FATAL(decode(d, len, f, 2), 2);
        uint8_t want[2][1024];
        size_t wl[2];
        CU_ASSERT_FATAL(f[0]->n_metric == 1 && f[0]->metric[0]->histogram);
        CU_ASSERT_FATAL(f[1]->n_metric == 1 && f[1]->metric[0]->summary);
        CU_ASSERT_FATAL(io__prometheus__client__histogram__get_packed_size(
                            f[0]->metric[0]->histogram) < sizeof want[0]);
        wl[0] = io__prometheus__client__histogram__pack(f[0]->metric[0]->histogram, want[0]);
        wl[1] = io__prometheus__client__summary__pack(f[1]->metric[0]->summary, want[1]);
        CU_ASSERT_EQUAL(f[0]->metric[0]->histogram->has_schema, schemas[k] != MV_EXPO_NH_OFF);
        const uint8_t *out;
        size_t ol;
        for (int rep = 0; rep < 2; rep++) { /* the second from the remembered bounds */
            CU_ASSERT_EQUAL(mv_expo_pb_histogram(e, le, cum, 5, 812.5, 4100, &out, &ol), 0);
            CU_ASSERT(ol == wl[0] && memcmp(out, want[0], ol) == 0);
        }
        CU_ASSERT_EQUAL(mv_expo_pb_summary(e, q, qv, 2, 3.5, 1ull << 40, &out, &ol), 0);
        CU_ASSERT(ol == wl[1] && memcmp(out, want[1], ol) == 0);
        for (int i = 0; i < 2; i++)
            io__prometheus__client__metric_family__free_unpacked(f[i], NULL);
        mv_expo_destroy(e);
    }
}

static void test_negotiate(void)
{
    /* Prometheus' Accept header with native histograms on (protobuf first). */
    CU_ASSERT_EQUAL(
        mv_expo_negotiate("application/vnd.google.protobuf;proto=io.prometheus.client."
                          "MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,"
                          "*/*;q=0.2"),
        MV_EXPO_PROTOBUF);
    CU_ASSERT_EQUAL(
        mv_expo_negotiate("application/vnd.google.protobuf;proto=io.prometheus.client."
                          "MetricFamily;encoding=delimited,application/openmetrics-text;"
                          "version=1.0.0;q=0.8,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
        MV_EXPO_PROTOBUF);
    /* Not without the delimited encoding or the message name, nor by a wildcard. */
    CU_ASSERT_EQUAL(mv_expo_negotiate("application/vnd.google.protobuf;proto=io.prometheus."
                                      "client.MetricFamily;encoding=text"),
                    MV_EXPO_TEXT);
    CU_ASSERT_EQUAL(mv_expo_negotiate("application/vnd.google.protobuf"), MV_EXPO_TEXT);
    CU_ASSERT_EQUAL(mv_expo_negotiate("*/*"), MV_EXPO_TEXT);
    CU_ASSERT_EQUAL(mv_expo_negotiate("application/*"), MV_EXPO_OPENMETRICS);
    /* A higher q for text wins. */
    CU_ASSERT_EQUAL(mv_expo_negotiate("application/vnd.google.protobuf;proto=io.prometheus.client."
                                      "MetricFamily;encoding=delimited;q=0.2,text/plain;q=0.5"),
                    MV_EXPO_TEXT);
    CU_ASSERT_STRING_EQUAL(mv_expo_content_type(MV_EXPO_PROTOBUF),
                           "application/vnd.google.protobuf; "
                           "proto=io.prometheus.client.MetricFamily; encoding=delimited");
}

/* The buckets (index, sign, count) a native histogram's spans and deltas stand for. */
static size_t expand(const Io__Prometheus__Client__Histogram *h, int neg, mv_expo_nh_bkt *out,
                     size_t max)
{
    size_t ns = neg ? h->n_negative_span : h->n_positive_span, k = 0, n = 0;
    Io__Prometheus__Client__BucketSpan **sp = neg ? h->negative_span : h->positive_span;
    const int64_t *d = neg ? h->negative_delta : h->positive_delta;
    int32_t idx = 0;
    int64_t c = 0;
    for (size_t i = 0; i < ns; i++) {
        idx += sp[i]->offset;
        for (uint32_t j = 0; j < sp[i]->length; j++, idx++) {
            c += d[k++];
            if (c && n < max)
                out[n++] = (mv_expo_nh_bkt){idx, (uint32_t)neg, (uint64_t)c};
        }
    }
    return n;
}

/* A gauge histogram family: GAUGE_HISTOGRAM, native fields only (no classic buckets), the
 * buckets given back by its spans and deltas; the part function packs the same bytes; the
 * text formats refuse the family and a sample call refuses it too. */
static void test_gauge_histogram(void)
{
    static const mv_expo_nh_bkt in_b[] = {{10, 1, 3}, {9, 1, 1}, {2, 1, 5}, {-3, 0, 2},
                                          {0, 0, 7},  {1, 0, 1}, {4, 0, 9}, {40, 0, 1}};
    mv_expo_native_in in = {.schema = 3,
                            .zero_count = 4,
                            .b = in_b,
                            .nb = sizeof in_b / sizeof in_b[0],
                            .count = 33,
                            .sum = -12.5};
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
    mv_expo_label l[2] = {{"pod", "web-1"}, {"namespace", "shop"}};
    CU_ASSERT_EQUAL(mv_expo_family(e, "temp_window_distribution", MV_EXPO_GAUGE_HISTOGRAM,
                                   "Distribution.", NULL),
                    0);
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, l, 2, NULL, 0, NULL, 0, 1.0, MV_EXPO_NO_TS), -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_native(e, l, 2, NULL, 0, &in, MV_EXPO_NO_TS), 0);
    mv_expo_native_in bad = in;
    bad.schema = 9;
    CU_ASSERT_EQUAL(mv_expo_native(e, l, 2, NULL, 0, &bad, MV_EXPO_NO_TS), -EINVAL);
    mv_expo_finish(e);
    size_t len;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    Io__Prometheus__Client__MetricFamily *f[2];
    CU_ASSERT_EQUAL_FATAL(decode(d, len, f, 2), 1);
    CU_ASSERT_STRING_EQUAL(f[0]->name, "temp_window_distribution");
    CU_ASSERT_EQUAL(f[0]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE_HISTOGRAM);
    CU_ASSERT_FATAL(f[0]->n_metric == 1 && f[0]->metric[0]->histogram);
    CU_ASSERT_EQUAL(f[0]->metric[0]->n_label, 2);
    const Io__Prometheus__Client__Histogram *h = f[0]->metric[0]->histogram;
    CU_ASSERT_EQUAL(h->n_bucket, 0);
    CU_ASSERT(h->has_schema && h->schema == 3);
    CU_ASSERT_EQUAL(h->zero_count, 4);
    CU_ASSERT_EQUAL(h->zero_threshold, MV_EXPO_NH_ZERO_THRESHOLD);
    CU_ASSERT_EQUAL(h->sample_count, 33);
    CU_ASSERT_EQUAL(h->sample_sum, -12.5);
    mv_expo_nh_bkt got[16];
    size_t np = expand(h, 0, got, 16), nn = expand(h, 1, got + np, 16 - np);
    CU_ASSERT_EQUAL(np, 5);
    CU_ASSERT_EQUAL(nn, 3);
    for (size_t i = 0; i < sizeof in_b / sizeof in_b[0]; i++) {
        int found = 0;
        for (size_t j = 0; j < np + nn; j++)
            found |=
                got[j].idx == in_b[i].idx && got[j].neg == in_b[i].neg && got[j].n == in_b[i].n;
        CU_ASSERT(found);
    }
    uint8_t want[1024];
    CU_ASSERT_FATAL(io__prometheus__client__histogram__get_packed_size(h) < sizeof want);
    size_t wl = io__prometheus__client__histogram__pack(h, want);
    const uint8_t *out;
    size_t ol;
    CU_ASSERT_EQUAL(mv_expo_pb_native(e, &in, &out, &ol), 0);
    CU_ASSERT(ol == wl && memcmp(out, want, ol) == 0);
    io__prometheus__client__metric_family__free_unpacked(f[0], NULL);
    /* Past the bucket limit the schema is lowered, as for any native histogram. */
    mv_expo_set_native(e, 6, 4);
    CU_ASSERT_EQUAL(mv_expo_pb_native(e, &in, &out, &ol), 0);
    Io__Prometheus__Client__Histogram *r = io__prometheus__client__histogram__unpack(NULL, ol, out);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT(r->schema < 3 && r->sample_count == 33);
    io__prometheus__client__histogram__free_unpacked(r, NULL);
    mv_expo_destroy(e);
    /* Text and OpenMetrics have no such family. */
    for (int fmt = 0; fmt < 2; fmt++) {
        e = mv_expo_create(fmt ? MV_EXPO_OPENMETRICS : MV_EXPO_TEXT, 0);
        CU_ASSERT_EQUAL(mv_expo_family(e, "x", MV_EXPO_GAUGE_HISTOGRAM, NULL, NULL), -EINVAL);
        CU_ASSERT_EQUAL(mv_expo_native(e, l, 2, NULL, 0, &in, MV_EXPO_NO_TS), -EINVAL);
        mv_expo_destroy(e);
    }
}

/* The sketch's native index is the exposition's, value for value. */
static void test_sketch_index_agrees(void)
{
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v = ldexp(1.0 + (double)(x >> 11) / 9007199254740992.0, (int)(x % 300) - 150);
        if (i % 4 == 0) /* exact boundaries too */
            v = exp2((double)((int)(x % 4000) - 2000) / 256.0);
        for (int32_t s = -4; s <= 8; s++)
            if (mv_sketch_native_index(v, s) != mv_expo_nh_index(v, s)) {
                CU_FAIL("index differs");
                return;
            }
    }
}

int main(void)
{
    mv_log_init("test_expo_pb", MV_LOG_ERROR); /* the cap case truncates on purpose */
    static const mv_test tests[] = {
        {"native bucket index", test_index},
        {"spans and deltas", test_spans},
        {"resolution reduction", test_reduce},
        {"protobuf render decodes", test_render},
        {"protobuf cap drops whole families", test_cap},
        {"protobuf family fits the cap to the byte", test_cap_exact},
        {"protobuf histogram and summary parts", test_parts},
        {"protobuf negotiation", test_negotiate},
        {"gauge histogram family", test_gauge_histogram},
        {"sketch and exposition native index agree", test_sketch_index_agrees},
    };
    return MV_TEST_RUN("expo_pb", tests);
}
