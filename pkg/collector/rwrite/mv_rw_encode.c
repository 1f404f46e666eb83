/* mv_rw_encode: remote write bodies: WriteRequest (1.0) and io.prometheus.write.v2.Request
 * (2.0, symbols table) packed with protobuf-c, compressed with Debian's libsnappy (the Snappy
 * block format the protocol mandates). */
#include <errno.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>

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

static int pack_v1(const mv_rw_series *s, size_t n, uint8_t **raw, size_t *rlen)
{
    size_t nl = 0;
    for (size_t i = 0; i < n; i++)
        nl += s[i].nlabels;
    Prometheus__TimeSeries *ts = calloc(n ? n : 1, sizeof *ts);
    Prometheus__TimeSeries **pts = calloc(n ? n : 1, sizeof *pts);
    Prometheus__Sample *sm = calloc(n ? n : 1, sizeof *sm);
    Prometheus__Sample **psm = calloc(n ? n : 1, sizeof *psm);
    Prometheus__Label *lb = calloc(nl ? nl : 1, sizeof *lb);
    Prometheus__Label **plb = calloc(nl ? nl : 1, sizeof *plb);
    int rc = -ENOMEM;
    if (!ts || !pts || !sm || !psm || !lb || !plb)
        goto out;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        prometheus__time_series__init(&ts[i]);
        prometheus__sample__init(&sm[i]);
        sm[i].value = s[i].value;
        sm[i].timestamp = s[i].ts_ms;
        psm[i] = &sm[i];
        ts[i].n_samples = 1;
        ts[i].samples = &psm[i];
        ts[i].n_labels = s[i].nlabels;
        ts[i].labels = &plb[k];
        for (size_t j = 0; j < s[i].nlabels; j++, k++) {
            prometheus__label__init(&lb[k]);
            lb[k].name = (char *)s[i].labels[j].name;
            lb[k].value = (char *)s[i].labels[j].value;
            plb[k] = &lb[k];
        }
        pts[i] = &ts[i];
    }
    Prometheus__WriteRequest wr = PROMETHEUS__WRITE_REQUEST__INIT;
    wr.n_timeseries = n;
    wr.timeseries = pts;
    size_t sz = prometheus__write_request__get_packed_size(&wr);
    *raw = malloc(sz ? sz : 1);
    if (!*raw)
        goto out;
    *rlen = prometheus__write_request__pack(&wr, *raw);
    rc = 0;
out:
    free(ts);
    free(pts);
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

static int pack_v2(const mv_rw_series *s, size_t n, uint8_t **raw, size_t *rlen)
{
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
    if (!t.sym || !t.slot || !ts || !pts || !sm || !psm || !refs)
        goto out;
    uint32_t r0;
    sym_ref(&t, "", &r0);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        io__prometheus__write__v2__time_series__init(&ts[i]);
        io__prometheus__write__v2__sample__init(&sm[i]);
        sm[i].value = s[i].value;
        sm[i].timestamp = s[i].ts_ms;
        psm[i] = &sm[i];
        ts[i].n_samples = 1;
        ts[i].samples = &psm[i];
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
    return rc;
}

int mv_rw_encode(int version, const mv_rw_series *s, size_t n, uint8_t **out, size_t *len,
                 size_t *raw_len)
{
    uint8_t *raw = NULL;
    size_t rlen = 0;
    int rc = version == 2 ? pack_v2(s, n, &raw, &rlen) : pack_v1(s, n, &raw, &rlen);
    if (rc == 0) {
        rc = snappy_pack(raw, rlen, out, len);
        if (raw_len)
            *raw_len = rlen;
    }
    free(raw);
    return rc;
}
