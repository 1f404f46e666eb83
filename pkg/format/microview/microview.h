/* microview.h: the pod-side API of libmicroview.
 *
 * A process opens the shared-memory segment it was given (MICROVIEW_SEGMENT),
 * registers metrics once, and then updates them with one or a few plain
 * stores: no syscalls, no locks and no allocation on the update path. A
 * collector reads the segment from outside the process (RDMA READ or a
 * same-host copy); the process never serves or renders anything.
 *
 * Threads: counter add/inc, gauge set/add and histogram observe are safe from
 * any number of threads on the same metric. The *_local variants are cheaper
 * and correct only when a single thread updates that metric.
 *
 * Errors: functions returning int give MV_OK (0) or a negative MV_ERR_* code;
 * mv_strerror() names the code and mv_errdetail() explains the last failure of
 * the calling thread. A failed registration still yields a usable handle that
 * writes to a private scratch word, so an application never crashes because
 * its metrics could not be set up.
 */
#ifndef MICROVIEW_H
#define MICROVIEW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MV_API __attribute__((visibility("default")))
#else
#define MV_API
#endif

#define MICROVIEW_ENV_SEGMENT "MICROVIEW_SEGMENT"
/* Value slot placement, read by mv_open: unset or "lines" (the default) starts every new
 * metric's value on its own 64-byte cache line, so that threads updating different metrics
 * never contend for a line (while the value area has room to spare; see
 * docs/segment-format.md section 5.1); "packed" places values back to back, which makes the
 * collector's per-tick copy of counters and gauges 8 times smaller but lets neighbouring
 * metrics updated from different threads slow each other down. */
#define MICROVIEW_ENV_PLACEMENT "MICROVIEW_PLACEMENT"

/* Shards for the metrics a process registers (see mv_set_shards): "1" (the default) gives a
 * metric one value; a power of two from 2 to 64 gives each metric that many per-thread
 * copies of its value, on lines of their own, summed by every reader. */
#define MICROVIEW_ENV_SHARDS "MICROVIEW_SHARDS"

enum {
    MV_OK = 0,
    MV_ERR_NOENV = -1,     /* MICROVIEW_SEGMENT is not set */
    MV_ERR_NOSEGMENT = -2, /* the segment file does not exist or cannot be opened */
    MV_ERR_FORMAT = -3,    /* the file is not a valid MicroView segment */
    MV_ERR_FULL = -4,      /* no room left in the segment's value or catalog area */
    MV_ERR_NAME = -5,      /* invalid metric or label name */
    MV_ERR_INVALID = -6,   /* other invalid argument (help, unit, buckets, NULL) */
    MV_ERR_CONFLICT = -7,  /* name already registered with another type or buckets */
    MV_ERR_BUSY = -8,      /* another process held the registration lock too long */
    MV_ERR_NOMEM = -9,     /* out of memory */
    MV_ERR_IO = -10,       /* mmap/stat/lock failed (see mv_errdetail) */
};

typedef struct mv_segment mv_segment;
typedef struct mv_histogram mv_histogram;

typedef struct mv_label {
    const char *key;
    const char *value;
} mv_label;

/* A counter or gauge handle: a pointer to its 8-byte value word, or, for a sharded metric,
 * to its first shard with log2 of the shard count in the pointer's low 3 bits. Opaque: use
 * the update functions below. */
typedef struct mv_counter {
    uint64_t *slot;
} mv_counter;
typedef struct mv_gauge {
    uint64_t *slot;
} mv_gauge;
/* A fractional counter (record type 4, docs/segment-format.md section 5.3): its slot holds
 * an integral u64 word and a binary64 word for the fractional adds. Same handle layout. */
typedef struct mv_counter_f {
    uint64_t *slot;
} mv_counter_f;

/* How full a segment is (docs/segment-format.md section 8.1), from its header. */
typedef struct mv_usage {
    uint64_t segment_size;
    uint32_t values_used, values_size;   /* value area: slots */
    uint32_t catalog_used, catalog_size; /* catalog area: records */
    uint32_t records;                    /* catalog records, tombstones included */
    double fullness;                     /* the larger of the two used/size ratios, 0..1 */
} mv_usage;

/* Opens the segment named by $MICROVIEW_SEGMENT. Free with mv_close. */
MV_API int mv_open_from_env(mv_segment **out);

/* Opens (and, if it is still all zeros, formats) the segment file at `path`.
 * The file's size is the segment's size. Free with mv_close. */
MV_API int mv_open(const char *path, mv_segment **out);

/* Unmaps the segment and frees histogram handles. Values already written stay
 * in the segment. NULL is accepted. */
MV_API void mv_close(mv_segment *s);

/* Stores the current time as the writer heartbeat (one store). */
MV_API void mv_heartbeat(mv_segment *s);

/* Sharding (docs/segment-format.md section 5.2): the metrics this process registers on `s`
 * after the call keep `shards` copies of their value, one cache line (a histogram: its
 * lines) each. A thread updates its own copy and readers sum them, so threads updating one
 * metric at once do not wait for each other's cache line. It costs the collector `shards`
 * times the bytes per read of that metric: shard the few metrics many threads update at
 * once. `shards` is 1 (off, the default unless $MICROVIEW_SHARDS says otherwise) or a power
 * of two from 2 to 64; anything else is MV_ERR_INVALID. A series that is already registered
 * keeps the shards it was registered with. A gauge's `set` on a sharded gauge stores into one
 * copy and zeroes the others: a reader copying the value meanwhile can see a mix. */
MV_API int mv_set_shards(mv_segment *s, unsigned shards);

/* Registration: `help` and `unit` may be NULL; `labels` has `nlabels`
 * constant labels of this series. Registering the same name and labels again
 * returns the existing slot (values are kept, e.g. across a restart). */
MV_API int mv_counter_register(mv_segment *s, const char *name, const char *help, const char *unit,
                               const mv_label *labels, size_t nlabels, mv_counter *out);
MV_API int mv_gauge_register(mv_segment *s, const char *name, const char *help, const char *unit,
                             const mv_label *labels, size_t nlabels, mv_gauge *out);
/* A fractional counter: what a Prometheus client's float counter needs (Add(0.25) counts
 * 0.25). Its integral adds cost what mv_counter_add costs; a fraction, a compare-and-swap. */
MV_API int mv_counter_f_register(mv_segment *s, const char *name, const char *help,
                                 const char *unit, const mv_label *labels, size_t nlabels,
                                 mv_counter_f *out);
/* `bounds` are the finite upper bounds (le) of the buckets, strictly
 * increasing; a +Inf bucket is implied. The handle is owned by `s`. */
MV_API int mv_histogram_register(mv_segment *s, const char *name, const char *help,
                                 const char *unit, const mv_label *labels, size_t nlabels,
                                 const double *bounds, size_t nbounds, mv_histogram **out);

/* Deletes the live series `name` with these labels, in the order it was registered with
 * (docs/segment-format.md section 6.6): appends its tombstone, so readers drop the series.
 * Returns 1 when a series was deleted, 0 when no live series has that name and labels, or a
 * negative MV_ERR_* (MV_ERR_FULL: no catalog room for the tombstone). Handles to the deleted
 * series stay valid; their updates are no longer seen. Registering the series again creates
 * it anew from zero (readers see a counter reset). Deleting frees no segment space. */
MV_API int mv_delete(mv_segment *s, const char *name, const mv_label *labels, size_t nlabels);

/* Fills `out` with `count` bounds start, start*factor, start*factor^2, ...
 * Returns MV_ERR_INVALID unless start > 0, factor > 1 and count in [1, 160]. */
MV_API int mv_exponential_buckets(double start, double factor, size_t count, double *out);

MV_API const char *mv_strerror(int err);
MV_API const char *mv_errdetail(void);

/* Segment facts, for tools. */
MV_API size_t mv_segment_size(const mv_segment *s);
MV_API const char *mv_segment_path(const mv_segment *s);
/* How full the segment is now: MV_OK, or MV_ERR_INVALID for NULL arguments. */
MV_API int mv_segment_usage(const mv_segment *s, mv_usage *out);

/* ---- Updates ------------------------------------------------------------ */

/* Internal: this thread's shard number, one per thread in the process, assigned on its first
 * update of a sharded metric, so that threads take shards in turn (each translation unit
 * keeps a copy in mv__thread_shard). */
MV_API unsigned mv__shard_id(void);
MV_API void mv__gauge_set_sharded(mv_gauge g, double v);
MV_API int mv__counter_f_add_slow(mv_counter_f c, double v);

static inline unsigned mv__thread_shard(void)
{
    static __thread unsigned id; /* __thread: also valid in C++ */
    if (__builtin_expect(id == 0, 0))
        id = mv__shard_id();
    return id;
}

/* The value word a thread updates: the handle's own word, or its shard's (8 words a line). */
static inline uint64_t *mv__word(uint64_t *slot)
{
    uintptr_t p = (uintptr_t)slot, k = p & 7u;
    if (__builtin_expect(k == 0, 1))
        return slot;
    return (uint64_t *)(p - k) + (size_t)(mv__thread_shard() & ((1u << k) - 1u)) * 8u;
}

/* Adds `n` to a counter: one atomic add, safe from many threads. */
static inline void mv_counter_add(mv_counter c, uint64_t n)
{
    __atomic_fetch_add(mv__word(c.slot), n, __ATOMIC_RELAXED);
}

static inline void mv_counter_inc(mv_counter c)
{
    __atomic_fetch_add(mv__word(c.slot), 1, __ATOMIC_RELAXED);
}

/* Single-writer add: a load and a store, no bus lock. Only one thread may
 * update this counter. */
static inline void mv_counter_add_local(mv_counter c, uint64_t n)
{
    uint64_t *w = mv__word(c.slot);
    __atomic_store_n(w, __atomic_load_n(w, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* Adds 1 to a fractional counter: one atomic add to its integral word. */
static inline void mv_counter_f_inc(mv_counter_f c)
{
    __atomic_fetch_add(mv__word(c.slot), 1, __ATOMIC_RELAXED);
}

/* Adds `v` to a fractional counter; safe from many threads. An integral amount is one atomic
 * add to the integral word, any other a compare-and-swap loop on the fraction word. NaN and
 * negative amounts are refused with MV_ERR_INVALID (nothing is stored), as client_golang and
 * prometheus_client refuse them; +Inf is stored (the counter is +Inf from then on). */
static inline int mv_counter_f_add(mv_counter_f c, double v)
{
    if (v >= 0 && v < 18446744073709551616.0) {
        uint64_t u = (uint64_t)v;
        if (!((double)u < v)) { /* u <= v always: equal, so v is integral */
            __atomic_fetch_add(mv__word(c.slot), u, __ATOMIC_RELAXED);
            return MV_OK;
        }
    }
    return mv__counter_f_add_slow(c, v);
}

/* Sets a gauge: one 8-byte store. Safe from many threads (last store wins). NaN is stored. */
static inline void mv_gauge_set(mv_gauge g, double v)
{
    uint64_t bits;
    if (__builtin_expect(((uintptr_t)g.slot & 7u) != 0, 0)) {
        mv__gauge_set_sharded(g, v);
        return;
    }
    if (__builtin_expect(__builtin_isnan(v), 0)) /* any NaN: the one quiet NaN (spec 9.5) */
        v = __builtin_nan("");
    memcpy(&bits, &v, sizeof bits);
    __atomic_store_n(g.slot, bits, __ATOMIC_RELAXED);
}

/* Adds to a gauge with a compare-and-swap loop; safe from many threads. */
MV_API void mv_gauge_add(mv_gauge g, double delta);

/* Read back what this process wrote, as a reader sums it: the value of a counter or a gauge
 * (a sharded one's shards added up, each loaded atomically). */
MV_API uint64_t mv_counter_value(mv_counter c);
MV_API double mv_counter_f_value(mv_counter_f c);
MV_API double mv_gauge_value(mv_gauge g);

/* Records one observation. NaN counts, as with the Prometheus clients: in the +Inf bucket,
 * and the sum becomes NaN (docs/segment-format.md section 9.5). Safe from many threads; the
 * segment format lets a reader detect and skip a copy caught mid-update. */
MV_API void mv_histogram_observe(mv_histogram *h, double v);

/* Reads a histogram back as a reader sums it: `count`, `sum` and `nbounds + 1` non-cumulative
 * bucket counts into `buckets` (the last is the +Inf bucket; at most 161). Returns the number
 * of finite bounds and points `*bounds` (when not NULL) at them. A handle whose registration
 * failed reads as empty with no bounds. */
MV_API size_t mv_histogram_read(const mv_histogram *h, uint64_t *count, double *sum,
                                uint64_t *buckets, const double **bounds);

#ifdef __cplusplus
}
#endif
#endif
