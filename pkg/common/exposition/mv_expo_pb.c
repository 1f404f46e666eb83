/* mv_expo_pb: the protobuf exposition (delimited io.prometheus.client.MetricFamily) behind
 * mv_expo's MV_EXPO_PROTOBUF format. Every metric of a family is packed with protobuf-c as soon
 * as its series is complete and appended to the family's body as field 4 (repeated fields may
 * be concatenated on the wire), so only one series is held at a time; the family's header
 * fields come first and its varint length is put in front when the family ends. */
#include "mv_expo_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prometheus/client/metrics.pb-c.h"

#define LEN_ROOM 10 /* a varint of up to 64 bits */

typedef struct {
    size_t name, value; /* offsets into arena */
} lbl_off;

struct mv_expo__pb {
    /* The family: LEN_ROOM bytes reserved, then the MetricFamily body. */
    uint8_t *buf;
    size_t len, alloc, cap;
    int fail;
    mv_expo_type type;
    int32_t schema;
    uint32_t max_buckets;
    /* The series being assembled (summary, histogram). */
    int open;
    int slot; /* 0 quantiles/buckets, 1 sum, 2 count */
    char *arena;
    size_t alen, acap;
    lbl_off *lbl;
    size_t nlbl, lcap;
    Io__Prometheus__Client__LabelPair *pairs;
    Io__Prometheus__Client__LabelPair **ppairs;
    size_t pcap;
    double *xs;    /* quantiles or bucket bounds */
    double *qv;    /* quantile values */
    uint64_t *cum; /* bucket counts */
    size_t nx, xcap;
    Io__Prometheus__Client__Quantile *qs;
    Io__Prometheus__Client__Quantile **pqs;
    Io__Prometheus__Client__Bucket *bs;
    Io__Prometheus__Client__Bucket **pbs;
    size_t qcap;
    double sum;
    uint64_t count;
    int64_t ts;
    mv_expo_nh nh;
    Io__Prometheus__Client__BucketSpan *sp[2];
    Io__Prometheus__Client__BucketSpan **psp[2];
    size_t spcap[2];
    uint8_t *obuf; /* mv_expo__pb_*_part: the packed part */
    size_t ocap;
    /* The classic-to-native map of the last histogram's bounds (histograms of one family
     * usually share them): valid for mnb bounds mb, schema mschema, zero threshold mzt. */
    double *mb;
    mv_expo__nh_slot *map;
    size_t mnb, mcap;
    int32_t mschema;
    double mzt;
    int mrc; /* 1: no map (nothing cached); 0 or -EINVAL: the map's result for those bounds */
};

/* Length of the valid UTF-8 sequence at s (1..4), or 0; reads no further than a NUL (which
 * fails the continuation checks). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
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

/* Grows up to four parallel arrays of one capacity *cap to hold need elements. */
static int grow_n(size_t *cap, size_t need, void **a, size_t ea, void **b, size_t eb, void **c,
                  size_t ec, void **d, size_t ed)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void **arr[4] = {a, b, c, d};
    size_t el[4] = {ea, eb, ec, ed};
    for (int i = 0; i < 4; i++) {
        if (!arr[i])
            continue;
        void *q = realloc(*arr[i], n * el[i]);
        if (!q)
            return -ENOMEM;
        *arr[i] = q;
    }
    *cap = n;
    return 0;
}

mv_expo__pb *mv_expo__pb_create(void)
{
    mv_expo__pb *p = calloc(1, sizeof *p);
    if (p) {
        p->schema = 6;
        p->max_buckets = MV_EXPO_NH_MAX_BUCKETS;
        p->mrc = 1;
    }
    return p;
}

void mv_expo__pb_destroy(mv_expo__pb *p)
{
    if (!p)
        return;
    free(p->buf);
    free(p->obuf);
    free(p->mb);
    free(p->map);
    free(p->arena);
    free(p->lbl);
    free(p->pairs);
    free(p->ppairs);
    free(p->xs);
    free(p->qv);
    free(p->cum);
    free(p->qs);
    free(p->pqs);
    free(p->bs);
    free(p->pbs);
    for (int i = 0; i < 2; i++) {
        free(p->sp[i]);
        free(p->psp[i]);
    }
    mv_expo_nh_free(&p->nh);
    free(p);
}

void mv_expo__pb_native(mv_expo__pb *p, int32_t schema, uint32_t max_buckets)
{
    p->schema = schema;
    p->max_buckets = max_buckets ? max_buckets : MV_EXPO_NH_MAX_BUCKETS;
}

/* Room for n more bytes in the family body; sets fail (ENOSPC past the cap, ENOMEM). A
 * request holds at most LEN_ROOM - 1 bytes more than is written, so one that passes the cap by
 * 2 LEN_ROOM is sure to: the exact test (length prefix and body against the cap) is made when
 * the family ends, so that whether a family fits depends on its size alone. */
static uint8_t *room(mv_expo__pb *p, size_t n)
{
    if (p->fail)
        return NULL;
    if (p->len + n > p->cap + 2 * LEN_ROOM) {
        p->fail = ENOSPC;
        return NULL;
    }
    if (p->len + n > p->alloc) {
        size_t a = p->alloc ? p->alloc : 4096;
        while (a < p->len + n)
            a *= 2;
        uint8_t *q = realloc(p->buf, a);
        if (!q) {
            p->fail = ENOMEM;
            return NULL;
        }
        p->buf = q;
        p->alloc = a;
    }
    return p->buf + p->len;
}

size_t mv_expo_pb_put_varint(uint8_t *o, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        o[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    o[n++] = (uint8_t)v;
    return n;
}

size_t mv_expo_pb_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A valid UTF-8, NUL-terminated copy of s in the arena (invalid bytes become U+FFFD);
 * returns its offset or (size_t)-1. */
static size_t arena_str(mv_expo__pb *p, const char *s)
{
    size_t n = strlen(s);
    if (grow((void **)&p->arena, &p->acap, p->alen + 3 * n + 1, 1)) {
        p->fail = ENOMEM;
        return (size_t)-1;
    }
    size_t off = p->alen;
    char *o = p->arena + off;
    const unsigned char *u = (const unsigned char *)s, *end = u + n;
    while (u < end) {
        size_t adv = *u < 0x80 ? 1 : utf8_len(u);
        if (adv == 0) {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            u++;
        } else {
            memcpy(o, u, adv);
            o += adv;
            u += adv;
        }
    }
    *o++ = '\0';
    p->alen = (size_t)(o - p->arena);
    return off;
}

static int utf8_ok(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        if (*u < 0x80) {
            u++;
            continue;
        }
        size_t adv = utf8_len(u);
        if (!adv)
            return 0;
        u += adv;
    }
    return 1;
}

/* Appends a packed message as field `field` (length-delimited). */
static void put_msg(mv_expo__pb *p, unsigned field, const ProtobufCMessage *m)
{
    size_t sz = protobuf_c_message_get_packed_size(m);
    uint8_t *o = room(p, 1 + LEN_ROOM + sz);
    if (!o)
        return;
    size_t h = 0;
    o[h++] = (uint8_t)(field << 3 | 2);
    h += mv_expo_pb_put_varint(o + h, sz);
    protobuf_c_message_pack(m, o + h);
    p->len += h + sz;
}

static void put_str_field(mv_expo__pb *p, unsigned field, const char *s)
{
    size_t n = strlen(s);
    uint8_t *o = room(p, 1 + LEN_ROOM + n);
    if (!o)
        return;
    size_t h = 0;
    o[h++] = (uint8_t)(field << 3 | 2);
    h += mv_expo_pb_put_varint(o + h, n);
    memcpy(o + h, s, n);
    p->len += h + n;
}

static Io__Prometheus__Client__MetricType pb_type(mv_expo_type t)
{
    switch (t) {
    case MV_EXPO_COUNTER:
        return IO__PROMETHEUS__CLIENT__METRIC_TYPE__COUNTER;
    case MV_EXPO_GAUGE:
        return IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE;
    case MV_EXPO_HISTOGRAM:
        return IO__PROMETHEUS__CLIENT__METRIC_TYPE__HISTOGRAM;
    case MV_EXPO_SUMMARY:
        return IO__PROMETHEUS__CLIENT__METRIC_TYPE__SUMMARY;
    case MV_EXPO_GAUGE_HISTOGRAM:
        return IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE_HISTOGRAM;
    default:
        return IO__PROMETHEUS__CLIENT__METRIC_TYPE__UNTYPED;
    }
}

void mv_expo__pb_begin(mv_expo__pb *p, const char *name, mv_expo_type t, const char *help,
                       const char *unit, size_t cap)
{
    p->len = LEN_ROOM;
    p->cap = cap;
    p->fail = 0;
    p->open = 0;
    p->type = t;
    if (!room(p, 0))
        return;
    p->alen = 0;
    put_str_field(p, 1, name); /* name: checked by the caller ([a-zA-Z_:]...) */
    if (help && *help) {
        size_t off = arena_str(p, help);
        if (off != (size_t)-1)
            put_str_field(p, 2, p->arena + off);
    }
    uint8_t *o = room(p, 1 + LEN_ROOM);
    if (o) {
        o[0] = 3 << 3; /* type, varint */
        p->len += 1 + mv_expo_pb_put_varint(o + 1, (uint64_t)pb_type(t));
    }
    if (unit && *unit && utf8_ok(unit))
        put_str_field(p, 5, unit);
}

/* The series' labels as LabelPair pointers (from the arena offsets). */
static int labels_ready(mv_expo__pb *p)
{
    if (grow_n(&p->pcap, p->nlbl + 1, (void **)&p->pairs, sizeof *p->pairs, (void **)&p->ppairs,
               sizeof *p->ppairs, NULL, 0, NULL, 0)) {
        p->fail = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < p->nlbl; i++) {
        io__prometheus__client__label_pair__init(&p->pairs[i]);
        p->pairs[i].name = p->arena + p->lbl[i].name;
        p->pairs[i].value = p->arena + p->lbl[i].value;
        p->ppairs[i] = &p->pairs[i];
    }
    return 0;
}

/* Copies the labels of a sample (a then b, without the extra one) into the arena. */
static int labels_copy(mv_expo__pb *p, const mv_expo_label *a, size_t na, const mv_expo_label *b,
                       size_t nb)
{
    p->alen = 0;
    p->nlbl = 0;
    if (grow((void **)&p->lbl, &p->lcap, na + nb, sizeof *p->lbl)) {
        p->fail = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < na + nb; i++) {
        const mv_expo_label *l = i < na ? &a[i] : &b[i - na];
        size_t no = arena_str(p, l->name);
        size_t vo = arena_str(p, l->value ? l->value : "");
        if (no == (size_t)-1 || vo == (size_t)-1)
            return -1;
        p->lbl[p->nlbl++] = (lbl_off){no, vo};
    }
    return 0;
}

/* The Summary of the series held in p (xs quantiles, qv values, sum, count). */
static int fill_summary(mv_expo__pb *p, Io__Prometheus__Client__Summary *s)
{
    if (grow_n(&p->qcap, p->nx + 1, (void **)&p->qs, sizeof *p->qs, (void **)&p->pqs,
               sizeof *p->pqs, (void **)&p->bs, sizeof *p->bs, (void **)&p->pbs, sizeof *p->pbs)) {
        p->fail = ENOMEM;
        return -ENOMEM;
    }
    for (size_t i = 0; i < p->nx; i++) {
        io__prometheus__client__quantile__init(&p->qs[i]);
        p->qs[i].has_quantile = p->qs[i].has_value = 1;
        p->qs[i].quantile = p->xs[i];
        p->qs[i].value = p->qv[i];
        p->pqs[i] = &p->qs[i];
    }
    s->n_quantile = p->nx;
    s->quantile = p->pqs;
    s->has_sample_sum = s->has_sample_count = 1;
    s->sample_sum = p->sum;
    s->sample_count = p->count;
    return 0;
}

static int native_fields(mv_expo__pb *p, Io__Prometheus__Client__Histogram *h);

/* The Histogram of the series held in p (xs bounds with +Inf among them, cum their cumulative
 * counts, sum, count): classic buckets and, unless off, the native histogram built from them.
 * xs and cum are compacted to the finite bounds (room: nx + 1). */
static int fill_hist(mv_expo__pb *p, Io__Prometheus__Client__Histogram *h)
{
    if (grow_n(&p->qcap, p->nx + 1, (void **)&p->qs, sizeof *p->qs, (void **)&p->pqs,
               sizeof *p->pqs, (void **)&p->bs, sizeof *p->bs, (void **)&p->pbs, sizeof *p->pbs)) {
        p->fail = ENOMEM;
        return -ENOMEM;
    }
    size_t nfin = 0; /* the finite bounds: the +Inf bucket is the count */
    for (size_t i = 0; i < p->nx; i++) {
        if (isinf(p->xs[i]) && p->xs[i] > 0)
            continue;
        io__prometheus__client__bucket__init(&p->bs[nfin]);
        p->bs[nfin].has_cumulative_count = p->bs[nfin].has_upper_bound = 1;
        p->bs[nfin].cumulative_count = p->cum[i];
        p->bs[nfin].upper_bound = p->xs[i];
        p->pbs[nfin] = &p->bs[nfin];
        p->xs[nfin] = p->xs[i];
        p->cum[nfin] = p->cum[i];
        nfin++;
    }
    h->n_bucket = nfin;
    h->bucket = p->pbs;
    h->has_sample_sum = h->has_sample_count = 1;
    h->sample_sum = p->sum;
    h->sample_count = p->count;
    if (p->schema == MV_EXPO_NH_OFF)
        return 0;
    p->cum[nfin] = p->count; /* the +Inf bucket (room: nx + 1) */
    mv_expo_nh_begin(&p->nh, p->schema);
    if (p->mrc == 1 || p->mnb != nfin || p->mschema != p->nh.schema ||
        p->mzt != p->nh.zero_threshold ||
        (nfin && memcmp(p->mb, p->xs, nfin * sizeof *p->xs) != 0)) {
        p->mrc = 1;
        if (grow_n(&p->mcap, nfin + 1, (void **)&p->mb, sizeof *p->mb, (void **)&p->map,
                   sizeof *p->map, NULL, 0, NULL, 0))
            return 0; /* as a failed add: no native part */
        memcpy(p->mb, p->xs, nfin * sizeof *p->xs);
        p->mnb = nfin;
        p->mschema = p->nh.schema;
        p->mzt = p->nh.zero_threshold;
        p->mrc = mv_expo__nh_classic_map(&p->nh, p->xs, nfin, p->map);
    }
    if (p->mrc != 0 || mv_expo__nh_add_mapped(&p->nh, p->map, nfin, p->cum) != 0 ||
        mv_expo_nh_finish(&p->nh, p->max_buckets) != 0)
        return 0;
    return native_fields(p, h);
}

/* The native fields of h from p->nh (finished): schema, zero bucket, spans and deltas. */
static int native_fields(mv_expo__pb *p, Io__Prometheus__Client__Histogram *h)
{
    h->has_schema = h->has_zero_threshold = h->has_zero_count = 1;
    h->schema = p->nh.schema;
    h->zero_threshold = p->nh.zero_threshold;
    h->zero_count = p->nh.zero_count;
    for (int sg = 0; sg < 2; sg++) {
        size_t ns = p->nh.nspan[sg];
        if (grow_n(&p->spcap[sg], ns + 1, (void **)&p->sp[sg], sizeof *p->sp[sg],
                   (void **)&p->psp[sg], sizeof *p->psp[sg], NULL, 0, NULL, 0)) {
            p->fail = ENOMEM;
            return -ENOMEM;
        }
        for (size_t i = 0; i < ns; i++) {
            io__prometheus__client__bucket_span__init(&p->sp[sg][i]);
            p->sp[sg][i].has_offset = p->sp[sg][i].has_length = 1;
            p->sp[sg][i].offset = p->nh.span[sg][i].offset;
            p->sp[sg][i].length = p->nh.span[sg][i].length;
            p->psp[sg][i] = &p->sp[sg][i];
        }
    }
    h->n_positive_span = p->nh.nspan[0];
    h->positive_span = p->psp[0];
    h->n_positive_delta = p->nh.ndelta[0];
    h->positive_delta = p->nh.delta[0];
    h->n_negative_span = p->nh.nspan[1];
    h->negative_span = p->psp[1];
    h->n_negative_delta = p->nh.ndelta[1];
    h->negative_delta = p->nh.delta[1];
    if (!h->n_positive_span && !h->n_negative_span) {
        /* No observations: a no-op span keeps it a native histogram. */
        io__prometheus__client__bucket_span__init(&p->sp[0][0]);
        p->sp[0][0].has_offset = p->sp[0][0].has_length = 1;
        p->psp[0][0] = &p->sp[0][0];
        h->n_positive_span = 1;
        h->positive_span = p->psp[0];
    }
    return 0;
}

static int flush_series(mv_expo__pb *p)
{
    if (!p->open)
        return 0;
    p->open = 0;
    if (p->fail || labels_ready(p))
        return -p->fail;
    Io__Prometheus__Client__Metric m = IO__PROMETHEUS__CLIENT__METRIC__INIT;
    m.n_label = p->nlbl;
    m.label = p->ppairs;
    if (p->ts != MV_EXPO_NO_TS) {
        m.has_timestamp_ms = 1;
        m.timestamp_ms = p->ts;
    }
    Io__Prometheus__Client__Summary s = IO__PROMETHEUS__CLIENT__SUMMARY__INIT;
    Io__Prometheus__Client__Histogram h = IO__PROMETHEUS__CLIENT__HISTOGRAM__INIT;
    if (p->type == MV_EXPO_SUMMARY) {
        if (fill_summary(p, &s))
            return -p->fail;
        m.summary = &s;
    } else {
        if (fill_hist(p, &h))
            return -p->fail;
        m.histogram = &h;
    }
    put_msg(p, 4, &m.base);
    return -p->fail;
}

/* Packs m into p->obuf, which `bound` bytes are sure to hold (one pass of protobuf-c instead of
 * two: sizing, then packing). */
static int pack_out(mv_expo__pb *p, const ProtobufCMessage *m, size_t bound, const uint8_t **out,
                    size_t *len)
{
    if (grow((void **)&p->obuf, &p->ocap, bound, 1))
        return -ENOMEM;
    *len = protobuf_c_message_pack(m, p->obuf);
    *out = p->obuf;
    return 0;
}

/* Loads a series' parts into p's arrays (as the samples of a summary or histogram would). */
static int load_parts(mv_expo__pb *p, const double *x, const double *qv, const uint64_t *cum,
                      size_t n, double sum, uint64_t count)
{
    if (p->open)
        return -EINVAL; /* a family's series is being assembled */
    if (grow_n(&p->xcap, n + 2, (void **)&p->xs, sizeof *p->xs, (void **)&p->qv, sizeof *p->qv,
               (void **)&p->cum, sizeof *p->cum, NULL, 0))
        return -ENOMEM;
    memcpy(p->xs, x, n * sizeof *x);
    if (qv)
        memcpy(p->qv, qv, n * sizeof *qv);
    if (cum)
        memcpy(p->cum, cum, n * sizeof *cum);
    p->nx = n;
    p->sum = sum;
    p->count = count;
    return 0;
}

int mv_expo__pb_hist_part(mv_expo__pb *p, const double *le, const uint64_t *cum, size_t n,
                          double sum, uint64_t count, const uint8_t **out, size_t *len)
{
    int rc = load_parts(p, le, NULL, cum, n, sum, count);
    if (rc)
        return rc;
    Io__Prometheus__Client__Histogram h = IO__PROMETHEUS__CLIENT__HISTOGRAM__INIT;
    int fail = p->fail; /* a counter or gauge family may be open: its state is kept */
    rc = fill_hist(p, &h);
    p->fail = fail;
    /* Varints at most 10 bytes, doubles 8, tags 1: a bucket is at most 2 + 11 + 9 bytes, a span
     * 2 + 6 + 6, a delta 10, the rest (counts, sum, schema, zero bucket, lengths) under 96. */
    size_t bound = 96 + 24 * h.n_bucket + 16 * (h.n_positive_span + h.n_negative_span) +
                   10 * (h.n_positive_delta + h.n_negative_delta);
    return rc ? rc : pack_out(p, &h.base, bound, out, len);
}

/* The Histogram of a native histogram given by its buckets (no classic buckets). */
static int fill_native(mv_expo__pb *p, const mv_expo_native_in *in,
                       Io__Prometheus__Client__Histogram *h)
{
    h->has_sample_sum = h->has_sample_count = 1;
    h->sample_sum = in->sum;
    h->sample_count = in->count;
    mv_expo_nh_begin(&p->nh, in->schema);
    p->nh.zero_count = in->zero_count;
    for (size_t i = 0; i < in->nb; i++)
        if (mv_expo_nh_add_bucket(&p->nh, in->b[i].idx, (int)in->b[i].neg, in->b[i].n) != 0) {
            p->fail = ENOMEM;
            return -ENOMEM;
        }
    if (mv_expo_nh_finish(&p->nh, p->max_buckets) != 0) {
        p->fail = ENOMEM;
        return -ENOMEM;
    }
    return native_fields(p, h);
}

int mv_expo__pb_native_series(mv_expo__pb *p, const mv_expo_label *a, size_t na,
                              const mv_expo_label *b, size_t nb, const mv_expo_native_in *in,
                              int64_t ts)
{
    if (p->fail)
        return -p->fail;
    if (flush_series(p) || labels_copy(p, a, na, b, nb) || labels_ready(p))
        return -p->fail;
    Io__Prometheus__Client__Metric m = IO__PROMETHEUS__CLIENT__METRIC__INIT;
    m.n_label = p->nlbl;
    m.label = p->ppairs;
    if (ts != MV_EXPO_NO_TS) {
        m.has_timestamp_ms = 1;
        m.timestamp_ms = ts;
    }
    Io__Prometheus__Client__Histogram h = IO__PROMETHEUS__CLIENT__HISTOGRAM__INIT;
    if (fill_native(p, in, &h))
        return -p->fail;
    m.histogram = &h;
    put_msg(p, 4, &m.base);
    return -p->fail;
}

int mv_expo__pb_native_part(mv_expo__pb *p, const mv_expo_native_in *in, const uint8_t **out,
                            size_t *len)
{
    if (p->open)
        return -EINVAL;
    Io__Prometheus__Client__Histogram h = IO__PROMETHEUS__CLIENT__HISTOGRAM__INIT;
    int fail = p->fail;
    p->fail = 0;
    int rc = fill_native(p, in, &h);
    p->fail = fail;
    size_t bound = 96 + 16 * (h.n_positive_span + h.n_negative_span) +
                   10 * (h.n_positive_delta + h.n_negative_delta);
    return rc ? rc : pack_out(p, &h.base, bound, out, len);
}

int mv_expo__pb_summary_part(mv_expo__pb *p, const double *q, const double *v, size_t n, double sum,
                             uint64_t count, const uint8_t **out, size_t *len)
{
    int rc = load_parts(p, q, v, NULL, n, sum, count);
    if (rc)
        return rc;
    Io__Prometheus__Client__Summary s = IO__PROMETHEUS__CLIENT__SUMMARY__INIT;
    int fail = p->fail;
    rc = fill_summary(p, &s);
    p->fail = fail;
    /* A quantile is at most 2 + 9 + 9 bytes; count and sum 20. */
    return rc ? rc : pack_out(p, &s.base, 32 + 24 * s.n_quantile, out, len);
}

int mv_expo__pb_sample(mv_expo__pb *p, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                       uint64_t u, int is_u, int64_t ts)
{
    if (p->fail)
        return -p->fail;
    (void)xname;
    if (p->type == MV_EXPO_SUMMARY || p->type == MV_EXPO_HISTOGRAM) {
        if (suffix && !strcmp(suffix, "_created"))
            return 0;
        int slot = !suffix || !strcmp(suffix, "_bucket") ? 0 : !strcmp(suffix, "_sum") ? 1 : 2;
        /* A new series: the first sample, or one that comes back to an earlier part. */
        if (!p->open || slot < p->slot || (slot == p->slot && slot > 0)) {
            if (flush_series(p))
                return -p->fail;
            if (labels_copy(p, a, na, b, nb))
                return -p->fail;
            if (grow_n(&p->xcap, 2, (void **)&p->xs, sizeof *p->xs, (void **)&p->qv, sizeof *p->qv,
                       (void **)&p->cum, sizeof *p->cum, NULL, 0)) {
                p->fail = ENOMEM;
                return -ENOMEM;
            }
            p->open = 1;
            p->nx = 0;
            p->sum = 0;
            p->count = 0;
            p->ts = ts;
        }
        p->slot = slot;
        double dv = is_u ? (double)u : v;
        if (slot == 0) {
            if (grow_n(&p->xcap, p->nx + 2, (void **)&p->xs, sizeof *p->xs, (void **)&p->qv,
                       sizeof *p->qv, (void **)&p->cum, sizeof *p->cum, NULL, 0)) {
                p->fail = ENOMEM;
                return -ENOMEM;
            }
            p->xs[p->nx] = xval;
            p->qv[p->nx] = dv;
            p->cum[p->nx] = is_u ? u : (v > 0 && v < 1.8e19 ? (uint64_t)llround(v) : 0);
            p->nx++;
        } else if (slot == 1) {
            p->sum = dv;
        } else {
            p->count = is_u ? u : (v > 0 && v < 1.8e19 ? (uint64_t)llround(v) : 0);
        }
        return 0;
    }
    if (suffix) /* counters' _created: not part of this format */
        return 0;
    /* Counter, gauge, untyped: one metric per sample, packed at once. */
    p->nlbl = 0;
    p->alen = 0;
    if (grow((void **)&p->lbl, &p->lcap, na + nb, sizeof *p->lbl) ||
        grow_n(&p->pcap, na + nb + 1, (void **)&p->pairs, sizeof *p->pairs, (void **)&p->ppairs,
               sizeof *p->ppairs, NULL, 0, NULL, 0)) {
        p->fail = ENOMEM;
        return -ENOMEM;
    }
    for (size_t i = 0; i < na + nb; i++) {
        const mv_expo_label *l = i < na ? &a[i] : &b[i - na];
        const char *val = l->value ? l->value : "";
        io__prometheus__client__label_pair__init(&p->pairs[i]);
        p->pairs[i].name = (char *)l->name;
        if (utf8_ok(val)) {
            p->pairs[i].value = (char *)val;
        } else {
            size_t off = arena_str(p, val);
            if (off == (size_t)-1)
                return -p->fail;
            p->pairs[i].value = NULL;
            p->lbl[i].value = off; /* resolved below: the arena may have moved */
        }
        p->ppairs[i] = &p->pairs[i];
    }
    for (size_t i = 0; i < na + nb; i++)
        if (!p->pairs[i].value)
            p->pairs[i].value = p->arena + p->lbl[i].value;
    Io__Prometheus__Client__Metric m = IO__PROMETHEUS__CLIENT__METRIC__INIT;
    m.n_label = na + nb;
    m.label = p->ppairs;
    if (ts != MV_EXPO_NO_TS) {
        m.has_timestamp_ms = 1;
        m.timestamp_ms = ts;
    }
    double dv = is_u ? (double)u : v;
    Io__Prometheus__Client__Counter c = IO__PROMETHEUS__CLIENT__COUNTER__INIT;
    Io__Prometheus__Client__Gauge g = IO__PROMETHEUS__CLIENT__GAUGE__INIT;
    Io__Prometheus__Client__Untyped un = IO__PROMETHEUS__CLIENT__UNTYPED__INIT;
    if (p->type == MV_EXPO_COUNTER) {
        c.has_value = 1;
        c.value = dv;
        m.counter = &c;
    } else if (p->type == MV_EXPO_GAUGE) {
        g.has_value = 1;
        g.value = dv;
        m.gauge = &g;
    } else {
        un.has_value = 1;
        un.value = dv;
        m.untyped = &un;
    }
    put_msg(p, 4, &m.base);
    return -p->fail;
}

int mv_expo__pb_end(mv_expo__pb *p, const char **data, size_t *len)
{
    flush_series(p);
    if (p->fail)
        return -p->fail;
    size_t body = p->len - LEN_ROOM;
    uint8_t tmp[LEN_ROOM];
    size_t h = mv_expo_pb_put_varint(tmp, body);
    if (h + body > p->cap) {
        p->fail = ENOSPC;
        return -ENOSPC;
    }
    memcpy(p->buf + LEN_ROOM - h, tmp, h);
    *data = (const char *)p->buf + LEN_ROOM - h;
    *len = body + h;
    return 0;
}
