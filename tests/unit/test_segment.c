/* Unit tests for pkg/segment: formatting, validation helpers, records, hot reads. */
#include "mv_segment.h"
#include "mv_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SEG_SIZE 8192

static uint64_t g_seg_words[SEG_SIZE / 8];
static unsigned char *const g_seg = (unsigned char *)g_seg_words;

static mv_seg_header *hdr(void)
{
    return (mv_seg_header *)(void *)g_seg;
}

static void fresh(void)
{
    mv_seg_error e;
    memset(g_seg_words, 0, sizeof g_seg_words);
    CU_ASSERT_EQUAL_FATAL(mv_seg_format(g_seg, SEG_SIZE, 0, &e), MV_SEG_OK);
}

/* Appends a record the way libmicroview does (single-threaded here). */
static uint32_t append(const mv_seg_metric_desc *d)
{
    mv_seg_header *h = hdr();
    mv_seg_error e;
    CU_ASSERT_EQUAL_FATAL(mv_seg_desc_check(d, &e), MV_SEG_OK);
    uint32_t voff = h->values_used, coff = h->catalog_used;
    h->generation++;
    mv_seg_record_encode(g_seg + h->catalog_offset + coff, d, voff);
    h->values_used += mv_seg_value_size(d);
    h->catalog_used += mv_seg_record_size(d);
    h->metric_count++;
    h->generation++;
    return voff;
}

/* Appends a tombstone of the record named like `d` whose slot is at `voff`. */
static void append_tomb(const char *name, const mv_seg_label *l, uint16_t nl, uint32_t voff)
{
    mv_seg_header *h = hdr();
    mv_seg_error e;
    mv_seg_metric_desc d = {.type = MV_SEG_TOMBSTONE, .name = name, .labels = l, .label_count = nl};
    CU_ASSERT_EQUAL_FATAL(mv_seg_desc_check(&d, &e), MV_SEG_OK);
    CU_ASSERT_EQUAL(mv_seg_value_size(&d), 0);
    mv_seg_record_encode(g_seg + h->catalog_offset + h->catalog_used, &d, voff);
    h->catalog_used += mv_seg_record_size(&d);
    h->metric_count++;
    h->generation += 2;
}

/* Rewrites record `idx` (0-based) with `fn` and re-seals its checksum. */
static void patch_record(size_t idx, void (*fn)(unsigned char *rec))
{
    mv_seg_header *h = hdr();
    unsigned char *rec = g_seg + h->catalog_offset;
    for (size_t i = 0; i < idx; i++) {
        uint32_t rs;
        memcpy(&rs, rec, 4);
        rec += rs;
    }
    uint32_t rs;
    memcpy(&rs, rec, 4);
    fn(rec);
    uint64_t sum = mv_seg_fnv1a64(rec, rs - 8);
    memcpy(rec + rs - 8, &sum, 8);
}

static mv_seg_reason parse_reason(void)
{
    mv_seg_catalog *c = NULL;
    mv_seg_error e;
    mv_seg_reason r = mv_seg_catalog_parse(g_seg, SEG_SIZE, SEG_SIZE, &c, &e);
    mv_seg_catalog_free(c);
    return r;
}

static mv_seg_catalog *parse_ok(void)
{
    mv_seg_catalog *c = NULL;
    mv_seg_error e;
    mv_seg_reason r = mv_seg_catalog_parse(g_seg, SEG_SIZE, SEG_SIZE, &c, &e);
    if (r != MV_SEG_OK)
        fprintf(stderr, "parse: %s: %s\n", mv_seg_reason_name(r), e.detail);
    CU_ASSERT_EQUAL_FATAL(r, MV_SEG_OK);
    return c;
}

static void test_format_parse(void)
{
    uint32_t vs, cs;
    CU_ASSERT_EQUAL(mv_seg_default_layout(65536, &vs, &cs), MV_SEG_OK);
    CU_ASSERT_EQUAL(vs, 16320); /* (65536-128)/4 = 16352 -> 64-multiple 16320 */
    CU_ASSERT_EQUAL(vs + cs + MV_SEG_HEADER_SIZE, 65536);
    CU_ASSERT_EQUAL(mv_seg_default_layout(1024, &vs, &cs), MV_SEG_OK);
    CU_ASSERT_EQUAL(vs, 512);
    CU_ASSERT_EQUAL(cs, 1024 - 128 - 512);
    CU_ASSERT_EQUAL(mv_seg_default_layout(1000, &vs, &cs), MV_SEG_E_SIZE);
    CU_ASSERT_EQUAL(mv_seg_default_layout(1028, &vs, &cs), MV_SEG_E_SIZE);
    CU_ASSERT_EQUAL(mv_seg_default_layout((1ull << 30) + 8, &vs, &cs), MV_SEG_E_SIZE);

    fresh();
    mv_seg_header *h = hdr();
    CU_ASSERT_EQUAL(memcmp(h->magic, "MVIEWSEG", 8), 0);
    CU_ASSERT_EQUAL(h->version, 1);
    CU_ASSERT_EQUAL(h->header_size, 128);
    CU_ASSERT_EQUAL(h->segment_size, SEG_SIZE);
    CU_ASSERT_EQUAL(h->values_offset, 128);
    CU_ASSERT_EQUAL(h->catalog_offset, 128 + h->values_size);
    CU_ASSERT_EQUAL(h->catalog_offset + h->catalog_size, SEG_SIZE);
    CU_ASSERT_NOT_EQUAL(h->instance, 0);
    CU_ASSERT_EQUAL(h->generation, 0);

    mv_seg_catalog *c = parse_ok();
    CU_ASSERT_EQUAL(mv_seg_catalog_count(c), 0);
    CU_ASSERT_EQUAL(mv_seg_catalog_instance(c), h->instance);
    CU_ASSERT_EQUAL(mv_seg_catalog_segment_size(c), SEG_SIZE);
    CU_ASSERT_EQUAL(mv_seg_catalog_hot_size(c), 128);
    CU_ASSERT_PTR_NULL(mv_seg_catalog_metric(c, 0));
    mv_seg_catalog_free(c);

    /* A wrong expected size and a short copy are rejected. */
    mv_seg_error e;
    CU_ASSERT_EQUAL(mv_seg_catalog_parse(g_seg, SEG_SIZE, SEG_SIZE * 2, &c, &e), MV_SEG_E_SIZE);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(mv_seg_catalog_parse(g_seg, 100, 0, &c, &e), MV_SEG_E_TRUNCATED);
    CU_ASSERT_EQUAL(e.reason, MV_SEG_E_TRUNCATED);
    CU_ASSERT(strlen(e.detail) > 0);
    /* Bad arguments to format. */
    CU_ASSERT_EQUAL(mv_seg_format(g_seg + 4, 4096, 0, &e), MV_SEG_E_INVAL);
    CU_ASSERT_EQUAL(mv_seg_format(g_seg, 1000, 0, &e), MV_SEG_E_SIZE);
    CU_ASSERT_EQUAL(mv_seg_format(g_seg, 4096, 100, &e), MV_SEG_E_LAYOUT);
    CU_ASSERT_EQUAL(mv_seg_format(g_seg, 4096, 4096, &e), MV_SEG_E_LAYOUT);
    /* A zeroed buffer is "not formatted". */
    memset(g_seg_words, 0, sizeof g_seg_words);
    CU_ASSERT_EQUAL(mv_seg_catalog_parse(g_seg, SEG_SIZE, 0, &c, &e), MV_SEG_E_MAGIC);
}

static void test_names_utf8(void)
{
    CU_ASSERT_TRUE(mv_seg_valid_metric_name("http_requests_total", 19));
    CU_ASSERT_TRUE(mv_seg_valid_metric_name("a:b_c9", 6));
    CU_ASSERT_TRUE(mv_seg_valid_metric_name(":x", 2));
    CU_ASSERT_TRUE(mv_seg_valid_metric_name("_x", 2));
    CU_ASSERT_FALSE(mv_seg_valid_metric_name("", 0));
    CU_ASSERT_FALSE(mv_seg_valid_metric_name("9abc", 4));
    CU_ASSERT_FALSE(mv_seg_valid_metric_name("__reserved", 10));
    CU_ASSERT_FALSE(mv_seg_valid_metric_name("a-b", 3));
    CU_ASSERT_FALSE(mv_seg_valid_metric_name("a b", 3));
    CU_ASSERT_FALSE(mv_seg_valid_metric_name("caf\xc3\xa9", 5));
    CU_ASSERT_TRUE(mv_seg_valid_label_name("method", 6));
    CU_ASSERT_FALSE(mv_seg_valid_label_name("a:b", 3));
    CU_ASSERT_FALSE(mv_seg_valid_label_name("__name__", 8));
    CU_ASSERT_FALSE(mv_seg_valid_label_name("1x", 2));

    CU_ASSERT_TRUE(mv_seg_valid_utf8("", 0));
    CU_ASSERT_TRUE(mv_seg_valid_utf8("plain ascii", 11));
    CU_ASSERT_TRUE(mv_seg_valid_utf8("caf\xc3\xa9", 5));
    CU_ASSERT_TRUE(mv_seg_valid_utf8("\xe2\x82\xac", 3));     /* U+20AC */
    CU_ASSERT_TRUE(mv_seg_valid_utf8("\xf0\x9f\x98\x80", 4)); /* U+1F600 */
    CU_ASSERT_FALSE(mv_seg_valid_utf8("a\0b", 3));
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\xff", 1));
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\xc3", 1));             /* truncated */
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\xc3\x28", 2));         /* bad continuation */
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\xc0\xaf", 2));         /* overlong */
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\xed\xa0\x80", 3));     /* surrogate */
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    CU_ASSERT_FALSE(mv_seg_valid_utf8("\x80", 1));

    /* Reason names are stable. */
    CU_ASSERT_STRING_EQUAL(mv_seg_reason_name(MV_SEG_E_CHECKSUM), "bad_checksum");
    CU_ASSERT_STRING_EQUAL(mv_seg_reason_name(MV_SEG_E_TORN), "torn");
    CU_ASSERT_STRING_EQUAL(mv_seg_reason_name((mv_seg_reason)999), "unknown");
    CU_ASSERT_TRUE(mv_seg_reason_transient(MV_SEG_E_BUSY));
    CU_ASSERT_FALSE(mv_seg_reason_transient(MV_SEG_E_CHECKSUM));

    /* Known FNV-1a 64 vectors. */
    CU_ASSERT_EQUAL(mv_seg_fnv1a64("", 0), 0xcbf29ce484222325ull);
    CU_ASSERT_EQUAL(mv_seg_fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
    CU_ASSERT_EQUAL(mv_seg_fnv1a64("foobar", 6), 0x85944171f73967e8ull);
    /* Histogram weights are odd and distinct. */
    for (uint32_t i = 0; i < 200; i++) {
        CU_ASSERT_EQUAL(mv_seg_hist_weight(i) & 1, 1);
        CU_ASSERT_NOT_EQUAL(mv_seg_hist_weight(i), mv_seg_hist_weight(i + 1));
    }
}

/* mv_seg_place_slot: the next 64-byte line while that leaves 8 value bytes per record the
 * catalog area can still take (estimated from this record's size), else packed. */
static void test_place_slot(void)
{
    /* values_used, values_size, catalog_used, catalog_size, record_size, value_size */
    CU_ASSERT_EQUAL(mv_seg_place_slot(0, 960, 0, 3008, 48, 8), 0);
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 960, 48, 3008, 48, 8), 64);
    CU_ASSERT_EQUAL(mv_seg_place_slot(64, 960, 96, 3008, 48, 8), 64); /* already on a line */
    CU_ASSERT_EQUAL(mv_seg_place_slot(72, 960, 96, 3008, 48, 160), 128);
    /* 60 more 48-byte records fit the catalog: 480 value bytes are kept for them. */
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 552, 48, 3008, 48, 8), 64);
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 551, 48, 3008, 48, 8), 8);
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 128, 48, 3008, 48, 8), 8);
    /* The record fills the catalog: nothing to keep room for. */
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 72, 2960, 3008, 48, 8), 64);
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 72, 2990, 3008, 48, 8), 64);
    /* The line does not fit at all: packed (the caller then finds whether that fits). */
    CU_ASSERT_EQUAL(mv_seg_place_slot(8, 64, 2960, 3008, 48, 8), 8);
    /* No wrap-around near the u32 limits. */
    CU_ASSERT_EQUAL(mv_seg_place_slot(0xfffffff8u, 0xfffffff8u, 0, 0xfffffff8u, 48, 8),
                    0xfffffff8u);
    CU_ASSERT_EQUAL(mv_seg_place_slot(0xffffffc8u, 0xffffffffu, 0, 0, 0, 8), 0xffffffc8u);
}

static void test_desc_check(void)
{
    mv_seg_error e;
    double good[] = {0.1, 1, 10}, bad[] = {1, 1, 2}, nan_b[] = {1, NAN};
    mv_seg_label l2[] = {{"a", "1"}, {"a", "2"}}, le[] = {{"le", "1"}}, badkey[] = {{"x-y", "1"}},
                 badval[] = {{"k", "\xff"}};
    mv_seg_metric_desc d = {.type = MV_SEG_COUNTER, .name = "ok_total"};
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_OK);
    d.name = "bad-name";
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_NAME);
    d.name = "ok";
    d.help = "\xc3";
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_STRING);
    d.help = "fine";
    d.unit = "not a unit";
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_STRING);
    d.unit = "seconds";
    d.type = 9;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_TYPE);
    d.type = MV_SEG_GAUGE;
    d.labels = l2;
    d.label_count = 2;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_DUPLICATE);
    d.labels = badkey;
    d.label_count = 1;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_NAME);
    d.labels = badval;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_STRING);
    d.labels = le;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_OK); /* le only reserved for histograms */
    d.type = MV_SEG_HISTOGRAM;
    d.bounds = good;
    d.bucket_count = 3;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_NAME);
    d.labels = NULL;
    d.label_count = 0;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_OK);
    d.bounds = bad;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_BUCKETS);
    d.bounds = nan_b;
    d.bucket_count = 2;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_BUCKETS);
    d.bucket_count = 0;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_COUNT);
    d.type = MV_SEG_COUNTER;
    d.bucket_count = 1;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&d, &e), MV_SEG_E_COUNT);
}

static void test_record_roundtrip(void)
{
    fresh();
    double bounds[] = {0.005, 0.5, 5};
    mv_seg_label labels[] = {{"method", "GET"}, {"path", "/caf\xc3\xa9"}};
    mv_seg_metric_desc c = {.type = MV_SEG_COUNTER, .name = "req_total", .help = "Requests."};
    mv_seg_metric_desc g = {.type = MV_SEG_GAUGE, .name = "temp", .unit = "celsius"};
    mv_seg_metric_desc hd = {.type = MV_SEG_HISTOGRAM,
                             .name = "latency_seconds",
                             .help = "Latency \xe2\x82\xac",
                             .unit = "seconds",
                             .labels = labels,
                             .label_count = 2,
                             .bounds = bounds,
                             .bucket_count = 3};

    /* Record size: 24 head + "req_total"(2+9+1) + help(2+9+1) + unit(2+0+1) = 51 -> 56, +8. */
    CU_ASSERT_EQUAL(mv_seg_record_size(&c), 64);
    CU_ASSERT_EQUAL(mv_seg_value_size(&c), 8);
    CU_ASSERT_EQUAL(mv_seg_value_size(&hd), 8 * 7);
    CU_ASSERT_EQUAL(mv_seg_record_size(&hd) % 8, 0);

    unsigned char rec[256];
    mv_seg_record_encode(rec, &c, 40);
    mv_seg_record_head head;
    memcpy(&head, rec, sizeof head);
    CU_ASSERT_EQUAL(head.record_size, 64);
    CU_ASSERT_EQUAL(head.type, MV_SEG_COUNTER);
    CU_ASSERT_EQUAL(head.value_offset, 40);
    CU_ASSERT_EQUAL(head.value_size, 8);
    CU_ASSERT_EQUAL(rec[24], 9);
    CU_ASSERT_EQUAL(rec[25], 0);
    CU_ASSERT_EQUAL(memcmp(rec + 26, "req_total", 10), 0); /* incl. NUL */
    uint64_t sum;
    memcpy(&sum, rec + 56, 8);
    CU_ASSERT_EQUAL(sum, mv_seg_fnv1a64(rec, 56));

    uint32_t oc = append(&c), og = append(&g), oh = append(&hd);
    CU_ASSERT_EQUAL(oc, 0);
    CU_ASSERT_EQUAL(og, 8);
    CU_ASSERT_EQUAL(oh, 16);
    mv_seg_catalog *cat = parse_ok();
    CU_ASSERT_EQUAL_FATAL(mv_seg_catalog_count(cat), 3);
    CU_ASSERT_EQUAL(mv_seg_catalog_generation(cat), 6);
    CU_ASSERT_EQUAL(mv_seg_catalog_hot_size(cat), 128 + 16 + 56);
    const mv_seg_metric *m = mv_seg_catalog_metric(cat, 0);
    CU_ASSERT_STRING_EQUAL(m->name, "req_total");
    CU_ASSERT_STRING_EQUAL(m->help, "Requests.");
    CU_ASSERT_STRING_EQUAL(m->unit, "");
    CU_ASSERT_EQUAL(m->type, MV_SEG_COUNTER);
    m = mv_seg_catalog_metric(cat, 1);
    CU_ASSERT_STRING_EQUAL(m->unit, "celsius");
    CU_ASSERT_EQUAL(m->help_len, 0);
    m = mv_seg_catalog_metric(cat, 2);
    CU_ASSERT_STRING_EQUAL(m->name, "latency_seconds");
    CU_ASSERT_STRING_EQUAL(m->help, "Latency \xe2\x82\xac");
    CU_ASSERT_EQUAL_FATAL(m->label_count, 2);
    CU_ASSERT_STRING_EQUAL(m->labels[0].key, "method");
    CU_ASSERT_STRING_EQUAL(m->labels[0].value, "GET");
    CU_ASSERT_STRING_EQUAL(m->labels[1].key, "path");
    CU_ASSERT_STRING_EQUAL(m->labels[1].value, "/caf\xc3\xa9");
    CU_ASSERT_EQUAL_FATAL(m->bucket_count, 3);
    CU_ASSERT_EQUAL(m->bounds[0], 0.005);
    CU_ASSERT_EQUAL(m->bounds[2], 5.0);
    CU_ASSERT_EQUAL(m->value_offset, 16);
    CU_ASSERT_EQUAL(m->value_size, 56);
    mv_seg_catalog_free(cat);

    /* A flipped byte inside a record is caught by its checksum. */
    mv_seg_header *h = hdr();
    g_seg[h->catalog_offset + 30] ^= 1;
    mv_seg_error e;
    CU_ASSERT_EQUAL(mv_seg_catalog_parse(g_seg, SEG_SIZE, SEG_SIZE, &cat, &e), MV_SEG_E_CHECKSUM);
    g_seg[h->catalog_offset + 30] ^= 1;
    /* Odd generation: busy. */
    h->generation++;
    CU_ASSERT_EQUAL(mv_seg_catalog_parse(g_seg, SEG_SIZE, SEG_SIZE, &cat, &e), MV_SEG_E_BUSY);
    h->generation++;
    cat = parse_ok();
    mv_seg_catalog_free(cat);
}

static void set_flags1(unsigned char *rec)
{
    rec[5] = 1;
}
static void set_vsize8(unsigned char *rec)
{
    rec[12] = 8;
}
static void set_type6(unsigned char *rec)
{
    rec[4] = 6;
}
/* Tombstones (spec section 6.6) and fractional counters (5.3) as the reader sees them. */
static void test_tombstones(void)
{
    mv_seg_label get[] = {{"m", "GET"}}, put[] = {{"m", "PUT"}};
    mv_seg_metric_desc a = {.type = MV_SEG_COUNTER, .name = "a", .labels = get, .label_count = 1};
    mv_seg_metric_desc a2 = {.type = MV_SEG_COUNTER, .name = "a", .labels = put, .label_count = 1};
    mv_seg_metric_desc g = {.type = MV_SEG_GAUGE, .name = "a", .labels = get, .label_count = 1};
    mv_seg_metric_desc f = {.type = MV_SEG_COUNTER_F, .name = "f"};

    /* Delete, then re-create: one live series, the new slot. */
    fresh();
    uint32_t v0 = append(&a);
    append(&a2);
    append_tomb("a", get, 1, v0);
    mv_seg_catalog *c = parse_ok();
    CU_ASSERT_EQUAL(mv_seg_catalog_count(c), 1);
    CU_ASSERT_EQUAL(mv_seg_catalog_tombstones(c), 1);
    CU_ASSERT_STRING_EQUAL(mv_seg_catalog_metric(c, 0)->labels[0].value, "PUT");
    CU_ASSERT_EQUAL(mv_seg_catalog_name_type(c, "a"), MV_SEG_COUNTER);
    CU_ASSERT_EQUAL(mv_seg_catalog_name_type(c, "zz"), 0);
    mv_seg_catalog_free(c);
    uint32_t v1 = append(&a);
    CU_ASSERT(v1 > v0);
    c = parse_ok();
    CU_ASSERT_EQUAL(mv_seg_catalog_count(c), 2);
    CU_ASSERT_EQUAL(mv_seg_catalog_metric(c, 1)->value_offset, v1);
    mv_seg_catalog_free(c);
    /* Deleted twice: the second tombstone names a record already deleted. */
    append_tomb("a", get, 1, v0);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);

    /* Re-created without a tombstone: a duplicate, as ever. A tombstone after the second
     * record does not make the pair legal. */
    fresh();
    v0 = append(&a);
    append(&a);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_DUPLICATE);
    append_tomb("a", get, 1, v0);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_DUPLICATE);

    /* A tombstone must name its record exactly. */
    fresh();
    v0 = append(&a);
    append_tomb("a", get, 1, v0 + 8);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
    fresh();
    v0 = append(&a);
    append_tomb("a", put, 1, v0);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
    fresh();
    v0 = append(&a);
    append_tomb("b", get, 1, v0);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
    /* ... and an earlier one: a tombstone before its record deletes nothing. */
    fresh();
    append_tomb("a", get, 1, 0);
    append(&a);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
    /* A tombstone of a tombstone. */
    fresh();
    v0 = append(&a);
    append_tomb("a", get, 1, v0);
    append_tomb("a", get, 1, v0);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);

    /* Fixed fields: no flags, no value bytes, no help or unit. */
    fresh();
    v0 = append(&a);
    append_tomb("a", get, 1, v0);
    patch_record(1, set_flags1);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
    fresh();
    v0 = append(&a);
    append_tomb("a", get, 1, v0);
    patch_record(1, set_vsize8);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
    mv_seg_metric_desc bad = {.type = MV_SEG_TOMBSTONE, .name = "a", .help = "h"};
    mv_seg_error e;
    CU_ASSERT_EQUAL(mv_seg_desc_check(&bad, &e), MV_SEG_E_INVAL);
    /* Encoded anyway (a writer that skips the check): the reader refuses it. */
    fresh();
    mv_seg_metric_desc plain = {.type = MV_SEG_COUNTER, .name = "a"};
    v0 = append(&plain);
    mv_seg_record_encode(g_seg + hdr()->catalog_offset + hdr()->catalog_used, &bad, v0);
    hdr()->catalog_used += mv_seg_record_size(&bad);
    hdr()->metric_count++;
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);

    /* A deleted name keeps its type. */
    fresh();
    v0 = append(&a);
    append_tomb("a", get, 1, v0);
    append(&g);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_TYPE);

    /* A type this reader does not know refuses the segment (the version rule). */
    fresh();
    append(&a);
    patch_record(0, set_type6);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_TYPE);

    /* counter_f: 16 bytes, a counter on the wire; 8 bytes is a wrong value_size. */
    fresh();
    uint32_t fo = append(&f);
    c = parse_ok();
    const mv_seg_metric *m = mv_seg_catalog_metric(c, 0);
    CU_ASSERT_EQUAL(m->type, MV_SEG_COUNTER_F);
    CU_ASSERT_EQUAL(m->value_size, 16);
    uint64_t *w = (uint64_t *)(void *)(g_seg + hdr()->values_offset + fo);
    double half = 0.5;
    w[0] = 2;
    memcpy(&w[1], &half, 8);
    CU_ASSERT_EQUAL(mv_seg_read_counter_f(g_seg, m), 2.5);
    mv_seg_catalog_free(c);
    patch_record(0, set_vsize8);
    CU_ASSERT_EQUAL(parse_reason(), MV_SEG_E_RECORD);
}

static void test_hot_check(void)
{
    fresh();
    mv_seg_metric_desc c = {.type = MV_SEG_COUNTER, .name = "a_total"};
    mv_seg_metric_desc c2 = {.type = MV_SEG_COUNTER, .name = "b_total"};
    append(&c);
    mv_seg_catalog *cat = parse_ok();
    mv_seg_error e;
    uint64_t hb = 1;
    static uint64_t hot[SEG_SIZE / 8];

    hdr()->heartbeat_ns = 12345;
    mv_seg_copy_words(hot, g_seg, mv_seg_catalog_hot_size(cat));
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, mv_seg_catalog_hot_size(cat), &hb, &e), MV_SEG_OK);
    CU_ASSERT_EQUAL(hb, 12345);
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, 64, &hb, &e), MV_SEG_E_TRUNCATED);

    /* Values changing does not invalidate the catalog. */
    *(uint64_t *)(void *)(g_seg + 128) = 99;
    mv_seg_copy_words(hot, g_seg, mv_seg_catalog_hot_size(cat));
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, mv_seg_catalog_hot_size(cat), NULL, &e), MV_SEG_OK);

    /* A registration does. */
    append(&c2);
    mv_seg_copy_words(hot, g_seg, SEG_SIZE);
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, SEG_SIZE, NULL, &e), MV_SEG_E_CHANGED);
    mv_seg_catalog_free(cat);
    cat = parse_ok();
    mv_seg_copy_words(hot, g_seg, SEG_SIZE);
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, SEG_SIZE, NULL, &e), MV_SEG_OK);

    /* So does a re-format (new instance), even with the same counts. */
    uint64_t old_instance = hdr()->instance;
    fresh();
    append(&c);
    append(&c2);
    CU_ASSERT_NOT_EQUAL(hdr()->instance, old_instance);
    mv_seg_copy_words(hot, g_seg, SEG_SIZE);
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, SEG_SIZE, NULL, &e), MV_SEG_E_CHANGED);
    /* A wiped segment is not a valid one. */
    memset(hot, 0, 128);
    CU_ASSERT_EQUAL(mv_seg_hot_check(cat, hot, SEG_SIZE, NULL, &e), MV_SEG_E_MAGIC);
    mv_seg_catalog_free(cat);
}

static void test_values(void)
{
    fresh();
    double bounds[] = {1, 2};
    mv_seg_metric_desc c = {.type = MV_SEG_COUNTER, .name = "c_total"};
    mv_seg_metric_desc g = {.type = MV_SEG_GAUGE, .name = "g"};
    mv_seg_metric_desc hd = {
        .type = MV_SEG_HISTOGRAM, .name = "h", .bounds = bounds, .bucket_count = 2};
    uint32_t oc = append(&c), og = append(&g), oh = append(&hd);
    uint64_t *v = (uint64_t *)(void *)(g_seg + hdr()->values_offset);
    v[oc / 8] = 42;
    double gv = -3.25;
    memcpy(&v[og / 8], &gv, 8);
    /* Histogram: observations 0.5, 1.5, 7 -> buckets 1,1,1; count 3; sum 9. */
    uint64_t *w = &v[oh / 8];
    double s = 9.0;
    w[0] = 3;
    memcpy(&w[1], &s, 8);
    w[2] = w[3] = w[4] = 1;
    uint64_t check = 0;
    for (uint32_t i = 0; i < 5; i++)
        check += w[i] * mv_seg_hist_weight(i);
    w[5] = check;

    mv_seg_catalog *cat = parse_ok();
    static uint64_t hot[SEG_SIZE / 8];
    mv_seg_copy_words(hot, g_seg, mv_seg_catalog_hot_size(cat));
    mv_seg_error e;
    CU_ASSERT_EQUAL_FATAL(mv_seg_hot_check(cat, hot, mv_seg_catalog_hot_size(cat), NULL, &e),
                          MV_SEG_OK);
    CU_ASSERT_EQUAL(mv_seg_read_counter(hot, mv_seg_catalog_metric(cat, 0)), 42);
    CU_ASSERT_EQUAL(mv_seg_read_gauge(hot, mv_seg_catalog_metric(cat, 1)), -3.25);
    mv_seg_hist_view hv;
    CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(hot, mv_seg_catalog_metric(cat, 2), &hv),
                          MV_SEG_OK);
    CU_ASSERT_EQUAL(hv.count, 3);
    CU_ASSERT_EQUAL(hv.sum, 9.0);
    CU_ASSERT_EQUAL(hv.buckets[0], 1);
    CU_ASSERT_EQUAL(hv.buckets[2], 1);

    /* Any single corrupted word is detected: weights are odd. */
    uint64_t *hw = &hot[(128 + oh) / 8];
    for (int i = 0; i < 6; i++) {
        uint64_t saved = hw[i];
        hw[i] += 1;
        CU_ASSERT_EQUAL(mv_seg_read_histogram(hot, mv_seg_catalog_metric(cat, 2), &hv),
                        MV_SEG_E_TORN);
        hw[i] = saved ^ 0x8000000000000000ull;
        CU_ASSERT_EQUAL(mv_seg_read_histogram(hot, mv_seg_catalog_metric(cat, 2), &hv),
                        MV_SEG_E_TORN);
        hw[i] = saved;
    }
    /* A consistent checksum over buckets that do not add up to count is torn too. */
    hw[2] += 1;
    hw[5] += mv_seg_hist_weight(2);
    CU_ASSERT_EQUAL(mv_seg_read_histogram(hot, mv_seg_catalog_metric(cat, 2), &hv), MV_SEG_E_TORN);
    mv_seg_catalog_free(cat);
}

int main(void)
{
    static const mv_test tests[] = {
        {"format and parse", test_format_parse},
        {"names and UTF-8", test_names_utf8},
        {"description checks", test_desc_check},
        {"record round trip", test_record_roundtrip},
        {"slot placement", test_place_slot},
        {"hot check", test_hot_check},
        {"tombstones and fractional counters", test_tombstones},
        {"values", test_values},
    };
    int failed = MV_TEST_RUN("segment", tests);
    return failed;
}
