/* mv_scsvc_metrics: the scaler's own counters and their /metrics rendering through the
 * project's exposition writer (pkg/common/exposition). Calls nothing else of the module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_expo.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_scsvc_int.h"

const char *const mv_scsvc__method_names[MV_SCSVC__METHODS] = {
    "IsActive", "StreamIsActive", "GetMetricSpec", "GetMetrics", "StreamMetricSpec"};

/* Upper bounds of the duration buckets, seconds (the last bucket is +Inf). */
static const double BOUNDS[MV_SCSVC__BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05,
                                                     0.1,   0.25,   0.5,   1,    2.5};

void mv_scsvc__metrics_call(mv_scsvc__metrics *m, int method, int code, uint64_t ns)
{
    if (method < 0 || method >= MV_SCSVC__METHODS)
        return;
    if (code < 0 || code >= MV_SCSVC__CODES)
        code = MV_RPC_UNKNOWN;
    atomic_fetch_add(&m->calls[method][code], 1);
    if (method == MV_SCSVC__STREAM_IS_ACTIVE || method == MV_SCSVC__STREAM_METRIC_SPEC)
        return; /* a stream's length is no call duration */
    double s = (double)ns / 1e9;
    size_t b = 0;
    while (b < MV_SCSVC__BUCKETS - 1 && s > BOUNDS[b])
        b++;
    atomic_fetch_add(&m->dur_bucket[method][b], 1);
    atomic_fetch_add(&m->dur_count[method], 1);
    atomic_fetch_add(&m->dur_sum_ns[method], ns);
}

static void one(mv_expo *e, const char *name, mv_expo_type type, const char *help,
                const mv_expo_label *l, uint64_t v)
{
    mv_expo_family(e, name, type, help, NULL);
    mv_expo_sample_u64(e, NULL, l, l ? 1 : 0, NULL, 0, NULL, 0, v, MV_EXPO_NO_TS);
}

char *mv_scsvc__metrics_render(mv_scsvc__metrics *m, const char *accept, const char **ctype,
                               size_t *len)
{
    mv_expo_format fmt = mv_expo_negotiate(accept);
    mv_expo *e = mv_expo_create(fmt, 256u << 10);
    if (!e)
        return NULL;
    mv_expo_family(e, "microview_scaler_calls_total", MV_EXPO_COUNTER,
                   "gRPC calls answered (streams: ended), by method and status code.", NULL);
    for (int i = 0; i < MV_SCSVC__METHODS; i++)
        for (int c = 0; c < MV_SCSVC__CODES; c++) {
            uint64_t v = atomic_load(&m->calls[i][c]);
            if (!v)
                continue;
            mv_expo_label l[2] = {{"method", mv_scsvc__method_names[i]},
                                  {"code", mv_rpc_code_name(c)}};
            mv_expo_sample_u64(e, NULL, l, 2, NULL, 0, NULL, 0, v, MV_EXPO_NO_TS);
        }
    mv_expo_family(e, "microview_scaler_call_duration_seconds", MV_EXPO_HISTOGRAM,
                   "Time from a unary call's arrival to its answer, by method.", NULL);
    for (int i = 0; i < MV_SCSVC__METHODS; i++) {
        if (i == MV_SCSVC__STREAM_IS_ACTIVE || i == MV_SCSVC__STREAM_METRIC_SPEC)
            continue;
        mv_expo_label l = {"method", mv_scsvc__method_names[i]};
        uint64_t cum = 0;
        for (int b = 0; b < MV_SCSVC__BUCKETS; b++) {
            cum += atomic_load(&m->dur_bucket[i][b]);
            double le = b < MV_SCSVC__BUCKETS - 1 ? BOUNDS[b] : 1.0 / 0.0;
            mv_expo_sample_u64(e, "_bucket", &l, 1, NULL, 0, "le", le, cum, MV_EXPO_NO_TS);
        }
        mv_expo_sample(e, "_sum", &l, 1, NULL, 0, NULL, 0,
                       (double)atomic_load(&m->dur_sum_ns[i]) / 1e9, MV_EXPO_NO_TS);
        mv_expo_sample_u64(e, "_count", &l, 1, NULL, 0, NULL, 0, cum, MV_EXPO_NO_TS);
    }
    one(e, "microview_scaler_collectors_asked_total", MV_EXPO_COUNTER,
        "Collectors asked for a workload's value (one per collector per evaluation).", NULL,
        atomic_load(&m->collectors_asked));
    one(e, "microview_scaler_collectors_missing_total", MV_EXPO_COUNTER,
        "Collectors that did not answer, and nodes of a workload without a running collector.",
        NULL, atomic_load(&m->collectors_missing));
    one(e, "microview_scaler_partial_answers_total", MV_EXPO_COUNTER,
        "Values computed without some collectors (missingCollectors: partial).", NULL,
        atomic_load(&m->partial_answers));
    mv_expo_family(e, "microview_scaler_rejected_calls_total", MV_EXPO_COUNTER,
                   "Calls refused with RESOURCE_EXHAUSTED, by the limit reached.", NULL);
    mv_expo_label busy = {"limit", "max_pending"}, streams = {"limit", "max_streams"};
    mv_expo_sample_u64(e, NULL, &busy, 1, NULL, 0, NULL, 0, atomic_load(&m->rejected_busy),
                       MV_EXPO_NO_TS);
    mv_expo_sample_u64(e, NULL, &streams, 1, NULL, 0, NULL, 0, atomic_load(&m->rejected_streams),
                       MV_EXPO_NO_TS);
    long long open = atomic_load(&m->streams_open);
    one(e, "microview_scaler_streams_open", MV_EXPO_GAUGE, "StreamIsActive streams open now.", NULL,
        open > 0 ? (uint64_t)open : 0);
    one(e, "microview_scaler_discovery_errors_total", MV_EXPO_COUNTER,
        "API server requests that failed (collector discovery and scale target lookup).", NULL,
        atomic_load(&m->discovery_errors));
    mv_expo_family(e, "microview_scaler_cache_hits_total", MV_EXPO_COUNTER,
                   "Answers taken from a cache, by cache.", NULL);
    static const char *const caches[MV_SCSVC__HITS] = {"result", "discovery", "target"};
    for (int i = 0; i < MV_SCSVC__HITS; i++) {
        mv_expo_label l = {"cache", caches[i]};
        mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, atomic_load(&m->cache_hits[i]),
                           MV_EXPO_NO_TS);
    }
    mv_expo_finish(e);
    char *out = mv_expo_copy(e, len);
    if (!out)
        MV_ERROR("scaler.metrics_failed", "err=%s",
                 mv_log_q(mv_expo_truncated(e) ? mv_expo_errmsg(e) : "out of memory"));
    else
        *ctype = mv_expo_content_type(fmt);
    mv_expo_destroy(e);
    return out;
}
