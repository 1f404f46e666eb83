/* mv_collect: the collector's segment table, tick loop and snapshots.
 *
 * Segments come and go (from an agent's catalog watch or static paths). Each
 * tick copies every segment's hot area (header + values) through its
 * transport, validates it with the segment reader (the single gate between
 * segment bytes and everything else), re-reads the catalog when the
 * generation moves, and publishes the copy. Consumers (exposition, the
 * analytics pipeline) take snapshots; a snapshot never blocks the tick for
 * longer than a few small memcpy calls.
 *
 * Transports only move bytes: the shm transport maps a file read-only; the
 * verbs transport posts RDMA READs. Both implement mv_coll_transport
 * (mv_transport.h).
 */
#ifndef MV_COLLECT_H
#define MV_COLLECT_H

#include <stddef.h>
#include <stdint.h>

#include "mv_pipeline.h"
#include "mv_segment.h"
#include "mv_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Transports ------------------------------------------------------------ */

/* The same-host transport: segments are files mapped read-only. Copies use
 * 8-byte atomic loads, and a SIGBUS from a file truncated under us turns
 * into -EIO instead of a crash. */
const mv_coll_transport *mv_coll_shm_transport(void);
/* Opens `path` for the shm transport; the file must be exactly `size` bytes
 * (0 = take the file's size). Returns 0 and a source, or -errno with a
 * message in errbuf. */
int mv_coll_shm_open(const char *path, uint64_t size, void **src, uint64_t *size_out, char *errbuf,
                     size_t errlen);

/* ---- The table --------------------------------------------------------------- */

/* One tick, as on_tick sees it (CLOCK_MONOTONIC nanoseconds). */
typedef struct mv_coll_tick_info {
    uint64_t due_ns;   /* its scheduled start; 0 for mv_coll_tick's and early ticks */
    uint64_t start_ns; /* when a worker started it */
    uint64_t end_ns;   /* when its last segment was done */
    uint64_t missed;   /* scheduled starts passed before it started (counted as missed) */
    uint64_t segments; /* segments in the table when it started */
    uint64_t deferred; /* of those, held by a worker of an earlier tick: not read by this one */
} mv_coll_tick_info;

typedef struct mv_coll_opts {
    uint32_t tick_us;             /* default 10000 (10 ms); minimum 1000 */
    uint32_t quarantine_after_ms; /* failures persisting this long quarantine; default 1000 */
    uint32_t recheck_ms;          /* quarantined segments are re-validated this often; 5000 */
    uint64_t max_segment_size;    /* larger segments are refused; default 64 MiB */
    /* Analytics: when set, every successful read feeds the segment's
     * mv_pipe_seg (built from `pipe`, rebuilt when the catalog changes). */
    int analytics;       /* default 0 */
    mv_pipe_config pipe; /* default mv_pipe_config_default */
    /* 0 (default): each segment's windows start at its own offset within window_ns,
     * derived from its id (pipe.window_phase_ns is set per segment), so the window
     * closes of many segments spread over the window instead of landing in one tick;
     * 1: pipe.window_phase_ns as given for every segment (0: wall-clock multiples). */
    int window_aligned;
    /* Adaptive sampling (needs analytics): each segment's read interval is
     * chosen by an mv_detect_rate controller between tick_us and
     * max_interval_us; the tick skips segments not yet due, and a read that
     * sees a change brings the segment back to every tick. 0 (default) or
     * <= tick_us: every segment is read every tick. */
    uint32_t max_interval_us;
    uint32_t calm_reads; /* calm reads before the interval grows; default 8 */
    /* Backed-off segments whose transport offers a probe (shm) are probed every tick and
     * read at once when a value word or the catalog moved, so a write is never served late
     * (every write: segments whose values change every tick are then read every tick).
     * 1: no probe, a backed-off segment waits for its interval. Default 0. */
    int no_probe;
    /* A histogram still torn after a few re-reads is served from its last
     * consistent copy for at most this long, then omitted until a consistent
     * copy arrives; default 1000. Never served as zeros. */
    uint32_t torn_stale_ms;
    /* Threads that share each tick's segments (the tick thread is one of them,
     * the others are started by mv_coll_create): prepare, read, validate,
     * analyse and publish run on all of them, each segment on one of them per
     * tick; reads through a transport that is not `concurrent` one at a time.
     * Default (and 0) 1: no helper thread; at most MV_COLL_MAX_TICK_WORKERS.
     * Scheduled ticks are started by whichever of them is awake at the tick's time, and
     * a tick never waits for a worker still holding segments of an earlier tick: those
     * are deferred to the next (mv_coll_stats.reads_deferred). */
    uint32_t tick_workers;
    /* Called as each tick ends, on the worker that ended it, under the table's lock: it
     * must be quick and must not call into the table. NULL: none (benchmarks use it). */
    void (*on_tick)(void *arg, const mv_coll_tick_info *ti);
    void *on_tick_arg;
    /* Nonzero: idle tick workers poll for the next scheduled tick instead of sleeping until
     * it, so each keeps a core busy. For cores of the collector's own (a DPU's, or a
     * Guaranteed pod's under the static CPU manager): a sleeping core of a virtual machine
     * can wake milliseconds late, which no tick worker can make up. Default 0. */
    int tick_poll;
    /* Segments whose transport can tell that their backing object changed under the reader
     * (transport->changed; shm: a file's size, inode or change time) are checked this often,
     * and before every catalog read: a change validates the whole segment again (header and
     * catalog), a size other than the mapped one fails it, so a truncated and re-extended file
     * gets the verdict a fresh collector would give it. Default (and 0) 1000; at most one
     * stat per segment per second is about 1 us of CPU. */
    uint32_t stat_ms;
} mv_coll_opts;

#define MV_COLL_MAX_TICK_WORKERS 64
/* With a tick longer than this, a segment added between ticks is read within this time (an
 * early tick; at most one per this time), not at the next tick; mv_coll_destroy does not
 * wait for the tick either. */
#define MV_COLL_EARLY_NS 10000000ull

typedef struct mv_coll mv_coll;

void mv_coll_opts_default(mv_coll_opts *o);
/* Creates a table and its tick_workers - 1 helper threads; free with
 * mv_coll_destroy (which stops the tick thread and joins the helpers, whether
 * or not a tick ran). Returns 0, -EINVAL (options), -ENOMEM, or the -errno of
 * a helper thread that could not be started (nothing is left behind). */
int mv_coll_create(const mv_coll_opts *o, mv_coll **out);
void mv_coll_destroy(mv_coll *c);
/* Starts the scheduled ticks: a tick every tick_us on an absolute schedule, started by
 * whichever tick worker is awake then (a start late by whole periods counts them as missed
 * ticks, and the schedule restarts from it instead of catching up in a burst), plus the
 * early ticks of MV_COLL_EARLY_NS. */
int mv_coll_start(mv_coll *c);
/* Runs one tick synchronously, shared with the helpers (for tests and
 * benchmarks; not with start, and from one thread at a time). Returns when
 * every segment of the tick is done. */
void mv_coll_tick(mv_coll *c);

/* Adds a segment; `src` (owned by the table from now on, even on error) is
 * read through `t`. `labels` are identity labels copied by the table.
 * Returns 0, -EEXIST if `id` is present, -ENOMEM. */
int mv_coll_add(mv_coll *c, const char *id, uint64_t size, const mv_seg_label *labels,
                size_t nlabels, const mv_coll_transport *t, void *src);
/* Gives segment `id` new identity labels (copied), keeping everything else: its source, reads
 * and analytics. Logs segment.relabeled. Returns 0, -ENOENT or -ENOMEM. */
int mv_coll_relabel(mv_coll *c, const char *id, const mv_seg_label *labels, size_t nlabels);
/* Gives segment `id` its pod's Kubernetes labels (copied; keys such as app.kubernetes.io/name),
 * which only label selectors see: they are not series labels. Returns 0, -ENOENT or -ENOMEM. */
int mv_coll_set_pod_labels(mv_coll *c, const char *id, const mv_seg_label *labels, size_t n);
/* Removes a segment (e.g. released or its rkey revoked). Returns 0 or -ENOENT. */
int mv_coll_remove(mv_coll *c, const char *id);
/* Called (from a tick worker, no table lock held) after the table dropped a
 * segment on its own because a read said it is gone (-ENOENT/-EACCES, e.g. a
 * revoked rkey). `src` is the dropped source (closed later through its
 * transport): whoever added it learns that it is no longer in the table and
 * may add it again, e.g. with a fresh rkey. */
typedef void (*mv_coll_drop_fn)(void *arg, const char *id, void *src);
void mv_coll_set_drop_hook(mv_coll *c, mv_coll_drop_fn fn, void *arg);
/* Read hook for live views (pkg/collector/live): called on the tick worker after each
 * published read of a segment that someone watches (mv_coll_watch), with the segment's id,
 * the catalog and the validated copy (sharded records folded), its CLOCK_REALTIME read time
 * and the pipeline's MV_PIPE_* flags of that read (0 without analytics). It must be quick and
 * must not call into the table. A segment nobody watches costs the tick one load of a counter
 * it already holds in cache: no call. */
typedef void (*mv_coll_read_fn)(void *arg, const char *id, const mv_seg_catalog *cat,
                                const void *hot, uint64_t now_ns, unsigned pipe_flags);
/* Sets the hook (NULL: none); `arg` must stay valid until the hook is cleared: clearing it
 * returns once the calls in flight have returned. */
void mv_coll_set_read_hook(mv_coll *c, mv_coll_read_fn fn, void *arg);
/* Counts one more (delta 1) or one less (delta -1) watcher of segment `id`. Returns 0 or
 * -ENOENT. */
int mv_coll_watch(mv_coll *c, const char *id, int delta);
/* Removes every segment whose id is not in `keep` (used after a resync). */
void mv_coll_retain(mv_coll *c, const char *const *keep, size_t n);

/* ---- Snapshots ---------------------------------------------------------------- */

typedef enum mv_coll_state {
    MV_COLL_PENDING = 0,     /* no valid catalog yet */
    MV_COLL_OK = 1,          /* values published */
    MV_COLL_QUARANTINED = 2, /* invalid for longer than quarantine_after_ms */
} mv_coll_state;

typedef struct mv_coll_seg_view {
    const char *id;
    const mv_seg_label *labels; /* identity labels */
    size_t nlabels;
    const mv_seg_label *pod_labels; /* the pod's Kubernetes labels, for selectors only */
    size_t npod_labels;
    mv_coll_state state;
    mv_seg_reason reason;      /* last rejection reason, if any */
    const char *detail;        /* its detail text */
    const mv_seg_catalog *cat; /* NULL unless a catalog was ever valid */
    /* Names `cat`: every catalog the table parses gets a new serial, never reused, so equal
     * serials mean the same (immutable) catalog. 0 = not known (views built by hand): the
     * exposition cache then renders that snapshot without caching. */
    uint64_t cat_serial;
    const void *hot; /* copy of header + values matching cat, or NULL */
    uint32_t hot_len;
    /* NULL, or one byte per catalog metric: 1 = that histogram had no
     * consistent copy within torn_stale_ms; consumers must omit it. */
    const uint8_t *omitted;
    uint32_t stale_histograms;   /* served from an older consistent copy in this one */
    uint32_t omitted_histograms; /* omitted from this copy */
    /* CLOCK_REALTIME since when the segment's catalog has been busy (an append in progress,
     * or an appender that died: values are frozen meanwhile); 0 = not busy. */
    uint64_t busy_since_ns;
    uint64_t read_ns; /* CLOCK_REALTIME of the copy */
    uint64_t heartbeat_ns;
    uint64_t reads, read_errors, torn;
    uint64_t read_bytes; /* bytes the transport delivered for it (hot area, catalog, retries) */
    uint64_t size;
    const char *transport;
    /* Analytics (NULL/0 without): the last complete window's summaries,
     * meaningful only when pipe->cat == cat; the current read interval. */
    const mv_pipe_view *pipe;
    uint64_t read_interval_ns;
    uint64_t reads_skipped;  /* ticks that skipped this segment (not due) */
    uint64_t probes;         /* ticks that probed it while not due (transport probe) */
    uint64_t probe_reads;    /* of which saw a change and read it early */
    uint64_t reads_same;     /* of `reads`, those whose probe found the published copy current:
                                nothing copied, the pipeline fed the same values */
    uint64_t reads_deferred; /* ticks that left it to the next: a worker of an earlier tick
                                still held it (mv_coll_stats.reads_deferred) */
} mv_coll_seg_view;

/* Upper bounds (seconds) of the tick-duration histogram's finite buckets. */
#define MV_COLL_TICK_BUCKETS 12
extern const double mv_coll_tick_bounds[MV_COLL_TICK_BUCKETS];

typedef struct mv_coll_stats {
    uint64_t ticks;
    /* Scheduled tick starts that passed before a tick worker could start them (the
     * ticks then go on from the late start and do not catch up in a burst). */
    uint64_t ticks_missed;
    /* Segment reads a tick left to the next because a worker of an earlier tick still
     * held the segment (it was stopped mid-chunk, e.g. its CPU taken by the host). */
    uint64_t reads_deferred;
    double poll_seconds; /* CPU time idle tick workers spent polling (tick_poll), all added up */
    uint64_t tick_buckets[MV_COLL_TICK_BUCKETS + 1]; /* non-cumulative; last = +Inf */
    double tick_seconds_sum;
    uint64_t errors[MV_SEG_REASON_COUNT_]; /* quarantine events by reason */
    uint64_t torn_retries;                 /* histogram copies caught mid-update */
    uint64_t catalog_reads;
    uint64_t segments_added, segments_removed;
    double last_tick_seconds;
} mv_coll_stats;

typedef struct mv_coll_snap mv_coll_snap;

/* Freed heap a process that takes snapshots often should keep (mv_util_malloc_keep): each
 * snapshot's copies then reuse the pages the previous one freed (microview-collector and tick_bench
 * set it; docs/benchmarks.md, "The snapshot's CPU was mostly page faults"). */
#define MV_COLL_HEAP_KEEP (64u << 20)

/* Takes a copy of the collector's statistics, then of every segment's latest published values
 * (each segment's copy consistent in itself; the statistics are from just before the
 * segments' copies). Holds the table's lock only to take the list of segments, so a scrape of
 * a large table does not hold back the ticks. */
mv_coll_snap *mv_coll_snapshot(mv_coll *c);
/* The collector's statistics alone, without a snapshot of the segments. */
void mv_coll_stats_get(mv_coll *c, mv_coll_stats *out);
void mv_coll_snap_free(mv_coll_snap *s);
size_t mv_coll_snap_count(const mv_coll_snap *s);
const mv_coll_seg_view *mv_coll_snap_seg(const mv_coll_snap *s, size_t i);
const mv_coll_stats *mv_coll_snap_stats(const mv_coll_snap *s);

#ifdef __cplusplus
}
#endif
#endif
