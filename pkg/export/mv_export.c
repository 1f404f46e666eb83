/* mv_export: raw segment values and collector self-metrics as exposition text. */
#include "mv_export.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LABELS (MV_SEG_LABELS_MAX + 1)

typedef struct entry {
    const char *name;
    uint32_t seg;    /* index into the sorted segment order */
    uint32_t metric; /* index in the segment's catalog */
} entry;

typedef struct render_ctx {
    const mv_coll_snap *snap;
    const mv_coll_seg_view **segs; /* sorted */
} render_ctx;

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

static int seg_cmp(const void *x, const void *y)
{
    const mv_coll_seg_view *a = *(const mv_coll_seg_view *const *)x;
    const mv_coll_seg_view *b = *(const mv_coll_seg_view *const *)y;
    int d = label_set_cmp(a->labels, a->nlabels, b->labels, b->nlabels);
    return d ? d : strcmp(a->id, b->id);
}

static int entry_cmp(const void *x, const void *y)
{
    const entry *a = x, *b = y;
    int d = strcmp(a->name, b->name);
    if (d)
        return d;
    if (a->seg != b->seg)
        return a->seg < b->seg ? -1 : 1;
    return a->metric < b->metric ? -1 : a->metric > b->metric;
}

static mv_expo_type expo_type(uint8_t t)
{
    return t == MV_SEG_COUNTER ? MV_EXPO_COUNTER
           : t == MV_SEG_GAUGE ? MV_EXPO_GAUGE
                               : MV_EXPO_HISTOGRAM;
}

/* The metric's own labels; a name that clashes with an identity label is
 * renamed exported_<name>, as Prometheus does for scraped labels. */
static size_t own_labels(const mv_coll_seg_view *v, const mv_seg_metric *m, mv_expo_label *out,
                         char (*buf)[MV_SEG_LABEL_KEY_MAX + 10], uint64_t *renamed)
{
    for (uint16_t i = 0; i < m->label_count; i++) {
        const char *k = m->labels[i].key;
        out[i].name = k;
        out[i].value = m->labels[i].value;
        for (size_t j = 0; j < v->nlabels; j++) {
            if (strcmp(v->labels[j].key, k) == 0) {
                snprintf(buf[i], sizeof buf[i], "exported_%s", k);
                out[i].name = buf[i];
                (*renamed)++;
                break;
            }
        }
    }
    return m->label_count;
}

static size_t identity_labels(const mv_coll_seg_view *v, mv_expo_label *out, size_t cap)
{
    size_t n = v->nlabels < cap ? v->nlabels : cap;
    for (size_t i = 0; i < n; i++) {
        out[i].name = v->labels[i].key;
        out[i].value = v->labels[i].value;
    }
    return n;
}

static int render_metric(mv_expo *e, const mv_coll_seg_view *v, const mv_seg_metric *m,
                         mv_export_stats *st)
{
    mv_expo_label idl[64], own[MAX_LABELS];
    char renamed[MAX_LABELS][MV_SEG_LABEL_KEY_MAX + 10];
    size_t nid = identity_labels(v, idl, 64);
    size_t nown = own_labels(v, m, own, renamed, &st->renamed_labels);
    int rc = 0;

    if (m->type == MV_SEG_COUNTER) {
        rc = mv_expo_sample_u64(e, NULL, idl, nid, own, nown, NULL, 0,
                                mv_seg_read_counter(v->hot, m), MV_EXPO_NO_TS);
        st->series++;
        return rc;
    }
    if (m->type == MV_SEG_GAUGE) {
        rc = mv_expo_sample(e, NULL, idl, nid, own, nown, NULL, 0, mv_seg_read_gauge(v->hot, m),
                            MV_EXPO_NO_TS);
        st->series++;
        return rc;
    }
    mv_seg_hist_view hv;
    if (mv_seg_read_histogram(v->hot, m, &hv) != MV_SEG_OK)
        return 0; /* the tick publishes only consistent records; be safe anyway */
    uint64_t cum = 0;
    for (uint32_t i = 0; i <= m->bucket_count && rc == 0; i++) {
        cum += hv.buckets[i];
        double le = i < m->bucket_count ? m->bounds[i] : INFINITY;
        rc = mv_expo_sample_u64(e, "_bucket", idl, nid, own, nown, "le", le, cum, MV_EXPO_NO_TS);
    }
    if (rc == 0)
        rc = mv_expo_sample(e, "_sum", idl, nid, own, nown, NULL, 0, hv.sum, MV_EXPO_NO_TS);
    if (rc == 0)
        rc = mv_expo_sample_u64(e, "_count", idl, nid, own, nown, NULL, 0, hv.count, MV_EXPO_NO_TS);
    st->series += m->bucket_count + 3u;
    return rc;
}

static int render_self(mv_expo *e, const mv_coll_snap *snap, const mv_export_stats *st)
{
    const mv_coll_stats *cs = mv_coll_snap_stats(snap);
    size_t n = mv_coll_snap_count(snap), by_state[3] = {0};
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(snap, i);
        if ((unsigned)v->state < 3)
            by_state[v->state]++;
    }
    static const char *const state_names[3] = {"pending", "ok", "quarantined"};
    rc |= mv_expo_family(e, "microview_segments", MV_EXPO_GAUGE,
                         "Segments known to the collector, by state.", NULL);
    for (int s = 0; s < 3; s++) {
        mv_expo_label l = {"state", state_names[s]};
        rc |= mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, by_state[s], MV_EXPO_NO_TS);
    }
    rc |= mv_expo_family(e, "microview_segment_errors_total", MV_EXPO_COUNTER,
                         "Segments quarantined, by the reader's rejection reason.", NULL);
    for (int r = 1; r < MV_SEG_REASON_COUNT_; r++) {
        if (r == MV_SEG_E_FULL || r == MV_SEG_E_INVAL || r == MV_SEG_E_CHANGED)
            continue; /* writer-side or internal reasons never quarantine */
        mv_expo_label l = {"reason", mv_seg_reason_name((mv_seg_reason)r)};
        rc |= mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, cs->errors[r], MV_EXPO_NO_TS);
    }
    rc |= mv_expo_family(e, "microview_segment_torn_reads_total", MV_EXPO_COUNTER,
                         "Histogram copies caught mid-update and re-read.", NULL);
    rc |= mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->torn_retries, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_catalog_reads_total", MV_EXPO_COUNTER,
                         "Full segment reads to (re)load a catalog.", NULL);
    rc |= mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->catalog_reads, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_collector_ticks_total", MV_EXPO_COUNTER,
                         "Collection ticks run.", NULL);
    rc |= mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->ticks, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_collector_tick_duration_seconds", MV_EXPO_GAUGE,
                         "Duration of the last collection tick.", "seconds");
    rc |= mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->last_tick_seconds, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_series_dropped_total", MV_EXPO_COUNTER,
                         "Series not exported, by reason.", NULL);
    mv_expo_label l = {"reason", "type_conflict"};
    rc |= mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st->dropped_type, MV_EXPO_NO_TS);
    return rc ? -ENOSPC : 0;
}

int mv_export_render(mv_expo *e, const mv_coll_snap *snap, mv_export_stats *cumulative)
{
    size_t nseg = mv_coll_snap_count(snap), total = 0;
    mv_export_stats st = {0};
    int rc = 0;

    const mv_coll_seg_view **segs = calloc(nseg ? nseg : 1, sizeof *segs);
    if (!segs)
        return -ENOMEM;
    for (size_t i = 0; i < nseg; i++) {
        segs[i] = mv_coll_snap_seg(snap, i);
        if (segs[i]->cat && segs[i]->hot && segs[i]->state == MV_COLL_OK)
            total += mv_seg_catalog_count(segs[i]->cat);
    }
    qsort(segs, nseg, sizeof *segs, seg_cmp);
    entry *ents = calloc(total ? total : 1, sizeof *ents);
    if (!ents) {
        free(segs);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < nseg; i++) {
        const mv_coll_seg_view *v = segs[i];
        if (!v->cat || !v->hot || v->state != MV_COLL_OK)
            continue;
        for (size_t j = 0; j < mv_seg_catalog_count(v->cat); j++)
            ents[k++] = (entry){mv_seg_catalog_metric(v->cat, j)->name, (uint32_t)i, (uint32_t)j};
    }
    qsort(ents, k, sizeof *ents, entry_cmp);

    for (size_t i = 0; i < k && rc == 0;) {
        const mv_coll_seg_view *v0 = segs[ents[i].seg];
        const mv_seg_metric *m0 = mv_seg_catalog_metric(v0->cat, ents[i].metric);
        rc = mv_expo_family(e, m0->name, expo_type(m0->type), m0->help,
                            m0->unit_len ? m0->unit : NULL);
        size_t j = i;
        for (; j < k && strcmp(ents[j].name, m0->name) == 0 && rc == 0; j++) {
            const mv_coll_seg_view *v = segs[ents[j].seg];
            const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, ents[j].metric);
            if (m->type != m0->type) {
                st.dropped_type++;
                continue;
            }
            rc = render_metric(e, v, m, &st);
        }
        i = j;
    }
    if (cumulative) {
        cumulative->series = st.series;
        cumulative->dropped_type += st.dropped_type;
        cumulative->renamed_labels += st.renamed_labels;
        st.dropped_type = cumulative->dropped_type;
    }
    if (rc == 0)
        rc = render_self(e, snap, &st);
    if (rc == 0)
        rc = mv_expo_finish(e);
    free(ents);
    free(segs);
    return rc ? -ENOSPC : 0;
}

char *mv_export_segments_json(const mv_coll_snap *snap)
{
    static const char *const state_names[3] = {"pending", "ok", "quarantined"};
    json_object *root = json_object_new_object(), *arr = json_object_new_array();
    const mv_coll_stats *cs = mv_coll_snap_stats(snap);
    for (size_t i = 0; i < mv_coll_snap_count(snap); i++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(snap, i);
        json_object *o = json_object_new_object(), *l = json_object_new_object();
        json_object_object_add(o, "id", json_object_new_string(v->id));
        for (size_t k = 0; k < v->nlabels; k++)
            json_object_object_add(l, v->labels[k].key, json_object_new_string(v->labels[k].value));
        json_object_object_add(o, "labels", l);
        json_object_object_add(
            o, "state",
            json_object_new_string((unsigned)v->state < 3 ? state_names[v->state] : "?"));
        if (v->reason != MV_SEG_OK) {
            json_object_object_add(o, "last_error",
                                   json_object_new_string(mv_seg_reason_name(v->reason)));
            json_object_object_add(o, "last_error_detail",
                                   json_object_new_string(v->detail ? v->detail : ""));
        }
        json_object_object_add(o, "transport", json_object_new_string(v->transport));
        json_object_object_add(o, "size", json_object_new_uint64(v->size));
        json_object_object_add(o, "metrics",
                               json_object_new_uint64(v->cat ? mv_seg_catalog_count(v->cat) : 0));
        json_object_object_add(o, "reads", json_object_new_uint64(v->reads));
        json_object_object_add(o, "read_errors", json_object_new_uint64(v->read_errors));
        json_object_object_add(o, "torn", json_object_new_uint64(v->torn));
        json_object_object_add(o, "last_read_unix_ns", json_object_new_uint64(v->read_ns));
        json_object_object_add(o, "heartbeat_unix_ns", json_object_new_uint64(v->heartbeat_ns));
        json_object_array_add(arr, o);
    }
    json_object_object_add(root, "segments", arr);
    json_object_object_add(root, "ticks", json_object_new_uint64(cs->ticks));
    json_object_object_add(root, "last_tick_seconds",
                           json_object_new_double(cs->last_tick_seconds));
    char *out = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return out;
}
