/* mv_segment: segment format v1 writer primitives and the validating catalog reader (the
 * value readers are in mv_segment_values.c). */
#include "mv_segment_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "segment format v1 is little-endian; big-endian hosts are not supported"
#endif

static const char *const reason_names[MV_SEG_REASON_COUNT_] = {
    [MV_SEG_OK] = "ok",
    [MV_SEG_E_TRUNCATED] = "truncated",
    [MV_SEG_E_MAGIC] = "bad_magic",
    [MV_SEG_E_VERSION] = "bad_version",
    [MV_SEG_E_HEADER] = "bad_header",
    [MV_SEG_E_SIZE] = "bad_size",
    [MV_SEG_E_LAYOUT] = "bad_layout",
    [MV_SEG_E_OVERLAP] = "overlap",
    [MV_SEG_E_COUNT] = "bad_count",
    [MV_SEG_E_RECORD] = "bad_record",
    [MV_SEG_E_STRING] = "bad_string",
    [MV_SEG_E_NAME] = "bad_name",
    [MV_SEG_E_TYPE] = "bad_type",
    [MV_SEG_E_VALUE_RANGE] = "bad_value_range",
    [MV_SEG_E_CHECKSUM] = "bad_checksum",
    [MV_SEG_E_BUSY] = "busy",
    [MV_SEG_E_TORN] = "torn",
    [MV_SEG_E_DUPLICATE] = "duplicate",
    [MV_SEG_E_BUCKETS] = "bad_buckets",
    [MV_SEG_E_CHANGED] = "changed",
    [MV_SEG_E_NOMEM] = "no_memory",
    [MV_SEG_E_FULL] = "full",
    [MV_SEG_E_INVAL] = "invalid_argument",
};

const char *mv_seg_reason_name(mv_seg_reason r)
{
    if ((unsigned)r >= MV_SEG_REASON_COUNT_)
        return "unknown";
    return reason_names[r];
}

int mv_seg_reason_transient(mv_seg_reason r)
{
    return r == MV_SEG_E_BUSY || r == MV_SEG_E_TORN || r == MV_SEG_E_CHANGED;
}

mv_seg_reason mv_seg__fail(mv_seg_error *err, mv_seg_reason r, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->reason = r;
        va_start(ap, fmt);
        vsnprintf(err->detail, sizeof err->detail, fmt, ap);
        va_end(ap);
    }
    return r;
}

uint64_t mv_seg_fnv1a64(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int name_char(unsigned char c, int first, int colon)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return 1;
    if (colon && c == ':')
        return 1;
    return !first && c >= '0' && c <= '9';
}

static int valid_name(const char *s, size_t len, int colon)
{
    if (len == 0 || (len >= 2 && s[0] == '_' && s[1] == '_'))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!name_char((unsigned char)s[i], i == 0, colon))
            return 0;
    return 1;
}

int mv_seg_valid_metric_name(const char *s, size_t len)
{
    return valid_name(s, len, 1);
}

int mv_seg_valid_label_name(const char *s, size_t len)
{
    return valid_name(s, len, 0);
}

int mv_seg_valid_utf8(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0) {
            n = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (len - i <= n)
            return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += n + 1;
    }
    return 1;
}

void mv_seg_copy_words(void *dst, const void *src, size_t len)
{
    uint64_t *d = dst;
    const uint64_t *s = src;
    size_t n = len / 8;
    for (size_t i = 0; i < n; i++)
        d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

/* ---- Formatting ------------------------------------------------------------ */

int mv_seg_default_layout(uint64_t size, uint32_t *values_size, uint32_t *catalog_size)
{
    if (size < MV_SEG_MIN_SIZE || size > MV_SEG_MAX_SIZE || size % MV_SEG_ALIGN)
        return MV_SEG_E_SIZE;
    uint64_t rest = size - MV_SEG_HEADER_SIZE;
    uint64_t v = (rest / 4) & ~(uint64_t)63;
    if (v < 512)
        v = 512;
    *values_size = (uint32_t)v;
    *catalog_size = (uint32_t)(rest - v);
    return MV_SEG_OK;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t random_instance(void)
{
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&x, sizeof x, 1, f) != 1)
            x = 0;
        fclose(f);
    }
    x ^= realtime_ns() ^ ((uint64_t)getpid() << 32);
    return x ? x : 1;
}

mv_seg_reason mv_seg_format(void *base, uint64_t size, uint32_t values_size, mv_seg_error *err)
{
    return mv_seg_format_with(base, size, values_size, random_instance(), realtime_ns(), err);
}

mv_seg_reason mv_seg_format_with(void *base, uint64_t size, uint32_t values_size, uint64_t instance,
                                 uint64_t created_ns, mv_seg_error *err)
{
    uint32_t vdef, cdef;
    if (!base || ((uintptr_t)base % MV_SEG_ALIGN))
        return mv_seg__fail(err, MV_SEG_E_INVAL, "segment base is NULL or not 8-aligned");
    if (mv_seg_default_layout(size, &vdef, &cdef) != MV_SEG_OK)
        return mv_seg__fail(err, MV_SEG_E_SIZE,
                            "segment size %llu is not a multiple of 8 in [%u, %u] bytes",
                            (unsigned long long)size, MV_SEG_MIN_SIZE, MV_SEG_MAX_SIZE);
    if (instance == 0)
        return mv_seg__fail(err, MV_SEG_E_INVAL, "instance id must be nonzero");
    if (values_size == 0)
        values_size = vdef;
    if (values_size % 64 || values_size < 64 ||
        (uint64_t)values_size + MV_SEG_HEADER_SIZE + 256 > size)
        return mv_seg__fail(err, MV_SEG_E_LAYOUT,
                            "value area of %u bytes does not fit a %llu-byte segment (64-byte "
                            "multiple, leaving 256 bytes of catalog)",
                            values_size, (unsigned long long)size);

    mv_seg_header *h = base;
    memset(h, 0, sizeof *h);
    h->version = MV_SEG_VERSION;
    h->header_size = MV_SEG_HEADER_SIZE;
    h->segment_size = size;
    h->values_offset = MV_SEG_HEADER_SIZE;
    h->values_size = values_size;
    h->catalog_offset = MV_SEG_HEADER_SIZE + values_size;
    h->catalog_size = (uint32_t)(size - h->catalog_offset);
    h->instance = instance;
    h->generation = 0;
    h->created_ns = created_ns;
    uint64_t magic;
    memcpy(&magic, MV_SEG_MAGIC, 8);
    __atomic_store_n((uint64_t *)(void *)h->magic, magic, __ATOMIC_RELEASE);
    return MV_SEG_OK;
}

/* ---- Records ------------------------------------------------------------------ */

static size_t slen(const char *s)
{
    return s ? strlen(s) : 0;
}

static uint32_t align8(uint64_t n)
{
    return (uint32_t)((n + 7) & ~(uint64_t)7);
}

/* Bytes of one encoded string: u16 length, bytes, NUL. */
static uint64_t str_bytes(const char *s)
{
    return 2 + slen(s) + 1;
}

uint32_t mv_seg_record_size(const mv_seg_metric_desc *d)
{
    uint64_t n = MV_SEG_RECORD_HEAD;
    n += str_bytes(d->name) + str_bytes(d->help) + str_bytes(d->unit);
    for (uint16_t i = 0; i < d->label_count; i++)
        n += str_bytes(d->labels[i].key) + str_bytes(d->labels[i].value);
    n = align8(n);
    n += 8ull * d->bucket_count;
    n += 8; /* checksum */
    return (uint32_t)n;
}

uint32_t mv_seg_shard_size(uint8_t type, uint16_t bucket_count)
{
    if (type == MV_SEG_HISTOGRAM)
        return 8u * MV_SEG_HIST_WORDS(bucket_count);
    return type == MV_SEG_COUNTER_F ? 16u : type == MV_SEG_TOMBSTONE ? 0u : 8u;
}

uint32_t mv_seg_shard_stride(uint8_t type, uint16_t bucket_count)
{
    return (mv_seg_shard_size(type, bucket_count) + MV_SEG_LINE - 1) & ~(uint32_t)(MV_SEG_LINE - 1);
}

uint32_t mv_seg_value_size(const mv_seg_metric_desc *d)
{
    if (d->type == MV_SEG_TOMBSTONE)
        return 0;
    if (d->shards > 1)
        return d->shards * mv_seg_shard_stride(d->type, d->bucket_count);
    return mv_seg_shard_size(d->type, d->bucket_count);
}

uint32_t mv_seg_place_slot(uint32_t values_used, uint32_t values_size, uint32_t catalog_used,
                           uint32_t catalog_size, uint32_t record_size, uint32_t value_size)
{
    uint64_t line = ((uint64_t)values_used + MV_SEG_LINE - 1) & ~(uint64_t)(MV_SEG_LINE - 1);
    uint64_t cat_end = (uint64_t)catalog_used + record_size, more = 0;
    if (record_size && cat_end < catalog_size)
        more = (catalog_size - cat_end) / record_size; /* records of this size still to come */
    if (line + value_size + 8 * more <= values_size)
        return (uint32_t)line;
    return values_used;
}

mv_seg_reason mv_seg_desc_check(const mv_seg_metric_desc *d, mv_seg_error *err)
{
    if (!d || !d->name)
        return mv_seg__fail(err, MV_SEG_E_INVAL, "metric description or name is NULL");
    size_t nl = strlen(d->name);
    if (nl > MV_SEG_NAME_MAX || !mv_seg_valid_metric_name(d->name, nl))
        return mv_seg__fail(err, MV_SEG_E_NAME,
                            "metric name %.64s is not [a-zA-Z_:][a-zA-Z0-9_:]* of at most %d bytes "
                            "(and may not start with __)",
                            d->name, MV_SEG_NAME_MAX);
    if (d->type < MV_SEG_COUNTER || d->type > MV_SEG_TOMBSTONE)
        return mv_seg__fail(err, MV_SEG_E_TYPE, "metric %s: unknown type %u", d->name, d->type);
    size_t hl = slen(d->help), ul = slen(d->unit);
    if (d->type == MV_SEG_TOMBSTONE && (hl || ul || d->shards > 1))
        return mv_seg__fail(err, MV_SEG_E_INVAL,
                            "tombstone of %s: no help, unit or shards (spec section 6.6)", d->name);
    if (hl > MV_SEG_HELP_MAX || (hl && !mv_seg_valid_utf8(d->help, hl)))
        return mv_seg__fail(err, MV_SEG_E_STRING,
                            "metric %s: help is not UTF-8 of at most %d bytes", d->name,
                            MV_SEG_HELP_MAX);
    if (ul > MV_SEG_UNIT_MAX || (ul && !mv_seg_valid_label_name(d->unit, ul)))
        return mv_seg__fail(err, MV_SEG_E_STRING,
                            "metric %s: unit must be [a-zA-Z_][a-zA-Z0-9_]* of at most %d bytes",
                            d->name, MV_SEG_UNIT_MAX);
    if (d->label_count > MV_SEG_LABELS_MAX || (d->label_count && !d->labels))
        return mv_seg__fail(err, MV_SEG_E_COUNT, "metric %s: %u labels (at most %d)", d->name,
                            d->label_count, MV_SEG_LABELS_MAX);
    for (uint16_t i = 0; i < d->label_count; i++) {
        const char *k = d->labels[i].key, *v = d->labels[i].value;
        size_t kl = slen(k), vl = slen(v);
        if (!k || kl > MV_SEG_LABEL_KEY_MAX || !mv_seg_valid_label_name(k, kl))
            return mv_seg__fail(
                err, MV_SEG_E_NAME,
                "metric %s: label name %.64s is not [a-zA-Z_][a-zA-Z0-9_]* of at most "
                "%d bytes (and may not start with __)",
                d->name, k ? k : "(null)", MV_SEG_LABEL_KEY_MAX);
        if (d->type == MV_SEG_HISTOGRAM && strcmp(k, "le") == 0)
            return mv_seg__fail(err, MV_SEG_E_NAME,
                                "metric %s: histograms may not have a label 'le'", d->name);
        if (vl > MV_SEG_LABEL_VALUE_MAX || (vl && !mv_seg_valid_utf8(v, vl)))
            return mv_seg__fail(err, MV_SEG_E_STRING,
                                "metric %s: value of label %s is not UTF-8 of at most %d bytes",
                                d->name, k, MV_SEG_LABEL_VALUE_MAX);
        for (uint16_t j = 0; j < i; j++)
            if (strcmp(d->labels[j].key, k) == 0)
                return mv_seg__fail(err, MV_SEG_E_DUPLICATE, "metric %s: label %s given twice",
                                    d->name, k);
    }
    if (d->type == MV_SEG_HISTOGRAM) {
        if (d->bucket_count == 0 || d->bucket_count > MV_SEG_BUCKETS_MAX || !d->bounds)
            return mv_seg__fail(err, MV_SEG_E_COUNT, "metric %s: %u bucket bounds (1 to %d)",
                                d->name, d->bucket_count, MV_SEG_BUCKETS_MAX);
        for (uint16_t i = 0; i < d->bucket_count; i++) {
            if (!isfinite(d->bounds[i]) || (i && !(d->bounds[i] > d->bounds[i - 1])))
                return mv_seg__fail(
                    err, MV_SEG_E_BUCKETS,
                    "metric %s: bucket bounds must be finite and strictly increasing "
                    "(bound %u is %g)",
                    d->name, i, d->bounds[i]);
        }
    } else if (d->bucket_count) {
        return mv_seg__fail(err, MV_SEG_E_COUNT, "metric %s: only histograms have buckets",
                            d->name);
    }
    if (d->shards > 1 && !mv_seg_valid_shards(d->shards))
        return mv_seg__fail(err, MV_SEG_E_COUNT,
                            "metric %s: %u shards (a power of two from 2 to %d)", d->name,
                            d->shards, MV_SEG_SHARDS_MAX);
    return MV_SEG_OK;
}

static unsigned char *put_str(unsigned char *p, const char *s)
{
    size_t n = slen(s);
    uint16_t n16 = (uint16_t)n;
    memcpy(p, &n16, 2);
    if (n)
        memcpy(p + 2, s, n);
    p[2 + n] = 0;
    return p + 3 + n;
}

void mv_seg_record_encode(void *out, const mv_seg_metric_desc *d, uint32_t value_offset)
{
    uint32_t size = mv_seg_record_size(d);
    unsigned char *base = out, *p;
    mv_seg_record_head head = {
        .record_size = size,
        .type = d->type,
        .label_count = d->label_count,
        .value_offset = value_offset,
        .value_size = mv_seg_value_size(d),
        .bucket_count = d->bucket_count,
    };
    if (d->shards > 1 && d->type != MV_SEG_TOMBSTONE) {
        head.flags = MV_SEG_REC_SHARDED;
        head.shard_count = d->shards;
    }
    memset(base, 0, size);
    memcpy(base, &head, sizeof head);
    p = base + MV_SEG_RECORD_HEAD;
    p = put_str(p, d->name);
    p = put_str(p, d->help);
    p = put_str(p, d->unit);
    for (uint16_t i = 0; i < d->label_count; i++) {
        p = put_str(p, d->labels[i].key);
        p = put_str(p, d->labels[i].value);
    }
    p = base + align8((uint64_t)(p - base));
    if (d->bucket_count)
        memcpy(p, d->bounds, 8u * d->bucket_count);
    uint64_t sum = mv_seg_fnv1a64(base, size - 8);
    memcpy(base + size - 8, &sum, 8);
}

/* ---- Reader: catalog ---------------------------------------------------------- */

size_t mv_seg_catalog_count(const mv_seg_catalog *c)
{
    return c->count;
}

const mv_seg_metric *mv_seg_catalog_metric(const mv_seg_catalog *c, size_t i)
{
    return i < c->count ? &c->metrics[i] : NULL;
}

size_t mv_seg_catalog_tombstones(const mv_seg_catalog *c)
{
    return c->ntomb;
}

uint8_t mv_seg_catalog_name_type(const mv_seg_catalog *c, const char *name)
{
    for (size_t i = 0; i < c->nall; i++)
        if (strcmp(c->metrics[i].name, name) == 0)
            return c->metrics[i].type;
    return 0;
}

uint64_t mv_seg_catalog_generation(const mv_seg_catalog *c)
{
    return c->generation;
}

uint64_t mv_seg_catalog_instance(const mv_seg_catalog *c)
{
    return c->instance;
}

uint64_t mv_seg_catalog_segment_size(const mv_seg_catalog *c)
{
    return c->segment_size;
}

uint32_t mv_seg_catalog_hot_size(const mv_seg_catalog *c)
{
    return c->hot_size;
}

uint32_t mv_seg_catalog_values_offset(const mv_seg_catalog *c)
{
    return c->values_offset;
}

size_t mv_seg_catalog_sharded(const mv_seg_catalog *c)
{
    return c->nsharded;
}

uint32_t mv_seg_catalog_fold_size(const mv_seg_catalog *c)
{
    return c->fold_size;
}

void mv_seg_catalog_free(mv_seg_catalog *c)
{
    if (!c)
        return;
    free(c->metrics);
    free(c->sharded);
    free(c->labels);
    free(c->bounds);
    free(c->bytes);
    free(c);
}

/* Validates the header of a copy; fills a host-order snapshot `h`. */
static mv_seg_reason header_check(const void *buf, size_t len, uint64_t expected_size,
                                  mv_seg_header *h, mv_seg_error *err)
{
    if (len < MV_SEG_HEADER_SIZE)
        return mv_seg__fail(err, MV_SEG_E_TRUNCATED,
                            "copy of %zu bytes is shorter than the %d-byte header", len,
                            MV_SEG_HEADER_SIZE);
    memcpy(h, buf, sizeof *h);
    if (memcmp(h->magic, MV_SEG_MAGIC, 8) != 0) {
        static const char zero[8];
        if (memcmp(h->magic, zero, 8) == 0)
            return mv_seg__fail(err, MV_SEG_E_MAGIC,
                                "segment is not formatted yet (magic is zero)");
        return mv_seg__fail(err, MV_SEG_E_MAGIC, "magic is not MVIEWSEG");
    }
    if (h->version != MV_SEG_VERSION)
        return mv_seg__fail(err, MV_SEG_E_VERSION,
                            "format version %u is not supported (this reader: %d)", h->version,
                            MV_SEG_VERSION);
    if (h->header_size != MV_SEG_HEADER_SIZE || h->flags != 0 || h->reserved0 != 0)
        return mv_seg__fail(err, MV_SEG_E_HEADER,
                            "header_size %u / flags 0x%x / reserved not as in v1", h->header_size,
                            h->flags);
    for (size_t i = 0; i < sizeof h->reserved; i++)
        if (h->reserved[i])
            return mv_seg__fail(err, MV_SEG_E_HEADER, "reserved header byte %zu is not zero",
                                96 + i);
    if (h->segment_size < MV_SEG_MIN_SIZE || h->segment_size > MV_SEG_MAX_SIZE ||
        h->segment_size % MV_SEG_ALIGN)
        return mv_seg__fail(err, MV_SEG_E_SIZE, "segment_size %llu out of range",
                            (unsigned long long)h->segment_size);
    if (expected_size && h->segment_size != expected_size)
        return mv_seg__fail(err, MV_SEG_E_SIZE, "segment_size %llu but the segment is %llu bytes",
                            (unsigned long long)h->segment_size, (unsigned long long)expected_size);
    uint64_t vo = h->values_offset, vs = h->values_size, co = h->catalog_offset,
             cs = h->catalog_size;
    if (vo % 8 || vs % 8 || co % 8 || cs % 8)
        return mv_seg__fail(err, MV_SEG_E_LAYOUT, "areas are not 8-byte aligned");
    if (vo < MV_SEG_HEADER_SIZE || co < MV_SEG_HEADER_SIZE)
        return mv_seg__fail(err, MV_SEG_E_OVERLAP, "an area overlaps the header");
    if (vo + vs > h->segment_size || co + cs > h->segment_size)
        return mv_seg__fail(err, MV_SEG_E_LAYOUT,
                            "areas [%llu,+%llu) and [%llu,+%llu) exceed the %llu-byte segment",
                            (unsigned long long)vo, (unsigned long long)vs, (unsigned long long)co,
                            (unsigned long long)cs, (unsigned long long)h->segment_size);
    if (vo < co + cs && co < vo + vs)
        return mv_seg__fail(err, MV_SEG_E_OVERLAP, "value area and catalog area overlap");
    if (h->values_used > vs || h->values_used % 8)
        return mv_seg__fail(err, MV_SEG_E_COUNT, "values_used %u exceeds the %llu-byte value area",
                            h->values_used, (unsigned long long)vs);
    if (h->catalog_used > cs || h->catalog_used % 8)
        return mv_seg__fail(err, MV_SEG_E_COUNT,
                            "catalog_used %u exceeds the %llu-byte catalog area", h->catalog_used,
                            (unsigned long long)cs);
    if (h->metric_count > MV_SEG_METRICS_MAX ||
        (uint64_t)h->metric_count * MV_SEG_RECORD_MIN > h->catalog_used)
        return mv_seg__fail(err, MV_SEG_E_COUNT, "metric_count %u cannot fit in %u catalog bytes",
                            h->metric_count, h->catalog_used);
    if (h->instance == 0)
        return mv_seg__fail(err, MV_SEG_E_HEADER, "instance is zero");
    return MV_SEG_OK;
}

/* Reads one length-prefixed, NUL-terminated string at *pos within rec[0,end). */
static mv_seg_reason get_str(const char *rec, uint32_t *pos, uint32_t end, uint32_t max,
                             const char **s, uint16_t *len, const char *what, size_t idx,
                             mv_seg_error *err)
{
    uint16_t n;
    if ((uint64_t)*pos + 3 > end)
        return mv_seg__fail(err, MV_SEG_E_RECORD, "record %zu: %s runs past the record", idx, what);
    memcpy(&n, rec + *pos, 2);
    if (n > max)
        return mv_seg__fail(err, MV_SEG_E_STRING, "record %zu: %s is %u bytes (at most %u)", idx,
                            what, n, max);
    if ((uint64_t)*pos + 2 + n + 1 > end)
        return mv_seg__fail(err, MV_SEG_E_RECORD, "record %zu: %s runs past the record", idx, what);
    const char *p = rec + *pos + 2;
    if (p[n] != '\0')
        return mv_seg__fail(err, MV_SEG_E_STRING, "record %zu: %s is not NUL-terminated", idx,
                            what);
    if (!mv_seg_valid_utf8(p, n))
        return mv_seg__fail(err, MV_SEG_E_STRING, "record %zu: %s is not valid UTF-8 (or has NUL)",
                            idx, what);
    *s = p;
    *len = n;
    *pos += 3u + n;
    return MV_SEG_OK;
}

static mv_seg_reason parse_record(mv_seg_catalog *c, size_t idx, const char *rec, uint32_t avail,
                                  size_t *label_used, size_t *bound_used, uint32_t *value_end,
                                  mv_seg_error *err)
{
    mv_seg_record_head hd;
    mv_seg_metric *m = &c->metrics[idx];
    mv_seg_reason r;

    if (avail < MV_SEG_RECORD_HEAD)
        return mv_seg__fail(err, MV_SEG_E_RECORD, "record %zu: header runs past catalog_used", idx);
    memcpy(&hd, rec, sizeof hd);
    if (hd.record_size < MV_SEG_RECORD_MIN || hd.record_size % 8 || hd.record_size > avail)
        return mv_seg__fail(err, MV_SEG_E_RECORD,
                            "record %zu: size %u is not a multiple of 8 in [%d, %u]", idx,
                            hd.record_size, MV_SEG_RECORD_MIN, avail);
    uint64_t sum;
    memcpy(&sum, rec + hd.record_size - 8, 8);
    if (sum != mv_seg_fnv1a64(rec, hd.record_size - 8))
        return mv_seg__fail(err, MV_SEG_E_CHECKSUM, "record %zu: checksum mismatch", idx);
    if ((hd.flags & ~MV_SEG_REC_SHARDED) || hd.reserved2)
        return mv_seg__fail(err, MV_SEG_E_RECORD,
                            "record %zu: unknown flags or reserved fields not zero", idx);
    if ((hd.flags & MV_SEG_REC_SHARDED) ? !mv_seg_valid_shards(hd.shard_count)
                                        : hd.shard_count != 0)
        return mv_seg__fail(
            err, MV_SEG_E_RECORD,
            "record %zu: shard_count %u (sharded: a power of two from 2 to %d, else 0)", idx,
            hd.shard_count, MV_SEG_SHARDS_MAX);
    if (hd.type < MV_SEG_COUNTER || hd.type > MV_SEG_TOMBSTONE)
        return mv_seg__fail(err, MV_SEG_E_TYPE, "record %zu: unknown type %u", idx, hd.type);
    int tomb = hd.type == MV_SEG_TOMBSTONE;
    if (tomb && (hd.flags || hd.value_size))
        return mv_seg__fail(err, MV_SEG_E_RECORD,
                            "record %zu: a tombstone has flags %u and value_size %u (0 and 0)", idx,
                            hd.flags, hd.value_size);
    if (hd.label_count > MV_SEG_LABELS_MAX)
        return mv_seg__fail(err, MV_SEG_E_COUNT, "record %zu: %u labels (at most %d)", idx,
                            hd.label_count, MV_SEG_LABELS_MAX);
    if (hd.type == MV_SEG_HISTOGRAM ? (hd.bucket_count == 0 || hd.bucket_count > MV_SEG_BUCKETS_MAX)
                                    : hd.bucket_count != 0)
        return mv_seg__fail(err, MV_SEG_E_COUNT, "record %zu: bucket_count %u invalid for type %u",
                            idx, hd.bucket_count, hd.type);
    uint16_t shards = hd.shard_count ? hd.shard_count : 1;
    uint32_t one = mv_seg_shard_size(hd.type, hd.bucket_count);
    uint32_t stride = shards > 1 ? mv_seg_shard_stride(hd.type, hd.bucket_count) : one;
    uint32_t want = shards * stride;
    if (hd.value_size != want)
        return mv_seg__fail(err, MV_SEG_E_RECORD, "record %zu: value_size %u, expected %u", idx,
                            hd.value_size, want);
    if (hd.value_offset % 8)
        return mv_seg__fail(err, MV_SEG_E_VALUE_RANGE,
                            "record %zu: value_offset %u is not 8-aligned", idx, hd.value_offset);
    if (tomb)
        ; /* no slot: section 6.6; the record it deletes is checked once all are parsed */
    else if (hd.value_offset < *value_end)
        return mv_seg__fail(err, MV_SEG_E_OVERLAP,
                            "record %zu: value slot at %u overlaps the previous one (ends at %u)",
                            idx, hd.value_offset, *value_end);
    else if ((uint64_t)hd.value_offset + hd.value_size > c->values_used)
        return mv_seg__fail(err, MV_SEG_E_VALUE_RANGE,
                            "record %zu: value slot [%u,+%u) is outside the %u used value bytes",
                            idx, hd.value_offset, hd.value_size, c->values_used);
    else
        *value_end = hd.value_offset + hd.value_size;

    uint32_t end = hd.record_size - 8, pos = MV_SEG_RECORD_HEAD;
    if ((r = get_str(rec, &pos, end, MV_SEG_NAME_MAX, &m->name, &m->name_len, "name", idx, err)))
        return r;
    if (!mv_seg_valid_metric_name(m->name, m->name_len))
        return mv_seg__fail(err, MV_SEG_E_NAME, "record %zu: invalid metric name %s", idx,
                            m->name_len ? m->name : "(empty)");
    if ((r = get_str(rec, &pos, end, MV_SEG_HELP_MAX, &m->help, &m->help_len, "help", idx, err)))
        return r;
    if ((r = get_str(rec, &pos, end, MV_SEG_UNIT_MAX, &m->unit, &m->unit_len, "unit", idx, err)))
        return r;
    if (m->unit_len && !mv_seg_valid_label_name(m->unit, m->unit_len))
        return mv_seg__fail(err, MV_SEG_E_NAME, "record %zu: invalid unit", idx);
    if (tomb && (m->help_len || m->unit_len))
        return mv_seg__fail(err, MV_SEG_E_RECORD, "record %zu: a tombstone has help or a unit",
                            idx);
    mv_seg_label *labels = c->labels + *label_used;
    for (uint16_t i = 0; i < hd.label_count; i++) {
        const char *k, *v;
        uint16_t kl, vl;
        if ((r = get_str(rec, &pos, end, MV_SEG_LABEL_KEY_MAX, &k, &kl, "label name", idx, err)))
            return r;
        if (!mv_seg_valid_label_name(k, kl) ||
            (hd.type == MV_SEG_HISTOGRAM && kl == 2 && memcmp(k, "le", 2) == 0))
            return mv_seg__fail(err, MV_SEG_E_NAME, "record %zu: invalid label name %s", idx,
                                kl ? k : "(empty)");
        if ((r = get_str(rec, &pos, end, MV_SEG_LABEL_VALUE_MAX, &v, &vl, "label value", idx, err)))
            return r;
        for (uint16_t j = 0; j < i; j++)
            if (strcmp(labels[j].key, k) == 0)
                return mv_seg__fail(err, MV_SEG_E_DUPLICATE, "record %zu: label %s given twice",
                                    idx, k);
        labels[i].key = k;
        labels[i].value = v;
    }
    pos = align8(pos);
    if ((uint64_t)pos + 8ull * hd.bucket_count != end)
        return mv_seg__fail(err, MV_SEG_E_RECORD, "record %zu: %u bytes left for %u bounds", idx,
                            end > pos ? end - pos : 0, hd.bucket_count);
    double *bounds = c->bounds + *bound_used;
    for (uint16_t i = 0; i < hd.bucket_count; i++) {
        memcpy(&bounds[i], rec + pos + 8u * i, 8);
        if (!isfinite(bounds[i]) || (i && !(bounds[i] > bounds[i - 1])))
            return mv_seg__fail(err, MV_SEG_E_BUCKETS,
                                "record %zu: bound %u (%g) is not finite and above the previous",
                                idx, i, bounds[i]);
    }
    m->type = hd.type;
    m->label_count = hd.label_count;
    m->labels = labels;
    m->bucket_count = hd.bucket_count;
    m->bounds = hd.bucket_count ? bounds : NULL;
    m->value_offset = hd.value_offset;
    m->value_size = hd.value_size;
    m->shards = shards;
    m->shard_size = one;
    m->shard_stride = stride;
    m->fold_offset = hd.value_offset;
    *label_used += hd.label_count;
    *bound_used += hd.bucket_count;
    return MV_SEG_OK;
}

/* Orders metrics by name, then labels as written, for duplicate detection. */
static int metric_cmp(const void *a, const void *b)
{
    const mv_seg_metric *x = *(const mv_seg_metric *const *)a;
    const mv_seg_metric *y = *(const mv_seg_metric *const *)b;
    int d = strcmp(x->name, y->name);
    if (d)
        return d;
    if (x->label_count != y->label_count)
        return x->label_count < y->label_count ? -1 : 1;
    for (uint16_t i = 0; i < x->label_count; i++) {
        if ((d = strcmp(x->labels[i].key, y->labels[i].key)))
            return d;
        if ((d = strcmp(x->labels[i].value, y->labels[i].value)))
            return d;
    }
    return 0;
}

/* metric_cmp, then record order. */
static int metric_cmp_index(const void *a, const void *b)
{
    int d = metric_cmp(a, b);
    if (d)
        return d;
    const mv_seg_metric *x = *(const mv_seg_metric *const *)a;
    const mv_seg_metric *y = *(const mv_seg_metric *const *)b;
    return x < y ? -1 : x > y;
}

/* Matches every tombstone with the earlier live record it deletes (spec section 6.6):
 * deleted_by[i] = 1 + the index of the tombstone that deleted record i, or 0. Slot records
 * are in increasing value_offset order, so the record is found by binary search. */
static mv_seg_reason resolve_tombstones(mv_seg_catalog *c, uint32_t *deleted_by, mv_seg_error *err)
{
    size_t nslot = 0;
    uint32_t *slots = malloc((c->count ? c->count : 1) * sizeof *slots);
    if (!slots)
        return mv_seg__fail(err, MV_SEG_E_NOMEM, "out of memory matching tombstones");
    mv_seg_reason r = MV_SEG_OK;
    for (size_t t = 0; t < c->count && !r; t++) {
        const mv_seg_metric *tm = &c->metrics[t];
        if (tm->type != MV_SEG_TOMBSTONE) {
            slots[nslot++] = (uint32_t)t;
            continue;
        }
        size_t lo = 0, hi = nslot;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (c->metrics[slots[mid]].value_offset < tm->value_offset)
                lo = mid + 1;
            else
                hi = mid;
        }
        const mv_seg_metric *x = &c->metrics[t];
        const mv_seg_metric *m = lo < nslot ? &c->metrics[slots[lo]] : NULL;
        if (!m || m->value_offset != tm->value_offset || metric_cmp(&m, &x) != 0)
            r = mv_seg__fail(err, MV_SEG_E_RECORD,
                             "record %zu: tombstone of %s at value offset %u deletes no earlier "
                             "record of that name and labels",
                             t, tm->name, tm->value_offset);
        else if (deleted_by[slots[lo]])
            r = mv_seg__fail(err, MV_SEG_E_RECORD,
                             "record %zu: tombstone of %s deletes record %u a second time", t,
                             tm->name, slots[lo]);
        else
            deleted_by[slots[lo]] = (uint32_t)t + 1;
    }
    free(slots);
    return r;
}

/* One type per name over every record that is not a tombstone, and no two live records
 * with the same name and labels: of two such records, the earlier one must have been
 * deleted by a tombstone that comes before the later one. */
static mv_seg_reason check_families(mv_seg_catalog *c, const uint32_t *deleted_by,
                                    mv_seg_error *err)
{
    if (c->count < 2)
        return MV_SEG_OK;
    const mv_seg_metric **v = malloc(c->count * sizeof *v);
    if (!v)
        return mv_seg__fail(err, MV_SEG_E_NOMEM, "out of memory checking %zu metrics", c->count);
    size_t n = 0;
    for (size_t i = 0; i < c->count; i++)
        if (c->metrics[i].type != MV_SEG_TOMBSTONE)
            v[n++] = &c->metrics[i];
    qsort(v, n, sizeof *v, metric_cmp_index);
    mv_seg_reason r = MV_SEG_OK;
    for (size_t i = 1; i < n && !r; i++) {
        if (strcmp(v[i]->name, v[i - 1]->name) != 0)
            continue;
        size_t a = (size_t)(v[i - 1] - c->metrics), b = (size_t)(v[i] - c->metrics);
        if (v[i]->type != v[i - 1]->type)
            r = mv_seg__fail(err, MV_SEG_E_TYPE, "metric %s is registered with two types",
                             v[i]->name);
        else if (metric_cmp(&v[i], &v[i - 1]) == 0 && !(deleted_by[a] && deleted_by[a] - 1 < b))
            r = mv_seg__fail(err, MV_SEG_E_DUPLICATE, "metric %s has the same labels twice",
                             v[i]->name);
    }
    free(v);
    return r;
}

/* Keeps the live records at the front of metrics, in record order, and the deleted ones
 * after them (for mv_seg_catalog_name_type); tombstones go. */
static void compact_live(mv_seg_catalog *c, const uint32_t *deleted_by)
{
    size_t live = 0, dead = 0;
    mv_seg_metric *tmp = c->metrics + c->count; /* the spare half (see the allocation) */
    for (size_t i = 0; i < c->count; i++) {
        if (c->metrics[i].type == MV_SEG_TOMBSTONE)
            c->ntomb++;
        else if (deleted_by[i])
            tmp[dead++] = c->metrics[i];
        else
            c->metrics[live++] = c->metrics[i];
    }
    memmove(c->metrics + live, tmp, dead * sizeof *tmp);
    c->count = live;
    c->nall = live + dead;
}

/* Lists the sharded records and gives each a place for its folded value past the hot size. */
static mv_seg_reason place_folds(mv_seg_catalog *c, mv_seg_error *err)
{
    uint64_t end = c->values_used;
    c->fold_size = c->hot_size;
    for (size_t i = 0; i < c->count; i++)
        c->nsharded += c->metrics[i].shards > 1;
    if (!c->nsharded)
        return MV_SEG_OK;
    if (!(c->sharded = malloc(c->nsharded * sizeof *c->sharded)))
        return mv_seg__fail(err, MV_SEG_E_NOMEM, "out of memory listing %zu sharded records",
                            c->nsharded);
    size_t k = 0;
    for (size_t i = 0; i < c->count; i++) {
        mv_seg_metric *m = &c->metrics[i];
        if (m->shards < 2)
            continue;
        c->sharded[k++] = (uint32_t)i;
        m->fold_offset = (uint32_t)end; /* end < values_used + value bytes of the slots */
        end += m->shard_size;
    }
    /* Each folded value is smaller than its slot, so this stays below twice the hot size. */
    c->fold_size = (uint32_t)(c->values_offset + end);
    return MV_SEG_OK;
}

mv_seg_reason mv_seg_catalog_parse(const void *buf, size_t len, uint64_t expected_size,
                                   mv_seg_catalog **out, mv_seg_error *err)
{
    mv_seg_header h;
    mv_seg_reason r;

    *out = NULL;
    if ((r = header_check(buf, len, expected_size, &h, err)))
        return r;
    if (h.generation & 1)
        return mv_seg__fail(err, MV_SEG_E_BUSY, "catalog append in progress (generation %llu)",
                            (unsigned long long)h.generation);
    if ((uint64_t)h.catalog_offset + h.catalog_used > len)
        return mv_seg__fail(err, MV_SEG_E_TRUNCATED,
                            "copy of %zu bytes ends inside the catalog (%u+%u)", len,
                            h.catalog_offset, h.catalog_used);

    mv_seg_catalog *c = calloc(1, sizeof *c);
    if (!c)
        return mv_seg__fail(err, MV_SEG_E_NOMEM, "out of memory");
    c->generation = h.generation;
    c->instance = h.instance;
    c->segment_size = h.segment_size;
    c->metric_count = h.metric_count;
    c->values_offset = h.values_offset;
    c->values_used = h.values_used;
    c->catalog_used = h.catalog_used;
    c->hot_size = h.values_offset + h.values_used;
    c->count = h.metric_count;
    /* Upper bounds from catalog_used: every label costs >= 6 bytes, every bound 8. */
    size_t max_labels = h.catalog_used / 6 + 1, max_bounds = h.catalog_used / 8 + 1;
    c->bytes = malloc(h.catalog_used ? h.catalog_used : 1);
    c->metrics = calloc(c->count ? 2 * c->count : 1, sizeof *c->metrics); /* 2x: compact_live */
    c->labels = calloc(max_labels, sizeof *c->labels);
    c->bounds = calloc(max_bounds, sizeof *c->bounds);
    if (!c->bytes || !c->metrics || !c->labels || !c->bounds) {
        mv_seg_catalog_free(c);
        return mv_seg__fail(err, MV_SEG_E_NOMEM, "out of memory for a %u-byte catalog",
                            h.catalog_used);
    }
    memcpy(c->bytes, (const char *)buf + h.catalog_offset, h.catalog_used);

    uint32_t pos = 0, value_end = 0;
    size_t label_used = 0, bound_used = 0;
    for (size_t i = 0; i < c->count; i++) {
        const mv_seg_record_head *hd = (const void *)(c->bytes + pos);
        r = parse_record(c, i, c->bytes + pos, h.catalog_used - pos, &label_used, &bound_used,
                         &value_end, err);
        if (r) {
            mv_seg_catalog_free(c);
            return r;
        }
        uint32_t rs;
        memcpy(&rs, &hd->record_size, 4);
        pos += rs;
    }
    if (pos != h.catalog_used) {
        mv_seg_catalog_free(c);
        return mv_seg__fail(err, MV_SEG_E_COUNT, "%u records use %u bytes but catalog_used is %u",
                            h.metric_count, pos, h.catalog_used);
    }
    c->nall = c->count;
    uint32_t *deleted_by = calloc(c->count ? c->count : 1, sizeof *deleted_by);
    if (!deleted_by)
        r = mv_seg__fail(err, MV_SEG_E_NOMEM, "out of memory for %zu records", c->count);
    else if (!(r = resolve_tombstones(c, deleted_by, err)) &&
             !(r = check_families(c, deleted_by, err)))
        compact_live(c, deleted_by);
    free(deleted_by);
    if (r || (r = place_folds(c, err))) {
        mv_seg_catalog_free(c);
        return r;
    }
    *out = c;
    if (err) {
        err->reason = MV_SEG_OK;
        err->detail[0] = '\0';
    }
    return MV_SEG_OK;
}

void mv_seg_recount(const void *base, size_t size, uint32_t *metric_count, uint32_t *catalog_used,
                    uint32_t *values_used)
{
    const mv_seg_header *h = base;
    uint32_t n = 0, pos = 0, vend = 0;
    const char *cat = (const char *)base + h->catalog_offset;
    uint64_t cap = h->catalog_size;
    if ((uint64_t)h->catalog_offset + cap > size || (uint64_t)h->values_offset > size)
        cap = 0; /* a header that lies about its areas: nothing to trust */
    while (n < MV_SEG_METRICS_MAX && cap - pos >= MV_SEG_RECORD_MIN) {
        mv_seg_record_head hd;
        memcpy(&hd, cat + pos, sizeof hd);
        if (hd.record_size < MV_SEG_RECORD_MIN || hd.record_size % 8 || hd.record_size > cap - pos)
            break;
        uint64_t sum;
        memcpy(&sum, cat + pos + hd.record_size - 8, 8);
        if (sum != mv_seg_fnv1a64(cat + pos, hd.record_size - 8))
            break;
        if (hd.type == MV_SEG_TOMBSTONE && hd.value_size == 0) {
            /* no slot (spec section 6.6) */
        } else if (hd.value_offset % 8 || hd.value_offset < vend || hd.value_size == 0 ||
                   (uint64_t)hd.value_offset + hd.value_size > h->values_size) {
            break;
        } else {
            vend = hd.value_offset + hd.value_size;
        }
        pos += hd.record_size;
        n++;
    }
    *metric_count = n;
    *catalog_used = pos;
    *values_used = vend;
}
