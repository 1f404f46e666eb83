/* Unit tests for mv_detect: steps/ramps detected within bounds, false alarms, read control. */
#include "mv_detect.h"
#include "analytics_rng.h"
#include "mv_test.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

#define TRIALS 200
#define ONSET  1000

static mv_detect *make(size_t n)
{
    mv_detect *d = NULL;
    CU_ASSERT_FATAL(mv_detect_create(NULL, n, &d) == 0);
    return d;
}

/* Delay (samples after ONSET) of the first change; -1 if none within len. */
static int first_change(mv_detect *d, uint64_t seed, double step, double slope, double mean,
                        double sd, int len)
{
    test_rng r = {seed};
    mv_detect_reset(d, 0);
    for (int i = 0; i < len; i++) {
        double x = mean + sd * rng_gauss(&r);
        if (i >= ONSET)
            x += sd * (step + slope * (i - ONSET));
        unsigned f = mv_detect_update(d, 0, x);
        if (f & MV_DETECT_CHANGED)
            return i >= ONSET ? i - ONSET : -2 - i;
    }
    return -1;
}

static void check_delay(double step, double slope, int bound)
{
    mv_detect *d = make(1);
    int worst = 0, early = 0;
    for (int t = 0; t < TRIALS; t++) {
        /* Scale-free: mean and sigma vary by trial. */
        double mean = t % 2 ? 1e6 : -3.0, sd = t % 3 ? 250.0 : 0.01;
        int delay = first_change(d, 10000 + (uint64_t)t, step, slope, mean, sd, ONSET + 4 * bound);
        if (delay < -1) {
            early++;
            continue;
        }
        if (delay < 0 || delay > worst)
            worst = delay < 0 ? 1 << 30 : delay;
    }
    if (worst > bound)
        printf("\nstep %g slope %g: worst delay %d > %d\n", step, slope, worst, bound);
    CU_ASSERT(worst <= bound);
    CU_ASSERT(early <= 1); /* a false alarm in the 1000 samples before onset is rare */
    mv_detect_destroy(d);
}

static void test_steps(void)
{
    check_delay(2.0, 0.0, 25);
    check_delay(-3.0, 0.0, 12);
    check_delay(8.0, 0.0, 2);
    check_delay(-8.0, 0.0, 2);
}

static void test_ramps(void)
{
    check_delay(0.0, 0.01, 250);
    check_delay(0.0, -0.03, 90);
}

static void test_small_step_mostly_found(void)
{
    mv_detect *d = make(1);
    int found = 0;
    for (int t = 0; t < TRIALS; t++) {
        int delay = first_change(d, 777 + (uint64_t)t, 1.0, 0.0, 5.0, 1.0, ONSET + 200);
        found += delay >= 0;
    }
    CU_ASSERT(found >= TRIALS * 9 / 10); /* 1 sigma within 200 samples in >= 90% */
    mv_detect_destroy(d);
}

static void test_false_alarms(void)
{
    mv_detect *d = make(2);
    test_rng r = {424242};
    for (int i = 0; i < 1000000; i++) {
        mv_detect_update(d, 0, 10.0 + 2.0 * rng_gauss(&r));
        mv_detect_update(d, 1, -1e9 + 1e3 * rng_gauss(&r));
    }
    uint64_t fa = mv_detect_changes(d, 0) + mv_detect_changes(d, 1);
    printf("\n  false changes over 2e6 stationary samples: %llu\n", (unsigned long long)fa);
    CU_ASSERT(fa <= 10); /* stated: <= 5 per 1e6 */
    CU_ASSERT(fabs(mv_detect_mean(d, 0) - 10.0) < 0.5);
    CU_ASSERT(fabs(mv_detect_sigma(d, 0) - 2.0) < 0.3);
    mv_detect_destroy(d);
}

static void test_constant_then_jump(void)
{
    mv_detect *d = make(1);
    for (int i = 0; i < 500; i++)
        CU_ASSERT((mv_detect_update(d, 0, 7.0) & MV_DETECT_CHANGED) == 0);
    CU_ASSERT(mv_detect_update(d, 0, 7.001) & MV_DETECT_CHANGED);
    CU_ASSERT(mv_detect_changes(d, 0) == 1);
    /* Settles on the new level: no further change once cool-down ends. */
    for (int i = 0; i < 500; i++)
        mv_detect_update(d, 0, 7.001);
    CU_ASSERT(mv_detect_changes(d, 0) == 1);
    CU_ASSERT(fabs(mv_detect_mean(d, 0) - 7.001) < 1e-9);
    mv_detect_destroy(d);
}

/* A series constant through warm-up that then turns noisy: one change at the
 * onset (a constant that starts to move is a change), then the detector must
 * have re-learnt level and scale - no further change over 60 s at 1 kHz. */
static void test_constant_then_noise_relearns(void)
{
    mv_detect *d = make(1);
    test_rng r = {1313};
    for (int i = 0; i < 200; i++)
        CU_ASSERT((mv_detect_update(d, 0, 5.0) & MV_DETECT_CHANGED) == 0);
    uint64_t later = 0;
    int first = -1;
    for (int i = 0; i < 60000; i++) {
        unsigned f = mv_detect_update(d, 0, 5.0 + rng_gauss(&r));
        if ((f & MV_DETECT_CHANGED) && first < 0)
            first = i;
        else if (f & MV_DETECT_CHANGED)
            later++;
    }
    printf("\n  constant then noise: first change at %d, %llu more in 60000 samples\n", first,
           (unsigned long long)later);
    CU_ASSERT(first == 0); /* detected at the first noisy sample */
    CU_ASSERT(later <= 1); /* stated: <= 5 per 1e6 stationary samples once re-learnt */
    CU_ASSERT(fabs(mv_detect_sigma(d, 0) - 1.0) < 0.2);
    mv_detect_destroy(d);
}

/* Noise whose sigma rises from 1 to 10: a change, then the new scale is
 * learnt - no change later than 100 samples after the rise. */
static void test_scale_rise_relearns(void)
{
    mv_detect *d = make(1);
    int late_total = 0, found = 0;
    for (int t = 0; t < 50; t++) {
        test_rng r = {900 + (uint64_t)t};
        mv_detect_reset(d, 0);
        int late = 0, any = 0;
        for (int i = 0; i < 2000; i++)
            mv_detect_update(d, 0, 3.0 + rng_gauss(&r));
        for (int i = 0; i < 20000; i++) {
            unsigned f = mv_detect_update(d, 0, 3.0 + 10.0 * rng_gauss(&r));
            if (f & MV_DETECT_CHANGED) {
                any = 1;
                late += i >= 100;
            }
        }
        found += any;
        late_total += late;
    }
    printf("\n  sigma 1 -> 10: found in %d of 50 trials, %d changes later than 100 samples\n",
           found, late_total);
    CU_ASSERT(found == 50);
    CU_ASSERT(late_total <= 5); /* 1e6 samples after re-learning: <= 5 per 1e6 */
    mv_detect_destroy(d);
}

static void test_spike_does_not_poison_baseline(void)
{
    mv_detect *d = make(1);
    test_rng r = {3};
    for (int i = 0; i < 2000; i++)
        mv_detect_update(d, 0, rng_gauss(&r));
    uint64_t before = mv_detect_changes(d, 0);
    CU_ASSERT(mv_detect_update(d, 0, 100.0) & MV_DETECT_CHANGED);
    for (int i = 0; i < 5000; i++)
        mv_detect_update(d, 0, rng_gauss(&r));
    CU_ASSERT(mv_detect_changes(d, 0) == before + 1);
    CU_ASSERT(fabs(mv_detect_mean(d, 0)) < 0.5);
    mv_detect_destroy(d);
}

static void test_invalid(void)
{
    mv_detect_config c;
    mv_detect *d = NULL;
    mv_detect_config_default(&c);
    c.lambda = 0.0;
    CU_ASSERT(mv_detect_create(&c, 4, &d) == -EINVAL);
    CU_ASSERT(mv_detect_config_check(&c) != NULL);
    CU_ASSERT(mv_detect_create(NULL, 0, &d) == -EINVAL);
    d = make(3);
    CU_ASSERT(mv_detect_update(d, 3, 1.0) == MV_DETECT_INVALID);
    CU_ASSERT(mv_detect_update(d, 0, NAN) == MV_DETECT_INVALID);
    CU_ASSERT(mv_detect_update(d, 0, 1.0) == MV_DETECT_WARMUP);
    CU_ASSERT(mv_detect_memory_bytes(1000) < 1000 * 80);
    double x[3] = {1, 2, 3};
    size_t moving = 99;
    CU_ASSERT(mv_detect_update_all(d, x, &moving) == 0);
    CU_ASSERT(moving == 0);
    mv_detect_destroy(d);
}

/* Simulated segment: 8 metrics, calm except for a level shift in metric 3 at
 * t = 60 s. Reads follow the controller's interval. */
static void test_rate_controller(void)
{
    mv_detect_rate_config rc;
    mv_detect_rate *r = NULL;
    mv_detect_rate_config_default(&rc); /* 1 ms fast, 1 s max, 8 calm reads, x2 */
    CU_ASSERT_FATAL(mv_detect_rate_create(&rc, &r) == 0);
    mv_detect *d = make(8);
    test_rng g = {11};
    uint64_t t = 0, end = 120000000000ull, shift = 60000000000ull;
    uint64_t first_read_after_shift = 0, interval_after = 0;
    int detected_at_first_read = 0;
    double x[8];
    while (t < end) {
        for (int i = 0; i < 8; i++)
            x[i] = 100.0 * (i + 1) + rng_gauss(&g) + (i == 3 && t >= shift ? 20.0 : 0.0);
        size_t moving = 0;
        size_t changed = mv_detect_update_all(d, x, &moving);
        uint64_t next = mv_detect_rate_observe(r, changed > 0, moving > 0);
        if (t >= shift && first_read_after_shift == 0) {
            first_read_after_shift = t;
            detected_at_first_read = changed > 0;
            interval_after = next;
        }
        t += next;
    }
    uint64_t reads = mv_detect_rate_reads(r);
    printf("\n  reads in 120 s: %llu (fixed 1 ms tick: 120000)\n", (unsigned long long)reads);
    CU_ASSERT(reads < 120000 / 20);                             /* calm series: far fewer reads */
    CU_ASSERT(first_read_after_shift - shift <= 1000000000ull); /* next read within max */
    CU_ASSERT(detected_at_first_read);
    CU_ASSERT(interval_after == rc.fast_ns);            /* snapped back to the fast tick */
    CU_ASSERT(mv_detect_rate_interval(r) == rc.max_ns); /* calm again at the end */

    /* Pure controller arithmetic (no dither). */
    rc.jitter = 0;
    mv_detect_rate *q = NULL;
    CU_ASSERT_FATAL(mv_detect_rate_create(&rc, &q) == 0);
    for (int i = 0; i < 7; i++)
        CU_ASSERT(mv_detect_rate_observe(q, 0, 0) == 1000000ull);
    CU_ASSERT(mv_detect_rate_observe(q, 0, 0) == 2000000ull);
    for (int i = 0; i < 100; i++)
        mv_detect_rate_observe(q, 0, 1); /* moving holds */
    CU_ASSERT(mv_detect_rate_interval(q) == 2000000ull);
    for (int i = 0; i < 8 * 20; i++)
        mv_detect_rate_observe(q, 0, 0);
    CU_ASSERT(mv_detect_rate_interval(q) == rc.max_ns);
    CU_ASSERT(mv_detect_rate_observe(q, 1, 0) == rc.fast_ns);
    rc.factor = 1;
    mv_detect_rate *bad = NULL;
    CU_ASSERT(mv_detect_rate_create(&rc, &bad) == -EINVAL);
    mv_detect_rate_destroy(q);
    mv_detect_rate_destroy(r);
    mv_detect_destroy(d);
}

/* The detector as it was before the embedded record (all double, branches, separate
 * mean and variance counts): the reference the inline fast path must agree with. */
typedef struct ref_series {
    double mean, var, splus, sminus;
    uint32_t n, n_mean, n_var, cooldown;
} ref_series;

static double ref_weight(const mv_detect_config *c, uint32_t n)
{
    double w = 1.0 / ((double)n + 1.0);
    return w > c->lambda ? w : c->lambda;
}

static unsigned ref_update(const mv_detect_config *c, ref_series *s, double x)
{
    unsigned flags = 0;
    if (!isfinite(x))
        return MV_DETECT_INVALID;
    if (s->n == 0) {
        s->mean = x;
        s->var = 0;
        s->n = s->n_mean = s->n_var = 1;
        return MV_DETECT_WARMUP;
    }
    double floor_s = c->sigma_floor_rel * fabs(s->mean);
    if (floor_s < c->sigma_floor_abs)
        floor_s = c->sigma_floor_abs;
    double sigma = sqrt(s->var);
    if (sigma < floor_s)
        sigma = floor_s;
    double dev = x - s->mean, z = dev / sigma;
    if (s->n < c->warmup) {
        flags |= MV_DETECT_WARMUP;
    } else if (s->cooldown > 0) {
        flags |= MV_DETECT_COOLDOWN;
        s->cooldown--;
    } else {
        double sp = s->splus + z - c->cusum_k, sm = s->sminus - z - c->cusum_k;
        s->splus = sp > 0 ? sp : 0;
        s->sminus = sm > 0 ? sm : 0;
        if (fabs(z) > c->z_threshold || s->splus > c->cusum_h || s->sminus > c->cusum_h) {
            s->cooldown = c->cooldown;
            s->splus = s->sminus = 0;
            s->n_mean = 0;
            s->n++;
            return MV_DETECT_CHANGED | MV_DETECT_MOVING;
        }
        if (fabs(z) > c->moving_z || s->splus > 0.5 * c->cusum_h || s->sminus > 0.5 * c->cusum_h) {
            s->n++;
            return flags | MV_DETECT_MOVING;
        }
    }
    if (s->n_mean == 0) {
        s->mean = x;
        s->var = 0;
        s->n_var = 1;
    } else {
        double w = ref_weight(c, s->n_mean), wv = ref_weight(c, s->n_var);
        s->mean += w * dev;
        s->var = (1 - wv) * (s->var + wv * dev * dev);
        s->n_var++;
    }
    s->n_mean++;
    s->n++;
    return flags;
}

/* The embedded record (mv_detect_series_update: inline fast path, float CUSUM) flags the
 * same samples as the reference over steps, ramps, spikes, scale changes and constants:
 * the float sums can only differ on a sample whose CUSUM lands within ~1e-6 of h. */
static void test_matches_reference(void)
{
    mv_detect_config cfg;
    mv_detect_config_default(&cfg);
    mv_detect_params p;
    CU_ASSERT_FATAL(mv_detect_params_init(&p, &cfg) == 0);
    int trials = 300, same = 0;
    uint64_t changes = 0, moving = 0, differ = 0;
    for (int t = 0; t < trials; t++) {
        test_rng r = {5000 + (uint64_t)t};
        mv_detect_series s = {0};
        ref_series ref = {0};
        double mean = t % 2 ? 1e6 : -3.0, sd = t % 3 ? 250.0 : 0.01;
        int diff = 0;
        for (int i = 0; i < 20000; i++) {
            double x = mean + sd * rng_gauss(&r);
            if (i >= 5000)
                x += sd * (t % 5) * 0.7; /* steps of 0 .. 2.8 sigma */
            if (i >= 10000)
                x += sd * 0.002 * (i - 10000) * (t % 4); /* ramps */
            if (i % 3001 == 0)
                x += sd * 20; /* spikes */
            if (i >= 15000 && t % 7 == 0)
                x = mean; /* constant */
            if (i >= 15000 && t % 7 == 1)
                x = mean + 10 * sd * rng_gauss(&r); /* scale x10 */
            unsigned a = mv_detect_series_update(&p, &s, x), b = ref_update(&cfg, &ref, x);
            changes += (a & MV_DETECT_CHANGED) != 0;
            moving += (a & MV_DETECT_MOVING) != 0;
            if (a != b) {
                diff = 1;
                differ++;
            }
        }
        same += !diff;
    }
    printf("\n  %d of %d trials flag every sample as the reference (%llu changes, %llu moving, "
           "%llu samples differ) ",
           same, trials, (unsigned long long)changes, (unsigned long long)moving,
           (unsigned long long)differ);
    CU_ASSERT(changes > 100 && moving > 1000);
    CU_ASSERT(same >= trials - 3);
}

/* The inline update (mv_detect_series_update) is the out-of-line one to the bit: the same
 * flags and the same state after every sample over series that change often, so cool-down
 * and the learning phase run inline most of the time. The counts aside: the out-of-line
 * path also counts steady-state samples, in n (which only matters below the warm-up) and
 * in n_mean (only while below n_lam); the test compares n_mean up to n_lam and keeps both
 * counts in step. */
static void test_inline_equals_out_of_line(void)
{
    mv_detect_config cfg;
    mv_detect_config_default(&cfg);
    mv_detect_params p;
    CU_ASSERT_FATAL(mv_detect_params_init(&p, &cfg) == 0);
    uint64_t samples = 0, mismatches = 0, learning = 0, cooling = 0;
    for (int t = 0; t < 40; t++) {
        test_rng r = {9000 + (uint64_t)t};
        mv_detect_series a = {0}, b = {0};
        for (int i = 0; i < 20000; i++) {
            /* A sawtooth with noise, held for runs of 8 samples; steps, NaN now and then. */
            double x = (double)((i / 8 * (7 + t)) % 1000) + (t % 3) * rng_gauss(&r);
            if (i % 997 == 0)
                x = NAN;
            if (t % 4 == 0 && i > 10000)
                x = 5.0; /* constant */
            learning += a.n >= cfg.warmup && a.n_mean > 0 && a.n_mean < p.n_lam;
            cooling += a.n >= cfg.warmup && a.cooldown > 0;
            unsigned fa = mv_detect_series_update(&p, &a, x);
            unsigned fb = mv_detect_series_update_slow(&p, &b, x);
            mv_detect_series ca = a, cb = b;
            ca.n = cb.n = 0;
            ca.n_mean = ca.n_mean < p.n_lam ? ca.n_mean : p.n_lam;
            cb.n_mean = cb.n_mean < p.n_lam ? cb.n_mean : p.n_lam;
            mismatches += fa != fb || memcmp(&ca, &cb, sizeof ca) != 0;
            b.n = a.n; /* keep the counts in step: see above */
            b.n_mean = a.n_mean;
            samples++;
        }
    }
    printf("\n  %llu samples (%llu learning, %llu cooling down), %llu mismatches ",
           (unsigned long long)samples, (unsigned long long)learning, (unsigned long long)cooling,
           (unsigned long long)mismatches);
    CU_ASSERT(learning > samples / 10 && cooling > samples / 100);
    CU_ASSERT_EQUAL(mismatches, 0);
}

/* A run of equal samples (mv_detect_series_update_run) is the same samples one at a time, to
 * the bit: state, ORed flags and changes, over runs of a constant (which reach fixed points
 * and stop early), noise, NaN, +-Inf, +-0, through warm-up, cool-down and resets, with and
 * without a sample's own sigma floor and with a config whose cool-down is 0. Where a run
 * reports *still, further steps with the same sample change nothing and report nothing but
 * MV_DETECT_INVALID. */
static void test_run_equals_steps(void)
{
    mv_detect_config cfgs[2];
    mv_detect_config_default(&cfgs[0]);
    mv_detect_config_default(&cfgs[1]);
    cfgs[1].cooldown = 0;
    cfgs[1].warmup = 2;
    cfgs[1].lambda = 0.25;
    uint64_t runs = 0, steps = 0, mismatches = 0, stills = 0, folded = 0, still_bad = 0;
    for (int c = 0; c < 2; c++) {
        mv_detect_params p;
        CU_ASSERT_FATAL(mv_detect_params_init(&p, &cfgs[c]) == 0);
        for (int t = 0; t < 30; t++) {
            test_rng r = {777 + (uint64_t)t + 1000 * (uint64_t)c};
            mv_detect_series a = {0}, b = {0};
            uint64_t ca = 0, cb = 0;
            double level = (double)(t % 5) * 10.0;
            for (int i = 0; i < 1500; i++) {
                uint64_t u = rng_u64(&r);
                double x;
                switch (u % 16) {
                case 0:
                    x = NAN;
                    break;
                case 1:
                    x = (u >> 8) & 1 ? INFINITY : -INFINITY;
                    break;
                case 2:
                    x = (u >> 8) & 1 ? 0.0 : -0.0;
                    break;
                case 3:
                    x = rng_gauss(&r) * 3.0 + level;
                    break;
                case 4:
                    level += rng_gauss(&r) * 50.0; /* a step */
                    x = level;
                    break;
                default:
                    x = level; /* a constant: its runs settle */
                }
                uint32_t k = (uint32_t)((u >> 16) % 400);
                double ms = (u >> 40) % 4 == 0 ? 0.5 : 0.0;
                if ((u >> 44) % 200 == 0) { /* a reset: learning starts again */
                    memset(&a, 0, sizeof a);
                    memset(&b, 0, sizeof b);
                }
                int still = -1;
                unsigned fa = mv_detect_series_update_run(&p, &a, x, ms, k, &ca, &still);
                unsigned fb = 0;
                for (uint32_t j = 0; j < k; j++) {
                    unsigned f = mv_detect_series_update_floor(&p, &b, x, ms);
                    cb += (f & MV_DETECT_CHANGED) != 0;
                    fb |= f;
                }
                runs++;
                steps += k;
                mismatches += fa != fb || ca != cb || memcmp(&a, &b, sizeof a) != 0;
                if (still == 1) {
                    stills++;
                    folded += k;
                    /* Further steps with x: nothing moves, nothing but INVALID is reported. */
                    mv_detect_series s0 = a;
                    for (int j = 0; j < 3; j++) {
                        unsigned f = mv_detect_series_update_floor(&p, &a, x, ms);
                        still_bad += (f & ~(unsigned)MV_DETECT_INVALID) != 0 ||
                                     memcmp(&s0, &a, sizeof a) != 0;
                    }
                    b = a;
                } else {
                    still_bad += still != 0;
                }
            }
        }
    }
    printf("\n  %llu runs, %llu steps, %llu ended still, %llu mismatches ",
           (unsigned long long)runs, (unsigned long long)steps, (unsigned long long)stills,
           (unsigned long long)mismatches);
    CU_ASSERT(stills > runs / 10); /* the fold is exercised */
    CU_ASSERT(folded > steps / 10);
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT_EQUAL(still_bad, 0);
    /* k = 0: no step, not still. */
    mv_detect_params p;
    CU_ASSERT_FATAL(mv_detect_params_init(&p, NULL) == 0);
    mv_detect_series z = {0};
    uint64_t ch = 0;
    int st = 1;
    CU_ASSERT_EQUAL(mv_detect_series_update_run(&p, &z, 1.0, 0.0, 0, &ch, &st), 0);
    CU_ASSERT(st == 0 && z.n == 0 && ch == 0);
}

int main(void)
{
    static const mv_test tests[] = {
        {"steps detected within bound", test_steps},
        {"ramps detected within bound", test_ramps},
        {"1 sigma step mostly found", test_small_step_mostly_found},
        {"false alarms under stationary noise", test_false_alarms},
        {"constant then jump", test_constant_then_jump},
        {"spike does not poison baseline", test_spike_does_not_poison_baseline},
        {"constant then noise: re-learns", test_constant_then_noise_relearns},
        {"sigma 1 -> 10: re-learns", test_scale_rise_relearns},
        {"invalid input", test_invalid},
        {"adaptive read interval", test_rate_controller},
        {"embedded record matches the reference", test_matches_reference},
        {"inline update equals the out-of-line one", test_inline_equals_out_of_line},
        {"a run of equal samples equals its steps", test_run_equals_steps},
    };
    int fails = MV_TEST_RUN("detect", tests);
    return fails;
}
