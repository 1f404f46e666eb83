/* mv_workload: registers gen_* metrics and updates them at a steady rate. */
#include "mv_workload.h"

#include "mv_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define HIST_BUCKETS 16

struct mv_workload {
    mv_workload_opts o;
    mv_segment *seg;
    mv_counter *counters;
    mv_gauge *gauges;
    mv_histogram **hists;
    uint64_t rng, steps;
    double t0;
};

static double mono_s(void)
{
    return (double)mv_util_mono_ns() / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double uniform01(uint64_t *s)
{
    return ((double)(xorshift(s) >> 11) + 0.5) / 9007199254740992.0;
}

void mv_workload_destroy(mv_workload *w)
{
    if (!w)
        return;
    free(w->counters);
    free(w->gauges);
    free(w->hists);
    free(w);
}

int mv_workload_create(mv_segment *seg, const mv_workload_opts *o, mv_workload **out)
{
    mv_workload *w = calloc(1, sizeof *w);
    int rc = MV_ERR_NOMEM;
    char worker[16];
    mv_label l = {"worker", worker};
    double bounds[HIST_BUCKETS];

    *out = NULL;
    if (!w)
        return rc;
    w->o = *o;
    w->seg = seg;
    w->rng = 0x9E3779B97F4A7C15ull;
    w->counters = calloc(o->counters + 1, sizeof *w->counters);
    w->gauges = calloc(o->gauges + 1, sizeof *w->gauges);
    w->hists = calloc(o->histograms + 1, sizeof *w->hists);
    if (!w->counters || !w->gauges || !w->hists)
        goto fail;
    mv_exponential_buckets(0.0005, 2.0, HIST_BUCKETS, bounds);
    for (unsigned i = 0; i < o->counters; i++) {
        snprintf(worker, sizeof worker, "%u", i);
        rc = mv_counter_register(seg, "gen_requests_total", "Requests handled by the generator.",
                                 NULL, &l, 1, &w->counters[i]);
        if (rc != MV_OK)
            goto fail;
    }
    for (unsigned i = 0; i < o->gauges; i++) {
        snprintf(worker, sizeof worker, "%u", i);
        rc = mv_gauge_register(seg, "gen_queue_depth", "Items waiting in the generator's queue.",
                               NULL, &l, 1, &w->gauges[i]);
        if (rc != MV_OK)
            goto fail;
    }
    for (unsigned i = 0; i < o->histograms; i++) {
        snprintf(worker, sizeof worker, "%u", i);
        rc = mv_histogram_register(seg, "gen_latency_seconds",
                                   "Latency of the generator's requests.", "seconds", &l, 1, bounds,
                                   HIST_BUCKETS, &w->hists[i]);
        if (rc != MV_OK)
            goto fail;
    }
    w->t0 = mono_s();
    *out = w;
    return MV_OK;
fail:
    mv_workload_destroy(w);
    return rc;
}

static void workload_step(mv_workload *w)
{
    double t = mono_s() - w->t0;
    for (unsigned i = 0; i < w->o.counters; i++)
        mv_counter_inc(w->counters[i]);
    for (unsigned i = 0; i < w->o.gauges; i++)
        mv_gauge_set(w->gauges[i], 50.0 + 40.0 * sin(2 * M_PI * t / 10.0) + (double)i);
    for (unsigned i = 0; i < w->o.histograms; i++) {
        /* Log-normal around 5 ms (Box-Muller). */
        double z = sqrt(-2.0 * log(uniform01(&w->rng))) * cos(2 * M_PI * uniform01(&w->rng));
        mv_histogram_observe(w->hists[i], 0.005 * exp(0.5 * z));
    }
    w->steps++;
}

uint64_t mv_workload_run(mv_workload *w, const volatile int *stop)
{
    double period = w->o.rate_hz > 0 ? 1.0 / w->o.rate_hz : 0.01;
    double start = mono_s(), next = start;
    uint64_t beat = 0;
    while (!(stop && *stop)) {
        if (w->o.duration_s > 0 && mono_s() - start >= w->o.duration_s)
            break;
        workload_step(w);
        if ((w->steps & 63) == 0 || ++beat % 16 == 0)
            mv_heartbeat(w->seg);
        next += period;
        double now = mono_s();
        if (next < now - 1.0)
            next = now; /* fell far behind: do not burst */
        if (next > now) {
            double d = next - now;
            struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    return w->steps;
}
