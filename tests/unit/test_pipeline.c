/* Unit tests for mv_pipeline: window math, quantile bounds, changes, scores (adaptive sampling
 * through the collector: test_adaptive.c; reads that must end where others do:
 * test_pipeline_equiv.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analytics_rng.h"
#include "microview.h"
#include "mv_detect.h"
#include "mv_pipeline.h"
#include "mv_sketch.h"
#include "mv_test.h"
#include "pipeline_fixture.h"

/* A phased segment's windows start at multiples of the window less its phase: reads at
 * 100 ms steps close windows at k s + 300 ms for a 700 ms phase of 1 s windows, the
 * published window says so, and a window still holds a whole window's reads. A phase of
 * a window or more is refused. */
static void test_window_phase(void)
{
    fixture f;
    mv_counter c;
    fx_one_counter(&f, "phase.seg", "reqs_total", &c);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.fd = 0;
    cfg.window_phase_ns = SEC;
    CU_ASSERT(mv_pipe_config_check(&cfg) != NULL);
    mv_pipe_seg *p = NULL;
    CU_ASSERT(mv_pipe_seg_create(&cfg, f.cat, NULL, &p) == -EINVAL);
    cfg.window_phase_ns = 700 * MS;
    CU_ASSERT(mv_pipe_config_check(&cfg) == NULL);
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &p) == 0);
    uint64_t t0 = 1000 * SEC;
    int closes = 0;
    for (int i = 0; i <= 35; i++) { /* t0 .. t0 + 3.5 s */
        uint64_t t = t0 + (uint64_t)i * SEC / 10;
        mv_counter_add(c, 10);
        unsigned fl = mv_pipe_seg_feed(p, f.map, t);
        int boundary = i % 10 == 3; /* t = t0 + k s + 300 ms = (t0 + k + 1) s - 700 ms */
        CU_ASSERT_EQUAL(!!(fl & MV_PIPE_WINDOW), boundary);
        if (!(fl & MV_PIPE_WINDOW))
            continue;
        closes++;
        mv_pipe_view *v = mv_pipe_seg_view(p);
        CU_ASSERT_FATAL(v != NULL);
        CU_ASSERT_EQUAL(v->window_end_ns, t);
        CU_ASSERT_EQUAL(v->window_start_ns, t - SEC);
        /* The first window (t0 - 700 ms .. t0 + 300 ms) holds the reads from t0 on, the
         * next ones 10 reads each, all at 100/s. */
        CU_ASSERT_EQUAL(v->window_reads, closes == 1 ? 3 : 10);
        CU_ASSERT(rel_err(v->m[0].rate, 100.0) < 1e-9);
        free(v);
    }
    CU_ASSERT_EQUAL(closes, 4);
    mv_pipe_seg_destroy(p);
    /* Near the start of the clock a window's start is clamped to 0. */
    cfg.window_phase_ns = 700 * MS;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &p) == 0);
    mv_pipe_seg_feed(p, f.map, 100 * MS);
    CU_ASSERT(mv_pipe_seg_feed(p, f.map, 300 * MS) & MV_PIPE_WINDOW);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    CU_ASSERT_FATAL(v != NULL);
    CU_ASSERT_EQUAL(v->window_start_ns, 0);
    CU_ASSERT_EQUAL(v->window_end_ns, 300 * MS);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Counter: rate over the window, the largest per-read rate, resets. */
static void test_counter_window(void)
{
    fixture f;
    mv_counter c;
    fx_one_counter(&f, "counter.seg", "reqs_total", &c);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t0 = 1000 * SEC; /* window-aligned */

    /* Window 0: reads every 100 ms, +10 each (100/s) but one burst of +50
     * (500/s). The first read has no interval and an interval belongs to the
     * window its end falls in, so window 0 holds 9 intervals (0.9 s). */
    mv_pipe_seg_feed(p, f.map, t0);
    for (int i = 1; i < 10; i++) {
        mv_counter_add(c, i == 5 ? 50 : 10);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * SEC / 10);
    }
    /* Window 1: a reset (the pod restarted) to 3, then +10 per 100 ms. */
    *c.slot = 3;
    unsigned fl = mv_pipe_seg_feed(p, f.map, t0 + SEC);
    CU_ASSERT(fl & MV_PIPE_WINDOW);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    CU_ASSERT_FATAL(v != NULL);
    CU_ASSERT_EQUAL(v->window_start_ns, t0);
    CU_ASSERT_EQUAL(v->window_end_ns, t0 + SEC);
    CU_ASSERT(v->m[0].has_window);
    /* 8 * 10 + 50 over 0.9 s */
    CU_ASSERT(rel_err(v->m[0].rate, 130.0 / 0.9) < 1e-9);
    CU_ASSERT(rel_err(v->m[0].rate_max, 500.0) < 1e-9);
    CU_ASSERT_EQUAL(v->m[0].resets, 0);
    free(v);
    for (int i = 1; i < 10; i++) {
        mv_counter_add(c, 10);
        mv_pipe_seg_feed(p, f.map, t0 + SEC + (uint64_t)i * SEC / 10);
    }
    mv_pipe_seg_feed(p, f.map, t0 + 2 * SEC);
    v = mv_pipe_seg_view(p);
    /* The reset interval counts the new value (3) as the increase; then 9 * 10;
     * the interval ending exactly at t0 + 2 s belongs to window 2. */
    CU_ASSERT(rel_err(v->m[0].rate, 93.0 / 1.0) < 1e-9);
    CU_ASSERT_EQUAL(v->m[0].resets, 1);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* A fractional counter (record type 4) has the rates of a counter, fractions included:
 * 0.25 per 100 ms is 2.5/s (a type 1 counter could not hold it), and a re-created series
 * (its value drops) counts as a reset. */
static void test_counter_f_window(void)
{
    fixture f;
    mv_counter_f c;
    fx_open(&f, "counter_f.seg", 16384);
    CU_ASSERT_FATAL(mv_counter_f_register(f.seg, "busy_seconds_total", NULL, NULL, NULL, 0, &c) ==
                    MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t0 = 1000 * SEC;
    mv_pipe_seg_feed(p, f.map, t0);
    for (int i = 1; i <= 10; i++) {
        mv_counter_f_add(c, i == 5 ? 1.25 : 0.25);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * SEC / 10);
    }
    mv_pipe_view *v = mv_pipe_seg_view(p);
    CU_ASSERT_FATAL(v != NULL);
    CU_ASSERT(v->m[0].has_window);
    /* Window 0 holds 9 intervals: 8 * 0.25 + 1.25 over 0.9 s; the largest 1.25 / 0.1 s. */
    CU_ASSERT(rel_err(v->m[0].rate, 3.25 / 0.9) < 1e-9);
    CU_ASSERT(rel_err(v->m[0].rate_max, 12.5) < 1e-9);
    CU_ASSERT(rel_err(v->m[0].rate_short, 3.25 / 0.9) < 1e-9); /* since the first read */
    CU_ASSERT_EQUAL(v->m[0].resets, 0);
    free(v);
    /* Integral adds land in the other word: the rate sees both. */
    for (int i = 11; i < 20; i++) {
        mv_counter_f_add(c, i % 2 ? 1 : 0.5);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * SEC / 10);
    }
    uint64_t *w = (uint64_t *)(void *)((uintptr_t)c.slot & ~(uintptr_t)7);
    w[0] = 0; /* the value drops (a re-created series): a reset */
    w[1] = 0;
    mv_counter_f_add(c, 0.5);
    mv_pipe_seg_feed(p, f.map, t0 + 2 * SEC);
    v = mv_pipe_seg_view(p);
    CU_ASSERT_FATAL(v != NULL);
    /* Window 1: the 0.25 read at t0 + 1 s, then 5 * 1 + 4 * 0.5, over 1 s. */
    CU_ASSERT(rel_err(v->m[0].rate, 7.25) < 1e-9);
    CU_ASSERT_EQUAL(v->m[0].resets, 0);
    free(v);
    for (int i = 21; i <= 30; i++) {
        mv_counter_f_add(c, 0.5);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * SEC / 10);
    }
    v = mv_pipe_seg_view(p);
    CU_ASSERT_FATAL(v != NULL);
    /* Window 2: the reset interval counts the new value (0.5), then 9 * 0.5, over 1 s. */
    CU_ASSERT(rel_err(v->m[0].rate, 5.0) < 1e-9);
    CU_ASSERT_EQUAL(v->m[0].resets, 1);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* A step in a counter's rate: the short-horizon rate shows it exactly within
 * its horizon (1 s) plus one read; the window rate needs up to two windows. */
static void test_short_rate_follows_step(void)
{
    fixture f;
    mv_counter c;
    fx_one_counter(&f, "short.seg", "jobs_total", &c);
    mv_pipe_seg *p = new_pipe(f.cat, 15 * SEC, 0, 0);
    uint64_t dt = SEC / 100, t0 = 10005 * SEC, step = t0 + 20 * SEC + 3 * SEC / 10;
    double short_lat = -1, window_lat = -1;
    for (uint64_t t = t0; t < step + 40 * SEC; t += dt) {
        mv_counter_add(c, t <= step ? 1 : 10); /* 100/s, then 1000/s */
        mv_pipe_seg_feed(p, f.map, t);
        mv_pipe_view *v = mv_pipe_seg_view(p);
        if (t > step && short_lat < 0 && rel_err(v->m[0].rate_short, 1000.0) < 1e-9)
            short_lat = (double)(t - step) / 1e9;
        if (t > step && window_lat < 0 && v->m[0].has_window &&
            rel_err(v->m[0].rate, 1000.0) < 1e-9)
            window_lat = (double)(t - step) / 1e9;
        if (t <= step && t > t0 + 2 * SEC)
            CU_ASSERT(rel_err(v->m[0].rate_short, 100.0) < 1e-9);
        free(v);
    }
    printf("\n  rate step 100 -> 1000/s: short rate exact after %.3f s, window rate after %.3f s ",
           short_lat, window_lat);
    CU_ASSERT(short_lat > 0 && short_lat <= 1.0 + 0.011);
    CU_ASSERT(window_lat > 15.0);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Gauge: exact min/max/mean/last/count/sum, quantiles within alpha of exact. */
static void test_gauge_window_quantiles(void)
{
    fixture f;
    mv_gauge g;
    fx_open(&f, "gauge.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "temp", NULL, NULL, NULL, 0, &g) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t0 = 2000 * SEC;
    enum { N = 5000 };
    static double xs[N];
    test_rng r = {42};
    double sum = 0;
    for (int i = 0; i < N; i++) {
        xs[i] = exp(rng_gauss(&r)) * 10; /* lognormal */
        mv_gauge_set(g, xs[i]);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * (SEC / N));
        sum += xs[i];
    }
    mv_pipe_seg_feed(p, f.map, t0 + SEC);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    const mv_pipe_out *o = &v->m[0];
    qsort(xs, N, sizeof xs[0], dcmp);
    CU_ASSERT(o->has_window);
    CU_ASSERT_EQUAL(o->count, N);
    CU_ASSERT(rel_err(o->sum, sum) < 1e-9);
    CU_ASSERT_EQUAL(o->min, xs[0]);
    CU_ASSERT_EQUAL(o->max, xs[N - 1]);
    CU_ASSERT(rel_err(o->mean, sum / N) < 1e-9);
    for (int q = 0; q < MV_PIPE_QUANTILES; q++) {
        double want = xs[(size_t)floor(mv_pipe_quantiles[q] * (N - 1))];
        CU_ASSERT(rel_err(o->q[q], want) <= 0.01 + 1e-12);
    }
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Window quantiles with the DEFAULT config over a wide range: log-uniform
 * 1 ns .. 1000 s (12 decades) and a 1 ms .. 10 s latency mix, every quantile
 * within alpha (the default sketch covers at least 1 ns .. 1 h). */
static void test_gauge_wide_range(void)
{
    fixture f;
    mv_gauge g[2];
    fx_open(&f, "wide.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "wide", NULL, NULL, NULL, 0, &g[0]) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "lat", NULL, NULL, NULL, 0, &g[1]) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t0 = 8000 * SEC;
    enum { N = 20000 };
    static double xs[2][N];
    test_rng r = {4242};
    for (int i = 0; i < N; i++) {
        xs[0][i] = pow(10.0, -9.0 + 12.0 * rng_unif(&r));
        /* 90% fast (1-5 ms), 10% slow (1-10 s) */
        xs[1][i] = rng_unif(&r) < 0.9 ? 0.001 + 0.004 * rng_unif(&r) : 1 + 9 * rng_unif(&r);
        mv_gauge_set(g[0], xs[0][i]);
        mv_gauge_set(g[1], xs[1][i]);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * (SEC / N));
    }
    mv_pipe_seg_feed(p, f.map, t0 + SEC);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    for (int m = 0; m < 2; m++) {
        qsort(xs[m], N, sizeof xs[m][0], dcmp);
        for (int q = 0; q < MV_PIPE_QUANTILES; q++) {
            double want = xs[m][(size_t)floor(mv_pipe_quantiles[q] * (N - 1))];
            double e = rel_err(v->m[m].q[q], want);
            if (e > 0.01)
                printf("\n  metric %d q=%g got %g want %g (x%.3g) ", m, mv_pipe_quantiles[q],
                       v->m[m].q[q], want, v->m[m].q[q] / want);
            CU_ASSERT(e <= 0.01 + 1e-12);
        }
    }
    CU_ASSERT_EQUAL(v->m[0].count, N);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Histogram: window count/sum exact; quantiles within the bucket's width. */
static void test_histogram_window(void)
{
    fixture f;
    mv_histogram *h;
    double bounds[60];
    CU_ASSERT_FATAL(mv_exponential_buckets(0.001, 1.1, 60, bounds) == MV_OK);
    fx_open(&f, "hist.seg", 65536);
    CU_ASSERT_FATAL(
        mv_histogram_register(f.seg, "lat_seconds", NULL, NULL, NULL, 0, bounds, 60, &h) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t0 = 3000 * SEC;
    /* Observations before the window starts are not counted in it. */
    for (int i = 0; i < 100; i++)
        mv_histogram_observe(h, 5.0);
    mv_pipe_seg_feed(p, f.map, t0);
    enum { N = 4000 };
    static double xs[N];
    test_rng r = {7};
    double sum = 0;
    for (int i = 0; i < N; i++) {
        xs[i] = 0.002 + 0.05 * rng_unif(&r);
        mv_histogram_observe(h, xs[i]);
        sum += xs[i];
        if (i % 100 == 99)
            mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)(i + 1) * (SEC / (N + 100)));
    }
    mv_pipe_seg_feed(p, f.map, t0 + SEC);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    const mv_pipe_out *o = &v->m[0];
    qsort(xs, N, sizeof xs[0], dcmp);
    CU_ASSERT(o->has_window);
    CU_ASSERT_EQUAL(o->count, N);
    CU_ASSERT(rel_err(o->sum, sum) < 1e-6);
    /* Bucket ratio 1.1: representative within (1.1-1)/(1.1+1) ~ 4.8%, plus alpha. */
    double bound = 0.1 / 2.1 + 0.01 + 1e-9;
    for (int q = 0; q < MV_PIPE_QUANTILES; q++) {
        double want = xs[(size_t)floor(mv_pipe_quantiles[q] * (N - 1))];
        double e = rel_err(o->q[q], want);
        if (e > bound)
            printf("\n  q=%g got %g want %g err %g\n", mv_pipe_quantiles[q], o->q[q], want, e);
        CU_ASSERT(e <= bound);
    }
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Change counts: none under stationary noise, at least one per injected step. */
static void test_changes_on_steps(void)
{
    fixture f;
    mv_gauge g;
    fx_open(&f, "steps.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "load", NULL, NULL, NULL, 0, &g) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t = 4000 * SEC, dt = SEC / 1000;
    test_rng r = {3};
    unsigned any = 0;
    for (int i = 0; i < 3000; i++, t += dt) {
        mv_gauge_set(g, 100 + rng_gauss(&r));
        any |= mv_pipe_seg_feed(p, f.map, t);
    }
    CU_ASSERT_FALSE(any & MV_PIPE_CHANGED);
    int detected_at[3] = {-1, -1, -1};
    for (int s = 0; s < 3; s++) {
        double level = 100 + 10.0 * (s + 1);
        for (int i = 0; i < 1000; i++, t += dt) {
            mv_gauge_set(g, level + rng_gauss(&r));
            if ((mv_pipe_seg_feed(p, f.map, t) & MV_PIPE_CHANGED) && detected_at[s] < 0)
                detected_at[s] = i;
        }
    }
    for (int s = 0; s < 3; s++)
        CU_ASSERT(detected_at[s] >= 0 && detected_at[s] < 5);
    mv_pipe_seg_feed(p, f.map, t + SEC);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    CU_ASSERT_EQUAL(v->m[0].changes, 3);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Reads every 1 ms under a 10 ms detection period at a 3 ms phase: the first read is a
 * step, then the reads 7, 17, 27, ... ms after it (the first read less the phase, plus the
 * period less half a read interval); only steps carry CHANGED or MOVING; a read after
 * mv_pipe_seg_step_next is a step. A counter's rate
 * stepping from 5 to 50 per ms, a gauge's level moving by 10 sigma and a histogram's mean
 * observation moving from 1 to 4 are each reported within three steps. Over an hour is refused. */
static void test_detection_period(void)
{
    fixture f;
    mv_counter c;
    mv_gauge g;
    mv_histogram *h;
    double bounds[4] = {0.5, 2, 8, 32};
    fx_open(&f, "period.seg", 16384);
    CU_ASSERT_FATAL(mv_counter_register(f.seg, "reqs_total", NULL, NULL, NULL, 0, &c) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "load", NULL, NULL, NULL, 0, &g) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(f.seg, "lat", NULL, NULL, NULL, 0, bounds, 4, &h) ==
                    MV_OK);
    fx_catalog(&f);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.fd = 0;
    cfg.detect_period_ns = 3601 * SEC;
    CU_ASSERT(mv_pipe_config_check(&cfg) != NULL);
    cfg.detect_period_ns = 10 * MS;
    cfg.phase_ns = 1003 * MS; /* 3 ms of the period */
    CU_ASSERT(mv_pipe_config_check(&cfg) == NULL);
    mv_pipe_seg *p = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &p) == 0);
    test_rng r = {11};
    uint64_t t0 = 9000 * SEC;
    int off_schedule = 0, flags_between = 0, steps = 0;
    int found[3] = {-1, -1, -1}; /* counter, gauge, histogram: read of the first CHANGED */
    for (int i = 0; i < 6000; i++) {
        int phase = i < 2000 ? 0 : i < 3000 ? 1 : i < 4000 ? 2 : 3;
        mv_counter_add(c, phase >= 1 ? 50 : 5);
        mv_gauge_set(g, (phase >= 2 ? 110.0 : 100.0) + rng_gauss(&r));
        mv_histogram_observe(h, phase >= 3 ? 4.0 : 1.0);
        unsigned fl = mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * MS);
        int step = (fl & MV_PIPE_STEP) != 0;
        steps += step;
        off_schedule += step != (i == 0 || i % 10 == 7);
        flags_between += !step && (fl & (MV_PIPE_CHANGED | MV_PIPE_MOVING));
        if ((fl & MV_PIPE_CHANGED) && phase >= 1 && found[phase - 1] < 0)
            found[phase - 1] = i;
    }
    /* A read the collector's probe brought forward: a step whenever the last one was. */
    uint64_t t = t0 + 6000 * MS;
    CU_ASSERT_FALSE(mv_pipe_seg_feed(p, f.map, t) & MV_PIPE_STEP); /* read 6000 */
    mv_pipe_seg_step_next(p);
    CU_ASSERT(mv_pipe_seg_feed(p, f.map, t + MS) & MV_PIPE_STEP);
    CU_ASSERT_FALSE(mv_pipe_seg_feed(p, f.map, t + 2 * MS) & MV_PIPE_STEP);
    mv_pipe_seg_step_next(NULL); /* ignored */
    /* The window published last closed at read 5000: the change counts as of then. */
    mv_pipe_view *v = mv_pipe_seg_view(p);
    CU_ASSERT_FATAL(v != NULL);
    int c_changes = (int)v->m[0].changes, g_changes = (int)v->m[1].changes;
    int h_changes = (int)v->m[2].changes;
    free(v);
    printf("\n  %d steps; first change at reads %d, %d, %d (counter, gauge, histogram) ", steps,
           found[0], found[1], found[2]);
    CU_ASSERT_EQUAL(steps, 601);
    CU_ASSERT_EQUAL(off_schedule, 0);
    CU_ASSERT_EQUAL(flags_between, 0);
    CU_ASSERT(found[0] >= 2000 && found[0] < 2030);
    CU_ASSERT(found[1] >= 3000 && found[1] < 3030);
    CU_ASSERT(found[2] >= 4000 && found[2] < 4030);
    /* Constant rates, a stationary level and one mean before and after their steps: one
     * change each. */
    CU_ASSERT_EQUAL(c_changes, 1);
    CU_ASSERT_EQUAL(g_changes, 1);
    CU_ASSERT_EQUAL(h_changes, 1);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* A gauge constant while the detectors warm up that then turns noisy
 * (stationary): one change at the onset, then no more, and the segment backs
 * off to the slowest interval instead of staying at the fast tick. Simulated
 * time: 1 ms fast tick, 1 s max interval, 60 s of noise. */
static void test_constant_then_noisy_backs_off(void)
{
    fixture f;
    mv_gauge g;
    fx_open(&f, "noisy.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "queue", NULL, NULL, NULL, 0, &g) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, 15 * SEC, 0, 0);
    mv_detect_rate_config rc;
    mv_detect_rate_config_default(&rc);
    mv_detect_rate *r = NULL;
    CU_ASSERT_FATAL(mv_detect_rate_create(&rc, &r) == 0);
    test_rng g_rng = {2024};
    uint64_t t0 = 7005 * SEC, t = t0, onset = t0 + 5 * SEC, end = onset + 60 * SEC;
    uint64_t changes = 0, reads_last_30s = 0;
    while (t < end) {
        mv_gauge_set(g, t < onset ? 40.0 : 40.0 + 3.0 * rng_gauss(&g_rng));
        unsigned fl = mv_pipe_seg_feed(p, f.map, t);
        changes += (fl & MV_PIPE_CHANGED) != 0;
        reads_last_30s += t >= end - 30 * SEC;
        t += mv_detect_rate_observe(r, (fl & MV_PIPE_CHANGED) != 0, (fl & MV_PIPE_MOVING) != 0);
    }
    printf("\n  constant then noisy: %llu changes, %.2f reads/s over the last 30 s ",
           (unsigned long long)changes, (double)reads_last_30s / 30.0);
    CU_ASSERT(changes <= 1);
    CU_ASSERT(reads_last_30s <= 2 * 30);
    CU_ASSERT_EQUAL(mv_detect_rate_interval(r), rc.max_ns);
    mv_detect_rate_destroy(r);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Aliasing: a gauge cycling through 0..9 every 10 ms on a segment the
 * detector judges calm. Backed off to 1 s, reads at exact multiples of the
 * cycle would see one phase only (p50 = p99); read times are dithered, so
 * the window still samples the whole cycle. Simulated time, 1 ms fast tick. */
static void test_backed_off_reads_do_not_alias(void)
{
    fixture f;
    mv_gauge g;
    fx_open(&f, "alias.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "phase", NULL, NULL, NULL, 0, &g) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, 15 * SEC, 0, 0);
    mv_detect_rate_config rc;
    mv_detect_rate_config_default(&rc);
    mv_detect_rate *r = NULL;
    CU_ASSERT_FATAL(mv_detect_rate_create(&rc, &r) == 0);
    uint64_t t = 20010 * SEC, end = t + 120 * SEC;
    int windows = 0, spread = 0;
    while (t < end) {
        mv_gauge_set(g, (double)((t / 1000000ull) % 10)); /* 0..9, one step per ms */
        unsigned fl = mv_pipe_seg_feed(p, f.map, t);
        if ((fl & MV_PIPE_WINDOW) && t > end - 60 * SEC) {
            mv_pipe_view *v = mv_pipe_seg_view(p);
            windows++;
            spread += v->m[0].q[2] - v->m[0].q[0] >= 3.0; /* p99 - p50 (true: 9 - 4) */
            /* The summary says it came from backed-off reads. */
            CU_ASSERT(v->window_max_interval_ns > 500000000ull);
            CU_ASSERT(v->window_reads < 40);
            free(v);
        }
        t += mv_detect_rate_observe(r, (fl & MV_PIPE_CHANGED) != 0, (fl & MV_PIPE_MOVING) != 0);
    }
    printf("\n  cycling gauge, backed off to %.0f ms: %d of %d windows show the cycle ",
           mv_detect_rate_interval(r) / 1e6, spread, windows);
    CU_ASSERT(mv_detect_rate_interval(r) == rc.max_ns); /* still backed off: calm */
    CU_ASSERT(windows >= 3 && spread == windows);
    mv_detect_rate_destroy(r);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Anomaly score: low while four counters move together, high when one departs. */
static void test_anomaly_score(void)
{
    fixture f;
    mv_counter c[4];
    char name[32];
    fx_open(&f, "anom.seg", 16384);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "c%d_total", i);
        CU_ASSERT_FATAL(mv_counter_register(f.seg, name, NULL, NULL, NULL, 0, &c[i]) == MV_OK);
    }
    fx_catalog(&f);
    /* Windows of 1 s, scorer every 50 ms, reads every 10 ms. */
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 1, SEC / 20);
    uint64_t t = 5000 * SEC, dt = SEC / 100;
    test_rng r = {11};
    double normal_max = 0;
    for (int w = 0; w < 10; w++) {
        for (int i = 0; i < 100; i++, t += dt) {
            double load = 1 + 0.5 * sin((double)(w * 100 + i) / 50); /* shared driver */
            for (int k = 0; k < 4; k++)
                mv_counter_add(c[k], (uint64_t)((k + 1) * 20 * load + 3 * rng_unif(&r)));
            mv_pipe_seg_feed(p, f.map, t);
        }
        mv_pipe_view *v = mv_pipe_seg_view(p);
        if (w >= 3 && isfinite(v->anomaly_score) && v->anomaly_score > normal_max)
            normal_max = v->anomaly_score;
        free(v);
    }
    /* Counter 2 stalls while the others keep going: the mix changes. */
    for (int i = 0; i < 100; i++, t += dt) {
        for (int k = 0; k < 4; k++)
            if (k != 2)
                mv_counter_add(c[k], (uint64_t)((k + 1) * 20 + 3 * rng_unif(&r)));
        mv_pipe_seg_feed(p, f.map, t);
    }
    mv_pipe_seg_feed(p, f.map, t);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    printf("\n  anomaly: normal max %.4f, injected %.4f ", normal_max, v->anomaly_score);
    CU_ASSERT(normal_max < 0.2);
    CU_ASSERT(v->anomaly_score > 0.3);
    CU_ASSERT(v->anomaly_score > 3 * normal_max);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Anomaly score after an idle start: absent (not 1.0) until the scorer has
 * learnt from real activity, then low under correlated load - never stuck. */
static void test_anomaly_idle_start(void)
{
    fixture f;
    mv_counter c[4];
    char name[32];
    fx_open(&f, "idle.seg", 16384);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "c%d_total", i);
        CU_ASSERT_FATAL(mv_counter_register(f.seg, name, NULL, NULL, NULL, 0, &c[i]) == MV_OK);
    }
    fx_catalog(&f);
    /* 1 s windows, scorer every 1 s (the default), reads every 10 ms. */
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 1, 0);
    uint64_t t = 9000 * SEC, dt = SEC / 100;
    test_rng r = {77};
    int high = 0, finite = 0, first_finite = -1;
    for (int w = 0; w < 60; w++) {
        for (int i = 0; i < 100; i++, t += dt) {
            if (w >= 30) { /* 30 s idle, then 30 s of load shared by all four */
                double load = 1 + 0.5 * sin((double)(w * 100 + i) / 300);
                for (int k = 0; k < 4; k++)
                    mv_counter_add(c[k], (uint64_t)((k + 1) * 20 * load + 3 * rng_unif(&r)));
            }
            mv_pipe_seg_feed(p, f.map, t);
        }
        mv_pipe_view *v = mv_pipe_seg_view(p);
        if (isfinite(v->anomaly_score)) {
            finite++;
            if (first_finite < 0)
                first_finite = w;
            high += v->anomaly_score > 0.2;
        }
        free(v);
    }
    printf("\n  idle start: first score in window %d, %d windows scored, %d high ", first_finite,
           finite, high);
    CU_ASSERT(first_finite >= 30 && first_finite <= 37); /* warm-up: 4 steps of load */
    CU_ASSERT(high == 0);
    /* Counter 3 stops for good: the score rises, then the new mix is learnt
     * and it comes down (not sticky). */
    double first_break = NAN, last = NAN;
    for (int w = 0; w < 30; w++) {
        for (int i = 0; i < 100; i++, t += dt) {
            for (int k = 0; k < 3; k++)
                mv_counter_add(c[k], (uint64_t)((k + 1) * 20 + 3 * rng_unif(&r)));
            mv_pipe_seg_feed(p, f.map, t);
        }
        mv_pipe_view *v = mv_pipe_seg_view(p);
        if (w < 3 && !(v->anomaly_score <= first_break))
            first_break = v->anomaly_score; /* the largest of its first windows */
        last = v->anomaly_score;
        free(v);
    }
    printf("break: %.3f in its first windows, %.3f after 30 s ", first_break, last);
    CU_ASSERT(first_break > 0.3);
    CU_ASSERT(last < 0.2);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* A catalog change keeps the state of unchanged metrics (by identity). */
static void test_rebuild_carries_state(void)
{
    fixture f;
    mv_counter c;
    mv_gauge g;
    fx_one_counter(&f, "rebuild.seg", "a_total", &c);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 1, 0), *np = NULL;
    uint64_t t0 = 6000 * SEC;
    mv_pipe_seg_feed(p, f.map, t0);
    *c.slot = 0; /* no reset: 0 -> 0 */
    mv_counter_add(c, 100);
    mv_pipe_seg_feed(p, f.map, t0 + SEC / 2);
    *c.slot = 1; /* a reset */
    mv_pipe_seg_feed(p, f.map, t0 + SEC / 2 + SEC / 4);
    mv_seg_catalog *old = f.cat;
    f.cat = NULL;
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "b", NULL, NULL, NULL, 0, &g) == MV_OK);
    fx_catalog(&f);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, p, &np) == 0);
    mv_pipe_seg_destroy(p);
    mv_seg_catalog_free(old);
    mv_gauge_set(g, 2.5);
    mv_counter_add(c, 10);
    mv_pipe_seg_feed(np, f.map, t0 + SEC);
    mv_pipe_view *v = mv_pipe_seg_view(np);
    CU_ASSERT_EQUAL(v->n, 2);
    CU_ASSERT_EQUAL(v->m[0].resets, 1);
    /* (100 + 1) over 0.75 s: the state from before the rebuild counted. */
    CU_ASSERT(rel_err(v->m[0].rate, 101 / 0.75) < 1e-9);
    free(v);
    mv_pipe_seg_destroy(np);
    fx_close(&f);
}

/* A gauge that keeps one value through a window has no sketch: its summary is exact
 * from its hot record (every quantile the value). The sketch is allocated when a window
 * first holds two distinct values, and freed after a window on one value again; the
 * memory the view reports follows, as of the latest read. */
static void test_gauge_sketch_lazy(void)
{
    fixture f;
    mv_gauge g[2];
    fx_open(&f, "lazy.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "steady", NULL, NULL, NULL, 0, &g[0]) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "moving", NULL, NULL, NULL, 0, &g[1]) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    uint64_t t0 = 12000 * SEC;
    mv_gauge_set(g[0], 0.1);
    mv_gauge_set(g[1], 5.0);
    for (int i = 0; i < 100; i++)
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * SEC / 100);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    uint64_t flat = v->mem_bytes;
    CU_ASSERT(flat > 0); /* current, before any window closed */
    free(v);
    /* Window 1: gauge 1 moves - its sketch appears. */
    mv_pipe_seg_feed(p, f.map, t0 + SEC);
    for (int i = 1; i < 100; i++) {
        mv_gauge_set(g[1], 5.0 + i % 7);
        mv_pipe_seg_feed(p, f.map, t0 + SEC + (uint64_t)i * SEC / 100);
    }
    v = mv_pipe_seg_view(p);
    uint64_t moving = v->mem_bytes;
    CU_ASSERT(moving > flat);
    /* Window 0 (both gauges on one value): exact figures without a sketch. */
    for (int m = 0; m < 2; m++) {
        const mv_pipe_out *o = &v->m[m];
        double x = m ? 5.0 : 0.1;
        CU_ASSERT(o->has_window);
        CU_ASSERT_EQUAL(o->count, 100);
        CU_ASSERT(o->min == x && o->max == x && o->mean == x && o->last == x);
        CU_ASSERT(rel_err(o->sum, 100 * x) < 1e-12);
        for (int q = 0; q < MV_PIPE_QUANTILES; q++)
            CU_ASSERT(o->q[q] == x);
    }
    free(v);
    /* Window 2: gauge 1 stays on one value; at its close the sketch is released. */
    mv_pipe_seg_feed(p, f.map, t0 + 2 * SEC);
    for (int i = 1; i < 100; i++)
        mv_pipe_seg_feed(p, f.map, t0 + 2 * SEC + (uint64_t)i * SEC / 100);
    v = mv_pipe_seg_view(p);
    CU_ASSERT_EQUAL(v->m[1].count, 100);
    CU_ASSERT(v->m[1].min == 5.0 && v->m[1].max == 11.0); /* window 1: 5 .. 5 + 6 */
    free(v);
    mv_pipe_seg_feed(p, f.map, t0 + 3 * SEC);
    v = mv_pipe_seg_view(p);
    CU_ASSERT_EQUAL(v->mem_bytes, flat);
    double last = 5.0 + 99 % 7; /* the value window 2 kept */
    CU_ASSERT(v->m[1].min == last && v->m[1].max == last && v->m[1].q[3] == last);
    free(v);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* cfg.native_schema: each gauge's window is published as native buckets, those of a sketch
 * fed the window's values (negative values and zeros included); a window on one value is
 * that value's bucket; the buffers are reused across windows (memory stops growing); off,
 * nothing is published. */
static void test_gauge_native_buckets(void)
{
    fixture f;
    mv_gauge g[2];
    fx_open(&f, "native.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "moving", NULL, NULL, NULL, 0, &g[0]) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "steady", NULL, NULL, NULL, 0, &g[1]) == MV_OK);
    fx_catalog(&f);
    for (int on = 0; on < 2; on++) {
        mv_pipe_config cfg;
        mv_pipe_config_default(&cfg);
        cfg.window_ns = SEC;
        cfg.fd = 0;
        cfg.native_schema = on ? 5 : MV_PIPE_NATIVE_OFF;
        mv_pipe_seg *p = NULL;
        CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &p) == 0);
        mv_sketch_config sc = {.alpha = cfg.alpha, .max_buckets = cfg.sketch_buckets};
        mv_sketch *ref = NULL;
        CU_ASSERT_FATAL(mv_sketch_create(&sc, &ref) == 0);
        uint64_t t0 = 30000 * SEC, mem = 0;
        test_rng r = {77};
        enum { N = 400 };
        double prev = 0;
        for (int w = 0; w < 5; w++) {
            mv_sketch_reset(ref);
            if (w) /* the read that closed the window before is this window's first */
                mv_sketch_add(ref, prev);
            for (int i = 0; i < N; i++) {
                double u = rng_unif(&r);
                double x = u < 0.1 ? 0.0 : (u < 0.4 ? -1 : 1) * exp(2 * rng_gauss(&r));
                mv_gauge_set(g[0], x);
                mv_gauge_set(g[1], -2.5);
                mv_sketch_add(ref, x);
                prev = x;
                mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)w * SEC + (uint64_t)i * (SEC / N));
            }
            mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)(w + 1) * SEC); /* closes window w */
            mv_pipe_view *v = mv_pipe_seg_view(p);
            CU_ASSERT_FATAL(v != NULL);
            if (!on) {
                CU_ASSERT(v->m[0].native == 0 && v->m[1].native == 0 && v->nnative == 0);
                free(v);
                continue;
            }
            const mv_pipe_out *o = &v->m[0];
            CU_ASSERT_FATAL(o->native > 0 && o->native <= v->nnative);
            const mv_sketch_nbucket *h = &v->native[o->native - 1];
            mv_sketch_nbucket want[512];
            uint64_t zero = 0;
            size_t n = mv_sketch_to_native(ref, 5, want, 512, &zero);
            CU_ASSERT(h->index == 5);
            CU_ASSERT_EQUAL(h->negative, n);
            CU_ASSERT_EQUAL(h->count, zero);
            CU_ASSERT(zero > 0);
            CU_ASSERT_FATAL(o->native + h->negative <= v->nnative);
            CU_ASSERT(memcmp(h + 1, want, n * sizeof *want) == 0);
            uint64_t total = h->count;
            for (size_t k = 0; k < h->negative; k++)
                total += h[1 + k].count;
            CU_ASSERT_EQUAL(total, o->count);
            /* The steady gauge: one negative bucket holding its N reads. */
            const mv_sketch_nbucket *s1 = &v->native[v->m[1].native - 1];
            CU_ASSERT(v->m[1].native > 0 && s1->negative == 1 && s1->count == 0);
            CU_ASSERT(s1[1].negative == 1 && s1[1].count == N + (w > 0) &&
                      s1[1].index == mv_sketch_native_index(2.5, 5));
            if (w == 3)
                mem = v->mem_bytes;
            if (w == 4) /* buffers reused: no more memory than a window before */
                CU_ASSERT(v->mem_bytes <= mem);
            if (w == 4) {
                /* A catalog rebuild carries the published native histograms over. */
                mv_pipe_seg *q = NULL;
                CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, p, &q) == 0);
                mv_pipe_view *u = mv_pipe_seg_view(q);
                CU_ASSERT_FATAL(u != NULL);
                for (int m = 0; m < 2; m++) {
                    CU_ASSERT_EQUAL(u->m[m].native, v->m[m].native);
                    const mv_sketch_nbucket *x = &u->native[u->m[m].native - 1],
                                            *y = &v->native[v->m[m].native - 1];
                    CU_ASSERT(u->m[m].native <= u->nnative &&
                              memcmp(x, y, (1 + y->negative) * sizeof *y) == 0);
                }
                free(u);
                mv_pipe_seg_destroy(p);
                p = q;
            }
            free(v);
        }
        mv_sketch_destroy(ref);
        mv_pipe_seg_destroy(p);
    }
    mv_pipe_config bad;
    mv_pipe_config_default(&bad);
    bad.native_schema = 9;
    CU_ASSERT(mv_pipe_config_check(&bad) != NULL);
    fx_close(&f);
}

/* Repeated values are counted in the hot record and enter the sketch as one weighted
 * add: the window's quantiles, count, sum, min and max are those of a sketch fed every
 * sample one by one (the same multiset), within the sketch's alpha of the exact ones. */
static void test_gauge_repeats_batched(void)
{
    fixture f;
    mv_gauge g;
    fx_open(&f, "repeats.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "level", NULL, NULL, NULL, 0, &g) == MV_OK);
    fx_catalog(&f);
    mv_pipe_seg *p = new_pipe(f.cat, SEC, 0, 0);
    mv_sketch_config sc = {.alpha = 0.01, .max_buckets = 1536};
    mv_sketch *ref = NULL;
    CU_ASSERT_FATAL(mv_sketch_create(&sc, &ref) == 0);
    uint64_t t0 = 13000 * SEC;
    enum { N = 20000 };
    static double xs[N];
    test_rng r = {99};
    double x = 1.0, sum = 0;
    for (int i = 0; i < N; i++) {
        if (rng_unif(&r) < 0.2) /* runs of ~5 equal reads */
            x = exp(2.0 * rng_gauss(&r));
        xs[i] = x;
        sum += x;
        mv_sketch_add(ref, x);
        mv_gauge_set(g, x);
        mv_pipe_seg_feed(p, f.map, t0 + (uint64_t)i * (SEC / N));
    }
    mv_pipe_seg_feed(p, f.map, t0 + SEC);
    mv_pipe_view *v = mv_pipe_seg_view(p);
    const mv_pipe_out *o = &v->m[0];
    qsort(xs, N, sizeof xs[0], dcmp);
    CU_ASSERT_EQUAL(o->count, N);
    CU_ASSERT(rel_err(o->sum, sum) < 1e-9);
    CU_ASSERT(o->min == xs[0] && o->max == xs[N - 1]);
    for (int q = 0; q < MV_PIPE_QUANTILES; q++) {
        CU_ASSERT(o->q[q] == mv_sketch_quantile(ref, mv_pipe_quantiles[q]));
        double want = xs[(size_t)floor(mv_pipe_quantiles[q] * (N - 1))];
        CU_ASSERT(rel_err(o->q[q], want) <= 0.01 + 1e-12);
    }
    free(v);
    mv_sketch_destroy(ref);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Gauges' runs wait for their sketches in groups (mv_pipeline_int.h, GPEND): each window's
 * summary is the one a sketch fed one add per change (mv_sketch_add_n of the run before it,
 * in order) gives - quantiles, sum, min and max to the bit - over windows whose numbers of
 * changes are not multiples of the group, with runs of repeats, and across a rebuild of the
 * pipeline in the middle of a window (the runs waiting carried over). Two gauges: one that
 * changes at every read but one in four, one that changes one read in three. */
static void test_gauge_waiting_runs_exact(void)
{
    fixture f;
    mv_gauge g[2];
    fx_open(&f, "waiting.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "busy", NULL, NULL, NULL, 0, &g[0]) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "slow", NULL, NULL, NULL, 0, &g[1]) == MV_OK);
    fx_catalog(&f);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.fd = 0;
    mv_pipe_seg *p = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &p) == 0);
    mv_sketch_config sc = {.alpha = cfg.alpha, .max_buckets = cfg.sketch_buckets};
    mv_sketch *ref[2];
    double last[2] = {NAN, NAN};
    uint64_t run[2] = {0, 0}, cur_w = UINT64_MAX;
    for (int m = 0; m < 2; m++)
        CU_ASSERT_FATAL(mv_sketch_create(&sc, &ref[m]) == 0);
    uint64_t t0 = 17000 * SEC;
    int checked = 0;
    /* 7 ms reads: 142 or 143 a window, so the changes per window vary. */
    for (int i = 0; i < 1000; i++) {
        uint64_t t = t0 + (uint64_t)i * 7 * MS;
        double x[2] = {1.0 + (double)((i - i / 4) * 37 % 101), 5.0 + (double)(i / 3 % 17)};
        for (int m = 0; m < 2; m++)
            mv_gauge_set(g[m], x[m]);
        if (i == 500) { /* a rebuild in the middle of a window carries the runs waiting */
            mv_pipe_seg *np = NULL;
            CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, p, &np) == 0);
            mv_pipe_seg_destroy(p);
            p = np;
        }
        mv_pipe_seg_feed(p, f.map, t);
        uint64_t w = t / SEC;
        if (cur_w != UINT64_MAX && w != cur_w) {
            /* The read after the boundary published the window before it. */
            mv_pipe_view *v = mv_pipe_seg_view(p);
            for (int m = 0; m < 2; m++) {
                if (run[m])
                    mv_sketch_add_n(ref[m], last[m], run[m]);
                double q[MV_PIPE_QUANTILES];
                mv_sketch_quantiles(ref[m], mv_pipe_quantiles, MV_PIPE_QUANTILES, q);
                const mv_pipe_out *o = &v->m[m];
                CU_ASSERT_EQUAL(o->count, mv_sketch_count(ref[m]));
                CU_ASSERT(o->sum == mv_sketch_sum(ref[m]));
                CU_ASSERT(o->min == mv_sketch_min(ref[m]) && o->max == mv_sketch_max(ref[m]));
                for (int k = 0; k < MV_PIPE_QUANTILES; k++)
                    CU_ASSERT(o->q[k] == q[k]);
                mv_sketch_reset(ref[m]);
                run[m] = 0;
            }
            free(v);
            checked++;
        }
        cur_w = w;
        for (int m = 0; m < 2; m++) {
            if (x[m] != last[m]) {
                if (run[m])
                    mv_sketch_add_n(ref[m], last[m], run[m]);
                last[m] = x[m];
                run[m] = 0;
            }
            run[m]++;
        }
    }
    CU_ASSERT(checked >= 6);
    for (int m = 0; m < 2; m++)
        mv_sketch_destroy(ref[m]);
    mv_pipe_seg_destroy(p);
    fx_close(&f);
}

/* Feeds one read of counters, gauges and histograms (deterministic values for read i). */
/* ---- Sparse signals under the collector's default flags (simulated time) ---------------------
 * A model of the collector's tick for one segment, as mv_collect runs it: a 10 ms tick, 10 ms
 * detection steps, adaptive sampling up to 1 s and the shm probe (a segment not yet due is
 * read when a value moved, and that read is a step: mv_pipe_seg_step_next); a due segment
 * whose values did not move is fed as a same read. Read times carry up to 300 us of lateness. */
#define SIM_TICK (10 * MS)

typedef struct sim {
    mv_pipe_seg *p;
    mv_detect_rate *r;
    uint64_t due, reads, ticks, changes, warm_steps;
    int fed;
} sim;

static void sim_config(mv_pipe_config *cfg)
{
    mv_pipe_config_default(cfg);
    cfg->detect_period_ns = 10 * MS;
    cfg->phase_ns = 3 * MS;
    cfg->close_spread_ns = 8 * SIM_TICK;
    cfg->window_phase_ns = 4321 * MS;
}

static void sim_init(sim *m, const mv_seg_catalog *cat)
{
    mv_pipe_config cfg;
    sim_config(&cfg);
    memset(m, 0, sizeof *m);
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, cat, NULL, &m->p) == 0);
    mv_detect_rate_config rc;
    mv_detect_rate_config_default(&rc);
    rc.fast_ns = SIM_TICK;
    rc.max_ns = SEC;
    CU_ASSERT_FATAL(mv_detect_rate_create(&rc, &m->r) == 0);
}

static void sim_free(sim *m)
{
    mv_pipe_seg_destroy(m->p);
    mv_detect_rate_destroy(m->r);
}

/* One tick at t; `moved`: a value (or the catalog) moved since the segment's last read.
 * Returns the read's flags with bit 16 set, 0 when it was not read. */
static unsigned sim_tick(sim *m, const void *map, uint64_t t, int moved)
{
    m->ticks++;
    int due = t + SIM_TICK / 2 >= m->due;
    if (!due && !moved)
        return 0;
    if (!due)
        mv_pipe_seg_step_next(m->p); /* brought forward by the probe */
    unsigned fl =
        !moved && m->fed ? mv_pipe_seg_feed_same(m->p, map, t) : mv_pipe_seg_feed(m->p, map, t);
    m->fed = 1;
    m->reads++;
    m->changes += (fl & MV_PIPE_CHANGED) != 0;
    m->warm_steps += (fl & MV_PIPE_WARMUP) != 0;
    uint64_t iv = fl & MV_PIPE_STEP
                      ? mv_detect_rate_observe(m->r, (fl & (MV_PIPE_CHANGED | MV_PIPE_WARMUP)) != 0,
                                               (fl & MV_PIPE_MOVING) != 0)
                      : mv_detect_rate_interval(m->r);
    m->due = t + iv;
    return fl | 0x10000u;
}

/* Steady counters over 10 simulated minutes: one increment a second (each up to 2 ms late)
 * and 10,000 a second (each up to 200 us late). Neither rate moves, so no change; the sparse
 * one is read about twice a second (its rise, brought forward by the probe, and the backed-off
 * read), i.e. >= 95 % of the 60,000 reads of every tick saved. Before the counters were scored
 * on their rise since their previous sample, each increment of the sparse one was a burst
 * against a baseline of mostly-zero steps: 590 changes, 69 % of the reads saved. */
static void test_steady_counters_quiet(void)
{
    const uint64_t T0 = 5000 * SEC, DUR = 600 * SEC, FIRST = T0 + 333700 * 1000ull;
    for (int which = 0; which < 2; which++) {
        fixture f;
        mv_counter c;
        fx_one_counter(&f, which ? "steady_dense.seg" : "steady_sparse.seg", "reqs_total", &c);
        sim m;
        sim_init(&m, f.cat);
        test_rng r = {77u + (uint64_t)which};
        uint64_t value = 0, next_inc = FIRST; /* sparse: the next increment's time */
        for (uint64_t k = 0, t = T0; t < T0 + DUR; k++) {
            t = T0 + k * SIM_TICK + (uint64_t)(rng_unif(&r) * 300e3);
            uint64_t want = value;
            if (!which) {
                while (next_inc <= t) {
                    want++;
                    next_inc = FIRST + want * SEC + (uint64_t)(rng_unif(&r) * 2e6);
                }
            } else {
                double v = (double)(t - T0) * 1e-5 - rng_unif(&r) * 2.0; /* 1e4 / s */
                if (v > (double)want)
                    want = (uint64_t)v;
            }
            if (want > value)
                mv_counter_add(c, want - value);
            sim_tick(&m, f.map, t, want != value);
            value = want;
        }
        mv_pipe_seg_feed(m.p, f.map, T0 + DUR + 20 * SEC); /* closes the last window */
        mv_pipe_view *v = mv_pipe_seg_view(m.p);
        CU_ASSERT_FATAL(v != NULL);
        double saved = 1.0 - (double)m.reads / (double)m.ticks;
        printf("\n  %s counter, 10 min: %llu changes (%llu counted), %llu reads of %llu ticks "
               "(%.1f %% saved), rate %.4g/s ",
               which ? "10,000/s" : "1/s", (unsigned long long)m.changes,
               (unsigned long long)v->m[0].changes, (unsigned long long)m.reads,
               (unsigned long long)m.ticks, 100.0 * saved, v->m[0].rate);
        CU_ASSERT_EQUAL(m.changes, 0);
        CU_ASSERT_EQUAL(v->m[0].changes, 0);
        if (!which)
            CU_ASSERT(saved >= 0.95);
        free(v);
        sim_free(&m);
        fx_close(&f);
    }
}

/* A segment backed off to 1 s registers a gauge; its level shifts 20 s later (its detector's
 * 50-sample warm-up would take ~50 s at the backed-off pace): the warm-up holds the fast
 * tick (50 steps, 0.5 s), so the shift is flagged at the read the probe brings, within a
 * detection period and a tick of it (the documented delay: the first step after the change),
 * and the segment backs off again. Also a counter's rate stepping 3x in the first minute of a
 * new segment: flagged within three detection steps. */
static void test_warmup_fast_then_step(void)
{
    fixture f;
    mv_gauge old_g, fresh;
    fx_open(&f, "warm.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "old", NULL, NULL, NULL, 0, &old_g) == MV_OK);
    mv_gauge_set(old_g, 3.0);
    fx_catalog(&f);
    sim m;
    sim_init(&m, f.cat);
    const uint64_t T0 = 6000 * SEC;
    test_rng r = {5};
    uint64_t k = 0, t = T0;
    for (; t < T0 + 60 * SEC; k++) {
        t = T0 + k * SIM_TICK + (uint64_t)(rng_unif(&r) * 300e3);
        sim_tick(&m, f.map, t, 0);
    }
    CU_ASSERT_EQUAL(mv_detect_rate_interval(m.r), SEC);
    /* The new gauge: a new catalog, the state rebuilt (as the collector does). */
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "fresh", NULL, NULL, NULL, 0, &fresh) == MV_OK);
    mv_gauge_set(fresh, 7.0);
    mv_seg_catalog *cat2 = NULL;
    mv_seg_error err;
    CU_ASSERT_FATAL(mv_seg_catalog_parse(f.map, f.size, f.size, &cat2, &err) == MV_SEG_OK);
    mv_pipe_seg *np = NULL;
    mv_pipe_config cfg;
    sim_config(&cfg);
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, cat2, m.p, &np) == 0);
    mv_pipe_seg_destroy(m.p);
    m.p = np;
    mv_seg_catalog_free(f.cat);
    f.cat = cat2;
    uint64_t t_reg = t + SIM_TICK, t_shift = t_reg + 20 * SEC, flagged = 0;
    uint64_t reads_reg = m.reads, reads_warm = 0, warm_end = 0;
    int moved = 1, shifted = 0; /* the catalog and the new value moved */
    for (k++; t < t_shift + 30 * SEC; k++) {
        t = T0 + k * SIM_TICK + (uint64_t)(rng_unif(&r) * 300e3);
        if (t >= t_shift && !shifted) {
            mv_gauge_set(fresh, 9.0);
            moved = shifted = 1;
        }
        unsigned fl = sim_tick(&m, f.map, t, moved);
        if (fl)
            moved = 0;
        if ((fl & MV_PIPE_WARMUP) && t > warm_end)
            warm_end = t;
        if (t < t_reg + SEC)
            reads_warm = m.reads - reads_reg;
        if ((fl & MV_PIPE_CHANGED) && t >= t_shift && !flagged)
            flagged = t;
    }
    mv_pipe_seg_feed(m.p, f.map, t + 20 * SEC);
    mv_pipe_view *v = mv_pipe_seg_view(m.p);
    CU_ASSERT_FATAL(v != NULL);
    printf("\n  new gauge on a segment backed off to 1 s: warm-up over %.2f s after it, %llu "
           "reads in its first second; its step flagged %.1f ms after it, %llu change(s); "
           "interval %.0f ms at the end ",
           warm_end > t_reg ? (double)(warm_end - t_reg) / 1e9 : -1.0,
           (unsigned long long)reads_warm, flagged ? (double)(flagged - t_shift) / 1e6 : -1.0,
           (unsigned long long)v->m[1].changes, mv_detect_rate_interval(m.r) / 1e6);
    CU_ASSERT(warm_end > t_reg && warm_end - t_reg < SEC);
    CU_ASSERT(reads_warm >= 50);
    CU_ASSERT(flagged >= t_shift && flagged - t_shift <= 10 * MS + SIM_TICK);
    CU_ASSERT_EQUAL(v->m[1].changes, 1);
    CU_ASSERT_EQUAL(v->m[0].changes, 0);
    CU_ASSERT_EQUAL(mv_detect_rate_interval(m.r), SEC);
    free(v);
    sim_free(&m);
    fx_close(&f);

    /* A counter at 1,000/s (each increment up to 200 us late) that triples at 30 s. */
    mv_counter c;
    fx_one_counter(&f, "warm_ctr.seg", "reqs_total", &c);
    sim_init(&m, f.cat);
    uint64_t value = 0, found = 0, t_step = T0 + 30 * SEC;
    for (k = 0, t = T0; t < T0 + 60 * SEC; k++) {
        t = T0 + k * SIM_TICK + (uint64_t)(rng_unif(&r) * 300e3);
        double v2 = ((double)(t - T0) * 1e-9 - rng_unif(&r) * 2e-4) * 1000.0;
        if (t >= t_step)
            v2 = 30000.0 + ((double)(t - t_step) * 1e-9 - rng_unif(&r) * 2e-4) * 3000.0;
        uint64_t want = v2 > (double)value ? (uint64_t)v2 : value;
        if (want > value)
            mv_counter_add(c, want - value);
        unsigned fl = sim_tick(&m, f.map, t, want != value);
        value = want;
        if ((fl & MV_PIPE_CHANGED) && !found)
            found = t;
    }
    printf("\n  counter 1,000/s -> 3,000/s at 30 s: flagged %.1f ms after, %llu change(s) ",
           found ? ((double)found - (double)t_step) / 1e6 : -1.0, (unsigned long long)m.changes);
    CU_ASSERT(found >= t_step && found - t_step <= 30 * MS);
    CU_ASSERT_EQUAL(m.changes, 1);
    sim_free(&m);
    fx_close(&f);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-pipeline");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"counter window", test_counter_window},
        {"fractional counter window", test_counter_f_window},
        {"windows at a phase", test_window_phase},
        {"short rate follows a step", test_short_rate_follows_step},
        {"gauge window quantiles", test_gauge_window_quantiles},
        {"gauge quantiles over 1 ns .. 1000 s", test_gauge_wide_range},
        {"histogram window", test_histogram_window},
        {"changes on steps", test_changes_on_steps},
        {"detection period", test_detection_period},
        {"constant then noisy: backs off", test_constant_then_noisy_backs_off},
        {"backed-off reads do not alias", test_backed_off_reads_do_not_alias},
        {"anomaly score", test_anomaly_score},
        {"anomaly score after an idle start", test_anomaly_idle_start},
        {"rebuild carries state", test_rebuild_carries_state},
        {"gauge sketch allocated lazily", test_gauge_sketch_lazy},
        {"gauge repeats batched into the sketch", test_gauge_repeats_batched},
        {"gauge runs waiting for the sketch: exact", test_gauge_waiting_runs_exact},
        {"steady sparse and dense counters: no change", test_steady_counters_quiet},
        {"warm-up at the fast tick, then a step", test_warmup_fast_then_step},
        {"gauge windows as native buckets", test_gauge_native_buckets},
    };
    int fails = MV_TEST_RUN("pipeline", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return fails;
}
