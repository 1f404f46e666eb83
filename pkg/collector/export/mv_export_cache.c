/* mv_export_cache: the exposition cache. Between scrapes it keeps every family's header and
 * every sample's rendered name and label set (escaped, per format), so that a scrape of an
 * unchanged table only formats values; in protobuf, every family's header fields and every
 * series' Metric as the renderer packed it (plan_run_pb patches values and packs histograms
 * and summaries again). See mv_export.h for the interface.
 *
 * What a cached render depends on, and so what the key holds (compared at every scrape):
 *   - per segment, in the walk's sorted order: id, identity labels, whether its values are
 *     served (state OK with a catalog and a copy), the catalog (mv_coll_seg_view.cat_serial,
 *     never reused: equal serials are the same immutable catalog), whether its analytics
 *     match that catalog, and which histograms are omitted;
 *   - the number of segments and the --derived selection (its serial, also never reused);
 *   - the format (one plan per format, each built on the first scrape that asks for it).
 * A mismatch anywhere drops both plans and builds again. A segment without a serial (views
 * built by hand) or a table whose derived families mix types is rendered uncached.
 *
 * What a plan keeps dynamic, read from the snapshot at every scrape through the same code as
 * the uncached walk (mv_export__value, mv_export__cond_holds): values, and whether each derived
 * entry is shown (a window closed, a short rate exists, an anomaly score...). The plan is
 * built with every derived entry the selection could show ("every" walk); its drops do not
 * depend on which of them are shown (derived families have one type; raw families are in the
 * key), and the counts of dropped series, the family header (that of the first entry shown)
 * and whether a family appears at all are worked out per scrape, as the uncached walk does.
 * So a cached render is byte for byte the uncached one of the same snapshot.
 *
 * Concurrency: a scrape renders from a snapshot (copies of values, references to immutable
 * catalogs), which ticks never change; the cache itself (key and plans) is guarded by its
 * mutex for the whole render, so parallel scrapes through one cache take turns and never see
 * a plan half built or a key of one snapshot with a plan of another. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mv_export.h"
#include "mv_export_int.h"

/* Plan arrays live in their own mappings and grow by remapping pages (mremap), never by
 * copying: a plan of a million series holds hundreds of MB. */
static size_t page_round(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

static void *vm_grow(void *p, size_t old_bytes, size_t new_bytes)
{
    size_t o = page_round(old_bytes), n = page_round(new_bytes);
    void *q = o ? mremap(p, o, n, MREMAP_MAYMOVE)
                : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED)
        return NULL;
#ifdef MADV_POPULATE_WRITE
    /* The new pages are written next: fault them in at once (one call, not a fault each). */
    madvise((char *)q + o, n - o, MADV_POPULATE_WRITE);
#endif
    return q;
}

static void vm_free(void *p, size_t bytes)
{
    if (p && bytes)
        munmap(p, page_round(bytes));
}

/* A growable byte area; offsets into it stay below 4 GiB (else the plan is not kept). */
typedef struct area {
    char *p;
    size_t len, cap;
} area;

static int64_t area_add(area *a, const char *s, size_t n)
{
    if (a->len + n > UINT32_MAX)
        return -1;
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1 << 16;
        while (cap < a->len + n)
            cap *= 2;
        char *p = vm_grow(a->p, a->cap, cap);
        if (!p)
            return -1;
        a->p = p;
        a->cap = cap;
    }
    memcpy(a->p + a->len, s, n);
    a->len += n;
    return (int64_t)(a->len - n);
}

/* One sample line: name, then the label part up to and with the space before the value. */
typedef struct cline {
    uint32_t name;     /* offset in the plan's text */
    uint16_t name_len; /* metric names are at most 255 bytes, plus a suffix */
    uint16_t src;      /* MV_EXPORT_SRC; VS_NONE: a sample the format refuses (counted) */
    uint32_t lab;
    uint32_t lab_len;
} cline;

enum {
    F_FIRST = 1,        /* first entry of its family in the plan */
    F_HIST = 2,         /* a raw histogram: lines need its consistent copy */
    F_UNRENDERABLE = 4, /* no free label name: counted, nothing written */
    F_DROP_TYPE = 8,    /* drop list: a type conflict */
    F_DROP_COLL = 16,   /* drop list: a name collision */
    F_COLL_LOG = 32,    /* drop list: names the family in the collision warning */
};

/* One entry of the walk that renders (ents) or is dropped (drops). */
typedef struct cent {
    uint32_t seg, metric;
    uint32_t line0; /* ents: first line; drops with F_COLL_LOG: name offset in the text */
    uint32_t nlines;
    uint32_t hdr; /* ents: index in hdrs */
    uint16_t renamed;
    uint8_t cond, flags;
} cent;

typedef struct chdr {
    uint32_t off, len;
} chdr;

/* The protobuf plan: per entry (cent.line0 indexes pms, nlines is 1), its Metric pre-encoded
 * by a protobuf render of the entry alone. */
enum {
    PM_NONE = 0, /* nothing written (the samples were refused: ninvalid counts them) */
    PM_FIXED,    /* counter, gauge, untyped: the whole field-4 record, its double at the end */
    PM_HIST,     /* histogram: the Metric's label fields; the Histogram encoded per scrape */
    PM_SUMMARY,  /* summary: the label fields; the Summary encoded per scrape */
    PM_GHIST,    /* gauge histogram: the label fields; its native Histogram encoded per scrape */
};

typedef struct pmet {
    uint32_t off, len; /* in the plan's text */
    uint16_t src;      /* PM_FIXED: MV_EXPORT_SRC of the value */
    uint16_t mask;     /* PM_SUMMARY: the MV_DERIVED_P* shown */
    uint8_t kind;
    uint8_t pad;
    uint16_t ninvalid; /* samples refused (counted as the uncached render counts them) */
    uint32_t nsamples; /* samples written (the series count) */
} pmet;

/* A protobuf family whose every entry is always shown, with a fixed size (no condition, no
 * histogram or summary, no unrenderable series): its length and counts are known at build. */
typedef struct pfam {
    uint32_t ent0, nents; /* its entries */
    uint64_t body;        /* fixed: the Metrics' bytes */
    uint64_t nsamples, ninvalid, renamed;
    uint8_t fixed;
} pfam;

#define NFMT  3    /* text, OpenMetrics, protobuf */
#define PV    NFMT /* the visit plan (mv_export_visit_cached): ents and lines (src only) */
#define NPLAN (NFMT + 1)

typedef struct plan {
    area text; /* headers, names, label parts */
    cline *lines;
    size_t nlines, cap_lines;
    cent *ents, *drops;
    size_t nents, ndrops, cap_ents, cap_drops;
    chdr *hdrs;
    size_t nhdrs, cap_hdrs;
    pmet *pms;
    size_t npms, cap_pms;
    pfam *fams;
    size_t nfams, cap_fams;
    char *raw_collided; /* a raw family dropped for a collision (the warning names it) */
} plan;

/* The key of one segment (sorted order). */
typedef struct kseg {
    char *ids;      /* id, then each label's key and value, NUL-separated */
    size_t nlabels; /* identity labels */
    uint64_t cat_serial;
    uint8_t valid, piped;
    uint8_t *omitted; /* valid segments with omitted histograms: a copy of the flags */
    size_t nomitted;
} kseg;

struct mv_export_cache {
    pthread_mutex_t mu;
    int have_key;
    kseg *key;
    size_t nkey;
    uint64_t sel_serial;
    plan *plans[NPLAN]; /* by mv_expo_format (the protobuf plan: pms and fams, no lines), PV */
    plan *spare[NPLAN]; /* plans dropped by a key change: their memory is reused, already mapped */
    const mv_coll_seg_view **sorted;
    size_t cap_sorted;
    size_t limit;           /* most bytes the plans may hold together; 0: no limit */
    uint8_t refused[NPLAN]; /* by format: the plan of this key passed the limit (not built again) */
    mv_export_cache_stats st;
    /* Protobuf renders: per entry of the family being written, and the parts encoded for it. */
    struct pstate *pst;
    size_t cap_pst;
    uint8_t *side;
    size_t side_len, side_cap;
    double *le, *qv;
    uint64_t *cum;
    size_t cap_le;
    mv_expo_nh_bkt *nb; /* a gauge histogram's native buckets */
    size_t nb_cap;
};

mv_export_cache *mv_export_cache_create(void)
{
    mv_export_cache *c = calloc(1, sizeof *c);
    if (c)
        pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void plan_free(plan *p)
{
    if (!p)
        return;
    vm_free(p->text.p, p->text.cap);
    vm_free(p->lines, p->cap_lines * sizeof *p->lines);
    vm_free(p->ents, p->cap_ents * sizeof *p->ents);
    vm_free(p->drops, p->cap_drops * sizeof *p->drops);
    vm_free(p->hdrs, p->cap_hdrs * sizeof *p->hdrs);
    vm_free(p->pms, p->cap_pms * sizeof *p->pms);
    vm_free(p->fams, p->cap_fams * sizeof *p->fams);
    free(p->raw_collided);
    free(p);
}

void mv_export_cache_set_limit(mv_export_cache *c, size_t max_bytes)
{
    pthread_mutex_lock(&c->mu);
    c->limit = max_bytes;
    memset(c->refused, 0, sizeof c->refused);
    pthread_mutex_unlock(&c->mu);
}

static size_t plan_bytes(const plan *p)
{
    return p ? p->text.cap + p->cap_lines * sizeof(cline) +
                   (p->cap_ents + p->cap_drops) * sizeof(cent) + p->cap_hdrs * sizeof(chdr) +
                   p->cap_pms * sizeof(pmet) + p->cap_fams * sizeof(pfam)
             : 0;
}

/* What the plans other than format f's hold. */
static size_t others_bytes(const mv_export_cache *c, mv_expo_format f)
{
    size_t n = 0;
    for (int i = 0; i < NPLAN; i++)
        if (i != (int)f)
            n += plan_bytes(c->plans[i]);
    return n;
}

static void key_free(mv_export_cache *c)
{
    for (size_t i = 0; i < c->nkey; i++) {
        free(c->key[i].ids);
        free(c->key[i].omitted);
    }
    free(c->key);
    c->key = NULL;
    c->nkey = 0;
    c->have_key = 0;
    memset(c->refused, 0, sizeof c->refused);
    for (int f = 0; f < NPLAN; f++) {
        plan *p = c->plans[f];
        c->plans[f] = NULL;
        if (!p)
            continue;
        plan_free(c->spare[f]);
        free(p->raw_collided);
        p->raw_collided = NULL;
        p->text.len = p->nlines = p->nents = p->ndrops = p->nhdrs = p->npms = p->nfams = 0;
        c->spare[f] = p;
    }
}

void mv_export_cache_destroy(mv_export_cache *c)
{
    if (!c)
        return;
    key_free(c);
    for (int f = 0; f < NPLAN; f++)
        plan_free(c->spare[f]);
    free(c->sorted);
    free(c->pst);
    free(c->side);
    free(c->le);
    free(c->qv);
    free(c->cum);
    free(c->nb);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void mv_export_cache_get_stats(mv_export_cache *c, mv_export_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->bytes = 0;
    for (int f = 0; f < NPLAN; f++)
        out->bytes += plan_bytes(c->plans[f]) + plan_bytes(c->spare[f]);
    pthread_mutex_unlock(&c->mu);
}

/* ---- Key --------------------------------------------------------------------------------- */

static int omitted_any(const mv_coll_seg_view *v)
{
    size_t n = mv_seg_catalog_count(v->cat);
    for (size_t j = 0; v->omitted && j < n; j++)
        if (v->omitted[j])
            return 1;
    return 0;
}

/* Does the key's segment describe view v? */
static int kseg_same(const kseg *k, const mv_coll_seg_view *v)
{
    if (k->nlabels != v->nlabels)
        return 0;
    const char *s = k->ids;
    if (strcmp(s, v->id) != 0)
        return 0;
    s += strlen(s) + 1;
    for (size_t i = 0; i < v->nlabels; i++) {
        if (strcmp(s, v->labels[i].key) != 0)
            return 0;
        s += strlen(s) + 1;
        if (strcmp(s, v->labels[i].value) != 0)
            return 0;
        s += strlen(s) + 1;
    }
    int valid = mv_export__seg_valid(v);
    if (k->valid != valid)
        return 0;
    if (!valid)
        return 1;
    if (k->cat_serial != v->cat_serial || k->piped != (mv_export__seg_pipe(v) != NULL))
        return 0;
    if (!k->omitted)
        return !omitted_any(v);
    return v->omitted && memcmp(k->omitted, v->omitted, k->nomitted) == 0;
}

static int kseg_set(kseg *k, const mv_coll_seg_view *v)
{
    size_t len = strlen(v->id) + 1;
    for (size_t i = 0; i < v->nlabels; i++)
        len += strlen(v->labels[i].key) + strlen(v->labels[i].value) + 2;
    char *p = k->ids = malloc(len);
    if (!p)
        return -ENOMEM;
    p = stpcpy(p, v->id) + 1;
    for (size_t i = 0; i < v->nlabels; i++) {
        p = stpcpy(p, v->labels[i].key) + 1;
        p = stpcpy(p, v->labels[i].value) + 1;
    }
    k->nlabels = v->nlabels;
    k->valid = (uint8_t)mv_export__seg_valid(v);
    if (!k->valid)
        return 0;
    k->cat_serial = v->cat_serial;
    k->piped = mv_export__seg_pipe(v) != NULL;
    if (omitted_any(v)) {
        k->nomitted = mv_seg_catalog_count(v->cat);
        if (!(k->omitted = malloc(k->nomitted)))
            return -ENOMEM;
        memcpy(k->omitted, v->omitted, k->nomitted);
    }
    return 0;
}

/* Sorts the views into c->sorted and checks them against the key, replacing the key (and
 * dropping the plans) when they differ. Returns 1 when they can be cached, 0 when not (a
 * segment without a catalog serial), -ENOMEM. */
static int key_check(mv_export_cache *c, const mv_coll_seg_view *const *views, size_t n,
                     uint64_t sel_serial)
{
    if (n > c->cap_sorted) {
        const mv_coll_seg_view **s = realloc(c->sorted, n * sizeof *s);
        if (!s)
            return -ENOMEM;
        c->sorted = s;
        c->cap_sorted = n;
    }
    if (n) {
        memcpy(c->sorted, views, n * sizeof *views);
        qsort(c->sorted, n, sizeof *c->sorted, mv_export__seg_cmp);
    }
    for (size_t i = 0; i < n; i++)
        if (mv_export__seg_valid(c->sorted[i]) && c->sorted[i]->cat_serial == 0)
            return 0;
    int same = c->have_key && c->nkey == n && c->sel_serial == sel_serial;
    for (size_t i = 0; same && i < n; i++)
        same = kseg_same(&c->key[i], c->sorted[i]);
    if (same)
        return 1;
    key_free(c);
    c->st.invalidations++;
    c->key = calloc(n ? n : 1, sizeof *c->key);
    if (!c->key)
        return -ENOMEM;
    c->nkey = n;
    for (size_t i = 0; i < n; i++)
        if (kseg_set(&c->key[i], c->sorted[i]) != 0) {
            key_free(c);
            return -ENOMEM;
        }
    c->sel_serial = sel_serial;
    c->have_key = 1;
    return 1;
}

/* ---- Building a plan ----------------------------------------------------------------------- */

#define GROUP_NAMES 8

typedef struct builder {
    mv_export__sink k;
    plan *p;
    mv_expo *scratch; /* renders each sample once, with the real renderer */
    uint64_t *lab_of; /* per metric (seg_base + index): its plain label part (off << 32 | len) */
    size_t *seg_base;
    uint32_t seg, metric;
    int share; /* this entry's label parts without an extra label may be shared */
    uint32_t names[GROUP_NAMES][2];
    int nnames;
    int err;
    uint32_t nsamp, ninval; /* protobuf: samples of the entry written and refused */
    unsigned src;           /* protobuf: the last sample's source */
    mv_expo_nh_bkt *nb;     /* protobuf: a gauge histogram's native buckets */
    size_t nb_cap;
} builder;

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 4096 / size;
    while (n < need)
        n *= 2;
    void *q = vm_grow(*p, *cap * size, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int name_ref(builder *b, const char *s, size_t n, uint32_t *off)
{
    for (int i = 0; i < b->nnames; i++)
        if (b->names[i][1] == n && memcmp(b->p->text.p + b->names[i][0], s, n) == 0) {
            *off = b->names[i][0];
            return 0;
        }
    int64_t o = area_add(&b->p->text, s, n);
    if (o < 0)
        return -1;
    *off = (uint32_t)o;
    if (b->nnames < GROUP_NAMES) {
        b->names[b->nnames][0] = *off;
        b->names[b->nnames++][1] = (uint32_t)n;
    }
    return 0;
}

static int rec_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                      const mv_expo_label *lb, size_t nb, const char *xname, double xval, double v,
                      uint64_t u, int is_u, unsigned src)
{
    builder *b = (builder *)k;
    plan *p = b->p;
    size_t before;
    mv_expo_data(b->scratch, &before);
    int rc =
        is_u ? mv_expo_sample_u64(b->scratch, suffix, a, na, lb, nb, xname, xval, u, MV_EXPO_NO_TS)
             : mv_expo_sample(b->scratch, suffix, a, na, lb, nb, xname, xval, v, MV_EXPO_NO_TS);
    if (grow((void **)&p->lines, &p->cap_lines, p->nlines + 1, sizeof *p->lines) != 0)
        rc = -ENOMEM;
    if (rc == -EINVAL) {
        p->lines[p->nlines++] = (cline){0, 0, VS_NONE, 0, 0};
        return 0;
    }
    if (rc < 0) {
        b->err = -ENOMEM;
        return -ENOMEM;
    }
    size_t len;
    const char *d = mv_expo_data(b->scratch, &len);
    const char *line = d + before;
    len -= before;
    /* NAME[{labels}] VALUE\n: the value has no space, names have no '{' or space. */
    size_t sp = len - 1;
    while (sp > 0 && line[sp] != ' ')
        sp--;
    size_t ne = 0;
    while (ne < sp && line[ne] != '{' && line[ne] != ' ')
        ne++;
    cline cl = {.name_len = (uint16_t)ne, .src = (uint16_t)src, .lab_len = (uint32_t)(sp + 1 - ne)};
    int share = b->share && !xname;
    uint64_t *slot = share ? &b->lab_of[b->seg_base[b->seg] + b->metric] : NULL;
    if (ne > UINT16_MAX || name_ref(b, line, ne, &cl.name) != 0) {
        b->err = -ENOMEM;
        return -ENOMEM;
    }
    if (slot && *slot != UINT64_MAX && (uint32_t)*slot == cl.lab_len &&
        memcmp(p->text.p + (*slot >> 32), line + ne, cl.lab_len) == 0) {
        cl.lab = (uint32_t)(*slot >> 32);
    } else {
        int64_t o = area_add(&p->text, line + ne, cl.lab_len);
        if (o < 0) {
            b->err = -ENOMEM;
            return -ENOMEM;
        }
        cl.lab = (uint32_t)o;
        if (slot && *slot == UINT64_MAX)
            *slot = (uint64_t)cl.lab << 32 | cl.lab_len;
    }
    p->lines[p->nlines++] = cl;
    mv_expo_raw_truncate(b->scratch, before);
    return 0;
}

/* ---- The protobuf plan ------------------------------------------------------------------------
 * Each entry is rendered alone as a family (the real renderer, so protobuf-c packs it); its one
 * Metric is kept: whole for a counter, gauge or untyped series (its value, a double, is the last
 * 8 bytes and is patched at each scrape), or its label fields only for a histogram or summary,
 * whose value message (varints, spans and deltas) is packed again at each scrape. */

static int pb_rec_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                         const mv_expo_label *lb, size_t nb, const char *xname, double xval,
                         double v, uint64_t u, int is_u, unsigned src)
{
    builder *b = (builder *)k;
    int rc =
        is_u ? mv_expo_sample_u64(b->scratch, suffix, a, na, lb, nb, xname, xval, u, MV_EXPO_NO_TS)
             : mv_expo_sample(b->scratch, suffix, a, na, lb, nb, xname, xval, v, MV_EXPO_NO_TS);
    if (rc == 0) {
        b->nsamp++;
        b->src = src;
    } else if (rc == -EINVAL) {
        b->ninval++;
    } else {
        b->err = -ENOMEM;
        return -ENOMEM;
    }
    return 0;
}

static int pb_rec_native(mv_export__sink *k, const mv_export__vctx *c, const mv_expo_label *a,
                         size_t na, const mv_expo_label *lb, size_t nb)
{
    builder *b = (builder *)k;
    mv_expo_native_in in;
    int rc = mv_export__native_in(c->p, c->metric, &in, &b->nb, &b->nb_cap);
    if (rc == 0)
        rc = mv_expo_native(b->scratch, a, na, lb, nb, &in, MV_EXPO_NO_TS);
    if (rc == 0) {
        b->nsamp++;
    } else if (rc == -EINVAL) {
        b->ninval++;
    } else {
        b->err = -ENOMEM;
        return -ENOMEM;
    }
    return 0;
}

/* Reads a varint at d[*i] (below n). 0, or -1 when it runs past n or past 64 bits. */
static int get_varint(const uint8_t *d, size_t n, size_t *i, uint64_t *v)
{
    *v = 0;
    for (unsigned sh = 0; *i < n && sh < 64; sh += 7) {
        uint8_t c = d[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return 0;
    }
    return -1;
}

/* Skips the length-delimited field whose tag is at d[*i]. 0 or -1. */
static int skip_ld(const uint8_t *d, size_t n, size_t *i)
{
    uint64_t l;
    (*i)++;
    if (get_varint(d, n, i, &l) != 0 || l > n - *i)
        return -1;
    *i += (size_t)l;
    return 0;
}

/* Keeps the entry just rendered into b->scratch (one family) as a pmet. 0, 1 (not cacheable:
 * not the shape expected) or -ENOMEM. */
static int pb_record(builder *b, plan *p, mv_expo_type t, uint16_t mask)
{
    if (mv_expo_finish(b->scratch) != 0 || mv_expo_truncated(b->scratch))
        return -ENOMEM;
    size_t n, i = 0;
    const uint8_t *d = (const uint8_t *)mv_expo_data(b->scratch, &n);
    uint64_t l;
    if (get_varint(d, n, &i, &l) != 0 || l != n - i)
        return 1;
    /* The family's header: name (1), help (2), type (3, a varint), unit (5). */
    while (i < n && d[i] != (4 << 3 | 2)) {
        if (d[i] == (3 << 3)) {
            i++;
            if (get_varint(d, n, &i, &l) != 0)
                return 1;
        } else if (d[i] == (1 << 3 | 2) || d[i] == (2 << 3 | 2) || d[i] == (5 << 3 | 2)) {
            if (skip_ld(d, n, &i) != 0)
                return 1;
        } else {
            return 1;
        }
    }
    if (b->ninval > UINT16_MAX ||
        (b->ninval && b->nsamp && t >= MV_EXPO_HISTOGRAM && t <= MV_EXPO_SUMMARY))
        return 1; /* part of a series refused: not worth a plan */
    pmet pm = {.mask = mask, .ninvalid = (uint16_t)b->ninval, .nsamples = b->nsamp};
    if (i < n) {
        size_t r0 = i++;
        if (get_varint(d, n, &i, &l) != 0 || l != n - i)
            return 1; /* not exactly one Metric */
        const uint8_t *m = d + i;
        size_t ml = (size_t)l, keep_off, keep_len;
        if (t == MV_EXPO_HISTOGRAM || t == MV_EXPO_SUMMARY || t == MV_EXPO_GAUGE_HISTOGRAM) {
            size_t j = 0;
            while (j < ml && m[j] == (1 << 3 | 2))
                if (skip_ld(m, ml, &j) != 0)
                    return 1;
            size_t lab = j;
            if (j >= ml || m[j] != (t == MV_EXPO_SUMMARY ? (4 << 3 | 2) : (7 << 3 | 2)) ||
                skip_ld(m, ml, &j) != 0 || j != ml)
                return 1;
            pm.kind = t == MV_EXPO_HISTOGRAM ? PM_HIST
                      : t == MV_EXPO_SUMMARY ? PM_SUMMARY
                                             : PM_GHIST;
            keep_off = (size_t)(m - d);
            keep_len = lab;
        } else {
            /* ... value message: tag, length 9, tag of field 1 (double), 8 bytes. */
            uint8_t tag = t == MV_EXPO_COUNTER ? (3 << 3 | 2)
                          : t == MV_EXPO_GAUGE ? (2 << 3 | 2)
                                               : (5 << 3 | 2);
            if (ml < 11 || m[ml - 11] != tag || m[ml - 10] != 9 || m[ml - 9] != (1 << 3 | 1))
                return 1;
            pm.kind = PM_FIXED;
            pm.src = (uint16_t)b->src;
            keep_off = r0;
            keep_len = n - r0;
        }
        int64_t o = area_add(&p->text, (const char *)d + keep_off, keep_len);
        if (o < 0)
            return -ENOMEM;
        pm.off = (uint32_t)o;
        pm.len = (uint32_t)keep_len;
    } else if (b->nsamp) {
        return 1;
    }
    if (grow((void **)&p->pms, &p->cap_pms, p->npms + 1, sizeof *p->pms) != 0)
        return -ENOMEM;
    p->pms[p->npms++] = pm;
    return 0;
}

/* Ends a protobuf family whose entries are ents[ent0..nents). */
static int pb_family(plan *p, size_t ent0)
{
    if (grow((void **)&p->fams, &p->cap_fams, p->nfams + 1, sizeof *p->fams) != 0)
        return -ENOMEM;
    pfam fm = {.ent0 = (uint32_t)ent0, .nents = (uint32_t)(p->nents - ent0), .fixed = 1};
    for (size_t k = ent0; k < p->nents && fm.fixed; k++) {
        const cent *en = &p->ents[k];
        const pmet *pm = &p->pms[en->line0];
        fm.fixed = !en->cond && !(en->flags & (F_UNRENDERABLE | F_HIST)) &&
                   (pm->kind == PM_FIXED || pm->kind == PM_NONE);
        fm.body += pm->kind == PM_FIXED ? pm->len : 0;
        fm.nsamples += pm->nsamples;
        fm.ninvalid += pm->ninvalid;
        fm.renamed += en->renamed;
    }
    p->fams[p->nfams++] = fm;
    return 0;
}

static int add_hdr(plan *p, mv_expo *hs, mv_expo_format f, const char *name, mv_expo_type t,
                   const char *help, const char *unit, uint32_t *idx)
{
    mv_expo_reset(hs, f);
    int rc = mv_expo_family(hs, name, t, help, unit);
    if (rc < 0)
        return rc;
    size_t len;
    const char *d = mv_expo_data(hs, &len);
    if (f == MV_EXPO_PROTOBUF) { /* the header fields, without the family's length */
        size_t i = 0;
        uint64_t l;
        if (mv_expo_finish(hs) != 0 || mv_expo_truncated(hs))
            return -ENOMEM;
        d = mv_expo_data(hs, &len);
        if (get_varint((const uint8_t *)d, len, &i, &l) != 0 || l != len - i)
            return -EINVAL;
        d += i;
        len -= i;
    }
    int64_t o = area_add(&p->text, d, len);
    if (o < 0 || grow((void **)&p->hdrs, &p->cap_hdrs, p->nhdrs + 1, sizeof *p->hdrs) != 0)
        return -ENOMEM;
    p->hdrs[p->nhdrs] = (chdr){(uint32_t)o, (uint32_t)len};
    *idx = (uint32_t)p->nhdrs++;
    return 0;
}

static int add_drop(plan *p, const mv_export__walk *w, const mv_export__entry *en, int coll_log)
{
    if (grow((void **)&p->drops, &p->cap_drops, p->ndrops + 1, sizeof *p->drops) != 0)
        return -ENOMEM;
    cent d = {.seg = en->seg,
              .metric = en->metric,
              .cond = en->cond,
              .flags = (uint8_t)(en->drop == 1 ? F_DROP_TYPE : F_DROP_COLL)};
    if (coll_log) {
        int64_t o = area_add(&p->text, en->name, strlen(en->name) + 1);
        if (o < 0)
            return -ENOMEM;
        d.line0 = (uint32_t)o;
        d.flags |= F_COLL_LOG;
    }
    (void)w;
    p->drops[p->ndrops++] = d;
    return 0;
}

/* Builds the plan of format f for the sorted views (c->sorted). 0, 1 (not cacheable), 2 (the
 * plan would pass the cache's limit) or -ENOMEM. */
static int plan_build(mv_export_cache *c, mv_expo_format f, size_t n, const mv_export_sel *sel,
                      plan **out)
{
    mv_export__walk w;
    builder b;
    memset(&b, 0, sizeof b);
    plan *p = c->spare[f] ? c->spare[f] : calloc(1, sizeof *p);
    c->spare[f] = NULL;
    int flags = MV_EXPORT__WALK_EVERY | (f == MV_EXPO_PROTOBUF ? MV_EXPORT__WALK_NATIVE : 0);
    int rc = p ? mv_export__walk_build(&w, c->sorted, n, sel, flags) : -ENOMEM;
    if (!p) {
        memset(&w, 0, sizeof w);
    } else if (rc == 0 && w.mixed_derived) {
        rc = 1;
    }
    mv_expo *hs = NULL;
    if (rc == 0) {
        b.k.sample = f == MV_EXPO_PROTOBUF ? pb_rec_sample : rec_sample;
        b.k.native = f == MV_EXPO_PROTOBUF ? pb_rec_native : NULL;
        b.p = p;
        b.scratch = mv_expo_create(f, SIZE_MAX / 4);
        hs = mv_expo_create(f, SIZE_MAX / 4);
        b.seg_base = calloc(w.nseg + 1, sizeof *b.seg_base);
        for (size_t i = 0; b.seg_base && i < w.nseg; i++)
            b.seg_base[i + 1] =
                b.seg_base[i] +
                (mv_export__seg_valid(w.segs[i]) ? mv_seg_catalog_count(w.segs[i]->cat) : 0);
        b.lab_of = b.seg_base ? malloc((b.seg_base[w.nseg] + 1) * sizeof *b.lab_of) : NULL;
        if (!b.scratch || !hs || !b.lab_of)
            rc = -ENOMEM;
        else
            memset(b.lab_of, 0xff, (b.seg_base[w.nseg] + 1) * sizeof *b.lab_of);
    }
    /* The raw family named in the collision warning, if any (it comes before any derived
     * one, which is worked out per scrape). */
    if (rc == 0 && w.raw_collided_name && !(p->raw_collided = strdup(w.raw_collided_name)))
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < w.n;) {
        size_t j = i + 1;
        while (j < w.n && strcmp(w.ents[j].name, w.ents[i].name) == 0)
            j++;
        /* Drops, in walk order; a derived entry of a derived-only family that collided names
         * the family in the warning when it is the first such entry shown. */
        int derived_only = w.ents[i].kind != 0;
        for (size_t e = i; rc == 0 && e < j; e++)
            if (w.ents[e].drop)
                rc = add_drop(p, &w, &w.ents[e],
                              derived_only && w.ents[e].drop == 2 && w.ents[e].kind != 0);
        size_t first = i;
        while (first < j && w.ents[first].drop)
            first++;
        if (rc != 0 || first == j) {
            i = j;
            continue;
        }
        mv_expo_type t;
        const char *help, *unit;
        mv_export__family_info(&w, &w.ents[first], &t, &help, &unit);
        mv_expo_reset(b.scratch, f);
        if (mv_expo_family(b.scratch, w.ents[first].name, t, help, unit) != 0) {
            i = j; /* a family the format refuses: never shown, nothing counted */
            continue;
        }
        b.nnames = 0;
        size_t ent0 = p->nents;
        const char *last_help = NULL, *last_unit = NULL;
        uint32_t hdr = 0;
        int first_ent = 1;
        for (size_t e = first; rc == 0 && e < j; e++) {
            const mv_export__entry *en = &w.ents[e];
            if (en->drop)
                continue;
            mv_export__family_info(&w, en, &t, &help, &unit);
            if (first_ent || help != last_help || unit != last_unit) {
                rc = add_hdr(p, hs, f, en->name, t, help, unit, &hdr);
                last_help = help;
                last_unit = unit;
                if (rc != 0)
                    break;
            }
            if (grow((void **)&p->ents, &p->cap_ents, p->nents + 1, sizeof *p->ents) != 0) {
                rc = -ENOMEM;
                break;
            }
            uint64_t renamed = w.renamed, unrenderable = w.unrenderable;
            const mv_coll_seg_view *v = w.segs[en->seg];
            int hist = en->kind == 0 && en->metric != MV_EXPORT_NO_METRIC &&
                       mv_seg_catalog_metric(v->cat, en->metric)->type == MV_SEG_HISTOGRAM;
            b.seg = en->seg;
            b.metric = en->metric;
            b.share = en->metric != MV_EXPORT_NO_METRIC &&
                      strcmp(en->name, "microview_changes_total") != 0;
            size_t line0 = f == MV_EXPO_PROTOBUF ? p->npms : p->nlines;
            if (f == MV_EXPO_PROTOBUF) {
                mv_expo_reset(b.scratch, f);
                b.nsamp = b.ninval = 0;
                rc = mv_expo_family(b.scratch, en->name, t, help, unit);
                if (rc == 0)
                    rc = mv_export__emit(&b.k, &w, en);
                if (rc == 0)
                    rc = pb_record(&b, p, t, en->mask);
                if (rc == -EINVAL)
                    rc = 1;
                if (rc != 0)
                    break;
            } else {
                rc = mv_export__emit(&b.k, &w, en);
                if (rc < 0)
                    break;
                rc = 0;
            }
            p->ents[p->nents++] =
                (cent){.seg = en->seg,
                       .metric = en->metric,
                       .line0 = (uint32_t)line0,
                       .nlines = f == MV_EXPO_PROTOBUF ? 1 : (uint32_t)(p->nlines - line0),
                       .hdr = hdr,
                       .renamed = (uint16_t)(w.renamed - renamed),
                       .cond = en->cond,
                       .flags = (uint8_t)((first_ent ? F_FIRST : 0) | (hist ? F_HIST : 0) |
                                          (w.unrenderable != unrenderable ? F_UNRENDERABLE : 0))};
            first_ent = 0;
            /* Past the limit: given up at once, so the build never holds much more. */
            if (c->limit && plan_bytes(p) + others_bytes(c, f) > c->limit)
                rc = 2;
        }
        mv_expo_raw_truncate(b.scratch, 0);
        if (rc == 0 && f == MV_EXPO_PROTOBUF && !first_ent)
            rc = pb_family(p, ent0);
        i = j;
    }
    if (rc == 0 && b.err)
        rc = b.err;
    if (rc == 0 && p->nlines > UINT32_MAX)
        rc = 1;
    mv_expo_destroy(b.scratch);
    mv_expo_destroy(hs);
    free(b.nb);
    free(b.lab_of);
    free(b.seg_base);
    mv_export__walk_free(&w);
    if (rc != 0) {
        if (rc == 2)
            c->st.last_refused_bytes = plan_bytes(p) + others_bytes(c, f);
        plan_free(p);
        return rc == 1 || rc == 2 ? rc : -ENOMEM;
    }
    *out = p;
    return 0;
}

/* ---- Rendering from a plan --------------------------------------------------------------------
 */

/* Room a line needs past its name and labels: the longest value and the newline. */
#define VALUE_ROOM 40

typedef struct replay {
    uint64_t series, invalid, renamed, unrenderable;
} replay;

/* Writes the plan's families and samples for the sorted views. 0 or the renderer's
 * -ENOSPC/-ENOMEM. */
static int plan_run(const plan *p, const mv_coll_seg_view *const *segs, mv_expo *e, int om,
                    replay *r)
{
    char *o, *end;
    size_t avail;
    mv_expo_raw_room(e, &o, &avail);
    end = o + avail;
    char *start = o;
    int open = 0;
    const char *text = p->text.p;
    for (size_t i = 0; i < p->nents; i++) {
        const cent *en = &p->ents[i];
        if (en->flags & F_FIRST)
            open = 0;
        const mv_coll_seg_view *v = segs[en->seg];
        const mv_pipe_view *pv = mv_export__seg_pipe(v);
        if (en->cond) {
            mv_export__entry tmp = {.metric = en->metric, .cond = en->cond};
            if (!mv_export__cond_holds(&tmp, pv))
                continue;
        }
        if (!open) {
            mv_expo_raw_commit(e, (size_t)(o - start));
            int rc = mv_expo_raw_family(e, text + p->hdrs[en->hdr].off, p->hdrs[en->hdr].len);
            if (rc < 0)
                return rc;
            mv_expo_raw_room(e, &o, &avail);
            start = o;
            end = o + avail;
            open = 1;
        }
        r->renamed += en->renamed;
        if (en->flags & F_UNRENDERABLE) {
            r->unrenderable++;
            continue;
        }
        mv_export__vctx c = {.v = v, .p = pv, .metric = en->metric};
        if (en->metric != MV_EXPORT_NO_METRIC)
            c.m = mv_seg_catalog_metric(v->cat, en->metric);
        if ((en->flags & F_HIST) && mv_seg_read_histogram(v->hot, c.m, &c.hv) != MV_SEG_OK)
            continue; /* as the walk does: a torn copy is not shown */
        const cline *l = p->lines + en->line0, *lend = l + en->nlines;
        for (; l < lend; l++) {
            if (l->src == VS_NONE) {
                r->invalid++;
                continue;
            }
            double d = 0;
            uint64_t u = 0;
            int is_u = mv_export__value(&c, l->src, &d, &u);
            size_t need = (size_t)l->name_len + l->lab_len + VALUE_ROOM;
            if ((size_t)(end - o) >= need) {
                memcpy(o, text + l->name, l->name_len);
                o += l->name_len;
                memcpy(o, text + l->lab, l->lab_len);
                o += l->lab_len;
                o += is_u ? mv_expo_format_u64(u, o) : mv_expo_format_double(d, om, o, VALUE_ROOM);
                *o++ = '\n';
            } else {
                /* Near the end of the buffer: the renderer grows it or truncates. */
                char num[VALUE_ROOM];
                size_t nl = is_u ? mv_expo_format_u64(u, num)
                                 : mv_expo_format_double(d, om, num, sizeof num);
                num[nl++] = '\n';
                mv_expo_raw_commit(e, (size_t)(o - start));
                mv_expo_raw_put(e, text + l->name, l->name_len);
                mv_expo_raw_put(e, text + l->lab, l->lab_len);
                int rc = mv_expo_raw_put(e, num, nl);
                if (rc < 0)
                    return rc;
                mv_expo_raw_room(e, &o, &avail);
                start = o;
                end = o + avail;
            }
            r->series++;
        }
    }
    mv_expo_raw_commit(e, (size_t)(o - start));
    return 0;
}

/* A histogram or summary of the protobuf family being written: its value message packed this
 * scrape (in c->side), or not shown (a torn copy). In entry order. */
typedef struct pstate {
    uint32_t off, len; /* len UINT32_MAX: not shown */
} pstate;

static int grow_heap(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* The value as the protobuf renderer takes it: a double, and a count (non-negative integer). */
static double as_double(int is_u, double d, uint64_t u)
{
    return is_u ? (double)u : d;
}

static uint64_t as_count(int is_u, double d, uint64_t u)
{
    return is_u ? u : (d > 0 && d < 1.8e19 ? (uint64_t)llround(d) : 0);
}

/* Room for n bucket bounds / quantiles in c->le, c->qv and c->cum. */
static int parts_room(mv_export_cache *c, size_t n)
{
    if (n <= c->cap_le)
        return 0;
    size_t cap = c->cap_le ? c->cap_le * 2 : 64;
    while (cap < n)
        cap *= 2;
    double *le = realloc(c->le, cap * sizeof *le);
    if (le)
        c->le = le;
    double *qv = realloc(c->qv, cap * sizeof *qv);
    if (qv)
        c->qv = qv;
    uint64_t *cum = realloc(c->cum, cap * sizeof *cum);
    if (cum)
        c->cum = cum;
    if (!le || !qv || !cum)
        return -ENOMEM;
    c->cap_le = cap;
    return 0;
}

/* Packs an entry's value message (histogram or summary) with the renderer, from the values
 * the uncached walk would read, into c->side; st gets its place and the Metric's length. */
static int pb_part(mv_export_cache *c, mv_expo *e, const pmet *pm, mv_export__vctx *vc, pstate *st)
{
    double d = 0, sum;
    uint64_t u = 0, count;
    const uint8_t *out;
    size_t len, n = 0;
    int rc, is_u;
    if (pm->kind == PM_HIST) {
        const mv_seg_metric *m = vc->m;
        if (parts_room(c, (size_t)m->bucket_count + 1) != 0)
            return -ENOMEM;
        vc->cum = 0;
        for (uint32_t i = 0; i <= m->bucket_count; i++) {
            is_u = mv_export__value(vc, MV_EXPORT_SRC(VS_HBUCKET, i), &d, &u);
            c->le[i] = i < m->bucket_count ? m->bounds[i] : INFINITY;
            c->cum[i] = as_count(is_u, d, u);
        }
        n = (size_t)m->bucket_count + 1;
        is_u = mv_export__value(vc, VS_HSUM, &d, &u);
        sum = as_double(is_u, d, u);
        is_u = mv_export__value(vc, VS_HCOUNT, &d, &u);
        count = as_count(is_u, d, u);
        rc = mv_expo_pb_histogram(e, c->le, c->cum, n, sum, count, &out, &len);
    } else if (pm->kind == PM_GHIST) {
        mv_expo_native_in in;
        rc = mv_export__native_in(vc->p, vc->metric, &in, &c->nb, &c->nb_cap);
        if (rc == 0)
            rc = mv_expo_pb_native(e, &in, &out, &len);
    } else {
        if (parts_room(c, MV_PIPE_QUANTILES) != 0)
            return -ENOMEM;
        for (int q = 0; q < MV_PIPE_QUANTILES; q++)
            if (pm->mask & (MV_DERIVED_P50 << q)) {
                is_u = mv_export__value(vc, MV_EXPORT_SRC(VS_Q, q), &d, &u);
                c->le[n] = mv_pipe_quantiles[q];
                c->qv[n++] = as_double(is_u, d, u);
            }
        is_u = mv_export__value(vc, VS_PSUM, &d, &u);
        sum = as_double(is_u, d, u);
        is_u = mv_export__value(vc, VS_PCOUNT, &d, &u);
        count = as_count(is_u, d, u);
        rc = mv_expo_pb_summary(e, c->le, c->qv, n, sum, count, &out, &len);
    }
    if (rc != 0)
        return rc;
    if (c->side_len + len > UINT32_MAX)
        return -ENOMEM;
    if (grow_heap((void **)&c->side, &c->side_cap, c->side_len + len, 1) != 0)
        return -ENOMEM;
    memcpy(c->side + c->side_len, out, len);
    st->off = (uint32_t)c->side_len;
    st->len = (uint32_t)len;
    c->side_len += len;
    return 0;
}

/* Output into the renderer: straight into its room, or through it near the end of the buffer
 * (where it grows the buffer or truncates). */
typedef struct pout {
    mv_expo *e;
    char *o, *start, *end;
} pout;

static void pout_open(pout *w)
{
    size_t avail;
    mv_expo_raw_room(w->e, &w->o, &avail);
    w->start = w->o;
    w->end = w->o + avail;
}

static int pout_put(pout *w, const void *s, size_t n)
{
    if ((size_t)(w->end - w->o) >= n) {
        memcpy(w->o, s, n);
        w->o += n;
        return 0;
    }
    mv_expo_raw_commit(w->e, (size_t)(w->o - w->start));
    int rc = mv_expo_raw_put(w->e, s, n);
    pout_open(w);
    return rc;
}

/* The length of a histogram's or summary's Metric with a value message of `len` bytes. */
static uint64_t var_mlen(const pmet *pm, uint32_t len)
{
    return (uint64_t)pm->len + 1 + mv_expo_pb_varint_len(len) + len;
}

/* Points c at an entry's segment, analytics and metric (its histogram view is left as it
 * is: mv_seg_read_histogram fills it before a histogram's values are read). */
static void vc_set(mv_export__vctx *c, const mv_coll_seg_view *v, const mv_pipe_view *pv,
                   uint32_t metric)
{
    c->v = v;
    c->p = pv;
    c->metric = metric;
    c->cum = 0;
    c->m = metric != MV_EXPORT_NO_METRIC ? mv_seg_catalog_metric(v->cat, metric) : NULL;
}

/* Is the entry shown this scrape (its condition holds)? pv: its segment's analytics. */
static int pb_shown(const cent *en, const mv_pipe_view *pv)
{
    if (!en->cond)
        return 1;
    mv_export__entry tmp = {.metric = en->metric, .cond = en->cond};
    return mv_export__cond_holds(&tmp, pv);
}

/* Writes the protobuf plan's families for the sorted views. Per family, a first pass finds the
 * entries shown and the family's length (packing its histograms and summaries), a second reads
 * the values of the others and writes the length, the header and the Metrics. 0 or the
 * renderer's -ENOSPC/-ENOMEM. */
static int plan_run_pb(mv_export_cache *c, const plan *p, const mv_coll_seg_view *const *segs,
                       mv_expo *e, replay *r)
{
    const char *text = p->text.p;
    /* One value context for every entry: it holds a histogram view of MV_SEG_BUCKETS_MAX + 1
     * sums, which initialising per entry would cost more than the rest of the entry. */
    mv_export__vctx vc;
    vc.hv.buckets = NULL;
    /* Ends the collector's last family (its series arrays are reused below). */
    int rc = mv_expo_raw_family(e, "", 0);
    if (rc < 0)
        return rc;
    for (size_t fi = 0; fi < p->nfams; fi++) {
        const pfam *fm = &p->fams[fi];
        size_t i = fm->ent0, j = i + fm->nents;
        c->side_len = 0;
        size_t nvar = 0;
        uint64_t body = 0, nsamples = 0;
        const chdr *hdr = NULL;
        uint32_t last_seg = UINT32_MAX;
        const mv_coll_seg_view *v = NULL;
        const mv_pipe_view *pv = NULL;
        if (fm->fixed) { /* every entry shown, sizes known */
            hdr = &p->hdrs[p->ents[i].hdr];
            body = fm->body;
            nsamples = fm->nsamples;
            r->invalid += fm->ninvalid;
            r->renamed += fm->renamed;
            j = i; /* no first pass */
        }
        for (size_t k = i; k < j; k++) {
            const cent *en = &p->ents[k];
            if (en->seg != last_seg) {
                last_seg = en->seg;
                v = segs[en->seg];
                pv = mv_export__seg_pipe(v);
            }
            if (!pb_shown(en, pv))
                continue;
            if (!hdr)
                hdr = &p->hdrs[en->hdr];
            r->renamed += en->renamed;
            if (en->flags & F_UNRENDERABLE) {
                r->unrenderable++;
                continue;
            }
            const pmet *pm = &p->pms[en->line0];
            if (pm->kind == PM_FIXED) {
                r->invalid += pm->ninvalid;
                nsamples += pm->nsamples;
                body += pm->len;
                continue;
            }
            vc_set(&vc, v, pv, en->metric);
            int torn =
                (en->flags & F_HIST) && mv_seg_read_histogram(v->hot, vc.m, &vc.hv) != MV_SEG_OK;
            if (!torn) { /* as the walk does: a torn copy is not shown */
                r->invalid += pm->ninvalid;
                nsamples += pm->nsamples;
            }
            if (pm->kind == PM_NONE)
                continue;
            if (grow_heap((void **)&c->pst, &c->cap_pst, nvar + 1, sizeof *c->pst) != 0)
                return -ENOMEM;
            pstate *st = &c->pst[nvar++];
            st->len = UINT32_MAX;
            if (torn)
                continue;
            rc = pb_part(c, e, pm, &vc, st);
            if (rc != 0)
                return rc;
            uint64_t ml = var_mlen(pm, st->len);
            body += 1 + mv_expo_pb_varint_len(ml) + ml;
        }
        j = i + fm->nents;
        if (!hdr)
            continue;
        body += hdr->len;
        uint8_t pre[16];
        size_t np = mv_expo_pb_put_varint(pre, body);
        rc = mv_expo_raw_family(e, (const char *)pre, np);
        if (rc == 0)
            rc = mv_expo_raw_put(e, text + hdr->off, hdr->len);
        if (rc < 0)
            return rc;
        pout w = {.e = e};
        pout_open(&w);
        last_seg = UINT32_MAX;
        size_t q = 0;
        for (size_t k = i; k < j && rc == 0; k++) {
            const cent *en = &p->ents[k];
            if (en->seg != last_seg) {
                last_seg = en->seg;
                v = segs[en->seg];
                pv = mv_export__seg_pipe(v);
            }
            if ((en->flags & F_UNRENDERABLE) || !pb_shown(en, pv))
                continue;
            const pmet *pm = &p->pms[en->line0];
            if (pm->kind == PM_NONE)
                continue;
            if (pm->kind == PM_FIXED) {
                vc_set(&vc, v, pv, en->metric);
                double d = 0;
                uint64_t u = 0;
                int is_u = mv_export__value(&vc, pm->src, &d, &u);
                double dv = as_double(is_u, d, u);
                uint64_t bits;
                memcpy(&bits, &dv, sizeof bits);
                uint8_t le[8];
                for (int b = 0; b < 8; b++)
                    le[b] = (uint8_t)(bits >> (8 * b));
                if ((size_t)(w.end - w.o) >= pm->len) {
                    memcpy(w.o, text + pm->off, pm->len);
                    memcpy(w.o + pm->len - 8, le, 8);
                    w.o += pm->len;
                } else {
                    rc = pout_put(&w, text + pm->off, pm->len - 8);
                    if (rc == 0)
                        rc = pout_put(&w, le, 8);
                }
                continue;
            }
            const pstate *st = &c->pst[q++];
            if (st->len == UINT32_MAX)
                continue;
            uint8_t h[24];
            size_t nh = 0;
            h[nh++] = 4 << 3 | 2; /* MetricFamily.metric */
            nh += mv_expo_pb_put_varint(h + nh, var_mlen(pm, st->len));
            rc = pout_put(&w, h, nh);
            if (rc == 0)
                rc = pout_put(&w, text + pm->off, pm->len);
            nh = 0;
            h[nh++] = pm->kind == PM_SUMMARY ? (4 << 3 | 2) : (7 << 3 | 2);
            nh += mv_expo_pb_put_varint(h + nh, st->len);
            if (rc == 0)
                rc = pout_put(&w, h, nh);
            if (rc == 0)
                rc = pout_put(&w, c->side + st->off, st->len);
        }
        mv_expo_raw_commit(e, (size_t)(w.o - w.start));
        if (rc < 0)
            return rc;
        r->series += nsamples; /* as the uncached render: once the family is written */
    }
    return 0;
}

/* Drops of this scrape: the walk's counts for the entries shown now. */
static const char *plan_drops(const plan *p, const mv_coll_seg_view *const *segs, uint64_t *type,
                              uint64_t *coll)
{
    const char *named = p->raw_collided;
    for (size_t i = 0; i < p->ndrops; i++) {
        const cent *d = &p->drops[i];
        if (d->cond) {
            mv_export__entry tmp = {.metric = d->metric, .cond = d->cond};
            if (!mv_export__cond_holds(&tmp, mv_export__seg_pipe(segs[d->seg])))
                continue;
        }
        if (d->flags & F_DROP_TYPE)
            (*type)++;
        else
            (*coll)++;
        if (!named && (d->flags & F_COLL_LOG))
            named = p->text.p + d->line0;
    }
    return named;
}

int mv_export_render_views_cached(mv_export_cache *c, mv_expo *e,
                                  const mv_coll_seg_view *const *views, size_t nviews,
                                  const mv_coll_stats *cs, const mv_export_sel *sel,
                                  mv_export_stats *cumulative)
{
    mv_expo_format f = mv_expo_get_format(e);
    pthread_mutex_lock(&c->mu);
    int rc = key_check(c, views, nviews, mv_export__sel_serial(sel));
    if (rc == 1 && c->refused[f]) {
        rc = 0; /* this table's plan is past the limit: not built again until it changes */
    } else if (rc == 1 && !c->plans[f]) {
        rc = plan_build(c, f, nviews, sel, &c->plans[f]);
        if (rc == 0) {
            c->st.builds++;
            rc = 1;
        } else if (rc == 2) {
            c->refused[f] = 1;
            c->st.over_limit++;
            rc = 0;
        } else if (rc == 1) {
            rc = 0; /* not cacheable */
        }
    } else if (rc == 1) {
        c->st.hits++;
    }
    if (rc <= 0) { /* not cacheable, or no memory for the cache: render without it */
        c->st.uncached++;
        pthread_mutex_unlock(&c->mu);
        return mv_export_render_views_sel(e, views, nviews, cs, sel, cumulative);
    }
    const plan *p = c->plans[f];
    const mv_coll_seg_view *const *segs = c->sorted;
    uint64_t dtype = 0, dcoll = 0;
    const char *named = plan_drops(p, segs, &dtype, &dcoll);
    mv_export_stats st = {0};
    if (cumulative) {
        cumulative->dropped_type += dtype;
        cumulative->dropped_collision += dcoll;
        st = *cumulative;
    } else {
        st.dropped_type = dtype;
        st.dropped_collision = dcoll;
    }
    replay r = {0};
    rc = mv_export__render_self(e, views, nviews, cs, &st);
    if (rc == 0)
        rc = f == MV_EXPO_PROTOBUF ? plan_run_pb(c, p, segs, e, &r)
                                   : plan_run(p, segs, e, f == MV_EXPO_OPENMETRICS, &r);
    if (rc == 0)
        rc = mv_expo_finish(e);
    if (mv_expo_truncated(e))
        rc = -ENOSPC;
    if (cumulative) {
        cumulative->series = r.series;
        cumulative->renamed_labels += r.renamed;
        cumulative->dropped_invalid += r.invalid + r.unrenderable;
        mv_export__note_drops(cumulative, named, r.invalid + r.unrenderable);
        if (rc == -ENOSPC)
            cumulative->truncated++;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == -ENOMEM)
        return rc;
    return rc ? -ENOSPC : 0;
}

int mv_export_render_cached(mv_export_cache *c, mv_expo *e, const mv_coll_snap *snap,
                            const mv_export_sel *sel, mv_export_stats *cumulative)
{
    size_t n = mv_coll_snap_count(snap);
    const mv_coll_seg_view **v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = mv_coll_snap_seg(snap, i);
    int rc = mv_export_render_views_cached(c, e, v, n, mv_coll_snap_stats(snap), sel, cumulative);
    free(v);
    return rc;
}

/* ---- Visit plans (mv_export_visit_cached) ---------------------------------------------------
 * The entries of an "every" walk and, per sample, its source; the sample's index in `lines` is
 * the series number the visitor was given when it described the sample. */

typedef struct vbuilder {
    mv_export__sink k;
    plan *p;
    const mv_export_plan_visitor *vis;
    const char *family;
    mv_expo_type type;
    int err;
} vbuilder;

/* A visit plan line whose value is the gauge histogram of its metric (mv_export__native_in). */
#define SRC_NATIVE 0xffffu

static int vrec_line(vbuilder *b, const char *suffix, const mv_expo_label *a, size_t na,
                     const mv_expo_label *lb, size_t nb, const char *xname, double xval,
                     unsigned src)
{
    plan *p = b->p;
    if (p->nlines >= UINT32_MAX ||
        grow((void **)&p->lines, &p->cap_lines, p->nlines + 1, sizeof *p->lines) != 0) {
        b->err = -ENOMEM;
        return -ENOMEM;
    }
    int rc = b->vis->describe(b->vis->arg, (uint32_t)p->nlines, b->family, b->type, suffix, a, na,
                              lb, nb, xname, xval);
    if (rc < 0) {
        b->err = rc;
        return rc;
    }
    p->lines[p->nlines++] = (cline){.src = (uint16_t)(rc == 0 ? src : VS_NONE)};
    return 0;
}

static int vrec_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *lb, size_t nb, const char *xname, double xval, double v,
                       uint64_t u, int is_u, unsigned src)
{
    (void)v;
    (void)u;
    (void)is_u;
    return vrec_line((vbuilder *)k, suffix, a, na, lb, nb, xname, xval, src);
}

static int vrec_native(mv_export__sink *k, const mv_export__vctx *c, const mv_expo_label *a,
                       size_t na, const mv_expo_label *lb, size_t nb)
{
    (void)c;
    return vrec_line((vbuilder *)k, NULL, a, na, lb, nb, NULL, 0, SRC_NATIVE);
}

/* Builds the visit plan for the sorted views, describing its series. 0, 1 (not cacheable) or
 * <0 (-ENOMEM or the visitor's). */
static int vplan_build(mv_export_cache *c, size_t n, const mv_export_sel *sel,
                       const mv_export_plan_visitor *vis, plan **out)
{
    mv_export__walk w;
    plan *p = c->spare[PV] ? c->spare[PV] : calloc(1, sizeof *p);
    c->spare[PV] = NULL;
    int flags = MV_EXPORT__WALK_EVERY | (vis->native ? MV_EXPORT__WALK_NATIVE : 0);
    int rc = p ? mv_export__walk_build(&w, c->sorted, n, sel, flags) : -ENOMEM;
    if (!p)
        memset(&w, 0, sizeof w);
    else if (rc == 0 && w.mixed_derived)
        rc = 1;
    if (rc == 0)
        rc = vis->begin(vis->arg);
    vbuilder b = {.k = {.sample = vrec_sample, .native = vrec_native}, .p = p, .vis = vis};
    for (size_t e = 0; rc == 0 && e < w.n; e++) {
        const mv_export__entry *en = &w.ents[e];
        if (en->drop)
            continue;
        const char *help, *unit;
        mv_export__family_info(&w, en, &b.type, &help, &unit);
        b.family = en->name;
        if (grow((void **)&p->ents, &p->cap_ents, p->nents + 1, sizeof *p->ents) != 0) {
            rc = -ENOMEM;
            break;
        }
        const mv_coll_seg_view *v = w.segs[en->seg];
        int hist = en->kind == 0 && en->metric != MV_EXPORT_NO_METRIC &&
                   mv_seg_catalog_metric(v->cat, en->metric)->type == MV_SEG_HISTOGRAM;
        uint64_t unrenderable = w.unrenderable;
        size_t line0 = p->nlines;
        rc = mv_export__emit(&b.k, &w, en);
        if (rc < 0)
            break;
        rc = 0;
        p->ents[p->nents++] =
            (cent){.seg = en->seg,
                   .metric = en->metric,
                   .line0 = (uint32_t)line0,
                   .nlines = (uint32_t)(p->nlines - line0),
                   .cond = en->cond,
                   .flags = (uint8_t)((hist ? F_HIST : 0) |
                                      (w.unrenderable != unrenderable ? F_UNRENDERABLE : 0))};
    }
    if (rc == 0 && b.err)
        rc = b.err;
    mv_export__walk_free(&w);
    if (rc != 0) {
        plan_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Gives the visitor the values of the plan's series shown in the sorted views. */
static int vplan_run(mv_export_cache *vc, const plan *p, const mv_coll_seg_view *const *segs,
                     const mv_export_plan_visitor *vis)
{
    for (size_t i = 0; i < p->nents; i++) {
        const cent *en = &p->ents[i];
        const mv_coll_seg_view *v = segs[en->seg];
        const mv_pipe_view *pv = mv_export__seg_pipe(v);
        if (!pb_shown(en, pv) || (en->flags & F_UNRENDERABLE))
            continue;
        mv_export__vctx c;
        vc_set(&c, v, pv, en->metric);
        if ((en->flags & F_HIST) && mv_seg_read_histogram(v->hot, c.m, &c.hv) != MV_SEG_OK)
            continue; /* as the walk does: a torn copy is not shown */
        for (uint32_t j = en->line0; j < en->line0 + en->nlines; j++) {
            unsigned src = p->lines[j].src;
            if (src == VS_NONE)
                continue;
            if (src == SRC_NATIVE) {
                mv_expo_native_in in;
                if (mv_export__native_in(c.p, c.metric, &in, &vc->nb, &vc->nb_cap) != 0)
                    return -ENOMEM;
                int rc = vis->native(vis->arg, j, &in, mv_export__sample_ts_ms(&c, VS_GMEAN));
                if (rc < 0)
                    return rc;
                continue;
            }
            double d = 0;
            uint64_t u = 0;
            int is_u = mv_export__value(&c, src, &d, &u);
            int rc = vis->value(vis->arg, j, d, u, is_u, mv_export__sample_ts_ms(&c, src));
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int mv_export_visit_views_cached(mv_export_cache *c, const mv_coll_seg_view *const *views, size_t n,
                                 const mv_export_sel *sel, const mv_export_plan_visitor *vis)
{
    pthread_mutex_lock(&c->mu);
    int rc = key_check(c, views, n, mv_export__sel_serial(sel));
    if (rc == 1 && !c->plans[PV]) {
        rc = vplan_build(c, n, sel, vis, &c->plans[PV]);
        if (rc == 0) {
            c->st.builds++;
            rc = 1;
        } else if (rc == 1 || rc == -ENOMEM) {
            rc = 0; /* not cacheable, or no memory for the plan: a visit without it */
        }
    } else if (rc == 1) {
        c->st.hits++;
    }
    int unplanned = rc == 0 || rc == -ENOMEM;
    if (rc == 1)
        rc = vplan_run(c, c->plans[PV], c->sorted, vis);
    else if (unplanned)
        c->st.uncached++;
    pthread_mutex_unlock(&c->mu);
    return unplanned ? mv_export__visit_unplanned(views, n, sel, vis) : rc;
}

int mv_export_visit_cached(mv_export_cache *c, const mv_coll_snap *snap, const mv_export_sel *sel,
                           const mv_export_plan_visitor *vis)
{
    size_t n = mv_coll_snap_count(snap);
    const mv_coll_seg_view **v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = mv_coll_snap_seg(snap, i);
    int rc = mv_export_visit_views_cached(c, v, n, sel, vis);
    free(v);
    return rc;
}
