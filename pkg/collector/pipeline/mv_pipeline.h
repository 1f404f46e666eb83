/* mv_pipeline: per-segment analytics fed by every validated hot copy, summarised per window.
 *
 * One mv_pipe_seg holds the analytics state of one segment for one catalog:
 * per metric a 64-byte hot record touched by every read (the change
 * detector's statistics, pkg/detect, and the few fields a read updates),
 * kept per type in contiguous arrays, and cold state touched only when
 * something happens: for gauges a relative-error sketch (pkg/sketch),
 * allocated when a window first holds two distinct values; for histograms
 * the previous and window counts per pod bucket. Per segment a Frequent
 * Directions anomaly scorer (pkg/fd). The collector's tick calls
 * mv_pipe_seg_feed() right after each successful read; feeding allocates
 * only for a gauge's sketch and when a sketch first touches a new page of
 * keys (bounded by sketch_buckets; steady metrics stop after their first
 * window) and takes one uncontended lock per read (the short-rate ring, read
 * by view). docs/analytics.md ("Layout, cost and memory") has the layout and
 * the cost per sample.
 *
 * Windows start at wall-clock multiples of window_ns less window_phase_ns (the
 * read time given to feed is CLOCK_REALTIME). The first read after a boundary closes
 * the previous window: it keeps what the summaries need that later reads
 * overwrite, the summaries (mv_pipe_out per metric) are computed into a new
 * buffer - at once, or over the reads within close_spread_ns - and that
 * buffer is swapped with the published one under a short lock when complete.
 * mv_pipe_seg_view() copies the published buffer for exposition.
 *
 * Per metric, in the window:
 *   counter:   rate = increase / elapsed time of the read intervals that ended
 *              in the window (a value that went down counts as a reset: the
 *              increase of that interval is the new value); rate_max = the
 *              largest increase/elapsed over one read interval; resets since
 *              the state was created.
 *   gauge:     every finite sample read is in the window's multiset -
 *              repeats of the previous value counted in the hot record and
 *              added to the sketch in one weighted add when the value
 *              changes or the window closes: quantiles, sum, count, min,
 *              max, mean (a window with one distinct value: all that value,
 *              exactly, no sketch); last = the last sample read.
 *   histogram: bucket deltas between consecutive reads are summed per pod
 *              bucket; a quantile is the representative of the bucket
 *              holding its rank (error bounded by the pod's bucket width);
 *              sum/count of the observations made in the window. A read
 *              whose count and sum equal the previous read's is unchanged.
 * Short-horizon counter rate: besides the window's rate, every counter's
 * cumulative increase is copied into a ring of 8 slots of short_ns / 8 at the
 * first read of each slot; mv_pipe_seg_view gives rate_short = increase /
 * elapsed over the intervals that ended in the last short_ns before the
 * latest read (at least the latest interval). It follows a step within
 * short_ns plus one read interval, instead of up to two windows.
 * Change detection (EWMA z + CUSUM) runs at every read, or at most every
 * detect_period_ns (a step): counters on their rise over the span since their
 * last sample, at a step where they rose (or a rate of 0 once they have not
 * risen for 4 of their usual gaps between rises), gauges on the value,
 * histograms on the mean observation since the previous step (when there was
 * one). Changes are counted per metric.
 *
 * Anomaly score: every fd_period_ns the segment's feature vector (counter
 * and histogram-count rates over the period, gauge last values; the first
 * fd_max_dims metrics) is divided component-wise by a slow EWMA of each
 * component's magnitude and scored by mv_fd_observe (residual off the top-k
 * subspace, in [0, 1]). The window's score is the largest score of the
 * window's periods (NaN while the scorer warms up).
 *
 * Rebuild: when the catalog changes, mv_pipe_seg_create(cfg, new_cat, old)
 * moves the state of every metric whose identity (type, name, labels, bucket
 * bounds) is unchanged from `old`; the caller then destroys `old`.
 *
 * Memory per metric (see mv_pipe_metric_bytes, the bound): sizeof(mv_pipe_out)
 * (the published summary) + a 64-byte hot record + cold state (counters: 40
 * bytes and 72 of short-rate ring and offset; gauges: 24; histograms: 72 +
 * 16 * (buckets + 1) of previous and window counts), plus for gauges a sparse
 * sketch once needed (at most mv_sketch_memory_bytes; 336 bytes for one
 * value). With cfg.native_schema, gauges also hold 2 * 16 bytes per native bucket of
 * their largest window so far, plus 2 * 16 for its head (the published window's buffer and
 * the closing one's, per segment; not in mv_pipe_metric_bytes). The view reports the bytes
 * held as of the latest read (mem_bytes).
 *
 * Threads: feed and create/destroy run on one thread (the tick); view may be
 * called from any thread concurrently with feed.
 * Ownership: mv_pipe_seg_create allocates, mv_pipe_seg_destroy frees; views
 * are malloc'd and freed by the caller with free(). The catalog must outlive
 * the mv_pipe_seg built on it.
 */
#ifndef MV_PIPELINE_H
#define MV_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "mv_segment.h"
#include "mv_sketch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MV_PIPE_QUANTILES 4 /* 0.5, 0.9, 0.99, 0.999 */
extern const double mv_pipe_quantiles[MV_PIPE_QUANTILES];

typedef struct mv_pipe_config {
    uint64_t window_ns;      /* export window; default 15 s; at least 1 ms */
    double alpha;            /* sketch relative accuracy; default 0.01 */
    uint32_t sketch_buckets; /* sketch key budget per sign; default 1536 (1 ns .. 1 h at 1%) */
    int detect;              /* run change detection; default 1 */
    int fd;                  /* run the anomaly scorer; default 1 */
    uint64_t fd_period_ns;   /* scorer step; default 1 s */
    uint32_t fd_max_dims;    /* metrics in the scorer's vector; default 64 */
    uint64_t short_ns;       /* horizon of the short counter rate; default 1 s; >= 1 ms */
    /* The summaries of a closing window are computed over the reads that follow the
     * boundary within this time (a share per read), then published at once; 0 (default):
     * all at the first read after the boundary. The collector uses 8 ticks, so segments
     * whose windows close together do not all pay in one tick. */
    uint64_t close_spread_ns;
    /* Offset of this segment's scorer steps within fd_period_ns (steps happen when
     * (now + phase_ns) / fd_period_ns changes); the collector spreads segments over the
     * period. Default 0. */
    uint64_t phase_ns;
    /* Offset of this segment's windows: window k covers [k window_ns - window_phase_ns,
     * (k + 1) window_ns - window_phase_ns) of wall-clock time (the first starts at 0 at
     * the earliest). Less than window_ns; default 0: windows at wall-clock multiples of
     * window_ns. The collector gives each segment its own offset unless asked to align
     * them, so that 1,000 segments' windows do not all close in one tick. */
    uint64_t window_phase_ns;
    /* Reads of unchanged values (mv_pipe_seg_feed_same) whose detector updates and gauge
     * repeat counts may wait and run together, at most this many: they run at the next
     * read with values, at the first read of a window, or when this many wait, to the bit
     * what they would have done one by one, on records then in cache. Their flags
     * (MV_PIPE_CHANGED, MV_PIPE_MOVING) come with the read that runs them, and published
     * summaries never miss one. 0 (default): each read runs its own; at most 65535. The
     * collector uses 8 when no adaptive sampling reads the flags. */
    uint32_t same_batch;
    /* Change detection steps at most this often: 0 (default) at every read. Otherwise a read
     * is a step when the last step is at least this long ago, less half the read interval (a
     * read interval at or above it: every read), and the detectors score, at each step, a
     * counter's rise over the span since its last sample (see above), a gauge's value and a
     * histogram's mean observation since the previous step. Reads between steps only update
     * the windows. The first read is a step; the next ones count from it less phase_ns (mod
     * this), so segments read in one tick step in different ticks. At most one hour. The
     * collector uses 10 ms (--detect-ms). */
    uint64_t detect_period_ns;
    /* MV_PIPE_NATIVE_OFF (default), or a native-histogram schema (-4..8): each gauge's window
     * is also published as native-histogram buckets of that schema (mv_pipe_view.native), the
     * sketch's buckets mapped by mv_sketch_to_native (a window of one value: that value's
     * bucket). The buffers are kept per segment and reused across windows. */
    int32_t native_schema;
} mv_pipe_config;

#define MV_PIPE_NATIVE_OFF INT32_MIN

void mv_pipe_config_default(mv_pipe_config *cfg);
/* NULL if valid, else a sentence saying what to fix. */
const char *mv_pipe_config_check(const mv_pipe_config *cfg);

/* One metric's summary of the last complete window. */
typedef struct mv_pipe_out {
    uint8_t type;       /* MV_SEG_COUNTER/GAUGE/HISTOGRAM */
    uint8_t has_window; /* 1 when a complete window with data was summarised */
    uint8_t pad[2];
    /* Gauges with cfg.native_schema: 1 + the index in the view's `native` of the window's
     * native histogram (0: none). That entry is its head: index = the schema, negative = the
     * number of buckets that follow it, count = the zero bucket's count (magnitudes up to
     * MV_SKETCH_NATIVE_ZERO); the buckets follow in value order. */
    uint32_t native;
    uint64_t changes;            /* changes detected since the state was created */
    uint64_t resets;             /* counters: resets since the state was created */
    double rate;                 /* counters: per-second increase over the window */
    double rate_max;             /* counters: highest rate over one read interval */
    double rate_short;           /* counters: rate over the reads of the last short_ns
                                    (as of the latest read; computed by mv_pipe_seg_view) */
    double q[MV_PIPE_QUANTILES]; /* gauges, histograms */
    double sum;                  /* gauges: of samples; histograms: of observations */
    uint64_t count;
    double min, max, mean, last; /* gauges */
    uint64_t collapses;          /* gauges, histograms: sketch collapses since created */
} mv_pipe_out;

typedef struct mv_pipe_view {
    const void *cat;          /* the catalog it describes (compare only) */
    uint64_t window_start_ns; /* wall clock; 0 before the first complete window */
    uint64_t window_end_ns;
    double anomaly_score;            /* NaN when not available */
    uint64_t fd_steps;               /* scorer steps run */
    uint64_t mem_bytes;              /* bytes of analytics state held (as of the latest read) */
    uint64_t collapses;              /* sketch collapses of all its metrics since created */
    uint64_t window_reads;           /* reads fed in the last complete window */
    uint64_t window_max_interval_ns; /* longest gap between two reads ending in it: above
                                        the fast tick the window was read backed off */
    int native_on;                   /* cfg.native_schema is set: gauges publish native buckets */
    const mv_sketch_nbucket *native; /* the gauges' native histograms (mv_pipe_out.native),
                                        in the same allocation as the view */
    size_t nnative;
    size_t n; /* metrics (catalog order) */
    mv_pipe_out m[];
} mv_pipe_view;

enum {
    MV_PIPE_CHANGED = 1u << 0, /* a metric changed in this read */
    MV_PIPE_MOVING = 1u << 1,  /* a metric moved (unusual) in this read */
    MV_PIPE_WINDOW = 1u << 2,  /* this read closed a window */
    /* This read was a detection step (detection on: every read without detect_period_ns):
     * the absence of CHANGED and MOVING is a verdict only on such a read. */
    MV_PIPE_STEP = 1u << 3,
    /* At this step a detector learnt its first baseline at the steps' pace (its warm-up):
     * the collector holds the fast tick meanwhile, so that the warm-up takes warmup steps
     * of the fast tick, not warmup reads of a backed-off segment (a new metric on a calm
     * segment). */
    MV_PIPE_WARMUP = 1u << 4,
};

typedef struct mv_pipe_seg mv_pipe_seg;

/* Builds the state for `cat` (cfg NULL = defaults), moving the state of
 * unchanged metrics out of `prev` (may be NULL; must have the same config).
 * Returns 0, -EINVAL (bad config) or -ENOMEM. */
int mv_pipe_seg_create(const mv_pipe_config *cfg, const mv_seg_catalog *cat, mv_pipe_seg *prev,
                       mv_pipe_seg **out);
void mv_pipe_seg_destroy(mv_pipe_seg *s);

/* Feeds one validated hot copy (as accepted by mv_seg_hot_check for the
 * catalog given to create) read at wall-clock time now_ns. A catalog with sharded
 * records is read at their fold_offset: the copy's buffer holds
 * mv_seg_catalog_fold_size bytes and mv_seg_fold ran on it. Returns a mask of
 * MV_PIPE_* flags. Allocates only for new sketch pages (see above). */
unsigned mv_pipe_seg_feed(mv_pipe_seg *s, const void *hot, uint64_t now_ns);

/* Feeds a read whose values are exactly those of the previous feed: `hot` is that
 * feed's copy, unchanged. Does what mv_pipe_seg_feed(s, hot, now_ns) would, to the bit,
 * without loading the counter and gauge values it already holds (a tick that found a
 * segment unchanged then touches only the per-metric records). */
unsigned mv_pipe_seg_feed_same(mv_pipe_seg *s, const void *hot, uint64_t now_ns);

/* Makes the next read a detection step whenever the last one was (cfg.detect_period_ns; a
 * no-op without one). The collector calls it for a read of a backed-off segment that its probe
 * brought forward: the change it saw is scored at once. NULL is ignored. */
void mv_pipe_seg_step_next(mv_pipe_seg *s);

/* What mv_pipe_seg_prefetch asks for. */
enum {
    MV_PIPE_PF_STATE = 0,   /* the state's own hot lines */
    MV_PIPE_PF_RECORDS = 1, /* the per-metric records a feed touches */
    MV_PIPE_PF_SAME = 2,    /* those that feed_same touches (fewer) */
};

/* Asks the CPU to bring a segment's state into cache ahead of its feed, so a tick that
 * feeds segment after segment does not wait for each: `what` is an MV_PIPE_PF_*; the
 * records' lines are found through the state (call it for a segment whose
 * MV_PIPE_PF_STATE came earlier). NULL is ignored. */
void mv_pipe_seg_prefetch(const mv_pipe_seg *s, int what);

/* Copies the published window summary. Free with free(). NULL on ENOMEM. */
mv_pipe_view *mv_pipe_seg_view(mv_pipe_seg *s);

/* Bytes per metric of each type (histograms with `nbuckets` finite bounds). */
size_t mv_pipe_metric_bytes(const mv_pipe_config *cfg, uint8_t type, uint32_t nbuckets);

#ifdef __cplusplus
}
#endif
#endif
