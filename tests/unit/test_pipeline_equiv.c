/* Unit tests for mv_pipeline: paths that must end exactly where another does: a window's
 * summary spread over reads against closed at once, reads of unchanged values (fed as
 * unchanged, batched or not) against full feeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "microview.h"
#include "mv_detect.h"
#include "mv_pipeline.h"
#include "mv_test.h"
#include "pipeline_fixture.h"

typedef struct mixed {
    int counters; /* the counters are registered (and written) */
    mv_counter c[4];
    mv_gauge g[4];
    mv_histogram *h[2];
} mixed;

static void mixed_write(mixed *m, int i)
{
    for (int k = 0; k < 4; k++) {
        if (m->counters)
            mv_counter_add(m->c[k], (uint64_t)(1 + (i * 7 + k) % 5));
        if ((i + k) % 3 == 0) /* gauges move one read in three */
            mv_gauge_set(m->g[k], (double)((i * 13 + k * 5) % 97) + 0.5);
    }
    for (int k = 0; k < 2; k++)
        mv_histogram_observe(m->h[k], 0.001 * (1 + (i * 11 + k) % 400));
}

/* Spread window close: the summaries computed over the reads after the boundary
 * (close_spread_ns) are those computed at once; until they are all in, the view shows
 * the previous window; metrics needed by the new window first are closed on the spot. */
static void test_spread_close_equals_immediate(void)
{
    fixture fa, fb;
    mixed ma = {.counters = 1}, mb = {.counters = 1}; /* both sides write the same */
    double bounds[8];
    mv_exponential_buckets(0.001, 2.0, 8, bounds);
    fixture *fx[2] = {&fa, &fb};
    mixed *mx[2] = {&ma, &mb};
    for (int s = 0; s < 2; s++) {
        fx_open(fx[s], s ? "spread-b.seg" : "spread-a.seg", 65536);
        char name[32];
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "c%d_total", k);
            CU_ASSERT_FATAL(
                mv_counter_register(fx[s]->seg, name, NULL, NULL, NULL, 0, &mx[s]->c[k]) == MV_OK);
            snprintf(name, sizeof name, "g%d", k);
            CU_ASSERT_FATAL(
                mv_gauge_register(fx[s]->seg, name, NULL, NULL, NULL, 0, &mx[s]->g[k]) == MV_OK);
        }
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "h%d", k);
            CU_ASSERT_FATAL(mv_histogram_register(fx[s]->seg, name, NULL, NULL, NULL, 0, bounds, 8,
                                                  &mx[s]->h[k]) == MV_OK);
        }
        fx_catalog(fx[s]);
    }
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.fd = 0;
    mv_pipe_seg *now = NULL, *spread = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, fa.cat, NULL, &now) == 0);
    cfg.close_spread_ns = 8 * 1000000ull;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, fb.cat, NULL, &spread) == 0);
    uint64_t t0 = 14000 * SEC, dt = 1000000ull; /* reads every 1 ms */
    int compared = 0, lagged = 0;
    for (int i = 0; i < 3500; i++) {
        uint64_t t = t0 + (uint64_t)i * dt;
        mixed_write(&ma, i);
        mixed_write(&mb, i);
        mv_pipe_seg_feed(now, fa.map, t);
        mv_pipe_seg_feed(spread, fb.map, t);
        mv_pipe_view *a = mv_pipe_seg_view(now), *b = mv_pipe_seg_view(spread);
        if (a->window_end_ns != b->window_end_ns) {
            /* Still summarising: the spread view shows the window before. */
            CU_ASSERT(b->window_end_ns == 0 || b->window_end_ns + SEC == a->window_end_ns);
            CU_ASSERT(t - a->window_end_ns < 8 * dt);
            lagged++;
        } else if (a->window_end_ns && t % SEC == 9 * dt) {
            /* Summaries identical except the change counts, which the spread side takes
             * when it summarises (none change here). */
            for (size_t m = 0; m < a->n; m++) {
                mv_pipe_out x = a->m[m], y = b->m[m];
                x.rate_short = y.rate_short = 0;
                if (memcmp(&x, &y, sizeof x) != 0)
                    printf("\n  metric %zu (type %u) differs: rate %g/%g count %llu/%llu ", m,
                           x.type, x.rate, y.rate, (unsigned long long)x.count,
                           (unsigned long long)y.count);
                CU_ASSERT(memcmp(&x, &y, sizeof x) == 0);
            }
            CU_ASSERT_EQUAL(a->window_reads, b->window_reads);
            compared++;
        }
        free(a);
        free(b);
    }
    printf("\n  spread close: %d windows compared, view lagged %d reads ", compared, lagged);
    CU_ASSERT(compared == 3);
    CU_ASSERT(lagged >= 3 * 2 && lagged <= 3 * 8);
    mv_pipe_seg_destroy(now);
    mv_pipe_seg_destroy(spread);
    fx_close(&fa);
    fx_close(&fb);
}

/* A segment `file` with the mixed metrics and a gauge to be set to NaN, its catalog parsed. */
static void mixed_open_as(fixture *f, const char *file, mixed *m, mv_gauge *nan_g, int counters)
{
    double bounds[8];
    mv_exponential_buckets(0.001, 2.0, 8, bounds);
    fx_open(f, file, 65536);
    char name[32];
    m->counters = counters;
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "c%d_total", k);
        if (counters)
            CU_ASSERT_FATAL(mv_counter_register(f->seg, name, NULL, NULL, NULL, 0, &m->c[k]) ==
                            MV_OK);
        snprintf(name, sizeof name, "g%d", k);
        CU_ASSERT_FATAL(mv_gauge_register(f->seg, name, NULL, NULL, NULL, 0, &m->g[k]) == MV_OK);
    }
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "h%d", k);
        CU_ASSERT_FATAL(
            mv_histogram_register(f->seg, name, NULL, NULL, NULL, 0, bounds, 8, &m->h[k]) == MV_OK);
    }
    CU_ASSERT_FATAL(mv_gauge_register(f->seg, "g_nan", NULL, NULL, NULL, 0, nan_g) == MV_OK);
    fx_catalog(f);
}

static void mixed_open(fixture *f, const char *file, mixed *m, mv_gauge *nan_g)
{
    mixed_open_as(f, file, m, nan_g, 1);
}

/* Two views of the same reads, to the bit. */
static int views_equal(const mv_pipe_view *a, const mv_pipe_view *b)
{
    return a->n == b->n && a->window_end_ns == b->window_end_ns &&
           a->window_reads == b->window_reads && a->fd_steps == b->fd_steps &&
           memcmp(&a->anomaly_score, &b->anomaly_score, sizeof a->anomaly_score) == 0 &&
           a->mem_bytes == b->mem_bytes && memcmp(a->m, b->m, a->n * sizeof a->m[0]) == 0;
}

/* A read that found the values of the previous one (the collector's `same` read) fed with
 * mv_pipe_seg_feed_same gives, to the bit, what mv_pipe_seg_feed gives: the same views at
 * every read, through window closes (spread), the scorer, resets and a NaN gauge. With
 * same_batch, the same views at every read too, and between two reads with values the
 * same flags in all (they come with the read that runs the waiting updates). */
static void test_feed_same_equals_feed(void)
{
    fixture f;
    mixed m;
    mv_gauge nan_g;
    mixed_open(&f, "same.seg", &m, &nan_g);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.close_spread_ns = 8 * 1000000ull;
    cfg.fd_period_ns = 10 * 1000000ull;
    mv_pipe_seg *full = NULL, *same = NULL, *first = NULL, *batch = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &full) == 0);
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &same) == 0);
    mv_pipe_config bcfg = cfg;
    bcfg.same_batch = 3;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&bcfg, f.cat, NULL, &batch) == 0);
    /* Fed with feed_same from its first read: nothing in its records yet, it takes the
     * values from the copy. */
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &first) == 0);
    uint64_t t0 = 20000 * SEC, dt = 1000000ull;
    int mismatches = 0, same_reads = 0, windows = 0, bmismatches = 0, bflags = 0;
    unsigned acc_a = 0, acc_b = 0;
    for (int i = 0; i < 4200; i++) {
        /* Writes on one read in five, in bursts, none for a while; a reset once; the NaN
         * gauge flips. */
        int write = (i % 5 == 0 && !(i > 3300 && i < 3600)) || (i > 2000 && i < 2040);
        if (write)
            mixed_write(&m, i);
        if (i == 3000)
            *m.c[1].slot = 3; /* a reset: the pod restarted */
        if (i % 700 == 0)
            mv_gauge_set(nan_g, i % 1400 ? NAN : 1.0);
        int changed = write || i == 3000 || i % 700 == 0 || i == 0;
        uint64_t t = t0 + (uint64_t)i * dt;
        unsigned fa = mv_pipe_seg_feed(full, f.map, t);
        unsigned fb =
            changed ? mv_pipe_seg_feed(same, f.map, t) : mv_pipe_seg_feed_same(same, f.map, t);
        unsigned fw =
            changed ? mv_pipe_seg_feed(batch, f.map, t) : mv_pipe_seg_feed_same(batch, f.map, t);
        same_reads += !changed;
        mv_pipe_view *a = mv_pipe_seg_view(full), *b = mv_pipe_seg_view(same);
        mv_pipe_view *w = mv_pipe_seg_view(batch);
        mismatches += !(fa == fb && views_equal(a, b));
        bmismatches += !views_equal(a, w);
        acc_a |= fa;
        acc_b |= fw;
        if (changed) { /* every update has run in both */
            bmismatches += acc_a != acc_b;
            bflags += (acc_a & MV_PIPE_CHANGED) != 0;
            acc_a = acc_b = 0;
        }
        free(w);
        windows += (fa & MV_PIPE_WINDOW) != 0;
        if (i < 2) {
            unsigned fc = mv_pipe_seg_feed_same(first, f.map, t);
            mv_pipe_view *c = mv_pipe_seg_view(first);
            CU_ASSERT(fc == fa && memcmp(a->m, c->m, a->n * sizeof a->m[0]) == 0);
            free(c);
        }
        free(a);
        free(b);
    }
    printf("\n  %d reads (%d same), %d windows, %d mismatches, batched: %d (%d stretches with "
           "a change) ",
           4200, same_reads, windows, mismatches, bmismatches, bflags);
    CU_ASSERT(same_reads > 3000);
    CU_ASSERT(windows == 4);
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT_EQUAL(bmismatches, 0);
    CU_ASSERT(bflags > 0);
    mv_pipe_seg_destroy(batch);
    mv_pipe_seg_destroy(full);
    mv_pipe_seg_destroy(same);
    mv_pipe_seg_destroy(first);
    fx_close(&f);
}

/* A detection period that every read reaches (reads 8 to 12 ms apart, a period of 10 ms,
 * at a phase): every read is a step, and for gauges and histograms the flags and views are,
 * to the bit, those of detection at every read, through level changes, a NaN gauge, reads of
 * unchanged values and a rebuild of the state for the same catalog. (Counters are scored
 * differently at steps - on their rises, test_counter_steps_follow_rises below.) */
static void test_period_reached_equals_each_read(void)
{
    fixture f;
    mixed m;
    mv_gauge nan_g;
    mixed_open_as(&f, "period.seg", &m, &nan_g, 0);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.close_spread_ns = 30 * MS;
    cfg.fd_period_ns = 100 * MS;
    cfg.phase_ns = 7 * MS;
    mv_pipe_seg *each = NULL, *per = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &each) == 0);
    cfg.detect_period_ns = 10 * MS;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &per) == 0);
    uint64_t t = 30000 * SEC;
    int mismatches = 0, steps = 0, changed_reads = 0, last_window = 0, rebuilt = 0;
    for (int i = 0; i < 3000; i++) {
        int write = i % 4 != 3 && !(i > 2600 && i < 2700);
        if (write) {
            mixed_write(&m, i);
            if (i >= 2000) /* the gauges' level moves */
                for (int k = 0; k < 4; k++)
                    mv_gauge_set(m.g[k], 500.0 + (double)(i % 7));
        }
        if (i % 500 == 0)
            mv_gauge_set(nan_g, i % 1000 ? NAN : 2.0);
        int changed = write || i % 500 == 0;
        unsigned fa, fb;
        if (changed) {
            fa = mv_pipe_seg_feed(each, f.map, t);
            fb = mv_pipe_seg_feed(per, f.map, t);
        } else {
            fa = mv_pipe_seg_feed_same(each, f.map, t);
            fb = mv_pipe_seg_feed_same(per, f.map, t);
        }
        if (fa & MV_PIPE_WINDOW)
            last_window = i;
        /* The state rebuilt for the same catalog keeps the schedule (once no summary is
         * pending: a rebuild finishes them at once). */
        if (!rebuilt && i >= 1200 && i - last_window > 5) {
            rebuilt = 1;
            mv_pipe_seg *np = NULL;
            CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, per, &np) == 0);
            mv_pipe_seg_destroy(per);
            per = np;
        }
        steps += (fb & MV_PIPE_STEP) != 0;
        changed_reads += (fa & MV_PIPE_CHANGED) != 0;
        mv_pipe_view *a = mv_pipe_seg_view(each), *b = mv_pipe_seg_view(per);
        mismatches += !(fa == fb && views_equal(a, b));
        free(a);
        free(b);
        t += 8 * MS + (uint64_t)((i * 37) % 5) * MS; /* 8 .. 12 ms */
    }
    printf("\n  %d reads, %d steps, %d with a change, %d mismatches ", 3000, steps, changed_reads,
           mismatches);
    CU_ASSERT_EQUAL(steps, 3000);
    CU_ASSERT(changed_reads > 0);
    CU_ASSERT(rebuilt);
    CU_ASSERT_EQUAL(mismatches, 0);
    mv_pipe_seg_destroy(each);
    mv_pipe_seg_destroy(per);
    fx_close(&f);
}

/* The documented rule, written out independently of the pipeline's records: at a detection
 * step a counter that rose since its last sample scores its rise over the span since then
 * (sigma at least one increment, or the read interval over the span, whichever is less),
 * one that did not rise for 4 of its usual gaps between rises scores 0, and any other waits. */
typedef struct ref_ctr {
    int primed, rose;
    uint64_t prev, total, det_total, det_e;
    uint32_t gap_us;
    mv_detect_series d;
    uint64_t changes;
} ref_ctr;

static unsigned ref_step(const mv_detect_params *p, ref_ctr *c, uint64_t e, uint64_t prev_step_e,
                         uint64_t gap, uint64_t period)
{
    uint64_t span = e - c->det_e, d = c->total - c->det_total;
    unsigned f = 0;
    if (d && span) {
        double sp = (double)span * 1e-9, res = fmin(1.0, (double)d * ((double)gap * 1e-9) / sp);
        f = mv_detect_series_update_floor(p, &c->d, (double)d / sp, res / sp);
        if (c->det_e != prev_step_e)
            f &= ~(unsigned)MV_DETECT_WARMUP;
        uint32_t u = (uint32_t)(span / 1000u);
        c->gap_us = c->gap_us && c->rose ? (uint32_t)(((uint64_t)c->gap_us * 3u + u) / 4u)
                    : c->gap_us          ? c->gap_us
                                         : u;
        c->rose = 1;
        c->det_e = e;
        c->det_total = c->total;
    } else if (c->gap_us && span >= (4000ull * c->gap_us > period ? 4000ull * c->gap_us : period)) {
        f = mv_detect_series_update(p, &c->d, 0.0) & ~(unsigned)MV_DETECT_WARMUP;
        c->rose = 0;
        c->det_e = e;
    }
    c->changes += (f & MV_DETECT_CHANGED) != 0;
    return (f & MV_DETECT_CHANGED ? MV_PIPE_CHANGED | MV_PIPE_MOVING : 0) |
           (f & MV_DETECT_MOVING ? MV_PIPE_MOVING : 0) |
           (f & MV_DETECT_WARMUP ? MV_PIPE_WARMUP : 0);
}

/* Counters at detection steps (every read a step: reads 8 to 12 ms apart, a 10 ms period)
 * give, read for read, the flags and change counts of the rule written out above: rises of
 * 1..5 per read at 3 reads in 4, ten times that from read 1500 (a change), a reset at 1800,
 * 100 reads without a write from 2600 (it stopped: a change), a rebuild of the state. */
static void test_counter_steps_follow_rises(void)
{
    fixture f;
    mv_counter c[4];
    fx_open(&f, "rises.seg", 65536);
    char name[32];
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "c%d_total", k);
        CU_ASSERT_FATAL(mv_counter_register(f.seg, name, NULL, NULL, NULL, 0, &c[k]) == MV_OK);
    }
    fx_catalog(&f);
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = SEC;
    cfg.close_spread_ns = 30 * MS;
    cfg.fd_period_ns = 100 * MS;
    cfg.phase_ns = 7 * MS;
    cfg.detect_period_ns = 10 * MS;
    mv_pipe_seg *per = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, NULL, &per) == 0);
    mv_detect_params dp;
    CU_ASSERT_FATAL(mv_detect_params_init(&dp, NULL) == 0);
    ref_ctr ref[4];
    memset(ref, 0, sizeof ref);
    uint64_t t = 31000 * SEC, e = 0, prev_step_e = 0, gap = 0;
    int mismatches = 0, steps = 0, changed_reads = 0, rebuilt = 0, last_window = 0;
    for (int i = 0; i < 3000; i++) {
        int write = i % 4 != 3 && !(i > 2600 && i < 2700);
        for (int k = 0; write && k < 4; k++)
            mv_counter_add(c[k], (uint64_t)(1 + (i * 7 + k) % 5) * (i >= 1500 ? 10u : 1u));
        if (i == 1800)
            *c[2].slot = 1; /* a reset */
        int changed = write || i == 1800;
        unsigned fb =
            changed ? mv_pipe_seg_feed(per, f.map, t) : mv_pipe_seg_feed_same(per, f.map, t);
        unsigned fr = 0;
        for (int k = 0; k < 4; k++) {
            uint64_t v = *c[k].slot;
            ref_ctr *r = &ref[k];
            if (!r->primed) {
                r->primed = 1;
                r->prev = v;
                r->det_e = e;
                continue;
            }
            r->total += v >= r->prev ? v - r->prev : v;
            r->prev = v;
            fr |= ref_step(&dp, r, e, prev_step_e, gap, cfg.detect_period_ns);
        }
        prev_step_e = e;
        if (fb & MV_PIPE_WINDOW)
            last_window = i;
        if (!rebuilt && i >= 1200 && i - last_window > 5) {
            rebuilt = 1;
            mv_pipe_seg *np = NULL;
            CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, f.cat, per, &np) == 0);
            mv_pipe_seg_destroy(per);
            per = np;
        }
        steps += (fb & MV_PIPE_STEP) != 0;
        changed_reads += (fb & MV_PIPE_CHANGED) != 0;
        mismatches += (fb & (MV_PIPE_CHANGED | MV_PIPE_MOVING | MV_PIPE_WARMUP)) != fr;
        gap = 8 * MS + (uint64_t)((i * 37) % 5) * MS; /* 8 .. 12 ms */
        t += gap;
        e += gap;
    }
    mv_pipe_seg_feed(per, f.map, t + 2 * SEC);
    mv_pipe_view *v = mv_pipe_seg_view(per);
    CU_ASSERT_FATAL(v != NULL);
    int count_mismatch = 0;
    for (int k = 0; k < 4; k++)
        count_mismatch += v->m[k].changes != ref[k].changes;
    printf("\n  %d reads, %d steps, %d with a change (%llu, %llu, %llu, %llu per counter), %d "
           "mismatches ",
           3000, steps, changed_reads, (unsigned long long)ref[0].changes,
           (unsigned long long)ref[1].changes, (unsigned long long)ref[2].changes,
           (unsigned long long)ref[3].changes, mismatches + count_mismatch);
    CU_ASSERT_EQUAL(steps, 3000);
    CU_ASSERT(changed_reads >= 2);
    for (int k = 0; k < 4; k++) /* the step up and the stop, at least */
        CU_ASSERT(ref[k].changes >= 2);
    CU_ASSERT(rebuilt);
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT_EQUAL(count_mismatch, 0);
    free(v);
    mv_pipe_seg_destroy(per);
    fx_close(&f);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-pipeline-equiv");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"spread window close equals immediate", test_spread_close_equals_immediate},
        {"feed of unchanged values equals a full feed", test_feed_same_equals_feed},
        {"a detection period every read reaches: as at every read",
         test_period_reached_equals_each_read},
        {"counters at detection steps follow the documented rule", test_counter_steps_follow_rises},
    };
    int fails = MV_TEST_RUN("pipeline equivalences", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return fails;
}
