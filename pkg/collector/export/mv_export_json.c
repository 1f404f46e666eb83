/* mv_export_json: the JSON outputs, /debug/segments (mv_export_segments_json) and the value
 * API (mv_export_value_json, fed by the family walk of mv_export.c). */
#include "mv_export.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mv_export_int.h"

static json_object *jnum(double v)
{
    return isfinite(v) ? json_object_new_double(v) : NULL; /* JSON has no NaN/Inf */
}

static json_object *jlabels(const mv_seg_label *l, size_t n)
{
    json_object *o = json_object_new_object();
    for (size_t k = 0; k < n; k++)
        json_object_object_add(o, l[k].key, json_object_new_string(l[k].value));
    return o;
}

static json_object *metric_json(const mv_coll_seg_view *v, const mv_pipe_view *p, size_t j)
{
    static const char *const tn[5] = {"?", "counter", "gauge", "histogram", "counter"};
    const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, j);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(m->name));
    json_object_object_add(o, "labels", jlabels(m->labels, m->label_count));
    json_object_object_add(o, "type", json_object_new_string(m->type < 5 ? tn[m->type] : "?"));
    if (m->type == MV_SEG_COUNTER) {
        json_object_object_add(o, "value", json_object_new_uint64(mv_seg_read_counter(v->hot, m)));
    } else if (m->type == MV_SEG_COUNTER_F) {
        json_object_object_add(o, "value", jnum(mv_seg_read_counter_f(v->hot, m)));
    } else if (m->type == MV_SEG_GAUGE) {
        json_object_object_add(o, "value", jnum(mv_seg_read_gauge(v->hot, m)));
    } else {
        mv_seg_hist_view hv;
        if (mv_seg_read_histogram(v->hot, m, &hv) == MV_SEG_OK) {
            json_object_object_add(o, "count", json_object_new_uint64(hv.count));
            json_object_object_add(o, "sum", jnum(hv.sum));
        }
    }
    if (p) {
        const mv_pipe_out *w = &p->m[j];
        json_object_object_add(o, "changes", json_object_new_uint64(w->changes));
        if (w->has_window && mv_seg_is_counter(m->type)) {
            json_object_object_add(o, "rate", jnum(w->rate));
            json_object_object_add(o, "rate_max", jnum(w->rate_max));
        } else if (w->has_window) {
            json_object_object_add(o, "window_count", json_object_new_uint64(w->count));
            json_object_object_add(o, "window_mean", jnum(w->mean));
            json_object_object_add(o, "window_p50", jnum(w->q[0]));
            json_object_object_add(o, "window_p99", jnum(w->q[2]));
        }
    }
    return o;
}

char *mv_export_segments_json(const mv_coll_snap *snap, int metrics)
{
    static const char *const state_names[3] = {"pending", "ok", "quarantined"};
    json_object *root = json_object_new_object(), *arr = json_object_new_array();
    const mv_coll_stats *cs = mv_coll_snap_stats(snap);
    for (size_t i = 0; i < mv_coll_snap_count(snap); i++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(snap, i);
        const mv_pipe_view *p = v->cat ? mv_export__seg_pipe(v) : NULL;
        json_object *o = json_object_new_object();
        json_object_object_add(o, "id", json_object_new_string(v->id));
        json_object_object_add(o, "labels", jlabels(v->labels, v->nlabels));
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
        json_object_object_add(o, "reads_skipped", json_object_new_uint64(v->reads_skipped));
        json_object_object_add(o, "probes", json_object_new_uint64(v->probes));
        json_object_object_add(o, "probe_reads", json_object_new_uint64(v->probe_reads));
        json_object_object_add(o, "reads_same", json_object_new_uint64(v->reads_same));
        json_object_object_add(o, "reads_deferred", json_object_new_uint64(v->reads_deferred));
        json_object_object_add(o, "read_errors", json_object_new_uint64(v->read_errors));
        json_object_object_add(o, "torn", json_object_new_uint64(v->torn));
        json_object_object_add(o, "read_interval_seconds", jnum((double)v->read_interval_ns / 1e9));
        json_object_object_add(o, "reads_per_second",
                               v->read_interval_ns ? jnum(1e9 / (double)v->read_interval_ns)
                                                   : NULL);
        json_object_object_add(o, "last_read_unix_ns", json_object_new_uint64(v->read_ns));
        json_object_object_add(o, "heartbeat_unix_ns", json_object_new_uint64(v->heartbeat_ns));
        if (p) {
            uint64_t changes = 0;
            for (size_t j = 0; j < p->n; j++)
                changes += p->m[j].changes;
            json_object_object_add(o, "anomaly_score", jnum(p->anomaly_score));
            json_object_object_add(o, "changes", json_object_new_uint64(changes));
            json_object_object_add(o, "window_start_unix_ns",
                                   json_object_new_uint64(p->window_start_ns));
            json_object_object_add(o, "window_end_unix_ns",
                                   json_object_new_uint64(p->window_end_ns));
            json_object_object_add(o, "analytics_memory_bytes",
                                   json_object_new_uint64(p->mem_bytes));
            json_object_object_add(o, "sketch_collapses", json_object_new_uint64(p->collapses));
            json_object_object_add(o, "window_reads", json_object_new_uint64(p->window_reads));
            json_object_object_add(o, "window_read_interval_max_seconds",
                                   jnum((double)p->window_max_interval_ns / 1e9));
        }
        if (metrics && mv_export__seg_valid(v)) {
            json_object *ma = json_object_new_array();
            for (size_t j = 0; j < mv_seg_catalog_count(v->cat); j++)
                json_object_array_add(ma, metric_json(v, p, j));
            json_object_object_add(o, "series", ma);
        }
        json_object_array_add(arr, o);
    }
    json_object_object_add(root, "segments", arr);
    json_object_object_add(root, "ticks", json_object_new_uint64(cs->ticks));
    json_object_object_add(root, "last_tick_seconds", jnum(cs->last_tick_seconds));
    char *out = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return out;
}

typedef struct value_sink {
    mv_export__sink k;
    const char *metric;
    size_t flen; /* length of the current family name when it is a prefix of metric */
    const mv_seg_label *filters;
    size_t nf;
    mv_export_seg_match_fn match;
    void *match_arg;
    const mv_coll_seg_view *match_seg; /* the segment `matched` is for */
    int matched;
    json_object *series;
    size_t count;
    double agg_v;
    int agg; /* 0 sum, 1 avg, 2 max, 3 min */
    /* While every matched sample is an integer (counters, counts), the sum, max and min
     * are also kept exactly: doubles lose integers above 2^53. */
    int all_u, u_overflow;
    uint64_t agg_u;
} value_sink;

static int value_family(mv_export__sink *k, const char *name, mv_expo_type t, const char *help,
                        const char *unit)
{
    (void)t;
    (void)help;
    (void)unit;
    value_sink *s = (value_sink *)k;
    size_t len = strlen(name);
    /* Samples are named family + suffix; skip families that cannot match. */
    if (strncmp(s->metric, name, len) != 0)
        return 1;
    s->flen = len;
    return 0;
}

static int label_match(const mv_expo_label *l, size_t n, const mv_seg_label *f)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i].name, f->key) == 0)
            return strcmp(l[i].value, f->value) == 0;
    return -1; /* absent */
}

static int value_sample(mv_export__sink *k, const char *suffix, const mv_expo_label *a, size_t na,
                        const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                        uint64_t u, int is_u, unsigned src)
{
    (void)src;
    value_sink *s = (value_sink *)k;
    const char *rest = s->metric + s->flen;
    if (strcmp(rest, suffix ? suffix : "") != 0)
        return 0;
    if (s->match) {
        if (s->match_seg != k->seg || !s->match_seg) {
            s->match_seg = k->seg;
            s->matched = k->seg && s->match(s->match_arg, k->seg);
        }
        if (!s->matched)
            return 0;
    }
    char xbuf[40] = "";
    if (xname)
        mv_expo_format_double(xval, 0, xbuf, sizeof xbuf);
    for (size_t i = 0; i < s->nf; i++) {
        const mv_seg_label *f = &s->filters[i];
        int m = label_match(a, na, f);
        if (m < 0)
            m = label_match(b, nb, f);
        if (m < 0 && xname && strcmp(xname, f->key) == 0)
            m = strcmp(xbuf, f->value) == 0 || strtod(f->value, NULL) == xval;
        if (m <= 0)
            return 0;
    }
    double val = is_u ? (double)u : v;
    json_object *o = json_object_new_object(), *l = json_object_new_object();
    for (size_t i = 0; i < na; i++)
        json_object_object_add(l, a[i].name, json_object_new_string(a[i].value));
    for (size_t i = 0; i < nb; i++)
        json_object_object_add(l, b[i].name, json_object_new_string(b[i].value));
    if (xname)
        json_object_object_add(l, xname, json_object_new_string(xbuf));
    json_object_object_add(o, "labels", l);
    json_object_object_add(o, "value", is_u ? json_object_new_uint64(u) : jnum(val));
    json_object_array_add(s->series, o);
    if (!is_u)
        s->all_u = 0;
    else if (s->count == 0)
        s->agg_u = u;
    else if (s->agg <= 1)
        s->u_overflow |= __builtin_add_overflow(s->agg_u, u, &s->agg_u);
    else if ((s->agg == 2) == (u > s->agg_u))
        s->agg_u = u;
    if (isfinite(val)) {
        if (s->count == 0)
            s->agg_v = val;
        else if (s->agg <= 1)
            s->agg_v += val;
        else if ((s->agg == 2) == (val > s->agg_v))
            s->agg_v = val;
        s->count++;
    }
    return 0;
}

int mv_export_value_json(const mv_coll_snap *snap, const char *metric, const mv_seg_label *filters,
                         size_t nfilters, const char *agg, char **out)
{
    mv_export_value_req r = {
        .metric = metric, .filters = filters, .nfilters = nfilters, .agg = agg};
    return mv_export_value_json_req(snap, &r, out);
}

int mv_export_value_json_req(const mv_coll_snap *snap, const mv_export_value_req *r, char **out)
{
    static const char *const aggs[4] = {"sum", "avg", "max", "min"};
    const char *metric = r->metric;
    int ai = -1;
    *out = NULL;
    for (int i = 0; i < 4; i++)
        if (strcmp(r->agg ? r->agg : "sum", aggs[i]) == 0)
            ai = i;
    if (ai < 0)
        return -EINVAL;
    value_sink s = {.k = {value_family, value_sample, NULL},
                    .metric = metric,
                    .filters = r->filters,
                    .nf = r->nfilters,
                    .match = r->match,
                    .match_arg = r->match_arg,
                    .series = json_object_new_array(),
                    .agg = ai,
                    .all_u = 1};
    int rc = mv_export__walk_snap(snap, NULL, &s.k); /* every derived series */
    if (rc != 0) {
        json_object_put(s.series);
        return rc;
    }
    json_object *root = json_object_new_object();
    json_object_object_add(root, "metric", json_object_new_string(metric));
    json_object_object_add(root, "aggregation", json_object_new_string(aggs[ai]));
    double v = s.count == 0 ? NAN : ai == 1 ? s.agg_v / (double)s.count : s.agg_v;
    if (s.count == 0 && r->empty_ok)
        json_object_object_add(root, "value", json_object_new_uint64(0));
    else if (s.count && s.all_u && ai != 1 && !s.u_overflow)
        json_object_object_add(root, "value", json_object_new_uint64(s.agg_u));
    else
        json_object_object_add(root, "value", jnum(v));
    json_object_object_add(root, "count", json_object_new_uint64(s.count));
    size_t nseries = json_object_array_length(s.series);
    json_object_object_add(root, "series", s.series);
    if (nseries == 0 && r->empty_ok)
        json_object_object_add(root, "empty", json_object_new_boolean(1));
    else if (nseries == 0)
        json_object_object_add(
            root, "error",
            json_object_new_string(
                strncmp(metric, "microview_", 10) == 0
                    ? "no series matches this metric and labels (the collector-wide microview_* "
                      "families are on /metrics only; per-segment ones are served here)"
                    : "no series matches this metric and labels"));
    *out = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    if (!*out)
        return -ENOMEM;
    return nseries || r->empty_ok ? 0 : -ENOENT;
}
