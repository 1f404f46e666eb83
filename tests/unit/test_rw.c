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
    mv_rw_series s[] = {{L0, 3, 42, 1700000000123}, {L1, 3, -0.5, 1700000000456}};
    uint8_t *enc, *raw;
    size_t len, rlen, plen;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(1, s, 2, &enc, &len, &plen), 0);
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
    mv_rw_series s[] = {{L0, 3, 1, 10}, {L1, 3, 2, 20}};
    uint8_t *enc, *raw;
    size_t len, rlen;
    CU_ASSERT_EQUAL_FATAL(mv_rw_encode(2, s, 2, &enc, &len, NULL), 0);
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

int main(void)
{
    mv_log_init("test_rw", MV_LOG_ERROR);
    static const mv_test tests[] = {
        {"config checks", test_config},
        {"remote write 1.0 body", test_v1},
        {"remote write 2.0 body", test_v2},
    };
    return MV_TEST_RUN("rw", tests);
}
