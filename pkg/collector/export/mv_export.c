/* mv_export: the ordered family walk (name-collision and type rules, label renaming) and the
 * Prometheus text / OpenMetrics rendering of raw values, derived window series and collector
 * self-metrics (mv_export_self.c). The --derived selection is mv_export_sel.c, the JSON outputs
 * mv_export_json.c. */
#include "mv_export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mv_export_int.h"
#include "mv_log.h"

#define MAX_LABELS    (MV_SEG_LABELS_MAX + 1)
#define MAX_ID        64
#define SEGMENT_LABEL "microview_segment" /* tells apart segments of equal identity */
#define NO_METRIC     MV_EXPORT_NO_METRIC

/* What an entry renders. */
enum kind {
    K_RAW = 0,
    K_RATE,       /* B_rate */
    K_RATE_MAX,   /* B_rate_max */
    K_RATE_SHORT, /* B_rate_short */
    K_RESETS,     /* B_resets_total */
    K_GWIN,       /* G_window summary */
    K_GMIN,
    K_GMAX,
    K_GMEAN,
    K_GLAST,
    K_HWIN,    /* H_window summary */
    K_CHANGES, /* microview_changes_total{metric=...} */
    K_ANOM,    /* microview_anomaly_score */
    K_IVAL,    /* microview_segment_read_interval_seconds */
    K_READS,   /* microview_segment_reads_total */
    K_COLL,    /* microview_sketch_collapses_total */
    K_MEM,     /* microview_analytics_memory_bytes */
    K_GAP,     /* microview_segment_window_read_interval_max_seconds */
    K_STALE,   /* microview_segment_stale_histograms */
    K_OMIT,    /* microview_segment_omitted_histograms */
    K_BUSY,    /* microview_segment_busy_seconds */
    K_FULL,    /* microview_segment_fullness */
    K_GDIST,   /* G_window_distribution gauge histogram (protobuf) */
    K_COUNT_
};

static const struct {
    const char *suffix; /* appended to the base name; NULL for fixed names */
    const char *fixed;
    mv_expo_type type;
    const char *help;
} kinds[K_COUNT_] = {
    [K_RAW] = {NULL, NULL, MV_EXPO_UNKNOWN, NULL},
    [K_RATE] = {"_rate", NULL, MV_EXPO_GAUGE,
                "Per-second increase over the last complete window (derived by the collector)."},
    [K_RATE_MAX] = {"_rate_max", NULL, MV_EXPO_GAUGE,
                    "Highest per-second rate between two consecutive reads in the last window."},
    [K_RATE_SHORT] = {"_rate_short", NULL, MV_EXPO_GAUGE,
                      "Per-second increase over the reads of the last second (short horizon)."},
    [K_RESETS] = {"_resets_total", NULL, MV_EXPO_COUNTER,
                  "Counter resets (value went down) seen by the collector."},
    [K_GWIN] = {"_window", NULL, MV_EXPO_SUMMARY,
                "Quantiles (relative-error sketch), sum and count of the samples read in the "
                "last complete window."},
    [K_GMIN] = {"_window_min", NULL, MV_EXPO_GAUGE, "Smallest sample read in the last window."},
    [K_GMAX] = {"_window_max", NULL, MV_EXPO_GAUGE, "Largest sample read in the last window."},
    [K_GMEAN] = {"_window_mean", NULL, MV_EXPO_GAUGE,
                 "Mean of the samples read in the last window."},
    [K_GLAST] = {"_window_last", NULL, MV_EXPO_GAUGE, "Last sample read in the last window."},
    [K_HWIN] = {"_window", NULL, MV_EXPO_SUMMARY,
                "Quantiles, sum and count of the observations made in the last complete window "
                "(error bounded by the histogram's bucket width)."},
    [K_CHANGES] = {NULL, "microview_changes_total", MV_EXPO_COUNTER,
                   "Changes (level shifts) detected per metric by the collector."},
    [K_ANOM] = {NULL, "microview_anomaly_score", MV_EXPO_GAUGE,
                "Largest Frequent-Directions residual of the segment's normalised metric vector "
                "in the last window (0 = usual mix, 1 = orthogonal to it)."},
    [K_IVAL] = {NULL, "microview_segment_read_interval_seconds", MV_EXPO_GAUGE,
                "Current adaptive read interval of the segment."},
    [K_READS] = {NULL, "microview_segment_reads_total", MV_EXPO_COUNTER,
                 "Successful reads of the segment."},
    [K_COLL] = {NULL, "microview_sketch_collapses_total", MV_EXPO_COUNTER,
                "Times a window sketch of the segment ran out of room and merged its lowest "
                "buckets (quantiles below the merged bucket are over-estimated)."},
    [K_GAP] = {NULL, "microview_segment_window_read_interval_max_seconds", MV_EXPO_GAUGE,
               "Longest interval between two reads in the last window; above the tick the "
               "window's summaries come from backed-off reads (values between reads unseen)."},
    [K_MEM] = {NULL, "microview_analytics_memory_bytes", MV_EXPO_GAUGE,
               "Bytes of analytics state (sketches, detectors, scorer) held for the segment."},
    [K_STALE] = {NULL, "microview_segment_stale_histograms", MV_EXPO_GAUGE,
                 "Histograms of the segment served from an older consistent copy because every "
                 "recent copy was caught mid-update."},
    [K_BUSY] = {NULL, "microview_segment_busy_seconds", MV_EXPO_GAUGE,
                "How long the segment's catalog has been busy (an append in progress or an "
                "appender that died): its values are frozen meanwhile; 0 = not busy."},
    [K_FULL] = {NULL, "microview_segment_fullness", MV_EXPO_GAUGE,
                "How full the segment is: the larger of its value area's and its catalog's used "
                "fraction (0 to 1). At 1 the writer's next new series fails; ask for more with "
                "the pod annotation microview.io/metrics-memory."},
    [K_GDIST] = {"_window_distribution", NULL, MV_EXPO_GAUGE_HISTOGRAM,
                 "Distribution of the samples read in the last complete window: the window "
                 "sketch as a native histogram (docs/exposition.md has its error bound)."},
    [K_OMIT] = {NULL, "microview_segment_omitted_histograms", MV_EXPO_GAUGE,
                "Histograms of the segment omitted because no consistent copy was read within the "
                "staleness bound."},
};

typedef mv_export__entry entry;
typedef mv_export__walk walk;

static int label_set_cmp(const mv_seg_label *a, size_t na, const mv_seg_label *b, size_t nb)
{
    for (size_t i = 0; i < na && i < nb; i++) {
        int d = strcmp(a[i].key, b[i].key);
        if (!d)
            d = strcmp(a[i].value, b[i].value);
        if (d)
            return d;
    }
    return na < nb ? -1 : na > nb;
}

int mv_export__seg_cmp(const void *x, const void *y)
{
    const mv_coll_seg_view *a = *(const mv_coll_seg_view *const *)x;
    const mv_coll_seg_view *b = *(const mv_coll_seg_view *const *)y;
    int d = label_set_cmp(a->labels, a->nlabels, b->labels, b->nlabels);
    return d ? d : strcmp(a->id, b->id);
}

/* Raw entries sort before derived ones of the same name, so a group that has
 * any raw entry starts with one. */
static int entry_cmp(const void *x, const void *y)
{
    const entry *a = x, *b = y;
    int d = strcmp(a->name, b->name);
    if (d)
        return d;
    if ((a->kind == K_RAW) != (b->kind == K_RAW))
        return a->kind == K_RAW ? -1 : 1;
    if (a->seg != b->seg)
        return a->seg < b->seg ? -1 : 1;
    if (a->metric != b->metric)
        return a->metric < b->metric ? -1 : 1;
    return (int)a->kind - (int)b->kind;
}

static mv_expo_type raw_type(uint8_t t)
{
    return mv_seg_is_counter(t) ? MV_EXPO_COUNTER
           : t == MV_SEG_GAUGE  ? MV_EXPO_GAUGE
                                : MV_EXPO_HISTOGRAM;
}

static mv_expo_type entry_type(const walk *w, const entry *en)
{
    if (en->kind != K_RAW)
        return kinds[en->kind].type;
    return raw_type(mv_seg_catalog_metric(w->segs[en->seg]->cat, en->metric)->type);
}

/* The base of a counter name: without a trailing "_total". */
static size_t counter_base_len(const char *name, size_t len)
{
    return len > 6 && strcmp(name + len - 6, "_total") == 0 ? len - 6 : len;
}

static int str_cmp(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int reserved(const char **set, size_t n, const char *s)
{
    return n && bsearch(&s, set, n, sizeof *set, str_cmp) != NULL;
}

/* A set of names (open addressing; capacity a power of two, never full). */
typedef struct nameset {
    const char **slot;
    size_t mask;
} nameset;

static size_t name_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int nameset_has(const nameset *ns, const char *s)
{
    for (size_t i = name_hash(s) & ns->mask; ns->slot[i]; i = (i + 1) & ns->mask)
        if (strcmp(ns->slot[i], s) == 0)
            return 1;
    return 0;
}

static void nameset_add(nameset *ns, const char *s)
{
    size_t i = name_hash(s) & ns->mask;
    while (ns->slot[i] && strcmp(ns->slot[i], s) != 0)
        i = (i + 1) & ns->mask;
    ns->slot[i] = s;
}

/* Every name a raw family of type `t` puts on the wire, in either format:
 * family names and sample names. Written into `bp` (room for 4 names of
 * MV_SEG_NAME_MAX + 10); returns how many. */
static int family_names(const char *nm, mv_expo_type t, char *bp, const char **out)
{
    size_t len = strlen(nm);
    int n = 0;
    out[n++] = nm;
    const char *sfx[3] = {NULL, NULL, NULL};
    if (t == MV_EXPO_COUNTER) {
        if (counter_base_len(nm, len) != len) { /* OpenMetrics family name */
            memcpy(bp, nm, len - 6);
            bp[len - 6] = '\0';
            out[n++] = bp;
            return n;
        }
        sfx[0] = "_total";
    } else if (t == MV_EXPO_HISTOGRAM) {
        sfx[0] = "_bucket";
        sfx[1] = "_sum";
        sfx[2] = "_count";
    }
    for (int i = 0; i < 3 && sfx[i]; i++) {
        size_t sl = strlen(sfx[i]);
        out[n++] = bp;
        memcpy(bp, nm, len);
        memcpy(bp + len, sfx[i], sl + 1);
        bp += len + sl + 1;
    }
    return n;
}

/* Marks what is not exported, so that no pod can make the body unparseable:
 *  - a series whose type differs from its family's (drop 1);
 *  - a raw family any of whose wire names (family or sample, either format)
 *    another raw family already claimed: families claim in name order, so of
 *    histogram `x` and gauge `x_count`, or counters `x` and `x_total`, the
 *    second is dropped (drop 2);
 *  - a derived family whose names collide with a raw family's (drop 2);
 *  - a derived series whose base raw series is dropped, for the same reason: a counter `c`
 *    and a counter `c_total` (a Go and a Python counter named `c`) both derive `c_rate`, and
 *    only the derived series of the family kept may be shown, or they are duplicates. */
static int follow_base(walk *w);

static int mark_drops(walk *w)
{
    size_t nraw = 0;
    for (size_t i = 0; i < w->n; i++)
        nraw += w->ents[i].kind == K_RAW;
    size_t cap = 16;
    while (cap < 8 * nraw + 16)
        cap <<= 1;
    nameset claimed = {calloc(cap, sizeof(char *)), cap - 1};
    const char **set = calloc(4 * nraw + 1, sizeof *set);
    char *buf = malloc(4 * nraw * (MV_SEG_NAME_MAX + 10) + 1);
    if (!set || !buf || !claimed.slot) {
        free(set);
        free(buf);
        free(claimed.slot);
        return -ENOMEM;
    }
    size_t ns = 0;
    char *bp = buf;
    for (size_t i = 0; i < w->n;) {
        size_t j = i + 1;
        while (j < w->n && strcmp(w->ents[j].name, w->ents[i].name) == 0)
            j++;
        entry *g = &w->ents[i];
        if (g->kind == K_RAW) {
            const char *names[4];
            int nn = family_names(g->name, entry_type(w, g), bp, names);
            int clash = 0;
            for (int q = 0; q < nn && !clash; q++)
                clash = nameset_has(&claimed, names[q]);
            if (clash) {
                for (size_t k = i; k < j; k++)
                    if (w->ents[k].kind == K_RAW && !w->ents[k].drop) {
                        w->ents[k].drop = 2;
                        w->dropped_collision++;
                    }
                if (w->collided_name == NULL)
                    w->collided_name = w->raw_collided_name = g->name;
            } else {
                for (int q = 0; q < nn; q++) {
                    nameset_add(&claimed, names[q]);
                    set[ns++] = names[q];
                }
                bp += 4 * (MV_SEG_NAME_MAX + 10);
            }
        }
        i = j;
    }
    qsort(set, ns, sizeof *set, str_cmp);

    for (size_t i = 0; i < w->n;) {
        size_t j = i + 1;
        while (j < w->n && strcmp(w->ents[j].name, w->ents[i].name) == 0)
            j++;
        entry *g = &w->ents[i];
        mv_expo_type t = entry_type(w, g);
        if (g->kind == K_RAW && g->drop == 2) {
            i = j; /* the whole raw family is out */
            continue;
        }
        int collide = g->kind != K_RAW && reserved(set, ns, g->name);
        if (!collide && g->kind != K_RAW) {
            char tmp[MV_SEG_NAME_MAX + 32];
            size_t len = strlen(g->name);
            if (t == MV_EXPO_COUNTER && counter_base_len(g->name, len) != len) {
                snprintf(tmp, sizeof tmp, "%.*s", (int)(len - 6), g->name);
                collide = reserved(set, ns, tmp);
            } else if (t == MV_EXPO_SUMMARY) {
                snprintf(tmp, sizeof tmp, "%s_sum", g->name);
                collide = reserved(set, ns, tmp);
                snprintf(tmp, sizeof tmp, "%s_count", g->name);
                collide = collide || reserved(set, ns, tmp);
            }
        }
        for (size_t k = i; k < j; k++) {
            entry *en = &w->ents[k];
            if (en->kind != K_RAW && (collide || g->kind == K_RAW)) {
                en->drop = 2;
                w->dropped_collision++;
                if (w->collided_name == NULL && g->kind != K_RAW && collide)
                    w->collided_name = en->name;
            } else if (entry_type(w, en) != t) {
                en->drop = 1;
                w->dropped_type++;
            }
        }
        i = j;
    }
    free(claimed.slot);
    free(set);
    w->drop_buf = buf; /* collided_name may point into it */
    return follow_base(w);
}

/* Derived series follow their base raw series' verdict (see mark_drops). */
static int follow_base(walk *w)
{
    size_t *first = calloc(w->nseg + 1, sizeof *first);
    if (!first)
        return -ENOMEM;
    for (size_t i = 0; i < w->nseg; i++)
        first[i + 1] =
            first[i] +
            (mv_export__seg_valid(w->segs[i]) ? mv_seg_catalog_count(w->segs[i]->cat) : 0);
    uint8_t *base = calloc(first[w->nseg] + 1, 1);
    if (!base) {
        free(first);
        return -ENOMEM;
    }
    for (size_t i = 0; i < w->n; i++)
        if (w->ents[i].kind == K_RAW)
            base[first[w->ents[i].seg] + w->ents[i].metric] = w->ents[i].drop;
    for (size_t i = 0; i < w->n; i++) {
        entry *en = &w->ents[i];
        if (en->kind == K_RAW || en->drop || en->metric == NO_METRIC)
            continue;
        uint8_t d = base[first[en->seg] + en->metric];
        if (!d)
            continue;
        en->drop = d;
        if (d == 1)
            w->dropped_type++;
        else
            w->dropped_collision++;
    }
    free(base);
    free(first);
    return 0;
}

void mv_export__walk_free(walk *w)
{
    free(w->dup);
    free(w->drop_buf);
    free(w->segs);
    free(w->ents);
    free(w->arena);
}

#define QMASK (MV_DERIVED_P50 | MV_DERIVED_P90 | MV_DERIVED_P99 | MV_DERIVED_P999)

int mv_export__walk_build(walk *w, const mv_coll_seg_view *const *views, size_t nviews,
                          const mv_export_sel *sel, int flags)
{
    int every = (flags & MV_EXPORT__WALK_EVERY) != 0;
    memset(w, 0, sizeof *w);
    w->nseg = nviews;
    w->every = every;
    w->native = (flags & MV_EXPORT__WALK_NATIVE) != 0;
    size_t total = 0, arena = 1;
    w->segs = calloc(w->nseg ? w->nseg : 1, sizeof *w->segs);
    if (!w->segs)
        return -ENOMEM;
    for (size_t i = 0; i < w->nseg; i++) {
        const mv_coll_seg_view *v = w->segs[i] = views[i];
        if (!mv_export__seg_valid(v))
            continue;
        size_t n = mv_seg_catalog_count(v->cat);
        total += 10 + n * (mv_export__seg_pipe(v) ? 8 : 1);
        if (mv_export__seg_pipe(v))
            for (size_t j = 0; j < n; j++)
                arena += 7 * ((size_t)mv_seg_catalog_metric(v->cat, j)->name_len + 24);
    }
    qsort(w->segs, w->nseg, sizeof *w->segs, mv_export__seg_cmp);
    /* Segments with equal identity labels (two standalone workloads started
     * with the same --label set) would give duplicate series: each of them is
     * told apart by an extra identity label microview_segment="<id>". */
    w->dup = calloc(w->nseg ? w->nseg : 1, 1);
    if (!w->dup)
        return -ENOMEM;
    for (size_t i = 1; i < w->nseg; i++)
        if (label_set_cmp(w->segs[i]->labels, w->segs[i]->nlabels, w->segs[i - 1]->labels,
                          w->segs[i - 1]->nlabels) == 0)
            w->dup[i] = w->dup[i - 1] = 1;
    w->ents = calloc(total ? total : 1, sizeof *w->ents);
    w->arena = malloc(arena);
    if (!w->ents || !w->arena)
        return -ENOMEM;
    char *ap = w->arena;
    size_t k = 0;
    for (size_t i = 0; i < w->nseg; i++) {
        const mv_coll_seg_view *v = w->segs[i];
        if (!mv_export__seg_valid(v))
            continue;
        const mv_pipe_view *p = mv_export__seg_pipe(v);
        for (size_t j = 0; j < mv_seg_catalog_count(v->cat); j++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, j);
            /* A histogram with no consistent copy lately is omitted, never zeros. */
            if (!v->omitted || !v->omitted[j])
                w->ents[k++] = (entry){m->name, (uint32_t)i, (uint32_t)j, K_RAW, 0, 0, 0};
            if (!p)
                continue;
            const mv_pipe_out *o = &p->m[j];
            uint32_t mask = mv_export_sel_mask(sel, m->type, m->name);
            uint8_t ks[6], cs[6];
            int nk = 0;
            /* Kind q is listed when chosen and, unless `every`, its condition holds. */
#define ADD_KIND(q, c, holds)                                                                      \
    do {                                                                                           \
        if (every || (holds)) {                                                                    \
            ks[nk] = (q);                                                                          \
            cs[nk++] = (c);                                                                        \
        }                                                                                          \
    } while (0)
            int win = o->has_window != 0;
            if (mv_seg_is_counter(m->type)) {
                if (mask & MV_DERIVED_RATE)
                    ADD_KIND(K_RATE, COND_WINDOW, win);
                if (mask & MV_DERIVED_RATE_MAX)
                    ADD_KIND(K_RATE_MAX, COND_WINDOW, win);
                if (mask & MV_DERIVED_RATE_SHORT)
                    ADD_KIND(K_RATE_SHORT, COND_RATE_SHORT, !isnan(o->rate_short));
                if (mask & MV_DERIVED_RESETS)
                    ADD_KIND(K_RESETS, COND_ALWAYS, 1);
            } else if (m->type == MV_SEG_GAUGE) {
                if (mask & QMASK)
                    ADD_KIND(K_GWIN, COND_WINDOW, win);
                if (mask & MV_DERIVED_MIN)
                    ADD_KIND(K_GMIN, COND_WINDOW, win);
                if (mask & MV_DERIVED_MAX)
                    ADD_KIND(K_GMAX, COND_WINDOW, win);
                if (mask & MV_DERIVED_MEAN)
                    ADD_KIND(K_GMEAN, COND_WINDOW, win);
                if (mask & MV_DERIVED_LAST)
                    ADD_KIND(K_GLAST, COND_WINDOW, win);
                /* Not a --derived item: --native-gauge-histograms (the pipeline) turns it on. */
                if (w->native && p->native_on)
                    ADD_KIND(K_GDIST, COND_NATIVE, o->native != 0);
            } else if (m->type == MV_SEG_HISTOGRAM && (mask & QMASK)) {
                ADD_KIND(K_HWIN, COND_WINDOW, win);
            }
#undef ADD_KIND
            size_t base =
                mv_seg_is_counter(m->type) ? counter_base_len(m->name, m->name_len) : m->name_len;
            for (int q = 0; q < nk; q++) {
                size_t sl = strlen(kinds[ks[q]].suffix);
                memcpy(ap, m->name, base);
                memcpy(ap + base, kinds[ks[q]].suffix, sl + 1);
                w->ents[k++] =
                    (entry){ap, (uint32_t)i, (uint32_t)j, ks[q], 0, (uint16_t)mask, cs[q]};
                ap += base + sl + 1;
            }
            if (mask & MV_DERIVED_CHANGES)
                w->ents[k++] =
                    (entry){kinds[K_CHANGES].fixed, (uint32_t)i, (uint32_t)j, K_CHANGES, 0, 0, 0};
        }
        if (p && (every || !isnan(p->anomaly_score)))
            w->ents[k++] =
                (entry){kinds[K_ANOM].fixed, (uint32_t)i, NO_METRIC, K_ANOM, 0, 0, COND_ANOM};
        if (p) {
            w->ents[k++] = (entry){kinds[K_COLL].fixed, (uint32_t)i, NO_METRIC, K_COLL, 0, 0, 0};
            w->ents[k++] = (entry){kinds[K_MEM].fixed, (uint32_t)i, NO_METRIC, K_MEM, 0, 0, 0};
            if (every || p->window_end_ns)
                w->ents[k++] =
                    (entry){kinds[K_GAP].fixed, (uint32_t)i, NO_METRIC, K_GAP, 0, 0, COND_GAP};
        }
        w->ents[k++] = (entry){kinds[K_IVAL].fixed, (uint32_t)i, NO_METRIC, K_IVAL, 0, 0, 0};
        w->ents[k++] = (entry){kinds[K_READS].fixed, (uint32_t)i, NO_METRIC, K_READS, 0, 0, 0};
        w->ents[k++] = (entry){kinds[K_STALE].fixed, (uint32_t)i, NO_METRIC, K_STALE, 0, 0, 0};
        w->ents[k++] = (entry){kinds[K_OMIT].fixed, (uint32_t)i, NO_METRIC, K_OMIT, 0, 0, 0};
        w->ents[k++] = (entry){kinds[K_BUSY].fixed, (uint32_t)i, NO_METRIC, K_BUSY, 0, 0, 0};
        if (v->hot && v->hot_len >= sizeof(mv_seg_header))
            w->ents[k++] = (entry){kinds[K_FULL].fixed, (uint32_t)i, NO_METRIC, K_FULL, 0, 0, 0};
    }
    w->n = k;
    qsort(w->ents, k, sizeof *w->ents, entry_cmp);
    int rc = mark_drops(w);
    /* The entries a family shows have one type: a derived-only family's entries all do (each
     * derived suffix belongs to one type), a raw family's type conflicts were dropped. If that
     * ever failed, which entries are dropped, or which samples the family's type accepts,
     * would depend on which entries are shown. */
    for (size_t i = 0; rc == 0 && every && i < w->n;) {
        size_t j = i + 1, first = SIZE_MAX;
        while (j < w->n && strcmp(w->ents[j].name, w->ents[i].name) == 0)
            j++;
        int derived_only = w->ents[i].kind != K_RAW;
        for (size_t q = i; q < j; q++) {
            if (w->ents[q].drop && !derived_only)
                continue;
            if (first == SIZE_MAX)
                first = q;
            else if (entry_type(w, &w->ents[q]) != entry_type(w, &w->ents[first]))
                w->mixed_derived = 1;
        }
        i = j;
    }
    return rc;
}

#define RENAME_MAX (MV_SEG_LABEL_KEY_MAX + 4 * 9 + 1) /* up to four "exported_" prefixes */

/* Does `name` clash with an identity label, `extra`, or one of the first `n`
 * final names in out[] or the original keys of m's labels other than `self`? */
static int label_taken(const mv_coll_seg_view *v, const mv_seg_metric *m, const char *extra,
                       const char *extra2, const mv_expo_label *out, uint16_t n, uint16_t self,
                       const char *name)
{
    if ((extra && strcmp(extra, name) == 0) || (extra2 && strcmp(extra2, name) == 0))
        return 1;
    for (size_t j = 0; j < v->nlabels; j++)
        if (strcmp(v->labels[j].key, name) == 0)
            return 1;
    for (uint16_t j = 0; j < m->label_count; j++)
        if (j != self && strcmp(j < n ? out[j].name : m->labels[j].key, name) == 0)
            return 1;
    return 0;
}

/* The metric's own labels; a name that clashes with an identity label (or
 * `extra`, e.g. "metric") is renamed exported_<name>, as Prometheus does, and
 * prefixed again while that name is taken too (own labels `service` and
 * `exported_service` under identity `service` give `exported_exported_service`
 * and `exported_service`). Returns the count, or -1 if no free name was found
 * within four prefixes (the series cannot be rendered). */
static int own_labels(const mv_coll_seg_view *v, const mv_seg_metric *m, const char *extra,
                      const char *extra2, mv_expo_label *out, char (*buf)[RENAME_MAX],
                      uint64_t *renamed)
{
    for (uint16_t i = 0; i < m->label_count; i++) {
        out[i].name = m->labels[i].key;
        out[i].value = m->labels[i].value;
    }
    for (uint16_t i = 0; i < m->label_count; i++) {
        const char *k = m->labels[i].key;
        int clash = (extra && strcmp(extra, k) == 0) || (extra2 && strcmp(extra2, k) == 0);
        for (size_t j = 0; j < v->nlabels && !clash; j++)
            clash = strcmp(v->labels[j].key, k) == 0;
        if (!clash)
            continue;
        int ok = 0;
        for (int depth = 1; depth <= 4 && !ok; depth++) {
            int len = snprintf(buf[i], sizeof buf[i], "%.*s%s", 9 * depth,
                               "exported_exported_exported_exported_", k);
            ok = len > 0 && (size_t)len < sizeof buf[i] &&
                 !label_taken(v, m, extra, extra2, out, m->label_count, i, buf[i]);
        }
        if (!ok)
            return -1;
        out[i].name = buf[i];
        (*renamed)++;
    }
    return m->label_count;
}

/* Feeds one sample whose value comes from `src`. */
static int put_sample(mv_export__sink *k, mv_export__vctx *c, const char *suffix,
                      const mv_expo_label *a, size_t na, const mv_expo_label *b, size_t nb,
                      const char *xname, double xval, unsigned src)
{
    double d = 0;
    uint64_t u = 0;
    int is_u = mv_export__value(c, src, &d, &u);
    k->ctx = c;
    return k->sample(k, suffix, a, na, b, nb, xname, xval, d, u, is_u, src);
}

/* Feeds a gauge histogram's series (its native histogram is read from c). */
static int put_native(mv_export__sink *k, mv_export__vctx *c, const mv_expo_label *a, size_t na,
                      const mv_expo_label *b, size_t nb)
{
    return k->native ? k->native(k, c, a, na, b, nb) : 0;
}

/* The kinds of per-segment series and where their values come from. */
static const uint8_t seg_src[K_COUNT_] = {
    [K_ANOM] = VS_ANOM,
    [K_COLL] = VS_COLL,
    [K_GAP] = VS_GAP,
    [K_MEM] = VS_MEM,
    [K_IVAL] = VS_IVAL,
    [K_BUSY] = VS_BUSY,
    [K_FULL] = VS_FULL,
    [K_STALE] = VS_STALE,
    [K_OMIT] = VS_OMIT,
    [K_READS] = VS_READS,
    [K_RATE] = VS_RATE,
    [K_RATE_MAX] = VS_RATE_MAX,
    [K_RATE_SHORT] = VS_RATE_SHORT,
    [K_RESETS] = VS_RESETS,
    [K_GMIN] = VS_GMIN,
    [K_GMAX] = VS_GMAX,
    [K_GMEAN] = VS_GMEAN,
    [K_GLAST] = VS_GLAST,
};

int mv_export__emit(mv_export__sink *k, walk *w, const entry *en)
{
    const mv_coll_seg_view *v = w->segs[en->seg];
    const mv_pipe_view *p = mv_export__seg_pipe(v);
    k->seg = v;
    mv_expo_label idl[MAX_ID + 2], own[MAX_LABELS];
    char renamed[MAX_LABELS][RENAME_MAX];
    size_t nid = v->nlabels < MAX_ID ? v->nlabels : MAX_ID, nown = 0;
    for (size_t i = 0; i < nid; i++) {
        idl[i].name = v->labels[i].key;
        idl[i].value = v->labels[i].value;
    }
    const char *segl = w->dup[en->seg] ? SEGMENT_LABEL : NULL;
    if (segl) {
        idl[nid].name = segl;
        idl[nid++].value = v->id;
    }
    mv_export__vctx c = {.v = v, .p = p, .m = NULL, .metric = en->metric};
    if (en->metric == NO_METRIC)
        return put_sample(k, &c, NULL, idl, nid, NULL, 0, NULL, 0, seg_src[en->kind]);
    const mv_seg_metric *m = c.m = mv_seg_catalog_metric(v->cat, en->metric);
    if (en->kind == K_CHANGES) {
        idl[nid].name = "metric";
        idl[nid].value = m->name;
        int no = own_labels(v, m, "metric", segl, own, renamed, &w->renamed);
        if (no < 0) {
            w->unrenderable++;
            return 0;
        }
        nown = (size_t)no;
        return put_sample(k, &c, NULL, idl, nid + 1, own, nown, NULL, 0, VS_CHANGES);
    }
    int no = own_labels(v, m, segl, NULL, own, renamed, &w->renamed);
    if (no < 0) {
        w->unrenderable++;
        return 0;
    }
    nown = (size_t)no;
    int rc = 0;
    if (en->kind == K_GDIST)
        return put_native(k, &c, idl, nid, own, nown);
    if (en->kind != K_RAW) {
        if (en->kind != K_GWIN && en->kind != K_HWIN)
            return put_sample(k, &c, NULL, idl, nid, own, nown, NULL, 0, seg_src[en->kind]);
        for (int q = 0; q < MV_PIPE_QUANTILES && rc == 0; q++)
            if (en->mask & (MV_DERIVED_P50 << q))
                rc = put_sample(k, &c, NULL, idl, nid, own, nown, "quantile", mv_pipe_quantiles[q],
                                MV_EXPORT_SRC(VS_Q, q));
        if (rc == 0)
            rc = put_sample(k, &c, "_sum", idl, nid, own, nown, NULL, 0, VS_PSUM);
        if (rc == 0)
            rc = put_sample(k, &c, "_count", idl, nid, own, nown, NULL, 0, VS_PCOUNT);
        return rc;
    }
    if (m->type == MV_SEG_COUNTER)
        return put_sample(k, &c, NULL, idl, nid, own, nown, NULL, 0, VS_COUNTER);
    if (m->type == MV_SEG_COUNTER_F)
        return put_sample(k, &c, NULL, idl, nid, own, nown, NULL, 0, VS_COUNTER_F);
    if (m->type == MV_SEG_GAUGE)
        return put_sample(k, &c, NULL, idl, nid, own, nown, NULL, 0, VS_GAUGE);
    if (mv_seg_read_histogram(v->hot, m, &c.hv) != MV_SEG_OK) {
        if (!w->every)
            return 0; /* the tick publishes only consistent records; be safe anyway */
        /* The exposition cache records the lines, with any value: it reads the copy again
         * (and skips a torn one) at each scrape. */
        static const uint64_t zeros[MV_SEG_BUCKETS_MAX + 1];
        c.hv = (mv_seg_hist_view){.buckets = zeros};
    }
    for (uint32_t i = 0; i <= m->bucket_count && rc == 0; i++) {
        double le = i < m->bucket_count ? m->bounds[i] : INFINITY;
        rc = put_sample(k, &c, "_bucket", idl, nid, own, nown, "le", le,
                        MV_EXPORT_SRC(VS_HBUCKET, i));
    }
    if (rc == 0)
        rc = put_sample(k, &c, "_sum", idl, nid, own, nown, NULL, 0, VS_HSUM);
    if (rc == 0)
        rc = put_sample(k, &c, "_count", idl, nid, own, nown, NULL, 0, VS_HCOUNT);
    return rc;
}

void mv_export__family_info(const walk *w, const entry *g, mv_expo_type *t, const char **help,
                            const char **unit)
{
    *help = kinds[g->kind].help;
    *unit = NULL;
    if (g->kind == K_RAW || g->metric != NO_METRIC) {
        const mv_seg_metric *m = mv_seg_catalog_metric(w->segs[g->seg]->cat, g->metric);
        if (g->kind == K_RAW)
            *help = m->help;
        if (m->unit_len && g->kind != K_CHANGES && g->kind != K_RESETS && g->kind != K_RATE &&
            g->kind != K_RATE_MAX && g->kind != K_RATE_SHORT)
            *unit = m->unit;
    } else if (g->kind == K_IVAL || g->kind == K_GAP) {
        *unit = "seconds";
    } else if (g->kind == K_MEM) {
        *unit = "bytes";
    }
    *t = entry_type(w, g);
}

/* Walks every family in order; stops at the first negative return. */
static int walk_run(walk *w, mv_export__sink *k)
{
    for (size_t i = 0; i < w->n;) {
        size_t j = i;
        while (j < w->n && strcmp(w->ents[j].name, w->ents[i].name) == 0)
            j++;
        size_t first = i;
        while (first < j && w->ents[first].drop)
            first++;
        if (first < j) {
            const entry *g = &w->ents[first];
            mv_expo_type t;
            const char *help, *unit;
            mv_export__family_info(w, g, &t, &help, &unit);
            int rc = k->family(k, g->name, t, help, unit);
            if (rc < 0)
                return rc;
            for (size_t e = first; e < j && rc == 0; e++) {
                if (w->ents[e].drop)
                    continue;
                rc = mv_export__emit(k, w, &w->ents[e]);
                if (rc < 0)
                    return rc;
                rc = 0;
            }
        }
        i = j;
    }
    return 0;
}

/* ---- Exposition ------------------------------------------------------------------------------ */

typedef struct expo_sink {
    mv_export__sink k;
    mv_expo *e;
    uint64_t series;
    uint64_t invalid; /* samples the renderer refused (-EINVAL) */
    /* Protobuf: a family's samples are written when it ends (or dropped whole at the cap), so
     * they count once it has been written. */
    uint64_t pending;
    mv_expo_nh_bkt *nb; /* native buckets of the gauge histogram being written */
    size_t nb_cap;
} expo_sink;

static int expo_family(mv_export__sink *k, const char *name, mv_expo_type t, const char *help,
                       const char *unit)
{
    expo_sink *s = (expo_sink *)k;
    int rc = mv_expo_family(s->e, name, t, help, unit);
    if (rc != -EINVAL) { /* the family before it ended: written, or dropped at the cap */
        s->series += rc == 0 ? s->pending : 0;
        s->pending = 0;
    }
    return rc == -EINVAL ? 1 : rc;
}

static int expo_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                       uint64_t u, int is_u, unsigned src)
{
    (void)src;
    expo_sink *s = (expo_sink *)k;
    int rc = is_u ? mv_expo_sample_u64(s->e, suffix, a, na, b, nb, xname, xval, u, MV_EXPO_NO_TS)
                  : mv_expo_sample(s->e, suffix, a, na, b, nb, xname, xval, v, MV_EXPO_NO_TS);
    if (rc == 0)
        (*(mv_expo_get_format(s->e) == MV_EXPO_PROTOBUF ? &s->pending : &s->series))++;
    if (rc == -EINVAL)
        s->invalid++; /* an unrenderable series is skipped and counted, not fatal */
    return rc == -EINVAL ? 0 : rc;
}

static int expo_native(mv_export__sink *k, const mv_export__vctx *c, const mv_expo_label *a,
                       size_t na, const mv_expo_label *b, size_t nb)
{
    expo_sink *s = (expo_sink *)k;
    mv_expo_native_in in;
    if (mv_export__native_in(c->p, c->metric, &in, &s->nb, &s->nb_cap) != 0)
        return -ENOMEM;
    int rc = mv_expo_native(s->e, a, na, b, nb, &in, MV_EXPO_NO_TS);
    if (rc == 0)
        s->pending++;
    if (rc == -EINVAL)
        s->invalid++;
    return rc == -EINVAL ? 0 : rc;
}

/* Views of a snapshot, as an array. */
static const mv_coll_seg_view **snap_views(const mv_coll_snap *snap)
{
    size_t n = mv_coll_snap_count(snap);
    const mv_coll_seg_view **v = calloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = mv_coll_snap_seg(snap, i);
    return v;
}

int mv_export__walk_views(const mv_coll_seg_view *const *views, size_t n, const mv_export_sel *sel,
                          int flags, mv_export__sink *k)
{
    walk w;
    int rc = mv_export__walk_build(&w, views, n, sel, flags);
    if (rc == 0)
        rc = walk_run(&w, k);
    mv_export__walk_free(&w);
    return rc;
}

int mv_export__walk_snap(const mv_coll_snap *snap, const mv_export_sel *sel, mv_export__sink *k)
{
    const mv_coll_seg_view **views = snap_views(snap);
    if (!views)
        return -ENOMEM;
    int rc = mv_export__walk_views(views, mv_coll_snap_count(snap), sel, 0, k);
    free(views);
    return rc;
}

int mv_export_render_sel(mv_expo *e, const mv_coll_snap *snap, const mv_export_sel *sel,
                         mv_export_stats *cumulative)
{
    const mv_coll_seg_view **v = snap_views(snap);
    if (!v)
        return -ENOMEM;
    int rc = mv_export_render_views_sel(e, v, mv_coll_snap_count(snap), mv_coll_snap_stats(snap),
                                        sel, cumulative);
    free(v);
    return rc;
}

int mv_export_render(mv_expo *e, const mv_coll_snap *snap, mv_export_stats *cumulative)
{
    return mv_export_render_sel(e, snap, NULL, cumulative);
}

/* One warning per newly seen reason to drop: a family dropped for a name
 * collision (by name) or series that could not be rendered. */
void mv_export__note_drops(mv_export_stats *st, const char *collided_name, uint64_t invalid)
{
    if (collided_name) {
        uint64_t h = name_hash(collided_name) | 1;
        int seen = 0;
        for (size_t i = 0; i < MV_EXPORT_LOGGED && !seen; i++)
            seen = st->logged[i] == h;
        if (!seen) {
            st->logged[st->nlogged++ % MV_EXPORT_LOGGED] = h;
            MV_WARN("series.dropped", "reason=name_collision family=%s detail=%s",
                    mv_log_q(collided_name),
                    mv_log_q("its names clash with another family's; see "
                             "microview_series_dropped_total"));
        }
    }
    if (invalid && !st->logged_invalid) {
        st->logged_invalid = 1;
        MV_WARN("series.dropped", "reason=invalid count=%llu detail=%s",
                (unsigned long long)invalid,
                mv_log_q("series the exposition formats cannot express were skipped"));
    }
}

int mv_export_render_views(mv_expo *e, const mv_coll_seg_view *const *views, size_t nviews,
                           const mv_coll_stats *cs, mv_export_stats *cumulative)
{
    return mv_export_render_views_sel(e, views, nviews, cs, NULL, cumulative);
}

int mv_export_render_views_sel(mv_expo *e, const mv_coll_seg_view *const *views, size_t nviews,
                               const mv_coll_stats *cs, const mv_export_sel *sel,
                               mv_export_stats *cumulative)
{
    walk w;
    int rc = mv_export__walk_build(
        &w, views, nviews, sel,
        mv_expo_get_format(e) == MV_EXPO_PROTOBUF ? MV_EXPORT__WALK_NATIVE : 0);
    if (rc != 0) {
        mv_export__walk_free(&w);
        return rc;
    }
    mv_export_stats st = {0};
    if (cumulative) {
        cumulative->dropped_type += w.dropped_type;
        cumulative->dropped_collision += w.dropped_collision;
        st = *cumulative;
    } else {
        st.dropped_type = w.dropped_type;
        st.dropped_collision = w.dropped_collision;
    }
    expo_sink k = {{expo_family, expo_sample, expo_native, NULL, NULL}, e, 0, 0, 0, NULL, 0};
    rc = mv_export__render_self(e, views, nviews, cs, &st);
    if (rc == 0)
        rc = walk_run(&w, &k.k);
    if (rc == 0)
        rc = mv_expo_finish(e);
    if (mv_expo_truncated(e))
        rc = -ENOSPC;
    else
        k.series += k.pending;
    if (cumulative) {
        cumulative->series = k.series;
        cumulative->renamed_labels += w.renamed;
        cumulative->dropped_invalid += k.invalid + w.unrenderable;
        mv_export__note_drops(cumulative, w.collided_name, k.invalid + w.unrenderable);
        if (rc == -ENOSPC)
            cumulative->truncated++;
    }
    free(k.nb);
    mv_export__walk_free(&w);
    if (rc == -ENOMEM)
        return rc;
    return rc ? -ENOSPC : 0;
}
