/* mv_export_cache: the exposition cache. Between scrapes it keeps every family's header and
 * every sample's rendered name and label set (escaped, per format), so that a scrape of an
 * unchanged table only formats values. See mv_export.h for the interface.
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

typedef struct plan {
    area text; /* headers, names, label parts */
    cline *lines;
    size_t nlines, cap_lines;
    cent *ents, *drops;
    size_t nents, ndrops, cap_ents, cap_drops;
    chdr *hdrs;
    size_t nhdrs, cap_hdrs;
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
    plan *plans[2]; /* by mv_expo_format */
    plan *spare[2]; /* plans dropped by a key change: their memory is reused, already mapped */
    const mv_coll_seg_view **sorted;
    size_t cap_sorted;
    size_t limit;       /* most bytes the plans may hold together; 0: no limit */
    uint8_t refused[2]; /* by format: the plan of this key passed the limit (not built again) */
    mv_export_cache_stats st;
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
    free(p->raw_collided);
    free(p);
}

void mv_export_cache_set_limit(mv_export_cache *c, size_t max_bytes)
{
    pthread_mutex_lock(&c->mu);
    c->limit = max_bytes;
    c->refused[0] = c->refused[1] = 0;
    pthread_mutex_unlock(&c->mu);
}

static size_t plan_bytes(const plan *p)
{
    return p ? p->text.cap + p->cap_lines * sizeof(cline) +
                   (p->cap_ents + p->cap_drops) * sizeof(cent) + p->cap_hdrs * sizeof(chdr)
             : 0;
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
    c->refused[0] = c->refused[1] = 0;
    for (int f = 0; f < 2; f++) {
        plan *p = c->plans[f];
        c->plans[f] = NULL;
        if (!p)
            continue;
        plan_free(c->spare[f]);
        free(p->raw_collided);
        p->raw_collided = NULL;
        p->text.len = p->nlines = p->nents = p->ndrops = p->nhdrs = 0;
        c->spare[f] = p;
    }
}

void mv_export_cache_destroy(mv_export_cache *c)
{
    if (!c)
        return;
    key_free(c);
    plan_free(c->spare[0]);
    plan_free(c->spare[1]);
    free(c->sorted);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void mv_export_cache_get_stats(mv_export_cache *c, mv_export_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->bytes = plan_bytes(c->plans[0]) + plan_bytes(c->plans[1]) + plan_bytes(c->spare[0]) +
                 plan_bytes(c->spare[1]);
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

static int add_hdr(plan *p, mv_expo *hs, mv_expo_format f, const char *name, mv_expo_type t,
                   const char *help, const char *unit, uint32_t *idx)
{
    mv_expo_reset(hs, f);
    int rc = mv_expo_family(hs, name, t, help, unit);
    if (rc < 0)
        return rc;
    size_t len;
    const char *d = mv_expo_data(hs, &len);
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
    int rc = p ? mv_export__walk_build(&w, c->sorted, n, sel, 1) : -ENOMEM;
    if (!p) {
        memset(&w, 0, sizeof w);
    } else if (rc == 0 && w.mixed_derived) {
        rc = 1;
    }
    mv_expo *hs = NULL;
    if (rc == 0) {
        b.k.sample = rec_sample;
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
                       .hdr = hdr,
                       .renamed = (uint16_t)(w.renamed - renamed),
                       .cond = en->cond,
                       .flags = (uint8_t)((first_ent ? F_FIRST : 0) | (hist ? F_HIST : 0) |
                                          (w.unrenderable != unrenderable ? F_UNRENDERABLE : 0))};
            first_ent = 0;
            /* Past the limit: given up at once, so the build never holds much more. */
            if (c->limit && plan_bytes(p) + plan_bytes(c->plans[!f]) > c->limit)
                rc = 2;
        }
        mv_expo_raw_truncate(b.scratch, 0);
        i = j;
    }
    if (rc == 0 && b.err)
        rc = b.err;
    if (rc == 0 && p->nlines > UINT32_MAX)
        rc = 1;
    mv_expo_destroy(b.scratch);
    mv_expo_destroy(hs);
    free(b.lab_of);
    free(b.seg_base);
    mv_export__walk_free(&w);
    if (rc != 0) {
        if (rc == 2)
            c->st.last_refused_bytes = plan_bytes(p) + plan_bytes(c->plans[!f]);
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
    if (f == MV_EXPO_PROTOBUF) /* the cache keeps text lines: protobuf renders without it */
        return mv_export_render_views_sel(e, views, nviews, cs, sel, cumulative);
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
        rc = plan_run(p, segs, e, f == MV_EXPO_OPENMETRICS, &r);
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
