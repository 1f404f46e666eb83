/* mv_collect internals shared by the module's files, not part of its interface: the segment
 * table's layout, the torn-histogram state and the tick-worker pool. */
#ifndef MV_COLLECT_INT_H
#define MV_COLLECT_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_detect.h"

/* Locks serialising reads through transports that are not `concurrent`, one
 * per transport (striped by address: two transports may share one). */
#define READ_LOCKS 16

/* A parsed catalog shared by the table and snapshots. */
typedef struct cat_ref {
    int refs; /* atomic */
    mv_seg_catalog *cat;
    uint64_t serial; /* mv_coll_seg_view.cat_serial */
} cat_ref;

typedef struct seg {
    /* Tick-hot: what a tick reads of a segment that it probes or serves unchanged, first
     * and line-aligned (SEG_HOT_END; the tick prefetches these lines only). */
    const mv_coll_transport *t;
    void *src;
    cat_ref *cat; /* current catalog (tick's reference) */
    /* Analytics and adaptive sampling (tick thread; pipe is swapped under mu). */
    mv_pipe_seg *pipe;
    cat_ref *pipe_cat; /* the catalog pipe was built on */
    mv_detect_rate *rate;
    uint64_t due_ns;     /* CLOCK_MONOTONIC time of the next read */
    int watched;         /* atomic: live viewers of this segment (mv_coll_watch) */
    unsigned pipe_flags; /* tick worker: the MV_PIPE_* flags of the last feed */
    /* Unchanged reads: the catalog serial whose last read was published whole (no torn
     * histogram served stale or omitted) and, with analytics, fed to the pipeline; 0 none.
     * While it is the current catalog's, a due segment whose probe words (below) all equal
     * the published copy's is not copied again: the pipeline is fed the published values
     * and the copy stays published (a `same` read). */
    uint64_t same_serial;
    /* The probe (transport->probe; adaptive sampling and `same` reads): the offsets of the
     * words that change when the segment does (the header's, each metric's first value
     * word), for the catalog of probe_serial. */
    uint32_t *probe_offs;
    uint64_t *probe_want; /* the words there in the published copy */
    size_t nprobe, probe_cap;
    uint64_t probe_serial;  /* the catalog serial the offsets were worked out for; 0 none */
    uint64_t pub_copies;    /* copies published (publish) */
    uint64_t probe_copy_at; /* pub_copies when probe_want was taken from the published copy */
    int refs; /* atomic: the table's list holds one, each tick list (tick_list) another */
    int busy; /* atomic: a tick worker holds the segment (claimed per chunk, released after) */
    uint64_t deferred; /* atomic: ticks that found it busy and left it to the next */

    /* Published state, under mu; the first fields are hot too. */
    pthread_mutex_t mu;
    mv_coll_state state;
    cat_ref *pub_cat;
    void *pub_hot;
    uint64_t read_ns, reads;
    uint64_t reads_same; /* of `reads`, those that found the published copy current */
    uint64_t interval_ns, skipped;
    uint64_t probes,
        probe_reads;          /* probes of a backed-off segment; those that read (mv_coll__count) */
    uint64_t next_recheck_ns; /* tick thread: a quarantined segment's next try */
    uint64_t stat_due_ns;     /* CLOCK_MONOTONIC: the next transport->changed check */

    /* Read when a copy is made (a changed segment) or something happens. */
    void *work; /* hot copy being validated, with room for its folded shards (mv_seg_fold) */
    uint32_t work_cap;
    uint32_t pub_len;    /* the published copy's hot bytes */
    uint32_t pub_cap;    /* its buffer's bytes (hot and folded) */
    uint64_t read_bytes; /* moved by the transport for this segment (atomic) */
    uint64_t heartbeat_ns, read_errors, torn;
    uint64_t busy_since_ns; /* CLOCK_REALTIME when the catalog went busy (odd generation) */
    uint8_t *pub_omit;      /* per metric index: 1 = no consistent copy, omit it */
    size_t pub_nomit;
    uint32_t pub_stale, pub_omitted;
    mv_seg_reason reason;
    char detail[192];
    char *id;
    mv_seg_label *labels;
    size_t nlabels;
    mv_seg_label *pod_labels; /* the pod's Kubernetes labels (for selectors), under mu */
    size_t npod_labels;
    uint64_t size;
    void *full;                            /* whole-segment buffer for catalog reads */
    uint64_t hdr2[MV_SEG_HEADER_SIZE / 8]; /* header re-read after a catalog copy */
    uint64_t fail_since_ns;
    /* Torn histograms: the last consistent words of every histogram (laid out
     * like the hot area), which metric indexes have them, and since when each
     * has failed to copy consistently (0 = its last copy was fine). Indexes
     * survive catalog appends (records are never moved); a new instance
     * (re-format) clears them. */
    void *good;
    uint32_t good_cap;
    uint8_t *have_good, *omit_work;
    uint64_t *torn_since;
    size_t nmet_cap;
    uint64_t good_instance;
    size_t good_tombs;               /* tombstones of the catalog the torn state is indexed by */
    const mv_seg_catalog *nhist_cat; /* the catalog nhist was counted for */
    size_t nhist;                    /* its histograms: none, no torn-copy work per tick */
} seg;

/* End of the tick-hot fields of a seg. */
#define SEG_HOT_END offsetof(seg, work)

typedef struct tick_item {
    struct seg *s;
    uint32_t len; /* hot bytes to read; 0 for a `same` read (nothing to copy) */
} tick_item;

/* One tick worker's scratch. w[0] .. w[nw-1] are the tick threads (w[0] the one mv_coll_start
 * starts, the others helpers started by mv_coll_create); w[nw] is mv_coll_tick's caller's.
 * Only its own thread touches it, and grows it (to the chunk it takes). */
typedef struct tick_worker {
    struct mv_coll *c;
    pthread_t thread;
    int started;
    tick_item *items;
    mv_coll_read *reqs;
    struct seg **mine; /* the chunk's segments this worker claimed */
    size_t cap;
    uint64_t torn; /* torn-histogram retries in the current chunk */
} tick_worker;

/* The segments ticks read: a copy of the table's list, newest first, holding a reference on
 * each; made again by the first tick after the list changed, and shared by the ticks through
 * one reference each (not one per segment per tick). */
typedef struct tick_list {
    int refs; /* atomic */
    size_t n;
    struct seg *v[];
} tick_list;

/* A tick: its segments (the tick list it holds a reference on), the next one to take,
 * and who still works on it. Ticks may overlap: a tick whose segments have all been taken
 * no longer holds back the next one, even while a worker that was stopped mid-chunk (the
 * host took its CPU) still holds some of them; the next tick defers those (seg.busy). */
typedef struct tick_run {
    tick_list *list;
    struct seg *const *segs; /* list->v */
    size_t n;
    size_t next;             /* atomic: the next segment to take */
    size_t holders;          /* under wmu: workers inside the run */
    int live;                /* under wmu: 0 free, 1 open or held, 2 ending (references going) */
    uint64_t gen;            /* under wmu: bumped when the run ends */
    uint64_t due_ns;         /* its scheduled start (CLOCK_MONOTONIC); 0 unscheduled */
    uint64_t start_ns;       /* when it started */
    uint64_t missed;         /* scheduled starts it came too late for */
    uint64_t torn, deferred; /* atomic */
} tick_run;

/* Ticks open at once: one running, and the ones workers stopped mid-chunk still hold. */
#define TICK_RUNS 4

struct mv_coll {
    mv_coll_opts o;
    pthread_mutex_t mu; /* protects the list and stats */
    seg **segs;         /* the table, oldest first (walks go newest first) */
    size_t nsegs, segs_cap;
    mv_coll_stats stats;
    int running;             /* under mu: mv_coll_start ran */
    tick_list *tlist;        /* under mu: the ticks' list (a reference of its own); NULL none yet */
    int tlist_stale;         /* under mu: the table's list changed since tlist was made */
    mv_coll_drop_fn drop_fn; /* under mu */
    mv_coll_read_fn read_fn; /* atomic pointer: the live views' read hook */
    void *read_arg;
    int read_busy; /* atomic: read hook calls in flight */
    void *drop_arg;
    /* Tick workers: w[0 .. nw-1] run ticks, w[nw] is mv_coll_tick's caller's scratch. Once
     * started (sched), every tick worker sleeps on wgo (CLOCK_MONOTONIC) until the next
     * scheduled start, and whichever is awake then starts the tick; the others join it, and
     * take chunks of its segments until none is left. No tick waits for a worker that holds
     * a chunk of an earlier one. A segment added while the ticks are longer than
     * MV_COLL_EARLY_NS sets tick_wake for an early tick (at most one per that time). */
    tick_worker *w;
    size_t nw;
    pthread_mutex_t wmu;
    pthread_cond_t wgo;       /* CLOCK_MONOTONIC: a tick to join or start, a free run, stop */
    pthread_cond_t wdone;     /* a run ended */
    tick_run runs[TICK_RUNS]; /* under wmu but for their atomic fields */
    int wstop;                /* under wmu */
    int sched;                /* under wmu: scheduled ticks (mv_coll_start) */
    uint64_t sched_next;      /* under wmu: the next scheduled start */
    int tick_wake;            /* under wmu */
    uint64_t early_at;        /* under wmu: the last early tick's start */
    pthread_mutex_t sync_mu;  /* one mv_coll_tick at a time */
    uint64_t wseq;            /* atomic, bumped under wmu: what polling workers watch */
    uint64_t poll_ns;         /* atomic: CPU time tick workers spent polling (tick_poll) */
    /* Serialise reads through transports that are not `concurrent` (e.g. one
     * RDMA connection) when there are several workers. */
    pthread_mutex_t read_mu[READ_LOCKS];
};

/* ---- mv_collect.c ---------------------------------------------------------------- */

/* A catalog reference: drop one (frees the catalog with the last), take one (NULL-safe). */
void mv_coll__cat_put(cat_ref *r);
cat_ref *mv_coll__cat_get(cat_ref *r);
/* Reads through the segment's transport and counts the bytes that arrived. */
void mv_coll__seg_read(mv_coll *c, seg *s, mv_coll_read *rq, size_t n);
/* Removes (up to all) segments for which pred(seg, arg) holds; returns how many. */
size_t mv_coll__remove_if(mv_coll *c, int (*pred)(const seg *, const void *), const void *arg);
/* The predicate "is this very object": arg is a seg *. */
int mv_coll__seg_is(const seg *s, const void *arg);
/* Drops a reference to a segment (frees it with the last). */
void mv_coll__seg_put(seg *s);
/* Drops a reference to a tick list (and, with the last, its references to the segments). */
void mv_coll__list_put(tick_list *l);
/* The table's tick list with a reference for the caller (mu held), made again first if the
 * table changed since the last one; *old gets the list it replaced, for the caller to drop
 * (mv_coll__list_put) once mu is released. NULL when there is no list and no memory to make
 * one (a table with segments) — with an empty table, an empty list. */
tick_list *mv_coll__list_ref(mv_coll *c, tick_list **old);
/* One worker's share of a tick: prepare, read and finish `n` segments it claimed. */
void mv_coll__tick_chunk(mv_coll *c, tick_worker *w, seg *const *segs, size_t n);

/* Counts one more in a per-segment counter that only the segment's tick worker of the
 * moment writes (the one that claimed it, seg.busy) and snapshots read: a relaxed load and store,
 * no locked instruction on the tick's path. */
static inline void mv_coll__count(uint64_t *n)
{
    __atomic_store_n(n, __atomic_load_n(n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* ---- mv_collect_probe.c: the probe ---------------------------------------------- */

/* Whether a backed-off segment changed since its published copy (1 also when the probe
 * failed or its catalog was dropped; 0 without a probe or a published copy). */
int mv_coll__probe_changed(const mv_coll *c, seg *s);
/* Whether a due segment is unchanged since its whole published copy (a `same` read). */
int mv_coll__probe_same(const mv_coll *c, seg *s);
/* Takes the probe's words from the copy just published, if its offsets are known. */
void mv_coll__probe_take(seg *s);

/* ---- mv_collect_torn.c: torn histograms ------------------------------------------ */

/* Re-reads the torn histogram records of the validated copy in s->work and
 * serves or omits those still torn; returns the number of torn records and
 * sets how many are stale and omitted. */
uint64_t mv_coll__fix_torn(mv_coll *c, seg *s, const mv_seg_catalog *cat, uint64_t now,
                           uint32_t *stale, uint32_t *omitted);

/* ---- mv_collect_workers.c: the tick-worker pool ---------------------------------- */

/* Reads through a transport, one caller at a time unless it says it is
 * concurrent. */
void mv_coll__read(mv_coll *c, const mv_coll_transport *t, mv_coll_read *rq, size_t n);
/* Initialises the pool's locks and scratch and starts the helper workers. */
int mv_coll__start_workers(mv_coll *c);
/* Turns scheduled ticks on and starts the tick thread (w[0]). */
int mv_coll__start_ticks(mv_coll *c);
/* Stops the tick thread and the helpers; every open tick ends first. */
void mv_coll__stop_workers(mv_coll *c);
/* Frees the workers' scratch, the runs and the pool's locks (after mv_coll__stop_workers). */
void mv_coll__free_workers(mv_coll *c);
/* Asks for an early tick (a segment was added while ticks are long). */
void mv_coll__wake_early(mv_coll *c);

#endif
