/* mv_sketch: DDSketch-style quantile sketch with a cubic log2 approximation for the keys. */
#include "mv_sketch.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cubic approximation of log2(1 + s) on [0, 1]; see the header for the proof. */
#define P_C1         (10.0 / 7.0)
#define P_C2         (-3.0 / 5.0)
#define P_C3         (6.0 / 35.0)
#define P_MIN_SLOPE  (10.0 / 7.0) /* min over [0,1] of (1 + s) P'(s) */
#define ALPHA_SHRINK (1.0 - 1e-7)
#define KEY_SPAN     1100 /* e + P(s) lies in [-1022, 1024] for normal doubles */

#define PAGE_SHIFT 4
#define PAGE       (1u << PAGE_SHIFT) /* keys per page */
#define COVER_OCT  64                 /* octaves the page directory spans at least */
#define MAX_PAGES  65535u             /* directory entries are uint16 (0 = no page) */
#define DIR_INIT   4                  /* first directory: 4 pages, 64 keys (~1.8 octaves) */

/*
 * One sign's sparse store. Keys are biased (non-negative); key k lives in
 * page k >> PAGE_SHIFT. `dir` is a window of dir_len page slots starting at
 * page lo_page: dir[i] = 1 + index into `pool` (pages of PAGE counts), or 0.
 * The directory is allocated on the first value of its sign with DIR_INIT
 * slots and doubles when the values kept need a wider window, up to dir_max
 * slots (the span the header promises); a sign never seen costs nothing.
 * Pages are allocated on first use (the pool grows by doubling up to
 * max_pages) and kept across resets, so a steady metric stops allocating
 * after its first window; freed pages go on a free list threaded through
 * their first count.
 */
typedef struct store {
    uint16_t *dir;
    uint64_t *pool;
    uint32_t lo_page;
    uint32_t dir_len;
    uint64_t total;
    uint32_t dir_max;
    uint32_t pool_cap;  /* pages allocated in pool */
    uint32_t pool_next; /* pages of pool handed out since the last reset */
    uint32_t free_head; /* 1 + first free page, 0 = none */
    uint32_t pages;     /* pages in use */
} store;

/* The fields an add of a positive value touches come first: with the header
 * 64-byte aligned they are its first two cache lines (mv_sketch_prefetch). */
struct mv_sketch {
    double mult;   /* M: keys per unit of e + P(s) */
    double bias_d; /* keeps M * (e + P(s)) + bias positive so truncation floors */
    uint64_t count;
    double sum;
    double min;
    double max;
    store pos;
    uint64_t zero_count;
    double alpha;
    int32_t bias;
    uint32_t max_pages; /* per sign */
    int collapsed;
    uint64_t collapses; /* values or pages folded into a lower bucket's neighbour */
    store neg;
};

static uint32_t dir_len_for(double mult, uint32_t max_buckets)
{
    uint32_t need = (uint32_t)ceil(COVER_OCT * mult / PAGE) + 2;
    uint32_t budget = (max_buckets + PAGE - 1) / PAGE + 2;
    uint32_t n = need > budget ? need : budget;
    return n;
}

static double mult_for(double alpha)
{
    double a = alpha * ALPHA_SHRINK;
    double gamma_ln = log1p(2.0 * a / (1.0 - a)); /* ln((1 + a) / (1 - a)) */
    return 1.0 / (P_MIN_SLOPE * gamma_ln);
}

static uint32_t pages_for(uint32_t max_buckets)
{
    uint32_t p = (max_buckets + PAGE - 1) / PAGE;
    return p > MAX_PAGES ? MAX_PAGES : p;
}

void mv_sketch_config_default(mv_sketch_config *cfg)
{
    cfg->alpha = 0.01;
    cfg->max_buckets = 2048;
}

const char *mv_sketch_config_check(const mv_sketch_config *cfg)
{
    if (cfg == NULL)
        return NULL;
    if (!(cfg->alpha >= 1e-4 && cfg->alpha <= 0.5))
        return "alpha (relative accuracy) must be within [1e-4, 0.5]";
    if (cfg->max_buckets < 16 || cfg->max_buckets > (1u << 20))
        return "max_buckets must be within [16, 1048576]";
    return NULL;
}

size_t mv_sketch_memory_bytes(const mv_sketch_config *cfg)
{
    mv_sketch_config def;
    if (cfg == NULL) {
        mv_sketch_config_default(&def);
        cfg = &def;
    }
    if (mv_sketch_config_check(cfg) != NULL)
        return 0;
    size_t dir = dir_len_for(mult_for(cfg->alpha), cfg->max_buckets);
    return sizeof(mv_sketch) + 2 * (dir * sizeof(uint16_t) +
                                    (size_t)pages_for(cfg->max_buckets) * PAGE * sizeof(uint64_t));
}

size_t mv_sketch_memory_used(const mv_sketch *sk)
{
    return sizeof(mv_sketch) + (size_t)(sk->pos.dir_len + sk->neg.dir_len) * sizeof(uint16_t) +
           (size_t)(sk->pos.pool_cap + sk->neg.pool_cap) * PAGE * sizeof(uint64_t);
}

static void store_clear(store *st)
{
    if (st->pool_next)
        memset(st->pool, 0, sizeof(uint64_t) * PAGE * st->pool_next);
    if (st->dir_len)
        memset(st->dir, 0, sizeof(uint16_t) * st->dir_len);
    st->lo_page = 0;
    st->pool_next = 0;
    st->free_head = 0;
    st->pages = 0;
    st->total = 0;
}

int mv_sketch_create(const mv_sketch_config *cfg, mv_sketch **out)
{
    mv_sketch_config def;
    mv_sketch *sk;

    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (cfg == NULL) {
        mv_sketch_config_default(&def);
        cfg = &def;
    }
    if (mv_sketch_config_check(cfg) != NULL)
        return -EINVAL;
    sk = aligned_alloc(64, (sizeof(*sk) + 63) & ~(size_t)63);
    if (sk == NULL)
        goto fail_none;
    memset(sk, 0, sizeof(*sk));
    sk->alpha = cfg->alpha;
    sk->mult = mult_for(cfg->alpha);
    sk->bias = (int32_t)ceil(KEY_SPAN * sk->mult) + 1;
    sk->bias_d = (double)sk->bias;
    sk->max_pages = pages_for(cfg->max_buckets);
    uint32_t dl = dir_len_for(sk->mult, cfg->max_buckets);
    sk->pos.dir_max = dl;
    sk->neg.dir_max = dl;
    mv_sketch_reset(sk);
    *out = sk;
    return 0;

fail_none:
    return -ENOMEM;
}

void mv_sketch_destroy(mv_sketch *sk)
{
    if (sk == NULL)
        return;
    free(sk->pos.dir);
    free(sk->neg.dir);
    free(sk->pos.pool);
    free(sk->neg.pool);
    free(sk);
}

void mv_sketch_reset(mv_sketch *sk)
{
    store_clear(&sk->pos);
    store_clear(&sk->neg);
    sk->collapsed = 0;
    sk->count = 0;
    sk->zero_count = 0;
    sk->sum = 0.0;
    sk->min = INFINITY;
    sk->max = -INFINITY;
}

/* Biased key of a positive normal double: floor(M * (e + P(s))) + bias >= 0. */
static inline uint32_t ukey_of(const mv_sketch *sk, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof(bits));
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &mbits, sizeof(m));
    double s = m - 1.0;
    double f = (double)e + ((P_C3 * s + P_C2) * s + P_C1) * s;
    return (uint32_t)(f * sk->mult + sk->bias_d);
}

/* Inverse of P on [0, 1] (query path only). P is increasing and concave on
 * [0, 1] with P(s) >= s, so Newton's method from s = t lands left of the root
 * after one step and then climbs to it monotonically and quadratically
 * (P' in [0.74, 1.43], |P''| <= 1.2): 6 steps reach the last bits, where a
 * bisection needed 64. */
static double p_inverse(double t)
{
    double s = t;
    for (int i = 0; i < 6; i++) {
        double f = ((P_C3 * s + P_C2) * s + P_C1) * s - t;
        double d = (3.0 * P_C3 * s + 2.0 * P_C2) * s + P_C1;
        s -= f / d;
    }
    return s < 0.0 ? 0.0 : s > 1.0 ? 1.0 : s;
}

/* Smallest x whose e + P(s) equals f. */
static double f_inverse(double f)
{
    double e = floor(f);
    if (e >= 1024.0)
        return DBL_MAX;
    return ldexp(1.0 + p_inverse(f - e), (int)e);
}

/* Value reported for a biased key: 2 lo hi / (lo + hi), within alpha of [lo, hi]. */
static double key_value(const mv_sketch *sk, uint32_t ukey)
{
    int32_t key = (int32_t)ukey - sk->bias;
    double lo = f_inverse((double)key / sk->mult);
    double hi = f_inverse((double)(key + 1) / sk->mult);
    return 2.0 / (1.0 / lo + 1.0 / hi); /* same value, no overflow near DBL_MAX */
}

static inline uint64_t *page_at(const store *st, uint32_t page)
{
    uint32_t i = page - st->lo_page;
    if (i >= st->dir_len || st->dir[i] == 0)
        return NULL;
    return st->pool + (size_t)(st->dir[i] - 1) * PAGE;
}

/* Lowest page in use at or above `from` (window-relative index), or UINT32_MAX. */
static uint32_t lowest_page_from(const store *st, uint32_t from)
{
    for (uint32_t i = from; i < st->dir_len; i++)
        if (st->dir[i])
            return st->lo_page + i;
    return UINT32_MAX;
}

/* Takes a page for slot `page` (in the window); 0 or -ENOMEM (budget or malloc). */
static int page_alloc(const mv_sketch *sk, store *st, uint32_t page)
{
    uint32_t idx;
    if (st->pages >= sk->max_pages)
        return -ENOMEM;
    if (st->free_head) {
        idx = st->free_head - 1;
        st->free_head = (uint32_t)st->pool[(size_t)idx * PAGE];
        st->pool[(size_t)idx * PAGE] = 0;
    } else {
        if (st->pool_next == st->pool_cap) {
            uint32_t cap = st->pool_cap ? 2 * st->pool_cap : 1;
            if (cap > sk->max_pages)
                cap = sk->max_pages;
            uint64_t *np = realloc(st->pool, sizeof(uint64_t) * PAGE * cap);
            if (np == NULL)
                return -ENOMEM;
            memset(np + (size_t)st->pool_cap * PAGE, 0,
                   sizeof(uint64_t) * PAGE * (cap - st->pool_cap));
            st->pool = np;
            st->pool_cap = cap;
        }
        idx = st->pool_next++;
    }
    st->dir[page - st->lo_page] = (uint16_t)(idx + 1);
    st->pages++;
    return 0;
}

/* Frees the page in window slot i and returns the sum of its counts. */
static uint64_t page_free(store *st, uint32_t i)
{
    uint32_t idx = st->dir[i] - 1u;
    uint64_t *c = st->pool + (size_t)idx * PAGE, n = 0;
    for (uint32_t j = 0; j < PAGE; j++)
        n += c[j];
    memset(c, 0, sizeof(uint64_t) * PAGE);
    c[0] = st->free_head;
    st->free_head = idx + 1;
    st->dir[i] = 0;
    st->pages--;
    return n;
}

/* Moves the window so that it starts at page new_lo; pages that would fall
 * below it must have been freed. */
static void window_move(store *st, uint32_t new_lo)
{
    uint32_t len = st->dir_len;
    if (new_lo > st->lo_page) {
        uint32_t sh = new_lo - st->lo_page;
        if (sh < len) {
            memmove(st->dir, st->dir + sh, sizeof(uint16_t) * (len - sh));
            memset(st->dir + len - sh, 0, sizeof(uint16_t) * sh);
        } else {
            memset(st->dir, 0, sizeof(uint16_t) * len);
        }
    } else if (new_lo < st->lo_page) {
        uint32_t sh = st->lo_page - new_lo;
        if (sh < len) {
            memmove(st->dir + sh, st->dir, sizeof(uint16_t) * (len - sh));
            memset(st->dir, 0, sizeof(uint16_t) * sh);
        } else {
            memset(st->dir, 0, sizeof(uint16_t) * len);
        }
    }
    st->lo_page = new_lo;
}

/* Frees every page below window slot `upto`; returns the values they held. */
static uint64_t free_below(store *st, uint32_t upto)
{
    uint64_t moved = 0;
    for (uint32_t i = 0; i < upto && i < st->dir_len; i++)
        if (st->dir[i])
            moved += page_free(st, i);
    return moved;
}

/* Puts `moved` folded values into the lowest key of the lowest page in the
 * window, allocating `page` (which must be in the window) when none is left. */
static void place_folded(mv_sketch *sk, store *st, uint64_t moved, uint32_t page)
{
    if (moved == 0)
        return;
    uint32_t target = lowest_page_from(st, 0);
    if (target == UINT32_MAX) {
        target = page;
        if (page_alloc(sk, st, page) != 0)
            return; /* unreachable: a page was just freed */
    }
    page_at(st, target)[0] += moved;
    sk->collapsed = 1;
    sk->collapses++;
}

/* Grows the directory to `len` slots (len <= dir_max), keeping its window
 * start; 0 or -ENOMEM. */
static int dir_grow(store *st, uint32_t len)
{
    if (len > st->dir_max)
        len = st->dir_max;
    if (len <= st->dir_len)
        return 0;
    uint16_t *d = realloc(st->dir, sizeof(uint16_t) * len);
    if (d == NULL)
        return -ENOMEM;
    memset(d + st->dir_len, 0, sizeof(uint16_t) * (len - st->dir_len));
    st->dir = d;
    st->dir_len = len;
    return 0;
}

/* Highest page in use, or UINT32_MAX (slow path only). */
static uint32_t highest_page(const store *st)
{
    for (uint32_t i = st->dir_len; i-- > 0;)
        if (st->dir[i])
            return st->lo_page + i;
    return UINT32_MAX;
}

/* Lowest key with a count (the lowest kept bucket), or `dflt` when empty. */
static uint32_t lowest_key(const store *st, uint32_t dflt)
{
    for (uint32_t i = 0; i < st->dir_len; i++) {
        if (!st->dir[i])
            continue;
        const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
        for (uint32_t j = 0; j < PAGE; j++)
            if (c[j])
                return ((st->lo_page + i) << PAGE_SHIFT) + j;
    }
    return dflt;
}

/* Slow path of store_add: makes room for `key`, collapsing the LOWEST
 * buckets only when the range is wider than the window or the page budget is
 * spent. Returns the key the count must go to (its page exists). */
static uint32_t store_make_room(mv_sketch *sk, store *st, uint32_t key)
{
    uint32_t page = key >> PAGE_SHIFT;
    if (st->dir_len == 0 && dir_grow(st, DIR_INIT) != 0)
        return key; /* no directory could be had: the caller finds no page */
    if (st->total == 0 && st->pages == 0) {
        uint32_t half = st->dir_len / 2;
        window_move(st, page > half ? page - half : 0);
    }
    if (page - st->lo_page >= st->dir_len) {
        uint32_t pmin = lowest_page_from(st, 0), pmax = highest_page(st);
        if (pmin == UINT32_MAX)
            pmin = pmax = page;
        uint32_t lo = page < pmin ? page : pmin, hi = page > pmax ? page : pmax;
        if (hi - lo >= st->dir_len && st->dir_len < st->dir_max) {
            /* Widen the directory (doubling, at most dir_max) before anything collapses. */
            uint32_t want = st->dir_len;
            while (want <= hi - lo && want < st->dir_max)
                want = 2 * want < st->dir_max ? 2 * want : st->dir_max;
            dir_grow(st, want); /* on failure the window stays and may collapse */
        }
        if (hi - lo < st->dir_len) {
            uint32_t slack = (st->dir_len - (hi - lo + 1)) / 2;
            window_move(st, lo > slack ? lo - slack : 0);
        } else if (page > pmax) {
            uint32_t new_lo = page - st->dir_len + 1;
            uint64_t moved = free_below(st, new_lo - st->lo_page);
            window_move(st, new_lo);
            place_folded(sk, st, moved, page);
        } else {
            /* Below a window that cannot stretch: the lowest kept bucket. */
            sk->collapsed = 1;
            sk->collapses++;
            return lowest_key(st, key);
        }
    }
    if (page_at(st, page) == NULL && page_alloc(sk, st, page) != 0) {
        /* Out of pages: fold the lowest page into the next one up, or put the
         * value in the lowest kept bucket if it is below everything. */
        uint32_t low = lowest_page_from(st, 0);
        if (low == UINT32_MAX || page < low) {
            sk->collapsed = 1;
            sk->collapses++;
            return lowest_key(st, key);
        }
        place_folded(sk, st, free_below(st, low - st->lo_page + 1), page);
        if (page_at(st, page) == NULL && page_alloc(sk, st, page) != 0) {
            sk->collapsed = 1;
            sk->collapses++;
            return lowest_key(st, key); /* allocation failed: keep the count somewhere */
        }
    }
    return key;
}

static inline void store_add(mv_sketch *sk, store *st, uint32_t key, uint64_t n)
{
    uint32_t i = (key >> PAGE_SHIFT) - st->lo_page;
    if (i < st->dir_len && st->dir[i] != 0) {
        st->pool[(size_t)(st->dir[i] - 1) * PAGE + (key & (PAGE - 1))] += n;
    } else {
        key = store_make_room(sk, st, key);
        uint64_t *pg = page_at(st, key >> PAGE_SHIFT);
        if (pg == NULL)
            return; /* no page at all could be had (malloc failed on an empty store) */
        pg[key & (PAGE - 1)] += n;
    }
    st->total += n;
}

int mv_sketch_add_n(mv_sketch *sk, double x, uint64_t n)
{
    if (!isfinite(x))
        return -EDOM;
    if (n == 0)
        return 0;
    if (x > MV_SKETCH_MIN_INDEXABLE)
        store_add(sk, &sk->pos, ukey_of(sk, x), n);
    else if (x < -MV_SKETCH_MIN_INDEXABLE)
        store_add(sk, &sk->neg, ukey_of(sk, -x), n);
    else
        sk->zero_count += n;
    sk->count += n;
    sk->sum += n == 1 ? x : x * (double)n;
    if (x < sk->min)
        sk->min = x;
    if (x > sk->max)
        sk->max = x;
    return 0;
}

#if defined(__GNUC__)
#define PREFETCH_W(p) __builtin_prefetch((p), 1)
#define PREFETCH_R(p) __builtin_prefetch((p), 0)
#else
#define PREFETCH_W(p) ((void)(p))
#define PREFETCH_R(p) ((void)(p))
#endif

size_t mv_sketch_add_many(mv_sketch_add_req *req, size_t n)
{
    size_t grown = 0;
    /* Stage 0: every header. */
    for (size_t k = 0; k < n; k++) {
        PREFETCH_W(req[k].sk);
        PREFETCH_W((const char *)req[k].sk + 64);
    }
    /* Stage 1: keys (positive values only: the others take mv_sketch_add_n), and the
     * directory slot of each key's page. */
    for (size_t k = 0; k < n; k++) {
        const mv_sketch *sk = req[k].sk;
        double x = req[k].value;
        req[k].key_ = UINT32_MAX;
        if (x > MV_SKETCH_MIN_INDEXABLE && x < INFINITY && req[k].count) {
            uint32_t key = ukey_of(sk, x), i = (key >> PAGE_SHIFT) - sk->pos.lo_page;
            req[k].key_ = key;
            if (i < sk->pos.dir_len)
                PREFETCH_R(&sk->pos.dir[i]);
        }
    }
    /* Stage 2: the pages. */
    for (size_t k = 0; k < n; k++) {
        const store *st = &req[k].sk->pos;
        uint32_t key = req[k].key_, i = (key >> PAGE_SHIFT) - st->lo_page;
        if (key != UINT32_MAX && i < st->dir_len && st->dir[i])
            PREFETCH_W(st->pool + (size_t)(st->dir[i] - 1) * PAGE + (key & (PAGE - 1)));
    }
    /* The adds: what mv_sketch_add_n does, with the key already known. */
    for (size_t k = 0; k < n; k++) {
        mv_sketch *sk = req[k].sk;
        double x = req[k].value;
        uint64_t c = req[k].count;
        uint32_t key = req[k].key_, i = (key >> PAGE_SHIFT) - sk->pos.lo_page;
        if (key == UINT32_MAX || i >= sk->pos.dir_len || !sk->pos.dir[i]) {
            /* The slow side (another sign, a new page, a wider directory): may allocate. */
            size_t m0 = mv_sketch_memory_used(sk);
            if (key == UINT32_MAX) {
                mv_sketch_add_n(sk, x, c);
                grown += mv_sketch_memory_used(sk) - m0;
                continue;
            }
            store_add(sk, &sk->pos, key, c);
            grown += mv_sketch_memory_used(sk) - m0;
        } else {
            sk->pos.pool[(size_t)(sk->pos.dir[i] - 1) * PAGE + (key & (PAGE - 1))] += c;
            sk->pos.total += c;
        }
        sk->count += c;
        sk->sum += c == 1 ? x : x * (double)c;
        if (x < sk->min)
            sk->min = x;
        if (x > sk->max)
            sk->max = x;
    }
    return grown;
}

/* ---- Runs: a few values per sketch, many sketches ------------------------------------------ */

#define RUN_KEYS   8  /* keys of a run computed ahead, with its fetches (the rest: as added) */
#define RUNS_CHUNK 16 /* runs whose fetches are asked for together */

/* The header lines an add of a positive value touches. */
static inline void runs_fetch_header(const mv_sketch *sk)
{
    PREFETCH_W(sk);
    PREFETCH_W((const char *)sk + 64);
}

/* Keys of r's first values (UINT32_MAX: not a positive finite value with a count, added by
 * mv_sketch_add_n), and the directory slots of their pages. Needs r->sk's header. */
static inline void runs_keys(const mv_sketch_runs *r, uint32_t *keys)
{
    const mv_sketch *sk = r->sk;
    const store *st = &sk->pos;
    uint32_t m = r->n < RUN_KEYS ? r->n : RUN_KEYS;
    for (uint32_t i = 0; i < m; i++) {
        double x = r->value[i];
        uint32_t key = UINT32_MAX;
        if (x > MV_SKETCH_MIN_INDEXABLE && x < INFINITY && r->count[i]) {
            key = ukey_of(sk, x);
            uint32_t d = (key >> PAGE_SHIFT) - st->lo_page;
            if (d < st->dir_len)
                PREFETCH_R(&st->dir[d]);
        }
        keys[i] = key;
    }
}

/* The page lines of r's first keys. Needs the header and the directory slots. */
static inline void runs_pages(const mv_sketch_runs *r, const uint32_t *keys)
{
    const store *st = &r->sk->pos;
    uint32_t m = r->n < RUN_KEYS ? r->n : RUN_KEYS;
    for (uint32_t i = 0; i < m; i++) {
        uint32_t key = keys[i], d = (key >> PAGE_SHIFT) - st->lo_page;
        if (key != UINT32_MAX && d < st->dir_len && st->dir[d])
            PREFETCH_W(st->pool + (size_t)(st->dir[d] - 1) * PAGE + (key & (PAGE - 1)));
    }
}

/* Adds r's values in order; returns the bytes allocated. The header's fields are kept in
 * locals between the slow adds (which read and write them in the sketch). */
static size_t runs_add(const mv_sketch_runs *r, const uint32_t *keys)
{
    mv_sketch *sk = r->sk;
    store *st = &sk->pos;
    size_t grown = 0;
    uint64_t count = sk->count, total = st->total;
    double sum = sk->sum, mn = sk->min, mx = sk->max;
    for (uint32_t i = 0; i < r->n; i++) {
        double x = r->value[i];
        uint64_t c = r->count[i];
        uint32_t key;
        if (i < RUN_KEYS)
            key = keys[i];
        else
            key = x > MV_SKETCH_MIN_INDEXABLE && x < INFINITY && c ? ukey_of(sk, x) : UINT32_MAX;
        uint32_t d = (key >> PAGE_SHIFT) - st->lo_page;
        if (key != UINT32_MAX && d < st->dir_len && st->dir[d]) {
            st->pool[(size_t)(st->dir[d] - 1) * PAGE + (key & (PAGE - 1))] += c;
            total += c;
            count += c;
            sum += c == 1 ? x : x * (double)c;
            if (x < mn)
                mn = x;
            if (x > mx)
                mx = x;
            continue;
        }
        /* The slow side (another sign, zero, NaN, a new page, a wider directory): through
         * the sketch itself. */
        sk->count = count;
        st->total = total;
        sk->sum = sum;
        sk->min = mn;
        sk->max = mx;
        size_t m0 = mv_sketch_memory_used(sk);
        mv_sketch_add_n(sk, x, c);
        grown += mv_sketch_memory_used(sk) - m0;
        count = sk->count;
        total = st->total;
        sum = sk->sum;
        mn = sk->min;
        mx = sk->max;
    }
    sk->count = count;
    st->total = total;
    sk->sum = sum;
    sk->min = mn;
    sk->max = mx;
    return grown;
}

size_t mv_sketch_add_runs(const mv_sketch_runs *r, size_t nr)
{
    /* Stage by stage over a chunk of runs, so that the misses of each stage overlap: the
     * headers, then the keys and their directory slots, then the pages, then the adds. */
    uint32_t keys[RUNS_CHUNK][RUN_KEYS];
    size_t grown = 0;
    for (size_t c0 = 0; c0 < nr; c0 += RUNS_CHUNK) {
        size_t m = nr - c0 < RUNS_CHUNK ? nr - c0 : RUNS_CHUNK;
        const mv_sketch_runs *c = r + c0;
        for (size_t k = 0; k < m; k++)
            runs_fetch_header(c[k].sk);
        for (size_t k = 0; k < m; k++)
            runs_keys(&c[k], keys[k]);
        for (size_t k = 0; k < m; k++)
            runs_pages(&c[k], keys[k]);
        for (size_t k = 0; k < m; k++)
            grown += runs_add(&c[k], keys[k]);
    }
    return grown;
}

int mv_sketch_add(mv_sketch *sk, double x)
{
    return mv_sketch_add_n(sk, x, 1);
}

int mv_sketch_add_buckets(mv_sketch *sk, const double *bounds, size_t nbounds,
                          const uint64_t *counts, double sum)
{
    if (sk == NULL || counts == NULL || (nbounds > 0 && bounds == NULL))
        return -EINVAL;
    for (size_t i = 0; i < nbounds; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return -EINVAL;
    }
    double before = sk->sum;
    for (size_t i = 0; i <= nbounds; i++) {
        if (counts[i] == 0)
            continue;
        double rep;
        if (nbounds == 0) {
            rep = isfinite(sum) ? sum / (double)counts[i] : 0.0;
        } else if (i == 0) {
            rep = bounds[0];
        } else if (i == nbounds) {
            rep = bounds[nbounds - 1];
        } else {
            double lo = bounds[i - 1], hi = bounds[i];
            if (lo >= 0.0 || hi <= 0.0)
                rep = 2.0 * lo * (hi / (lo + hi)); /* same sign: lo + hi != 0 */
            else
                rep = 0.5 * (lo + hi);
        }
        if (!isfinite(rep))
            rep = i == 0 ? bounds[0] : bounds[i - 1];
        int rc = mv_sketch_add_n(sk, rep, counts[i]);
        if (rc != 0)
            return rc;
    }
    if (isfinite(sum))
        sk->sum = before + sum;
    return 0;
}

static int store_merge(mv_sketch *dst, store *d, const store *s)
{
    if (s->total == 0)
        return 0;
    /* Highest keys first so a collapsing destination settles its window once. */
    for (uint32_t i = s->dir_len; i-- > 0;) {
        if (!s->dir[i])
            continue;
        const uint64_t *c = s->pool + (size_t)(s->dir[i] - 1) * PAGE;
        uint32_t base = (s->lo_page + i) << PAGE_SHIFT;
        for (uint32_t j = PAGE; j-- > 0;)
            if (c[j])
                store_add(dst, d, base + j, c[j]);
    }
    return 0;
}

int mv_sketch_merge(mv_sketch *dst, const mv_sketch *src)
{
    if (dst == NULL || src == NULL || dst->mult != src->mult)
        return -EINVAL;
    if (src->count == 0)
        return 0;
    store_merge(dst, &dst->pos, &src->pos);
    store_merge(dst, &dst->neg, &src->neg);
    dst->zero_count += src->zero_count;
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    if (src->collapsed)
        dst->collapsed = 1;
    dst->collapses += src->collapses;
    return 0;
}

double mv_sketch_quantile(const mv_sketch *sk, double q)
{
    if (sk->count == 0 || !(q >= 0.0 && q <= 1.0))
        return NAN;
    uint64_t rank = (uint64_t)floor(q * (double)(sk->count - 1));
    uint64_t seen = 0;
    double v = 0.0;
    const store *st = &sk->neg;
    int found = 0;
    if (st->total > rank) {
        /* Most negative first: highest magnitude key first. */
        for (uint32_t i = st->dir_len; i-- > 0 && !found;) {
            if (!st->dir[i])
                continue;
            const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
            for (uint32_t j = PAGE; j-- > 0;) {
                seen += c[j];
                if (seen > rank) {
                    v = -key_value(sk, ((st->lo_page + i) << PAGE_SHIFT) + j);
                    found = 1;
                    break;
                }
            }
        }
    } else {
        seen = st->total;
    }
    if (!found) {
        seen += sk->zero_count;
        if (seen > rank) {
            v = 0.0;
        } else {
            st = &sk->pos;
            for (uint32_t i = 0; i < st->dir_len && !found; i++) {
                if (!st->dir[i])
                    continue;
                const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
                for (uint32_t j = 0; j < PAGE; j++) {
                    seen += c[j];
                    if (seen > rank) {
                        v = key_value(sk, ((st->lo_page + i) << PAGE_SHIFT) + j);
                        found = 1;
                        break;
                    }
                }
            }
        }
    }
    /* The true quantile lies in [min, max]; clamping never adds error. */
    if (v < sk->min)
        v = sk->min;
    if (v > sk->max)
        v = sk->max;
    return v;
}

/* Quantiles of ascending qs in one walk over the buckets, lowest value first. */
int mv_sketch_quantiles(const mv_sketch *sk, const double *qs, size_t nq, double *out)
{
    uint64_t rank[16];
    if (nq > 16)
        return -EINVAL;
    for (size_t j = 0; j < nq; j++) {
        if (!(qs[j] >= 0.0 && qs[j] <= 1.0) || (j > 0 && !(qs[j] >= qs[j - 1])))
            return -EINVAL;
        out[j] = NAN;
    }
    if (sk->count == 0 || nq == 0)
        return 0;
    for (size_t j = 0; j < nq; j++)
        rank[j] = (uint64_t)floor(qs[j] * (double)(sk->count - 1));
    size_t j = 0;
    uint64_t seen = 0;
    const store *st = &sk->neg;
    /* Most negative first: the highest negative key first. */
    for (uint32_t i = st->dir_len; i-- > 0 && j < nq && st->total;) {
        if (!st->dir[i])
            continue;
        const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
        for (uint32_t k = PAGE; k-- > 0 && j < nq;) {
            if (!c[k])
                continue;
            seen += c[k];
            if (seen > rank[j]) {
                double v = -key_value(sk, ((st->lo_page + i) << PAGE_SHIFT) + k);
                while (j < nq && seen > rank[j])
                    out[j++] = v;
            }
        }
    }
    seen = st->total; /* what the walk would have counted, also when it stopped early */
    seen += sk->zero_count;
    while (j < nq && seen > rank[j])
        out[j++] = 0.0;
    st = &sk->pos;
    for (uint32_t i = 0; i < st->dir_len && j < nq; i++) {
        if (!st->dir[i])
            continue;
        const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
        for (uint32_t k = 0; k < PAGE && j < nq; k++) {
            if (!c[k])
                continue;
            seen += c[k];
            if (seen > rank[j]) {
                double v = key_value(sk, ((st->lo_page + i) << PAGE_SHIFT) + k);
                while (j < nq && seen > rank[j])
                    out[j++] = v;
            }
        }
    }
    /* The true quantile lies in [min, max]; clamping never adds error. (A rank
     * the walk did not reach - counts lost to a failed allocation - reports 0
     * clamped, as mv_sketch_quantile does.) */
    for (j = 0; j < nq; j++) {
        double v = isnan(out[j]) ? 0.0 : out[j];
        out[j] = v < sk->min ? sk->min : v > sk->max ? sk->max : v;
    }
    return 0;
}

uint64_t mv_sketch_count(const mv_sketch *sk)
{
    return sk->count;
}

double mv_sketch_sum(const mv_sketch *sk)
{
    return sk->sum;
}

double mv_sketch_min(const mv_sketch *sk)
{
    return sk->count ? sk->min : NAN;
}

double mv_sketch_max(const mv_sketch *sk)
{
    return sk->count ? sk->max : NAN;
}

static uint32_t store_nonempty(const store *st)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < st->dir_len; i++) {
        if (!st->dir[i])
            continue;
        const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
        for (uint32_t j = 0; j < PAGE; j++)
            n += c[j] != 0;
    }
    return n;
}

uint32_t mv_sketch_bucket_count(const mv_sketch *sk)
{
    return store_nonempty(&sk->pos) + store_nonempty(&sk->neg) + (sk->zero_count != 0);
}

int mv_sketch_collapsed(const mv_sketch *sk)
{
    return sk->collapsed;
}

uint64_t mv_sketch_collapses(const mv_sketch *sk)
{
    return sk->collapses;
}

/* ---- Buckets and native histograms ---------------------------------------------------------- */

static int foreach_store(const mv_sketch *sk, const store *st, int sign,
                         int (*fn)(void *arg, const mv_sketch_bucket *b), void *arg)
{
    if (st->total == 0)
        return 0;
    for (uint32_t n = 0; n < st->dir_len; n++) {
        /* Negative values: highest magnitude first. */
        uint32_t i = sign < 0 ? st->dir_len - 1 - n : n;
        if (!st->dir[i])
            continue;
        const uint64_t *c = st->pool + (size_t)(st->dir[i] - 1) * PAGE;
        for (uint32_t m = 0; m < PAGE; m++) {
            uint32_t j = sign < 0 ? PAGE - 1 - m : m;
            if (!c[j])
                continue;
            uint32_t ukey = ((st->lo_page + i) << PAGE_SHIFT) + j;
            int32_t key = (int32_t)ukey - sk->bias;
            mv_sketch_bucket b = {.key = key, .sign = sign, .count = c[j]};
            b.lo = f_inverse((double)key / sk->mult);
            b.hi = f_inverse((double)(key + 1) / sk->mult);
            b.rep = sign * key_value(sk, ukey);
            int rc = fn(arg, &b);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int mv_sketch_foreach(const mv_sketch *sk, int (*fn)(void *arg, const mv_sketch_bucket *b),
                      void *arg)
{
    int rc = foreach_store(sk, &sk->neg, -1, fn, arg);
    if (rc)
        return rc;
    if (sk->zero_count) {
        mv_sketch_bucket z = {.count = sk->zero_count};
        rc = fn(arg, &z);
        if (rc)
            return rc;
    }
    return foreach_store(sk, &sk->pos, 1, fn, arg);
}

static int32_t native_clamp(int32_t s)
{
    return s < -4 ? -4 : s > 8 ? 8 : s;
}

/* Upper bound of native bucket idx of schema s (clamped). */
static double native_upper(int32_t idx, int32_t schema)
{
    if (schema <= 0) {
        int64_t e = (int64_t)idx * ((int64_t)1 << -schema);
        return e > 2000 ? INFINITY : e < -2000 ? 0.0 : ldexp(1, (int)e);
    }
    int32_t per = 1 << schema;
    int32_t q = idx >= 0 ? idx / per : -((-idx + per - 1) / per);
    int32_t r = idx - q * per;
    return q > 2000 ? INFINITY : q < -2000 ? 0.0 : ldexp(exp2((double)r / per), q);
}

int32_t mv_sketch_native_index(double x, int32_t schema)
{
    schema = native_clamp(schema);
    if (!(x > 0))
        return INT32_MIN / 2;
    if (isinf(x))
        return INT32_MAX / 2;
    int e;
    double f = frexp(x, &e); /* x = f 2^e, f in [0.5, 1) */
    double t = ceil(ldexp((double)(e - 1) + log2(2 * f), schema));
    int32_t idx = (int32_t)t;
    /* log2 rounds: settle on the bucket whose bounds hold x exactly. */
    while (native_upper(idx - 1, schema) >= x)
        idx--;
    while (native_upper(idx, schema) < x)
        idx++;
    return idx;
}

typedef struct native_ctx {
    int32_t schema;
    mv_sketch_nbucket *out;
    size_t cap, n;
    uint64_t zero;
    mv_sketch_nbucket last; /* the bucket n - 1 */
} native_ctx;

static int native_add(void *arg, const mv_sketch_bucket *b)
{
    native_ctx *c = arg;
    if (b->sign == 0 || fabs(b->rep) <= MV_SKETCH_NATIVE_ZERO) {
        c->zero += b->count;
        return 0;
    }
    mv_sketch_nbucket nb = {mv_sketch_native_index(fabs(b->rep), c->schema), b->sign < 0, b->count};
    /* Buckets come in value order and the map is monotonic: equal ones are adjacent. */
    if (c->n && c->last.index == nb.index && c->last.negative == nb.negative) {
        c->last.count += nb.count;
        if (c->n <= c->cap)
            c->out[c->n - 1].count += nb.count;
        return 0;
    }
    if (c->n < c->cap)
        c->out[c->n] = nb;
    c->last = nb;
    c->n++;
    return 0;
}

size_t mv_sketch_to_native(const mv_sketch *sk, int32_t schema, mv_sketch_nbucket *out, size_t cap,
                           uint64_t *zero)
{
    native_ctx c = {.schema = native_clamp(schema), .out = out, .cap = cap};
    mv_sketch_foreach(sk, native_add, &c);
    if (zero)
        *zero = c.zero;
    return c.n;
}
