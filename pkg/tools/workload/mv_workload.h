/* mv_workload: a synthetic metrics workload for demos, tests and benchmarks. */
#ifndef MV_WORKLOAD_H
#define MV_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "microview.h"

typedef struct mv_workload_opts {
    unsigned counters;   /* gen_requests_total{worker="i"}: +1 per step */
    unsigned gauges;     /* gen_queue_depth{worker="i"}: 50 + 40 sin(2 pi t / 10 s) + i */
    unsigned histograms; /* gen_latency_seconds{worker="i"}: log-normal, median 5 ms */
    double rate_hz;      /* steps per second (every metric updated once per step) */
    double duration_s;   /* 0 = until stopped */
} mv_workload_opts;

typedef struct mv_workload mv_workload;

/* Registers the workload's metrics in `seg` (which must outlive the
 * workload). Returns MV_OK or a libmicroview error (see mv_errdetail()).
 * Free with mv_workload_destroy. */
int mv_workload_create(mv_segment *seg, const mv_workload_opts *o, mv_workload **out);
void mv_workload_destroy(mv_workload *w);

/* Steps at rate_hz until duration_s elapses or *stop becomes nonzero.
 * Returns the number of steps taken. */
uint64_t mv_workload_run(mv_workload *w, const volatile int *stop);

#endif
