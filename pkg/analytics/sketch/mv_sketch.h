/* mv_sketch: relative-error quantile sketch (DDSketch-style log buckets) with a sparse, paged
 * store. */
#ifndef MV_SKETCH_H
#define MV_SKETCH_H

#include <stddef.h>
#include <stdint.h>

/*
 * Guarantee: for every q, mv_sketch_quantile() returns a value y with
 * |y - x| <= alpha * |x|, where x is the element of rank floor(q * (count - 1))
 * (0-based) of the sorted input, provided that
 *   - |x| >= MV_SKETCH_MIN_INDEXABLE (smaller magnitudes are kept as zero), and
 *   - x's bucket was not collapsed (see "Store" below).
 * Values added with mv_sketch_add_buckets() carry the pod histogram's bucket
 * error instead (see there).
 *
 * Index mapping: x = 2^e * (1 + s), s in [0, 1), is mapped to the key
 * floor(M * (e + P(s))) with the cubic P(s) = (10/7) s - (3/5) s^2 + (6/35) s^3.
 * P(0) = 0, P(1) = 1 and (1 + s) P'(s) = 10/7 + (2s/35)(3s - 2)^2 >= 10/7, so
 * one key spans at most (7/10)/M in ln(x). With M = 7 / (10 ln gamma) a bucket's
 * bounds satisfy hi/lo <= gamma = (1 + alpha)/(1 - alpha), and the bucket's
 * representative 2 lo hi / (lo + hi) is within (gamma - 1)/(gamma + 1) = alpha
 * of any value in it. The mapping needs only bit operations and one cubic; it
 * uses about 1% more buckets than the exact log mapping (7 / (10 ln 2) = 1.0099).
 * alpha is shrunk by a factor (1 - 1e-7) internally, which absorbs the rounding
 * of the index computation, so the bound above holds in floating point.
 *
 * Store: sparse, in pages of 16 keys allocated on first use. Each sign has a
 * page directory spanning at least 64 octaves (2^64 ~ 1.8e19 between the
 * lowest and highest magnitude kept; more when max_buckets asks for it) that
 * re-centres when the data move, and a budget of max_buckets keys
 * (max_buckets / 16 pages). Only two things collapse buckets, and then
 * always the LOWEST-magnitude ones, into the lowest kept bucket: a range wider
 * than the directory, or a spent page budget. Counts, count, sum, min and
 * max stay exact, quantiles above the collapsed bucket keep the alpha bound,
 * and quantiles falling in it are over-estimated in magnitude.
 * mv_sketch_collapses() counts these events (since create).
 * With alpha = 0.01 one octave is ~35 keys (~116 per decade): 1 ns .. 1 h
 * (12.6 decades) needs ~1,460 keys, i.e. ~93 pages.
 *
 * Memory: a sign's page directory is allocated with its first value (4
 * slots) and doubles when the values kept need a wider window, up to the
 * span above; a steady value uses one page and a 4-slot directory (320
 * bytes with the header). mv_sketch_memory_used(sk) is what is allocated
 * now (pages and directories are kept across resets, so after the first
 * window of a steady metric nothing is allocated), mv_sketch_memory_bytes(cfg)
 * the most it can grow to: 2 * (2 * dir_len + 8 * max_buckets) + a header.
 * Adds allocate only when a page or a wider directory is first needed
 * (never after the budget is reached); a failed allocation collapses instead.
 *
 * Threading: a sketch is not thread-safe; use one per thread or lock outside.
 * Ownership: mv_sketch_create allocates; the caller frees with mv_sketch_destroy.
 */

#define MV_SKETCH_MIN_INDEXABLE 2.2250738585072014e-308 /* DBL_MIN */

typedef struct mv_sketch mv_sketch;

typedef struct mv_sketch_config {
    double alpha;         /* relative accuracy, in [1e-4, 0.5]; default 0.01 */
    uint32_t max_buckets; /* key budget per sign, in [16, 1 << 20]; default 2048 */
} mv_sketch_config;

/* Fills the defaults (alpha 0.01, 2048 buckets per sign). */
void mv_sketch_config_default(mv_sketch_config *cfg);

/* Returns NULL if cfg is valid, else a sentence saying what to fix. */
const char *mv_sketch_config_check(const mv_sketch_config *cfg);

/* Most bytes one sketch with this config can own (0 if the config is invalid). */
size_t mv_sketch_memory_bytes(const mv_sketch_config *cfg);

/* Creates an empty sketch (cfg NULL = defaults). Returns 0, -EINVAL (call
 * mv_sketch_config_check for the reason) or -ENOMEM. */
int mv_sketch_create(const mv_sketch_config *cfg, mv_sketch **out);
void mv_sketch_destroy(mv_sketch *sk);

/* Adds one value / `count` copies of a value. Returns 0, or -EDOM for NaN or
 * an infinity (not added). Allocates only when a new page of keys is first
 * touched (see "Store"). */
int mv_sketch_add(mv_sketch *sk, double value);
int mv_sketch_add_n(mv_sketch *sk, double value, uint64_t count);

/* One add of a batch (mv_sketch_add_many); key_ is scratch. */
typedef struct mv_sketch_add_req {
    mv_sketch *sk;
    double value;
    uint64_t count;
    uint32_t key_;
} mv_sketch_add_req;

/* mv_sketch_add_n(req[i].sk, req[i].value, req[i].count) for every i, in order
 * (the same contents), for many sketches that are cold in cache: the headers,
 * then the directory slots, then the pages are fetched stage by stage across
 * the batch, so their misses overlap instead of following one another, and
 * each key is computed once. A sketch may appear more than once. Returns the
 * bytes these adds allocated (mv_sketch_memory_used grew by that much). */
size_t mv_sketch_add_many(mv_sketch_add_req *req, size_t n);

/* One sketch's share of a batch (mv_sketch_add_runs): value[i] added count[i] times, for i
 * in [0, n), in that order. */
typedef struct mv_sketch_runs {
    mv_sketch *sk;
    const double *value;
    const uint32_t *count;
    uint32_t n;
} mv_sketch_runs;

/* mv_sketch_add_n(r[k].sk, r[k].value[i], r[k].count[i]) for every k and, within it, every
 * i, in that order: the same contents, sum included to the bit. For many sketches each given
 * a few values, cold in cache: the headers of a chunk of them, then the directory slots of
 * their values' keys, then the pages are fetched stage by stage, so that the misses of a
 * stage overlap, and each sketch's header is read once for all its values. A sketch may
 * appear more than once. Returns the bytes these adds allocated (mv_sketch_memory_used grew
 * by that much). */
size_t mv_sketch_add_runs(const mv_sketch_runs *r, size_t nr);

/* Adds a pod-written explicit-bucket histogram delta: `bounds` holds nbounds
 * strictly increasing finite upper bounds, `counts` holds nbounds + 1
 * NON-cumulative counts (counts[i] for (bounds[i-1], bounds[i]], the last for
 * (bounds[nbounds-1], +Inf)). Each bucket's count is attributed to one value:
 * 2 lo hi / (lo + hi) for a bucket of one sign (relative error at most
 * (hi - lo)/(hi + lo) for the values it stood for), the midpoint for a bucket
 * straddling zero, bounds[0] for the first open bucket and bounds[nbounds-1]
 * for the +Inf bucket (there only the bound is known). The resulting quantile
 * error is therefore bounded by the pod's bucket width (plus alpha), not by
 * alpha alone. If `sum` is finite it replaces the representative-based sum
 * contribution, so mv_sketch_sum stays exact. Returns 0, -EINVAL for bad
 * bounds (nothing is added), or -EDOM. */
int mv_sketch_add_buckets(mv_sketch *sk, const double *bounds, size_t nbounds,
                          const uint64_t *counts, double sum);

/* Adds `src` into `dst`. Both must have the same alpha (same key mapping);
 * returns -EINVAL otherwise. dst's own bucket limit applies. */
int mv_sketch_merge(mv_sketch *dst, const mv_sketch *src);

/* Empties the sketch (keeps the config and memory). */
void mv_sketch_reset(mv_sketch *sk);

/* Quantile q in [0, 1]; NaN if the sketch is empty or q is out of range. */
double mv_sketch_quantile(const mv_sketch *sk, double q);

/* Quantiles qs[0..nq) (ascending, nq <= 16) into out, in one walk over the
 * buckets: the same values as mv_sketch_quantile for each, at the cost of
 * one. Returns 0 (out all NaN when empty) or -EINVAL (out of range, not
 * ascending, nq > 16). */
int mv_sketch_quantiles(const mv_sketch *sk, const double *qs, size_t nq, double *out);

uint64_t mv_sketch_count(const mv_sketch *sk);
double mv_sketch_sum(const mv_sketch *sk);
double mv_sketch_min(const mv_sketch *sk); /* NaN when empty */
double mv_sketch_max(const mv_sketch *sk); /* NaN when empty */
/* Number of non-empty buckets (both signs, zero bucket included). */
uint32_t mv_sketch_bucket_count(const mv_sketch *sk);
/* Nonzero once a bucket limit has forced a collapse since the last reset. */
int mv_sketch_collapsed(const mv_sketch *sk);
/* Collapse events since create (not cleared by reset). */
uint64_t mv_sketch_collapses(const mv_sketch *sk);
/* Bytes the sketch holds now (header, directories, pages allocated so far). */
size_t mv_sketch_memory_used(const mv_sketch *sk);

/* ---- Buckets and native histograms ------------------------------------------------------------
 * A non-empty bucket of the sketch, as mv_sketch_foreach gives it: key (signed, unbiased: the
 * magnitudes of the bucket are [lo, hi)), sign (+1, -1; 0 for the zero bucket, whose lo, hi and
 * rep are 0), its representative rep (signed: the value mv_sketch_quantile reports for it,
 * before the clamp to [min, max]) and its count. */
typedef struct mv_sketch_bucket {
    int32_t key;
    int32_t sign;
    double lo, hi;
    double rep;
    uint64_t count;
} mv_sketch_bucket;

/* Calls fn for each non-empty bucket in increasing value order: negative buckets (most
 * negative first), the zero bucket, positive buckets. Stops at fn's first nonzero return and
 * returns it; 0 when every bucket was given. */
int mv_sketch_foreach(const mv_sketch *sk, int (*fn)(void *arg, const mv_sketch_bucket *b),
                      void *arg);

/* Values of magnitude at most this go to a native histogram's zero bucket (Prometheus'
 * default zero threshold). */
#define MV_SKETCH_NATIVE_ZERO 0x1p-128

/* Index of the native-histogram bucket of schema s (clamped to -4..8) holding magnitude x > 0:
 * bucket i holds (2^((i-1) 2^-s), 2^(i 2^-s)]. */
int32_t mv_sketch_native_index(double x, int32_t schema);

/* One bucket of a native histogram (mv_sketch_to_native). */
typedef struct mv_sketch_nbucket {
    int32_t index;
    uint32_t negative; /* 1: the bucket of -value */
    uint64_t count;
} mv_sketch_nbucket;

/* Maps the sketch into a native histogram of schema s: each non-empty bucket's count goes to
 * the native bucket holding its representative (rep), a representative of magnitude at most
 * MV_SKETCH_NATIVE_ZERO (and the zero bucket) to *zero. Writes the buckets in increasing value
 * order (negative ones by decreasing index, then positive ones by increasing index), each
 * once, into out[0..cap); returns how many there are (more than cap: only cap were written;
 * call again with room for that many). Error bound: docs/exposition.md, "Gauge sketches". */
size_t mv_sketch_to_native(const mv_sketch *sk, int32_t schema, mv_sketch_nbucket *out, size_t cap,
                           uint64_t *zero);

#endif
