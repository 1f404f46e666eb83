/* mv_pipeline_int.h: what the pipeline's files share (not installed, not for other
 * libraries): the per-metric records, the segment's state, and the window-close functions
 * of mv_pipeline_window.c. */
#ifndef MV_PIPELINE_INT_H
#define MV_PIPELINE_INT_H

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mv_detect.h"
#include "mv_fd.h"
#include "mv_pipeline.h"
#include "mv_sketch.h"

#define FD_SCALE_LAMBDA 0.05
#define FD_EPS          1e-12

#define SHORT_SLOTS 8

/* ---- Per-metric records ------------------------------------------------------------------ */

/* Hot records: touched by every read that copies the segment, packed per type. A read
 * that finds the segment unchanged (feed_same) touches no counter or gauge record between
 * detection steps (the gauges' repeats are folded: hgauge.run0). */
typedef struct hctr {
    uint64_t prev;   /* raw value at the previous read */
    double rate_max; /* window: highest increase / elapsed over one read interval */
    /* The raw total at its last detection sample (cfg.detect_period_ns; cdet): prev - det_raw
     * is the increase since then (moved with every change of coff). */
    uint64_t det_raw;
    uint32_t off;    /* value offset in the value area */
    uint16_t primed; /* a previous read exists; 2: its first read came after the last step */
    uint16_t frac;   /* a counter_f (record type 4): values in units of PIPE_FRAC_UNIT */
} hctr;

/* A fractional counter (record type 4) is kept as an integer like the others: its value in
 * units of 2^-16 (mod 2^64), so rates and increases are exact to 1/65536 of a unit. */
#define PIPE_FRAC_BITS 16
#define PIPE_FRAC_UNIT (1.0 / 65536.0)

/* The value of counter_f words (integral u64, fraction f64) in PIPE_FRAC_UNIT units. */
static inline uint64_t pipe_frac_value(const char *w)
{
    uint64_t whole;
    double frac;
    memcpy(&whole, w, 8);
    memcpy(&frac, w + 8, 8);
    double f = frac * 65536.0;
    if (!(f >= 0 && f < 18446744073709551616.0)) /* NaN, infinite or beyond 2^64 units */
        f = f >= 0 && f < INFINITY ? fmod(f, 18446744073709551616.0) : 0.0;
    return (whole << PIPE_FRAC_BITS) + (uint64_t)f;
}

/* A counter's rate from an increase in its own units. */
static inline double pipe_ctr_scale(const hctr *h)
{
    return h->frac ? PIPE_FRAC_UNIT : 1.0;
}

typedef struct hgauge {
    mv_detect_series det;
    double last;   /* last sample read (NaN/Inf included) */
    mv_sketch *sk; /* NULL: no window yet needed one */
    uint32_t off;
    /* Reads of `last` in this window not yet in the sketch, folded: gauge_run(s, h) =
     * s->greads - run0 while `last` is not NaN (0 when it is), so a read that finds the
     * value unchanged - and a read of an unchanged segment, all its gauges at once - touches
     * no gauge record: it only counts in s->greads. */
    uint32_t run0;
} hgauge;

/* Gauges' runs waiting for their sketches, in the order they ended (s->pv, pn, pl): a change
 * of value appends the run of the value before it, and a gauge's sketch (cold: its header,
 * directory and pages are lines of their own, a few KiB per gauge) takes GPEND runs at once
 * (mv_sketch_add_runs, batched over the gauges of a read): the same adds in the same order as
 * one add per change, so the same sketch, its sum to the bit; and a gauge that moves little
 * puts its GPEND values in a page or two. Gauge j's k-th run waiting is pv[k * ng + j]
 * (value), pn[k * ng + j] (reads) for k < pl[j]: the runs that the gauges of a segment append
 * at one read, as they do when their writer sets them together, share a few lines. The runs
 * waiting at a window's close are the closing window's: its summary adds them first
 * (summarise_gauge), and a change in the new window before that summary closes it on the
 * spot (as a sketch needed by the new window always did). */
#define GPEND 6

typedef struct hhist {
    mv_detect_series det;
    uint64_t prev_count;
    double prev_sum;
    uint32_t off;
    uint32_t primed;
} hhist;

_Static_assert(sizeof(mv_detect_series) == 32 && sizeof(hctr) == 32 && sizeof(hgauge) == 56 &&
                   sizeof(hhist) == 56,
               "hot records are packed: a feed streams through 32 to 56 bytes per metric");

/* Cold records. */
typedef struct cctr {
    uint64_t win_base; /* total at the start of the window */
    uint64_t prime_e;  /* elapsed clock (see mv_pipe_seg.e) at the first read */
    uint64_t changes, resets;
    uint32_t idx; /* catalog index */
} cctr;

typedef struct cgauge {
    uint64_t changes;
    uint64_t collapses; /* of sketches freed before this one */
    uint32_t idx;
} cgauge;

typedef struct chist {
    uint64_t *b;  /* [0, nb): previous bucket counts; [nb, 2 nb): window counts */
    uint64_t off; /* reset offset: cumulative count = prev_count + off */
    double win_sum;
    uint64_t win_count;
    /* Observations since the previous detection step (cfg.detect_period_ns): their count
     * and sum. */
    uint64_t det_count;
    double det_sum;
    uint64_t changes, resets;
    uint32_t idx, nb; /* nb = bucket_count + 1 */
} chist;

/* A counter's detection samples (cfg.detect_period_ns), touched at detection steps only. A
 * counter is scored on its rate over the span since its last sample, at a step where it has
 * risen (so a sparse counter, one increment a second at a 10 ms step, scores one increment
 * over the second it took, not a burst against mostly-zero steps), or at a step where it has
 * not risen for 4 of its usual gaps between rises (a rate of 0: it stopped). */
typedef struct cdet {
    uint64_t det_e;  /* elapsed clock at its last sample (or at its first read) */
    uint32_t gap_us; /* EWMA (weight 1/4) of the span between samples that saw it rise, us;
                        0: none yet (it is not scored before it first rises) */
    uint32_t rose;   /* its last sample saw it rise (the span was a gap between rises) */
} cdet;

/* What the closing window needs of a metric that the next reads overwrite. */
typedef struct wsnap {
    uint64_t u; /* counter: total at the close; gauge: run; histogram: primed */
    double d;   /* counter: rate_max; gauge: last */
} wsnap;

enum { T_CTR = 0, T_GAUGE = 1, T_HIST = 2 };
#define LOC(t, j) (((uint32_t)(t) << 30) | (uint32_t)(j))
#define LOC_T(l)  ((l) >> 30)
#define LOC_J(l)  ((l)&0x3fffffffu)

struct mv_pipe_seg {
    /* Hot: what every read touches, first, on as few lines as they fit (the struct is
     * line-aligned; mv_pipe_seg_prefetch asks for these lines only, PIPE_HOT_END). */
    pthread_mutex_t mu;         /* the published output and what views read, below */
    const mv_detect_params *dp; /* shared: every pipeline's detectors use the defaults */
    size_t nc, ng, nh;
    int fed; /* a read with values (not feed_same) was fed */
    /* feed_same reads waiting for their detector updates (cfg.same_batch): all of them
     * for gauges, the forward ones for counters. */
    uint32_t same_g, same_c;
    uint32_t greads;      /* reads whose gauge values are in the window (see hgauge.run0) */
    mv_detect_series *dc; /* counters' detectors */
    hctr *hc;
    hgauge *hg;
    /* Bit j (word j / 64): gauge j's detector reached a fixed point at a sample equal to
     * its mean, to the bit - a step with it returns no flag and leaves the state as it was
     * (mv_detect_series_update_run) - so while its `last` equals that mean, to the bit, its
     * steps are passed over. Cleared when the detectors are fed outside the fold (at every
     * read, with no detection period); a new pipeline starts with none. */
    uint64_t *gstill;
    hhist *hh;
    /* Gauges' runs waiting for their sketches (GPEND rows of ng; touched on a change of value). */
    double *pv;
    uint32_t *pn;
    uint8_t *pl;
    /* Time. e: elapsed clock, the sum of the forward read intervals (ns). */
    uint64_t e, last_read_ns;
    uint64_t cur_w;                  /* window index being accumulated; UINT64_MAX = none */
    uint64_t w_lo_ns, w_hi_ns;       /* [lo, hi): the times of window cur_w (empty at first) */
    uint64_t slot_lo_ns, slot_hi_ns; /* [lo, hi): the times of slot last_slot */
    uint64_t last_slot;
    uint64_t win_reads, win_gap_max;
    wsnap *cl; /* closing window (cl != NULL while summaries are pending) */
    mv_fd *fd;
    uint64_t fd_step;
    /* Detection steps (cfg.detect_period_ns): the time the steps count from (the previous
     * step, or the first read less the phase) and the elapsed clock at the previous step;
     * det_started: set at the first read. */
    uint64_t det_last_ns, det_e;
    int det_started;
    int det_soon;  /* a read one read interval after the last would be a step */
    int det_force; /* the next read is a step (mv_pipe_seg_step_next) */
    mv_pipe_config cfg;
    /* Touched when something happens (a change, a reset, a first read, a sketch). */
    cctr *cc;
    cdet *cd;       /* counters' detection samples (touched at steps) */
    uint64_t *coff; /* counters' reset offsets: total = prev + coff */
    cgauge *cg;
    chist *ch;
    uint64_t *scratch; /* histogram deltas (scratch_len words) */
    size_t scratch_len;
    /* Bytes held: fixed at create, plus the gauges' sketches as they grow (under mu). */
    uint64_t mem_fixed, sk_mem;

    const mv_seg_catalog *cat;
    size_t n;
    uint32_t *loc;  /* per catalog index: type and index in its arrays */
    uint64_t win_e; /* e at the start of the window */

    /* Short-rate ring: per slot, its number + 1 (0 = empty), e at the read before its
     * first read, and every counter's total then ([slot][counter]). */
    uint64_t slot_id[SHORT_SLOTS], slot_e[SHORT_SLOTS];
    uint64_t *slot_tot;

    /* Closing window, with cl above. */
    mv_pipe_out *cl_out; /* the summaries being computed */
    uint8_t *cl_pending; /* per catalog index */
    size_t cl_left, cl_next;
    uint64_t cl_w, cl_e, cl_win_e, cl_deadline, cl_reads, cl_gap_max;
    uint64_t cl_steps;
    double cl_score;
    uint64_t cl_collapses;

    /* Scorer, with fd and fd_step above. */
    uint32_t fd_d;
    uint32_t *fd_loc; /* loc of each dimension */
    double *fd_x, *fd_scale;
    uint64_t *fd_base; /* counters/histograms: cumulative count at the last step */
    uint64_t fd_last_ns, fd_steps;
    double fd_wmax;

    /* Published output, under mu. */
    mv_pipe_out *pub;
    uint64_t pub_start, pub_end;
    double pub_score;
    uint64_t pub_steps;
    uint64_t pub_collapses;
    uint64_t pub_reads, pub_gap_max;
    /* Native histograms of the gauges (cfg.native_schema), under mu: nat[nat_pub] is the
     * published window's (pub[].native indexes it), the other the closing window's; both
     * kept across windows. nat_mem: their bytes. */
    mv_sketch_nbucket *nat[2];
    size_t nat_len[2], nat_cap[2];
    int nat_pub;
    uint64_t nat_mem;
};

/* End of the hot fields: what a read touches of the struct. */
#define PIPE_HOT_END offsetof(struct mv_pipe_seg, cc)

/* Gauge h's reads of its last value in this window not yet in its sketch. */
static inline uint32_t gauge_run(const mv_pipe_seg *s, const hgauge *h)
{
    return h->last == h->last ? s->greads - h->run0 : 0; /* a NaN stays out of the window */
}

/* Takes gauge j's runs waiting for its sketch into v and n (GPEND each); returns how many. */
static inline uint32_t gauge_take(mv_pipe_seg *s, size_t j, double *v, uint32_t *n)
{
    uint32_t len = s->pl[j];
    for (uint32_t k = 0; k < len; k++) {
        v[k] = s->pv[k * s->ng + j];
        n[k] = s->pn[k * s->ng + j];
    }
    s->pl[j] = 0;
    return len;
}

/* A counter's or histogram's cumulative increase (its total) by its location; 0 for a gauge. */
static inline uint64_t pipe_total_of(const mv_pipe_seg *s, uint32_t loc)
{
    uint32_t j = LOC_J(loc);
    if (LOC_T(loc) == T_CTR)
        return s->hc[j].prev + s->coff[j];
    if (LOC_T(loc) == T_HIST)
        return s->hh[j].prev_count + s->ch[j].off;
    return 0;
}

/* mv_pipeline.c */
/* Analytics bytes a metric of `type` holds besides a gauge's sketch and a histogram's buckets. */
size_t mv_pipe__fixed_bytes(uint8_t type);
/* The histogram checksum weights and the detectors' parameters, made once; returns the
 * parameters, shared by every pipeline. */
const mv_detect_params *mv_pipe__init(void);
/* Runs the detector updates and gauge repeats that reads of unchanged values left waiting. */
unsigned mv_pipe__run_same(mv_pipe_seg *s);

/* mv_pipeline_create.c */
static inline const mv_seg_metric *mv_pipe__cat_m(const mv_pipe_seg *s, size_t i)
{
    return mv_seg_catalog_metric(s->cat, i);
}
void mv_pipe__cl_free(mv_pipe_seg *s);

/* mv_pipeline_window.c: window summaries and their spread over the reads after a boundary. */
/* Gauge j's sketch, created on first use (NULL when there is no memory for it). */
mv_sketch *mv_pipe__gauge_sketch(mv_pipe_seg *s, size_t j);
/* Representative of pod bucket b (of nbounds + 1): the value every observation in it is
 * taken to be. */
double mv_pipe__bucket_rep(const double *bounds, uint32_t nbounds, uint32_t b);
/* The wall-clock span [lo, hi) of window w under cfg's window_ns and window_phase_ns. */
void mv_pipe__window_span(const mv_pipe_config *cfg, uint64_t w, uint64_t *lo, uint64_t *hi);
/* Computes metric i's pending summary now (it is about to change). */
void mv_pipe__close_one(mv_pipe_seg *s, size_t i);
/* Finishes every pending summary and publishes them. */
void mv_pipe__close_all(mv_pipe_seg *s);
/* Snapshots what window w needs at the first read after its boundary. */
void mv_pipe__close_begin(mv_pipe_seg *s, uint64_t w, uint64_t now_ns);
/* This read's share of the pending summaries; publishes when none is left. */
void mv_pipe__close_step(mv_pipe_seg *s, uint64_t now_ns, uint64_t gap);

#endif
