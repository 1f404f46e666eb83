/* mv_rw_encode: remote write bodies: WriteRequest (1.0) and io.prometheus.write.v2.Request
 * (2.0, symbols table) packed with protobuf-c, compressed with Debian's libsnappy (the Snappy
 * block format the protocol mandates). */
#include <errno.h>
#include <math.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>

#include "mv_expo.h"
#include "mv_rw.h"
#include "prometheus/prompb/remote.pb-c.h"
#include "prometheus/write/v2/types.pb-c.h"

/* ---- Snappy ------------------------------------------------------------------------------- */

int mv_rw_unsnappy(const uint8_t *in, size_t n, size_t max_out, uint8_t **out, size_t *len)
{
    size_t ulen;
    *out = NULL;
    *len = 0;
    if (snappy_uncompressed_length((const char *)in, n, &ulen) != SNAPPY_OK)
        return -EINVAL;
    if (ulen > max_out)
        return -E2BIG;
    if (snappy_validate_compressed_buffer((const char *)in, n) != SNAPPY_OK)
        return -EINVAL;
    uint8_t *o = malloc(ulen ? ulen : 1);
    if (!o)
        return -ENOMEM;
    size_t got = ulen;
    if (snappy_uncompress((const char *)in, n, (char *)o, &got) != SNAPPY_OK || got != ulen) {
        free(o);
        return -EINVAL;
    }
    *out = o;
    *len = got;
    return 0;
}

static int snappy_pack(const uint8_t *raw, size_t n, uint8_t **out, size_t *len)
{
    size_t cap = snappy_max_compressed_length(n);
    uint8_t *o = malloc(cap ? cap : 1);
    if (!o)
        return -ENOMEM;
    size_t got = cap;
    if (snappy_compress((const char *)raw, n, (char *)o, &got) != SNAPPY_OK) {
        free(o);
        return -ENOMEM;
    }
    *out = o;
    *len = got;
    return 0;
}

/* ---- 1.0 ------------------------------------------------------------------------------------ */

/* A histogram's classic series for 1.0: <name>_bucket{le} per bucket, _sum, _count. Fills
 * out[] (room for nbounds + 3) with labels from lab (room for (nbounds + 3) (nlabels + 1))
 * and strings from str (room for (nbounds + 3) * 40 + 3 * (strlen(name) + 8)). */
static size_t expand_hist(const mv_rw_series *h, mv_rw_series *out, mv_rw_label *lab, char *str)
{
    const char *name = "";
    for (size_t j = 0; j < h->nlabels; j++)
        if (strcmp(h->labels[j].name, "__name__") == 0)
            name = h->labels[j].value;
    size_t nl = strlen(name), k = 0;
    char *nb = str, *ns = str + nl + 8, *nc = str + 2 * (nl + 8), *le = str + 3 * (nl + 8);
    memcpy(nb, name, nl);
    memcpy(nb + nl, "_bucket", 8);
    memcpy(ns, name, nl);
    memcpy(ns + nl, "_sum", 5);
    memcpy(nc, name, nl);
    memcpy(nc + nl, "_count", 7);
    for (size_t b = 0; b <= h->nbounds + 2; b++) {
        int bucket = b <= h->nbounds;
        mv_rw_label *l = lab + b * (h->nlabels + 1);
        size_t m = 0;
        const char *nm = bucket ? nb : b == h->nbounds + 1 ? ns : nc;
        char *v = le + b * 40;
        if (bucket)
            mv_expo_format_double(b < h->nbounds ? h->bounds[b] : INFINITY, 0, v, 40);
        int put_le = bucket;
        for (size_t j = 0; j < h->nlabels; j++) {
            const mv_rw_label *src = &h->labels[j];
            if (put_le && strcmp(src->name, "le") > 0) {
                l[m++] = (mv_rw_label){"le", v};
                put_le = 0;
            }
            if (strcmp(src->name, "__name__") == 0)
                l[m++] = (mv_rw_label){"__name__", nm};
            else
                l[m++] = *src;
        }
        if (put_le)
            l[m++] = (mv_rw_label){"le", v};
        double val = bucket ? (double)h->cum[b] : b == h->nbounds + 1 ? h->sum : (double)h->count;
        out[k++] = (mv_rw_series){.labels = l, .nlabels = m, .value = val, .ts_ms = h->ts_ms};
    }
    return k;
}

/* A Sample's fields as protobuf-c packs them: proto3 scalars are left out when they compare
 * equal to zero (so -0.0 as well: it arrives as 0). */
static size_t sample_len(double v, int64_t ts)
{
    return (v != 0.0 ? 9 : 0) + (ts ? 1 + mv_expo_pb_varint_len((uint64_t)ts) : 0);
}

static size_t put_sample(uint8_t *o, double v, int64_t ts)
{
    uint8_t *p = o;
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    if (v != 0.0) {
        *p++ = 0x09; /* field 1, 64-bit */
        for (int i = 0; i < 8; i++)
            *p++ = (uint8_t)(bits >> (8 * i));
    }
    if (ts) {
        *p++ = 0x10; /* field 2, varint */
        p += mv_expo_pb_put_varint(p, (uint64_t)ts);
    }
    return (size_t)(p - o);
}

/* The label fields of a TimeSeries: n Label messages, as protobuf-c packs them. */
static void labels_pb(const mv_rw_label *l, size_t n, Prometheus__Label *lb,
                      Prometheus__Label **plb, Prometheus__TimeSeries *ts)
{
    prometheus__time_series__init(ts);
    for (size_t j = 0; j < n; j++) {
        prometheus__label__init(&lb[j]);
        lb[j].name = (char *)l[j].name;
        lb[j].value = (char *)l[j].value;
        plb[j] = &lb[j];
    }
    ts->n_labels = n;
    ts->labels = plb;
}

#define PB_LABELS_MAX 256

size_t mv_rw_labels_pb_size(const mv_rw_label *l, size_t n)
{
    Prometheus__Label lb[PB_LABELS_MAX], *plb[PB_LABELS_MAX];
    Prometheus__TimeSeries ts;
    if (n > PB_LABELS_MAX)
        return 0;
    labels_pb(l, n, lb, plb, &ts);
    return prometheus__time_series__get_packed_size(&ts);
}

void mv_rw_labels_pb_pack(const mv_rw_label *l, size_t n, uint8_t *out)
{
    Prometheus__Label lb[PB_LABELS_MAX], *plb[PB_LABELS_MAX];
    Prometheus__TimeSeries ts;
    if (n > PB_LABELS_MAX)
        return;
    labels_pb(l, n, lb, plb, &ts);
    prometheus__time_series__pack(&ts, out);
}

/* A WriteRequest is its TimeSeries, each as field 1 (tag, length, message), in order: each
 * series is packed alone (its labels by protobuf-c, or copied from pb_labels when given; its
 * one Sample), which gives protobuf-c's bytes for the whole request. Gauge histograms (is_hist
 * 2) are left out: 1.0 has no classic form of them. */
static int pack_v1(const mv_rw_series *in, size_t nin, uint8_t **raw, size_t *rlen)
{
    /* Histograms become their classic series. */
    size_t n = 0, nlab = 0, nstr = 0;
    for (size_t i = 0; i < nin; i++) {
        if (in[i].is_hist == 2)
            continue;
        if (!in[i].is_hist) {
            n++;
            continue;
        }
        n += in[i].nbounds + 3;
        nlab += (in[i].nbounds + 3) * (in[i].nlabels + 1);
        for (size_t j = 0; j < in[i].nlabels; j++)
            if (strcmp(in[i].labels[j].name, "__name__") == 0)
                nstr += 3 * (strlen(in[i].labels[j].value) + 8);
        nstr += (in[i].nbounds + 3) * 40;
    }
    mv_rw_series *s = malloc((n ? n : 1) * sizeof *s);
    mv_rw_label *xl = malloc((nlab ? nlab : 1) * sizeof *xl);
    char *xs = malloc(nstr ? nstr : 1);
    size_t *tlen = malloc((n ? n : 1) * sizeof *tlen);
    int rc = -ENOMEM;
    Prometheus__TimeSeries *ts = NULL;
    Prometheus__Sample *sm = NULL, **psm = NULL;
    Prometheus__Label *lb = NULL, **plb = NULL;
    if (!s || !xl || !xs || !tlen)
        goto out;
    {
        size_t k = 0, lo = 0, so = 0;
        for (size_t i = 0; i < nin; i++) {
            if (in[i].is_hist == 2)
                continue;
            if (!in[i].is_hist) {
                s[k++] = in[i];
                continue;
            }
            size_t name_len = 0;
            for (size_t j = 0; j < in[i].nlabels; j++)
                if (strcmp(in[i].labels[j].name, "__name__") == 0)
                    name_len = strlen(in[i].labels[j].value);
            k += expand_hist(&in[i], s + k, xl + lo, xs + so);
            lo += (in[i].nbounds + 3) * (in[i].nlabels + 1);
            so += 3 * (name_len + 8) + (in[i].nbounds + 3) * 40;
        }
    }
    /* protobuf-c messages for the series without packed labels. */
    size_t np = 0, nl = 0;
    for (size_t i = 0; i < n; i++)
        if (!s[i].pb_labels) {
            np++;
            nl += s[i].nlabels;
        }
    ts = calloc(np ? np : 1, sizeof *ts);
    sm = calloc(np ? np : 1, sizeof *sm);
    psm = calloc(np ? np : 1, sizeof *psm);
    lb = calloc(nl ? nl : 1, sizeof *lb);
    plb = calloc(nl ? nl : 1, sizeof *plb);
    if (!ts || !sm || !psm || !lb || !plb)
        goto out;
    size_t total = 0;
    for (size_t i = 0, p = 0, k = 0; i < n; i++) {
        if (s[i].pb_labels) {
            size_t sl = sample_len(s[i].value, s[i].ts_ms);
            tlen[i] = s[i].pb_len + 1 + mv_expo_pb_varint_len(sl) + sl;
        } else {
            labels_pb(s[i].labels, s[i].nlabels, &lb[k], &plb[k], &ts[p]);
            k += s[i].nlabels;
            prometheus__sample__init(&sm[p]);
            sm[p].value = s[i].value;
            sm[p].timestamp = s[i].ts_ms;
            psm[p] = &sm[p];
            ts[p].n_samples = 1;
            ts[p].samples = &psm[p];
            tlen[i] = prometheus__time_series__get_packed_size(&ts[p]);
            p++;
        }
        total += 1 + mv_expo_pb_varint_len(tlen[i]) + tlen[i];
    }
    uint8_t *o = *raw = malloc(total ? total : 1);
    if (!o)
        goto out;
    for (size_t i = 0, p = 0; i < n; i++) {
        *o++ = 0x0a; /* WriteRequest.timeseries, field 1 */
        o += mv_expo_pb_put_varint(o, tlen[i]);
        if (s[i].pb_labels) {
            memcpy(o, s[i].pb_labels, s[i].pb_len);
            o += s[i].pb_len;
            *o++ = 0x12; /* TimeSeries.samples, field 2 */
            o += mv_expo_pb_put_varint(o, sample_len(s[i].value, s[i].ts_ms));
            o += put_sample(o, s[i].value, s[i].ts_ms);
        } else {
            o += prometheus__time_series__pack(&ts[p++], o);
        }
    }
    *rlen = (size_t)(o - *raw);
    rc = 0;
out:
    free(s);
    free(xl);
    free(xs);
    free(tlen);
    free(ts);
    free(sm);
    free(psm);
    free(lb);
    free(plb);
    return rc;
}

/* ---- 2.0 ------------------------------------------------------------------------------------ */

/* The symbols table: "" first, as the spec requires, then each string once. */
typedef struct {
    const char **sym;
    size_t n, cap;
    uint32_t *slot; /* open addressing: index + 1 into sym, 0 empty */
    size_t nslot;
} symtab;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int sym_ref(symtab *t, const char *s, uint32_t *ref)
{
    size_t mask = t->nslot - 1;
    for (size_t i = str_hash(s) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->slot[i];
        if (!v) {
            if (t->n == t->cap)
                return -ENOMEM; /* sized for every string up front */
            t->sym[t->n] = s;
            t->slot[i] = (uint32_t)++t->n;
            *ref = (uint32_t)(t->n - 1);
            return 0;
        }
        if (strcmp(t->sym[v - 1], s) == 0) {
            *ref = v - 1;
            return 0;
        }
    }
}

/* A histogram's native form for 2.0 (nh and the span structs stay alive until packed). */
static int native_v2(const mv_rw_series *s, int32_t schema, mv_expo_nh *nh,
                     Io__Prometheus__Write__V2__Histogram *h,
                     Io__Prometheus__Write__V2__BucketSpan **sp,
                     Io__Prometheus__Write__V2__BucketSpan ***psp)
{
    io__prometheus__write__v2__histogram__init(h);
    int rc = 0;
    if (s->is_hist == 2) { /* a gauge histogram: its own schema and buckets */
        mv_expo_nh_begin(nh, s->native_schema);
        nh->zero_count = s->zero_count;
        for (size_t i = 0; i < s->nnbkt && rc == 0; i++)
            rc = mv_expo_nh_add_bucket(nh, s->nbkt[i].idx, (int)s->nbkt[i].neg, s->nbkt[i].n);
        if (rc)
            return rc;
        h->reset_hint = IO__PROMETHEUS__WRITE__V2__HISTOGRAM__RESET_HINT__RESET_HINT_GAUGE;
    } else {
        mv_expo_nh_begin(nh, schema);
        rc = mv_expo_nh_add_classic(nh, s->bounds, s->nbounds, s->cum);
        if (rc == -EINVAL) /* bounds that are not increasing: the count alone */
            mv_expo_nh_begin(nh, schema);
        else if (rc)
            return rc;
    }
    if ((rc = mv_expo_nh_finish(nh, 0)))
        return rc;
    h->count_case = IO__PROMETHEUS__WRITE__V2__HISTOGRAM__COUNT_COUNT_INT;
    h->count_int = s->count;
    h->sum = s->sum;
    h->schema = nh->schema;
    h->zero_threshold = nh->zero_threshold;
    h->zero_count_case = IO__PROMETHEUS__WRITE__V2__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_INT;
    h->zero_count_int = nh->zero_count;
    h->timestamp = s->ts_ms;
    size_t ns = nh->nspan[0] + nh->nspan[1];
    *sp = calloc(ns ? ns : 1, sizeof **sp);
    *psp = calloc(ns ? ns : 1, sizeof **psp);
    if (!*sp || !*psp)
        return -ENOMEM;
    size_t k = 0;
    for (int sign = 0; sign < 2; sign++) {
        for (size_t i = 0; i < nh->nspan[sign]; i++, k++) {
            io__prometheus__write__v2__bucket_span__init(&(*sp)[k]);
            (*sp)[k].offset = nh->span[sign][i].offset;
            (*sp)[k].length = nh->span[sign][i].length;
            (*psp)[k] = &(*sp)[k];
        }
    }
    h->n_positive_spans = nh->nspan[0];
    h->positive_spans = *psp;
    h->n_positive_deltas = nh->ndelta[0];
    h->positive_deltas = nh->delta[0];
    h->n_negative_spans = nh->nspan[1];
    h->negative_spans = *psp + nh->nspan[0];
    h->n_negative_deltas = nh->ndelta[1];
    h->negative_deltas = nh->delta[1];
    return 0;
}

static int pack_v2(const mv_rw_series *s, size_t n, int32_t schema, uint8_t **raw, size_t *rlen)
{
    size_t nh_n = 0;
    for (size_t i = 0; i < n; i++)
        nh_n += s[i].is_hist != 0;
    mv_expo_nh *nh = calloc(nh_n ? nh_n : 1, sizeof *nh);
    Io__Prometheus__Write__V2__Histogram *hs = calloc(nh_n ? nh_n : 1, sizeof *hs);
    Io__Prometheus__Write__V2__Histogram **phs = calloc(nh_n ? nh_n : 1, sizeof *phs);
    Io__Prometheus__Write__V2__BucketSpan **sps = calloc(nh_n ? nh_n : 1, sizeof *sps);
    Io__Prometheus__Write__V2__BucketSpan ***psps = calloc(nh_n ? nh_n : 1, sizeof *psps);
    size_t hk = 0;
    size_t nl = 0;
    for (size_t i = 0; i < n; i++)
        nl += s[i].nlabels;
    symtab t = {0};
    t.cap = 2 * nl + 1;
    t.nslot = 16;
    while (t.nslot < 2 * t.cap)
        t.nslot *= 2;
    t.sym = malloc(t.cap * sizeof *t.sym);
    t.slot = calloc(t.nslot, sizeof *t.slot);
    Io__Prometheus__Write__V2__TimeSeries *ts = calloc(n ? n : 1, sizeof *ts);
    Io__Prometheus__Write__V2__TimeSeries **pts = calloc(n ? n : 1, sizeof *pts);
    Io__Prometheus__Write__V2__Sample *sm = calloc(n ? n : 1, sizeof *sm);
    Io__Prometheus__Write__V2__Sample **psm = calloc(n ? n : 1, sizeof *psm);
    uint32_t *refs = calloc(2 * nl + 1, sizeof *refs);
    int rc = -ENOMEM;
    if (!t.sym || !t.slot || !ts || !pts || !sm || !psm || !refs || !nh || !hs || !phs || !sps ||
        !psps)
        goto out;
    uint32_t r0;
    sym_ref(&t, "", &r0);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        io__prometheus__write__v2__time_series__init(&ts[i]);
        io__prometheus__write__v2__sample__init(&sm[i]);
        if (s[i].is_hist) {
            if (native_v2(&s[i], schema, &nh[hk], &hs[hk], &sps[hk], &psps[hk]))
                goto out;
            phs[hk] = &hs[hk];
            ts[i].n_histograms = 1;
            ts[i].histograms = &phs[hk];
            hk++;
        } else {
            sm[i].value = s[i].value;
            sm[i].timestamp = s[i].ts_ms;
            psm[i] = &sm[i];
            ts[i].n_samples = 1;
            ts[i].samples = &psm[i];
        }
        ts[i].labels_refs = &refs[k];
        ts[i].n_labels_refs = 2 * s[i].nlabels;
        for (size_t j = 0; j < s[i].nlabels; j++) {
            if (sym_ref(&t, s[i].labels[j].name, &refs[k++]) ||
                sym_ref(&t, s[i].labels[j].value, &refs[k++]))
                goto out;
        }
        pts[i] = &ts[i];
    }
    Io__Prometheus__Write__V2__Request req = IO__PROMETHEUS__WRITE__V2__REQUEST__INIT;
    req.n_symbols = t.n;
    req.symbols = (char **)t.sym;
    req.n_timeseries = n;
    req.timeseries = pts;
    size_t sz = io__prometheus__write__v2__request__get_packed_size(&req);
    *raw = malloc(sz ? sz : 1);
    if (!*raw)
        goto out;
    *rlen = io__prometheus__write__v2__request__pack(&req, *raw);
    rc = 0;
out:
    free(t.sym);
    free(t.slot);
    free(ts);
    free(pts);
    free(sm);
    free(psm);
    free(refs);
    for (size_t i = 0; i < nh_n && nh && sps && psps; i++) {
        mv_expo_nh_free(&nh[i]);
        free(sps[i]);
        free(psps[i]);
    }
    free(nh);
    free(hs);
    free(phs);
    free(sps);
    free(psps);
    return rc;
}

int mv_rw_encode(int version, const mv_rw_series *s, size_t n, int32_t schema, uint8_t **out,
                 size_t *len, size_t *raw_len)
{
    uint8_t *raw = NULL;
    size_t rlen = 0;
    int rc = version == 2 ? pack_v2(s, n, schema, &raw, &rlen) : pack_v1(s, n, &raw, &rlen);
    if (rc == 0) {
        rc = snappy_pack(raw, rlen, out, len);
        if (raw_len)
            *raw_len = rlen;
    }
    free(raw);
    return rc;
}
