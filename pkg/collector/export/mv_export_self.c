/* mv_export's collector self-metrics: segments by state, read errors by reason, ticks, missed
 * ticks, deferred reads, polling time, dropped series and truncated expositions, rendered
 * after the segments' families in every exposition. */
#include <errno.h>
#include <math.h>

#include "mv_export_int.h"

int mv_export__render_self(mv_expo *e, const mv_coll_seg_view *const *views, size_t n,
                           const mv_coll_stats *cs, const mv_export_stats *st)
{
    size_t by_state[3] = {0};
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const mv_coll_seg_view *v = views[i];
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
    rc |= mv_expo_family(e, "microview_collector_tick_seconds", MV_EXPO_HISTOGRAM,
                         "Duration of collection ticks (a tick longer than the period delays the "
                         "next one).",
                         "seconds");
    uint64_t cum = 0;
    for (size_t b = 0; b <= MV_COLL_TICK_BUCKETS; b++) {
        cum += cs->tick_buckets[b];
        double le = b < MV_COLL_TICK_BUCKETS ? mv_coll_tick_bounds[b] : INFINITY;
        rc |= mv_expo_sample_u64(e, "_bucket", NULL, 0, NULL, 0, "le", le, cum, MV_EXPO_NO_TS);
    }
    rc |= mv_expo_sample(e, "_sum", NULL, 0, NULL, 0, NULL, 0, cs->tick_seconds_sum, MV_EXPO_NO_TS);
    rc |= mv_expo_sample_u64(e, "_count", NULL, 0, NULL, 0, NULL, 0, cum, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_collector_ticks_missed_total", MV_EXPO_COUNTER,
                         "Scheduled ticks whose start passed before a tick worker could start "
                         "them (the previous ticks overran, or every worker was held up).",
                         NULL);
    rc |= mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->ticks_missed, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_collector_reads_deferred_total", MV_EXPO_COUNTER,
                         "Segment reads a tick left to the next because a worker of an earlier "
                         "tick still held the segment.",
                         NULL);
    rc |= mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->reads_deferred, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_collector_tick_poll_seconds_total", MV_EXPO_COUNTER,
                         "CPU time idle tick workers spent polling for the next tick "
                         "(--tick-poll), all workers added up.",
                         "seconds");
    rc |= mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, cs->poll_seconds, MV_EXPO_NO_TS);
    rc |= mv_expo_family(e, "microview_series_dropped_total", MV_EXPO_COUNTER,
                         "Series not exported, by reason.", NULL);
    mv_expo_label l = {"reason", "type_conflict"};
    rc |= mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st->dropped_type, MV_EXPO_NO_TS);
    l.value = "name_collision";
    rc |=
        mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st->dropped_collision, MV_EXPO_NO_TS);
    l.value = "invalid";
    rc |= mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, st->dropped_invalid, MV_EXPO_NO_TS);
    rc |=
        mv_expo_family(e, "microview_exposition_truncated_total", MV_EXPO_COUNTER,
                       "Expositions cut at the body cap (--max-body-bytes) before this one.", NULL);
    rc |= mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, st->truncated, MV_EXPO_NO_TS);
    return rc ? -ENOSPC : 0;
}
