/* mv_burst_writer: a test workload that makes a 20 ms burst every 2 s, for the live view's
 * tests and benchmark. Usage: mv_burst_writer SEGMENT_FILE [SECONDS [PERIOD_MS [EXTRA]]]
 *
 * Every millisecond: outside a burst, burst_requests_total += 1, burst_inflight = 1 and one
 * burst_latency_seconds observation of 1 ms; during the first 20 ms of every 2 s of wall-clock
 * time (CLOCK_REALTIME multiples of 2 s, so a test knows when each burst happened),
 * burst_requests_total += 50, burst_inflight = 100 and an observation of 50 ms. Prints one
 * line per burst start on stdout: "burst <unix ms>". PERIOD_MS (default 2000, at least 40)
 * changes the period; EXTRA (default 0, at most 64) more gauges burst_extra_<i> are set to i
 * every millisecond (for benchmarks with more series). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "microview.h"

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mv_burst_writer SEGMENT_FILE [SECONDS [PERIOD_MS [EXTRA]]]\n");
        return 2;
    }
    double secs = argc > 2 ? atof(argv[2]) : 0;
    long period = argc > 3 ? atol(argv[3]) : 2000;
    long extra = argc > 4 ? atol(argv[4]) : 0;
    if (period < 40 || extra < 0 || extra > 64) {
        fprintf(stderr, "mv_burst_writer: PERIOD_MS >= 40 and EXTRA 0..64\n");
        return 2;
    }
    mv_gauge more[64];
    mv_segment *seg;
    int rc = mv_open(argv[1], &seg);
    if (rc) {
        fprintf(stderr, "mv_burst_writer: %s: %s\n", argv[1], mv_strerror(rc));
        return 1;
    }
    mv_counter req;
    mv_gauge inflight;
    mv_histogram *lat;
    double bounds[8];
    mv_exponential_buckets(0.0005, 2, 8, bounds);
    if (mv_counter_register(seg, "burst_requests_total", "Requests.", NULL, NULL, 0, &req) ||
        mv_gauge_register(seg, "burst_inflight", "Requests in flight.", NULL, NULL, 0, &inflight) ||
        mv_histogram_register(seg, "burst_latency_seconds", "Latency.", "seconds", NULL, 0, bounds,
                              8, &lat)) {
        fprintf(stderr, "mv_burst_writer: register: %s\n", mv_errdetail());
        return 1;
    }
    for (long i = 0; i < extra; i++) {
        char name[32];
        snprintf(name, sizeof name, "burst_extra_%ld", i);
        if (mv_gauge_register(seg, name, "Extra series.", NULL, NULL, 0, &more[i])) {
            fprintf(stderr, "mv_burst_writer: register: %s\n", mv_errdetail());
            return 1;
        }
    }
    uint64_t start = wall_ms(), last_burst = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        uint64_t now = wall_ms();
        if (secs > 0 && (double)(now - start) >= secs * 1000)
            break;
        int burst = now % (uint64_t)period < 20;
        if (burst && now / (uint64_t)period != last_burst) {
            last_burst = now / (uint64_t)period;
            printf("burst %llu\n", (unsigned long long)(now - now % (uint64_t)period));
            fflush(stdout);
        }
        mv_counter_add(req, burst ? 50 : 1);
        mv_gauge_set(inflight, burst ? 100 : 1);
        mv_histogram_observe(lat, burst ? 0.05 : 0.001);
        for (long i = 0; i < extra; i++)
            mv_gauge_set(more[i], (double)i);
        mv_heartbeat(seg);
        next.tv_nsec += 1000000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    mv_close(seg);
    return 0;
}
