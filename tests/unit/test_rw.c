/* Unit tests for mv_rw: configuration checks and the remote write 1.0 / 2.0 bodies (snappy
 * block, WriteRequest, v2 Request with its symbols table) decoded back with protobuf-c. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mv_log.h"
#include "mv_rw.h"
#include "mv_test.h"
#include "prometheus/prompb/remote.pb-c.h"
#include "prometheus/write/v2/types.pb-c.h"

static const mv_rw_label L0[] = {{"__name__", "req_total"}, {"namespace", "shop"}, {"pod", "a"}};
static const mv_rw_label L1[] = {{"__name__", "req_total"}, {"namespace", "shop"}, {"pod", "b"}};

static void test_config(void)
{
    mv_rw_config c;
    mv_rw_config_default(&c);
    CU_ASSERT_PTR_NOT_NULL(mv_rw_config_check(&c)); /* no URL */
    c.url = "https://mimir.example:443/api/v1/push";
    CU_ASSERT_PTR_NULL(mv_rw_config_check(&c));
    c.version = 3;
    CU_ASSERT_PTR_NOT_NULL(mv_rw_config_check(&c));
    c.version = 2;
    c.shards = 0;
    CU_ASSERT_PTR_NOT_NULL(mv_rw_config_check(&c));
    c.shards = 2;
    c.bearer_token_file = "/t";
    c.basic_user = "u";
    CU_ASSERT_PTR_NOT_NULL(mv_rw_config_check(&c)); /* both auths */
    c.bearer_token_file = NULL;
    CU_ASSERT_PTR_NOT_NULL(mv_rw_config_check(&c)); /* basic without password file */
    c.basic_password_file = "/p";
    CU_ASSERT_PTR_NULL(mv_rw_config_check(&c));
    c.url = "ftp://x";
    CU_ASSERT_PTR_NOT_NULL(mv_rw_config_check(&c));
}

static void test_v1(void)
{
    mv_rw_series s[] = {{.labels = L0, .nlabels = 3, .value = 42, .ts_ms = 1700000000123},
                        {.labels = L1, .nlabels = 3, .value = -0.5, .ts_ms = 1700000000456}};
    uint8_t *enc, *raw;
    size_t len, rlen, plen;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(1, s, 2, 6, &enc, &len, &plen), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(enc, len, 1 << 20, &raw, &rlen), 0);
    CU_ASSERT_EQUAL(rlen, plen);
    Prometheus__WriteRequest *w = prometheus__write_request__unpack(NULL, rlen, raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL_FATAL(w->n_timeseries, 2);
    CU_ASSERT_EQUAL(w->timeseries[1]->n_labels, 3);
    CU_ASSERT_STRING_EQUAL(w->timeseries[1]->labels[2]->value, "b");
    CU_ASSERT_EQUAL(w->timeseries[1]->samples[0]->value, -0.5);
    CU_ASSERT_EQUAL(w->timeseries[1]->samples[0]->timestamp, 1700000000456);
    prometheus__write_request__free_unpacked(w, NULL);
    free(raw);
    /* Bad snappy input is refused, a too large one too. */
    CU_ASSERT_EQUAL(mv_rw_unsnappy(enc, len, 4, &raw, &rlen), -E2BIG);
    enc[len - 1] ^= 0xff;
    uint8_t junk[] = {0x08, 0x09, 0x7f};
    CU_ASSERT_EQUAL(mv_rw_unsnappy(junk, sizeof junk, 1 << 20, &raw, &rlen), -EINVAL);
    free(enc);
}

static void test_v2(void)
{
    mv_rw_series s[] = {{.labels = L0, .nlabels = 3, .value = 1, .ts_ms = 10},
                        {.labels = L1, .nlabels = 3, .value = 2, .ts_ms = 20}};
    uint8_t *enc, *raw;
    size_t len, rlen;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(2, s, 2, 6, &enc, &len, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(enc, len, 1 << 20, &raw, &rlen), 0);
    Io__Prometheus__Write__V2__Request *r =
        io__prometheus__write__v2__request__unpack(NULL, rlen, raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    /* "" first, then each string once: __name__ req_total namespace shop pod a b. */
    CU_ASSERT_EQUAL(r->n_symbols, 8);
    CU_ASSERT_STRING_EQUAL(r->symbols[0], "");
    CU_ASSERT_EQUAL_FATAL(r->n_timeseries, 2);
    const Io__Prometheus__Write__V2__TimeSeries *t = r->timeseries[1];
    CU_ASSERT_EQUAL_FATAL(t->n_labels_refs, 6);
    CU_ASSERT_STRING_EQUAL(r->symbols[t->labels_refs[0]], "__name__");
    CU_ASSERT_STRING_EQUAL(r->symbols[t->labels_refs[5]], "b");
    CU_ASSERT_EQUAL(t->labels_refs[0], r->timeseries[0]->labels_refs[0]);
    CU_ASSERT_EQUAL(t->samples[0]->timestamp, 20);
    io__prometheus__write__v2__request__free_unpacked(r, NULL);
    free(raw);
    free(enc);
}

/* A histogram: classic series in 1.0 (le placed in label order), one native histogram in 2.0. */
static void test_hist(void)
{
    static const mv_rw_label hl[] = {{"__name__", "lat_seconds"}, {"pod", "a"}};
    double bounds[] = {exp2(1 / 64.0), exp2(2 / 64.0), exp2(3 / 64.0)};
    uint64_t cum[] = {1, 3, 6, 10};
    mv_rw_series s = {.labels = hl,
                      .nlabels = 2,
                      .ts_ms = 99,
                      .is_hist = 1,
                      .bounds = bounds,
                      .cum = cum,
                      .nbounds = 3,
                      .sum = 12.5,
                      .count = 10};
    uint8_t *enc, *raw;
    size_t len, rlen;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(1, &s, 1, 6, &enc, &len, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(enc, len, 1 << 20, &raw, &rlen), 0);
    Prometheus__WriteRequest *w = prometheus__write_request__unpack(NULL, rlen, raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL_FATAL(w->n_timeseries, 6); /* 4 buckets, _sum, _count */
    const Prometheus__TimeSeries *b3 = w->timeseries[3];
    CU_ASSERT_EQUAL_FATAL(b3->n_labels, 3);
    CU_ASSERT_STRING_EQUAL(b3->labels[0]->value, "lat_seconds_bucket");
    CU_ASSERT_STRING_EQUAL(b3->labels[1]->name, "le");
    CU_ASSERT_STRING_EQUAL(b3->labels[1]->value, "+Inf");
    CU_ASSERT_STRING_EQUAL(b3->labels[2]->name, "pod");
    CU_ASSERT_EQUAL(b3->samples[0]->value, 10);
    CU_ASSERT_EQUAL(b3->samples[0]->timestamp, 99);
    CU_ASSERT_STRING_EQUAL(w->timeseries[4]->labels[0]->value, "lat_seconds_sum");
    CU_ASSERT_EQUAL(w->timeseries[4]->samples[0]->value, 12.5);
    CU_ASSERT_STRING_EQUAL(w->timeseries[5]->labels[0]->value, "lat_seconds_count");
    CU_ASSERT_EQUAL(w->timeseries[5]->n_labels, 2);
    prometheus__write_request__free_unpacked(w, NULL);
    free(raw);
    free(enc);

    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(2, &s, 1, 6, &enc, &len, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(enc, len, 1 << 20, &raw, &rlen), 0);
    Io__Prometheus__Write__V2__Request *r =
        io__prometheus__write__v2__request__unpack(NULL, rlen, raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(r->n_timeseries, 1);
    const Io__Prometheus__Write__V2__TimeSeries *t = r->timeseries[0];
    CU_ASSERT_EQUAL(t->n_samples, 0);
    CU_ASSERT_EQUAL_FATAL(t->n_histograms, 1);
    const Io__Prometheus__Write__V2__Histogram *h = t->histograms[0];
    CU_ASSERT_EQUAL(h->count_case, IO__PROMETHEUS__WRITE__V2__HISTOGRAM__COUNT_COUNT_INT);
    CU_ASSERT_EQUAL(h->count_int, 10);
    CU_ASSERT_EQUAL(h->sum, 12.5);
    CU_ASSERT_EQUAL(h->schema, 6);
    CU_ASSERT_EQUAL(h->timestamp, 99);
    /* Buckets 1 (-Inf, 2^(1/64)] -> native 1, 2, 3, and +Inf just above -> 4: counts 1 2 3 4. */
    CU_ASSERT_EQUAL_FATAL(h->n_positive_spans, 1);
    CU_ASSERT_EQUAL(h->positive_spans[0]->offset, 1);
    CU_ASSERT_EQUAL(h->positive_spans[0]->length, 4);
    int64_t c = 0;
    for (size_t i = 0; i < h->n_positive_deltas; i++) {
        c += h->positive_deltas[i];
        CU_ASSERT_EQUAL(c, (int64_t)i + 1);
    }
    io__prometheus__write__v2__request__free_unpacked(r, NULL);
    free(raw);
    free(enc);
}

/* Labels packed once (mv_rw_labels_pb_pack) and copied give protobuf-c's exact WriteRequest,
 * for values and times protobuf-c leaves out (0, 0.0, -0.0) or writes (NaN, negative times),
 * mixed with histograms and series without packed labels. */
static void test_v1_packed_labels(void)
{
    static const double vals[] = {0.0, -0.0, 1.0, -2.5, 1e300, NAN, INFINITY, 5e-324};
    static const int64_t tss[] = {0, 1, -1, 1700000000123, INT64_MIN, 127, 128};
    static const mv_rw_label hl[] = {{"__name__", "lat_seconds"}, {"pod", "a"}};
    double bounds[] = {0.5, 1};
    uint64_t cum[] = {1, 3, 3};
    enum { N = 8 * 7 + 1 };
    mv_rw_series a[N], b[N];
    uint8_t pb0[256], pb1[256];
    size_t l0 = mv_rw_labels_pb_size(L0, 3), l1 = mv_rw_labels_pb_size(L1, 3);
    CU_ASSERT_FATAL(l0 > 0 && l0 <= sizeof pb0 && l1 > 0 && l1 <= sizeof pb1);
    mv_rw_labels_pb_pack(L0, 3, pb0);
    mv_rw_labels_pb_pack(L1, 3, pb1);
    size_t n = 0;
    for (size_t i = 0; i < 8; i++)
        for (size_t j = 0; j < 7; j++, n++) {
            a[n] = (mv_rw_series){
                .labels = (n & 1) ? L1 : L0, .nlabels = 3, .value = vals[i], .ts_ms = tss[j]};
            b[n] = a[n];
            if (n % 3) { /* every third series without packed labels */
                b[n].pb_labels = (n & 1) ? pb1 : pb0;
                b[n].pb_len = (n & 1) ? l1 : l0;
            }
        }
    a[n] = (mv_rw_series){.labels = hl,
                          .nlabels = 2,
                          .ts_ms = 7,
                          .is_hist = 1,
                          .bounds = bounds,
                          .cum = cum,
                          .nbounds = 2,
                          .sum = 2,
                          .count = 3};
    b[n] = a[n];
    n++;
    uint8_t *ea, *eb, *ra, *rb;
    size_t la, lb, pa, pb, rla, rlb;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(1, a, n, 6, &ea, &la, &pa), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(1, b, n, 6, &eb, &lb, &pb), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(ea, la, 1 << 20, &ra, &rla), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(eb, lb, 1 << 20, &rb, &rlb), 0);
    CU_ASSERT_EQUAL(pa, pb);
    CU_ASSERT_EQUAL_FATAL(rla, rlb);
    CU_ASSERT(memcmp(ra, rb, rla) == 0);
    /* And protobuf-c packs the decoded request to the same bytes. */
    Prometheus__WriteRequest *w = prometheus__write_request__unpack(NULL, rlb, rb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(w->n_timeseries, N - 1 + 5);
    size_t sz = prometheus__write_request__get_packed_size(w);
    uint8_t *again = malloc(sz);
    CU_ASSERT_EQUAL_FATAL(prometheus__write_request__pack(w, again), rlb);
    CU_ASSERT(memcmp(again, rb, rlb) == 0);
    CU_ASSERT_EQUAL(w->timeseries[7]->samples[0]->value, 0); /* -0.0: left out, as protobuf-c */
    CU_ASSERT(isnan(w->timeseries[35]->samples[0]->value));
    CU_ASSERT_EQUAL(w->timeseries[4]->samples[0]->timestamp, INT64_MIN);
    prometheus__write_request__free_unpacked(w, NULL);
    free(again);
    free(ra);
    free(rb);
    free(ea);
    free(eb);
}

/* A gauge histogram: one native histogram with reset hint GAUGE in 2.0, left out of 1.0. */
static void test_gauge_hist(void)
{
    static const mv_rw_label gl[] = {{"__name__", "temp_window_distribution"}, {"pod", "a"}};
    mv_expo_nh_bkt b[] = {
        {.idx = 3, .n = 2}, {.idx = 4, .n = 5}, {.idx = 7, .n = 1}, {.idx = 2, .neg = 1, .n = 4}};
    mv_rw_series s[] = {{.labels = L0, .nlabels = 3, .value = 1, .ts_ms = 5},
                        {.labels = gl,
                         .nlabels = 2,
                         .ts_ms = 77,
                         .is_hist = 2,
                         .sum = -3.5,
                         .count = 15,
                         .native_schema = 5,
                         .zero_count = 3,
                         .nbkt = b,
                         .nnbkt = 4}};
    uint8_t *enc, *raw;
    size_t len, rlen;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(2, s, 2, 6, &enc, &len, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(enc, len, 1 << 20, &raw, &rlen), 0);
    Io__Prometheus__Write__V2__Request *r =
        io__prometheus__write__v2__request__unpack(NULL, rlen, raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(r->n_timeseries, 2);
    const Io__Prometheus__Write__V2__TimeSeries *t = r->timeseries[1];
    CU_ASSERT_EQUAL_FATAL(t->n_histograms, 1);
    const Io__Prometheus__Write__V2__Histogram *h = t->histograms[0];
    CU_ASSERT_EQUAL(h->reset_hint,
                    IO__PROMETHEUS__WRITE__V2__HISTOGRAM__RESET_HINT__RESET_HINT_GAUGE);
    CU_ASSERT_EQUAL(h->schema, 5);
    CU_ASSERT_EQUAL(h->count_int, 15);
    CU_ASSERT_EQUAL(h->sum, -3.5);
    CU_ASSERT_EQUAL(h->zero_count_int, 3);
    CU_ASSERT_EQUAL(h->timestamp, 77);
    /* Positive buckets 3, 4 (2, 5), a gap of 2, 7 (1); negative bucket 2 (4). */
    int64_t want[8] = {0}, got[8] = {0}, c = 0;
    want[3] = 2;
    want[4] = 5;
    want[7] = 1;
    size_t d = 0;
    int32_t at = 0; /* the first span's offset is an index, the others' the gap before them */
    for (size_t i = 0; i < h->n_positive_spans; i++) {
        at += h->positive_spans[i]->offset;
        for (uint32_t k = 0; k < h->positive_spans[i]->length && d < h->n_positive_deltas;
             k++, d++) {
            c += h->positive_deltas[d];
            if (at >= 0 && at < 8)
                got[at] = c;
            at++;
        }
    }
    CU_ASSERT(memcmp(want, got, sizeof want) == 0);
    CU_ASSERT_EQUAL_FATAL(h->n_negative_deltas, 1);
    CU_ASSERT_EQUAL(h->negative_deltas[0], 4);
    CU_ASSERT_EQUAL(h->negative_spans[0]->offset, 2);
    io__prometheus__write__v2__request__free_unpacked(r, NULL);
    free(raw);
    free(enc);
    /* 1.0 has no form for it: only the float series is sent. */
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(1, s, 2, 6, &enc, &len, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(mv_rw_unsnappy(enc, len, 1 << 20, &raw, &rlen), 0);
    Prometheus__WriteRequest *w = prometheus__write_request__unpack(NULL, rlen, raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(w->n_timeseries, 1);
    prometheus__write_request__free_unpacked(w, NULL);
    free(raw);
    free(enc);
}

int main(void)
{
    mv_log_init("test_rw", MV_LOG_ERROR);
    static const mv_test tests[] = {
        {"config checks", test_config},
        {"remote write 1.0 body", test_v1},
        {"remote write 1.0 with labels packed once", test_v1_packed_labels},
        {"remote write 2.0 body", test_v2},
        {"histograms: classic in 1.0, native in 2.0", test_hist},
        {"gauge histograms: native with reset hint GAUGE in 2.0, not in 1.0", test_gauge_hist},
    };
    return MV_TEST_RUN("rw", tests);
}
