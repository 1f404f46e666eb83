/* mv_collect_tick: one tick's work per segment: prepare (is it due, has it changed), copy
 * through the transport, validate, repair torn histograms (mv_collect_torn.c), analyse
 * (pkg/collector/pipeline) and publish; a read that says "gone" drops the segment. Called by
 * the tick workers (mv_collect_workers.c, the layer above); calls only the layers below. */
#include "mv_collect_int.h"
#include "mv_detect.h"
#include "mv_log.h"
#include "mv_util.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Drops the very object whose read said "gone" — not whatever now carries its
 * id: an agent resync may have re-added the id with a new source (a new rkey)
 * while this tick's read with the old one was in flight. */
static void drop_gone(mv_coll *c, seg *s, int status)
{
    if (!mv_coll__remove_if(c, mv_coll__seg_is, s))
        return; /* already replaced or removed */
    MV_INFO("segment.gone", "id=%s error=%s", mv_log_q(s->id), mv_log_q(strerror(-status)));
    pthread_mutex_lock(&c->mu);
    mv_coll_drop_fn fn = c->drop_fn;
    void *arg = c->drop_arg;
    pthread_mutex_unlock(&c->mu);
    if (fn)
        fn(arg, s->id, s->src);
}

/* Hands a published read to the live views' hook when someone watches the segment. */
static inline void watch_read(mv_coll *c, seg *s, const void *hot, uint64_t now)
{
    if (__builtin_expect(__atomic_load_n(&s->watched, __ATOMIC_RELAXED) == 0, 1))
        return;
    __atomic_add_fetch(&c->read_busy, 1, __ATOMIC_SEQ_CST);
    mv_coll_read_fn fn = __atomic_load_n(&c->read_fn, __ATOMIC_SEQ_CST);
    if (fn && s->cat)
        fn(c->read_arg, s->id, s->cat->cat, hot, now, s->pipe_flags);
    __atomic_sub_fetch(&c->read_busy, 1, __ATOMIC_RELEASE);
}

/* ---- Tick ------------------------------------------------------------------------ */

static void set_failure(mv_coll *c, seg *s, mv_seg_reason r, const char *detail, uint64_t now)
{
    if (!s->fail_since_ns)
        s->fail_since_ns = now;
    s->same_serial = 0; /* the next read copies */
    pthread_mutex_lock(&s->mu);
    s->reason = r;
    if (r == MV_SEG_E_BUSY && !s->busy_since_ns)
        s->busy_since_ns = now;
    snprintf(s->detail, sizeof s->detail, "%s", detail);
    s->read_errors++;
    /* busy/changed/torn clear on a re-read: they never quarantine. */
    int quarantine = s->state != MV_COLL_QUARANTINED && !mv_seg_reason_transient(r) &&
                     now - s->fail_since_ns >= (uint64_t)c->o.quarantine_after_ms * 1000000ull;
    if (quarantine) {
        s->state = MV_COLL_QUARANTINED;
        mv_coll__cat_put(s->pub_cat);
        s->pub_cat = NULL;
        free(s->pub_hot);
        s->pub_hot = NULL;
        s->pub_len = s->pub_cap = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (quarantine) {
        s->next_recheck_ns = now + (uint64_t)c->o.recheck_ms * 1000000ull;
        mv_coll__cat_put(s->cat);
        s->cat = NULL;
        pthread_mutex_lock(&c->mu);
        c->stats.errors[r < MV_SEG_REASON_COUNT_ ? r : MV_SEG_E_INVAL]++;
        pthread_mutex_unlock(&c->mu);
        MV_WARN("segment.quarantined", "id=%s reason=%s detail=%s", mv_log_q(s->id),
                mv_seg_reason_name(r), mv_log_q(detail));
    }
}

static int ensure_buf(void **buf, uint32_t *cap, uint32_t need)
{
    if (*buf && *cap >= need)
        return 0;
    void *p = aligned_alloc(64, ((size_t)need + 63) & ~(size_t)63);
    if (!p)
        return -ENOMEM;
    free(*buf);
    *buf = p;
    *cap = need;
    return 0;
}

/* Reads the whole segment and parses its catalog; retries transient reasons a
 * few times since a writer's append takes microseconds. */
static int load_catalog(mv_coll *c, seg *s, uint64_t now)
{
    mv_seg_error err = {0};
    mv_seg_reason r = MV_SEG_OK;
    mv_seg_catalog *cat = NULL;

    if (!s->full && !(s->full = aligned_alloc(64, (s->size + 63) & ~(uint64_t)63))) {
        set_failure(c, s, MV_SEG_E_NOMEM, "cannot allocate the segment buffer", now);
        return -1;
    }
    /* The copy has no defined order across words, so a parse of a copy taken
     * while the writer appended can fail or succeed on a mix. Re-read the
     * header afterwards: only a parse whose generation (even) and instance
     * are unchanged in the second read is trusted, success or rejection. */
    for (int attempt = 0; attempt < 8; attempt++) {
        mv_coll_read rq[2] = {
            {.src = s->src, .off = 0, .len = (uint32_t)s->size, .dst = s->full},
            {.src = s->src, .off = 0, .len = MV_SEG_HEADER_SIZE, .dst = s->hdr2},
        };
        mv_coll__seg_read(c, s, &rq[0], 1);
        if (rq[0].status) {
            snprintf(err.detail, sizeof err.detail, "read failed: %s", strerror(-rq[0].status));
            r = MV_SEG_E_TRUNCATED;
            break;
        }
        r = mv_seg_catalog_parse(s->full, s->size, s->size, &cat, &err);
        mv_coll__seg_read(c, s, &rq[1], 1);
        const mv_seg_header *h1 = s->full, *h2 = (const void *)s->hdr2;
        int stable = rq[1].status == 0 && !(h1->generation & 1) &&
                     h1->generation == h2->generation && h1->instance == h2->instance;
        if (stable || r == MV_SEG_E_MAGIC || r == MV_SEG_E_VERSION || rq[1].status)
            break;
        if (cat) {
            mv_seg_catalog_free(cat);
            cat = NULL;
        }
        if (r == MV_SEG_OK) {
            r = MV_SEG_E_CHANGED;
            snprintf(err.detail, sizeof err.detail, "catalog changed while it was read");
        }
        usleep(50);
    }
    /* The parsed catalog owns copies of what it points to: the whole-segment buffer is
     * not kept between catalog reads (at 1,000 segments of 32 KiB, 32 MiB less RSS). */
    free(s->full);
    s->full = NULL;
    pthread_mutex_lock(&c->mu);
    c->stats.catalog_reads++;
    pthread_mutex_unlock(&c->mu);
    if (r != MV_SEG_OK) {
        if (cat)
            mv_seg_catalog_free(cat);
        set_failure(c, s, r, err.detail, now);
        return -1;
    }
    cat_ref *ref = malloc(sizeof *ref);
    if (!ref) {
        mv_seg_catalog_free(cat);
        set_failure(c, s, MV_SEG_E_NOMEM, "out of memory", now);
        return -1;
    }
    static uint64_t cat_serials; /* process-wide: a serial is never reused */
    ref->refs = 1;
    ref->cat = cat;
    ref->serial = __atomic_add_fetch(&cat_serials, 1, __ATOMIC_RELAXED);
    mv_coll__cat_put(s->cat);
    s->cat = ref;
    s->nhist_cat = NULL; /* count its histograms again (the address may be reused) */
    if (s->fail_since_ns || s->state == MV_COLL_QUARANTINED)
        MV_INFO("segment.recovered", "id=%s metrics=%zu", mv_log_q(s->id),
                mv_seg_catalog_count(cat));
    else
        MV_DEBUG("segment.catalog", "id=%s generation=%llu metrics=%zu", mv_log_q(s->id),
                 (unsigned long long)mv_seg_catalog_generation(cat), mv_seg_catalog_count(cat));
    s->fail_since_ns = 0;
    return 0;
}

static void publish(seg *s, uint64_t now, uint64_t hb, uint64_t torn, uint32_t stale,
                    uint32_t omitted)
{
    uint32_t len = mv_seg_catalog_hot_size(s->cat->cat);
    size_t n = mv_seg_catalog_count(s->cat->cat);
    uint8_t *om = NULL;
    if (omitted) {
        if ((om = malloc(n)) == NULL)
            return; /* cannot say what to omit: keep serving the previous copy */
        memcpy(om, s->omit_work, n);
    }
    pthread_mutex_lock(&s->mu);
    free(s->pub_omit);
    s->pub_omit = om;
    s->pub_nomit = om ? n : 0;
    s->pub_stale = stale;
    s->pub_omitted = omitted;
    s->busy_since_ns = 0;
    if (s->pub_cat != s->cat) {
        mv_coll__cat_put(s->pub_cat);
        s->pub_cat = mv_coll__cat_get(s->cat);
    }
    /* Swap buffers: the old published copy becomes the next work buffer. */
    void *old = s->pub_hot;
    uint32_t old_cap = s->pub_cap;
    s->pub_hot = s->work;
    s->pub_len = len;
    s->pub_cap = s->work_cap;
    s->state = MV_COLL_OK;
    s->read_ns = now;
    s->heartbeat_ns = hb;
    s->reads++;
    s->torn += torn;
    pthread_mutex_unlock(&s->mu);
    s->pub_copies++;
    s->work = old;
    s->work_cap = old ? old_cap : 0;
    /* The probe's words of the new copy, while its lines are still in cache. */
    if (s->probe_serial == s->cat->serial)
        mv_coll__probe_take(s);
}

/* (Re)builds the segment's pipeline for the current catalog. */
static int ensure_pipe(mv_coll *c, seg *s)
{
    if (s->pipe && s->pipe_cat == s->cat)
        return 0;
    mv_pipe_seg *np = NULL;
    /* Each segment's windows close at its own offset (unless asked to align them) and
     * spread their summaries over 8 ticks, and its scorer and detectors step at its own
     * phase of their periods, so none of these lands on one tick for all segments. The two offsets
     * come from differently mixed hashes of the id, so they are not tied to each other. */
    mv_pipe_config pc = c->o.pipe;
    uint64_t h = mv_seg_fnv1a64(s->id, strlen(s->id));
    pc.close_spread_ns = 8ull * c->o.tick_us * 1000ull;
    if (pc.close_spread_ns > pc.window_ns / 2)
        pc.close_spread_ns = pc.window_ns / 2;
    /* The scorer's steps and the detectors' (phase_ns mod detect_period_ns). */
    pc.phase_ns = h % (pc.fd_period_ns ? pc.fd_period_ns : 1000000000ull);
    /* Without adaptive sampling nothing reads a read's flags at once: the detector updates
     * of up to 8 unchanged reads run together, on records then in cache. */
    pc.same_batch = s->rate ? 0 : 8;
    if (!c->o.window_aligned) {
        uint64_t m = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser */
        m = (m ^ (m >> 27)) * 0x94d049bb133111ebull;
        pc.window_phase_ns = (m ^ (m >> 31)) % pc.window_ns;
    }
    int rc = mv_pipe_seg_create(&pc, s->cat->cat, s->pipe, &np);
    if (rc != 0) {
        MV_WARN("analytics.failed", "id=%s error=%s", mv_log_q(s->id), mv_log_q(strerror(-rc)));
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    mv_pipe_seg *old = s->pipe;
    cat_ref *old_cat = s->pipe_cat;
    s->pipe = np;
    s->pipe_cat = mv_coll__cat_get(s->cat);
    pthread_mutex_unlock(&s->mu);
    mv_pipe_seg_destroy(old);
    mv_coll__cat_put(old_cat);
    return 0;
}

/* Feeds the validated copy `hot` to the pipeline (`same`: its values are those of the
 * previous feed) and picks the next read time. Returns 1 when the pipeline was fed. */
static int analyse(mv_coll *c, seg *s, const void *hot, int same, uint64_t now)
{
    if (!c->o.analytics || ensure_pipe(c, s) != 0)
        return 0;
    unsigned f =
        same ? mv_pipe_seg_feed_same(s->pipe, hot, now) : mv_pipe_seg_feed(s->pipe, hot, now);
    s->pipe_flags = f;
    if (s->rate) {
        /* Only a detection step's verdict moves the interval: the reads between steps keep
         * it (undithered). A detector still learning its first baseline (a new metric) holds
         * the fast tick, so its warm-up takes that many fast steps, not that many seconds. */
        uint64_t iv =
            f & MV_PIPE_STEP
                ? mv_detect_rate_observe(s->rate, (f & (MV_PIPE_CHANGED | MV_PIPE_WARMUP)) != 0,
                                         (f & MV_PIPE_MOVING) != 0)
                : mv_detect_rate_interval(s->rate);
        s->due_ns = mv_util_mono_ns() + iv; /* iv is dithered when backed off */
        iv = mv_detect_rate_interval(s->rate);
        if (iv != s->interval_ns) {
            pthread_mutex_lock(&s->mu);
            s->interval_ns = iv;
            pthread_mutex_unlock(&s->mu);
        }
    }
    return 1;
}

/* A `same` read (probe_same): the published copy stays, as current as of `now` (the
 * probe's time). */
static void publish_same(mv_coll *c, seg *s, uint64_t now)
{
    /* The pipeline reads the published copy only for what it does not hold (a histogram
     * it has not primed); the tick worker owns pub_hot's contents between publishes. */
    analyse(c, s, s->pub_hot, 1, now);
    pthread_mutex_lock(&s->mu);
    s->read_ns = now;
    s->reads++;
    s->reads_same++;
    pthread_mutex_unlock(&s->mu);
    watch_read(c, s, s->pub_hot, now);
}

/* Asks the transport whether the segment's backing object changed under the reader
 * (transport->changed) and schedules the next check. 1: it did; the catalog is dropped, so
 * the read that follows validates the whole segment (header and catalog) as a fresh collector
 * would. A negative errno: it cannot be served as mapped (failed, not read). 0: unchanged,
 * or the transport cannot tell. */
static int backing_changed(mv_coll *c, seg *s, uint64_t mono)
{
    if (!s->t->changed)
        return 0;
    s->stat_due_ns = mono + (uint64_t)c->o.stat_ms * 1000000ull;
    char detail[sizeof s->detail];
    detail[0] = '\0';
    int ch = s->t->changed(s->t->ctx, s->src, detail, sizeof detail);
    if (ch == 0)
        return 0;
    mv_coll__cat_put(s->cat);
    s->cat = NULL;
    s->same_serial = 0;
    if (ch > 0) {
        MV_DEBUG("segment.revalidate", "id=%s detail=%s", mv_log_q(s->id), mv_log_q(detail));
        return 1;
    }
    set_failure(c, s, MV_SEG_E_TRUNCATED, detail, mv_util_wall_ns());
    return ch;
}

/* Phase 1 of a tick for one segment: decides whether it is read now, loads
 * its catalog when needed, and sizes its buffer. Returns the hot length to
 * read, or 0 to skip it this tick. With `same_at` (NULL: it is read), a due segment
 * that the probe finds unchanged is not copied: 0, and *same_at is the probe's time.
 * `mono`: the CLOCK_MONOTONIC time of the chunk (when transport->changed is due). */
static uint32_t tick_prepare(mv_coll *c, seg *s, uint64_t *same_at, uint64_t mono)
{
    /* Bytes replaced under the reader (a truncated and re-extended file): validated again
     * whole, now, whether or not the segment was due. */
    int replaced = 0;
    if (mono >= s->stat_due_ns && s->state != MV_COLL_QUARANTINED) {
        int ch = backing_changed(c, s, mono);
        if (ch < 0)
            return 0;
        replaced = ch;
    }
    /* Adaptive sampling: a segment not yet due is skipped (half a tick of
     * slack, so a due time a few microseconds ahead does not cost a tick),
     * unless the transport's probe sees that it changed: then it is read now,
     * and the read's change brings it back to every tick. */
    if (!replaced && s->rate && s->state == MV_COLL_OK &&
        mv_util_mono_ns() + (uint64_t)c->o.tick_us * 500ull < s->due_ns) {
        if (!mv_coll__probe_changed(c, s)) {
            mv_coll__count(&s->skipped);
            return 0;
        }
        /* Brought forward by a change: its read is a detection step, whenever the last one
         * was, so that the change can bring the segment back to every tick at once. */
        mv_pipe_seg_step_next(s->pipe);
    }
    uint64_t now = mv_util_wall_ns();
    if (s->state == MV_COLL_QUARANTINED && now < s->next_recheck_ns)
        return 0;
    if (s->state == MV_COLL_QUARANTINED)
        s->next_recheck_ns = now + (uint64_t)c->o.recheck_ms * 1000000ull;
    if (same_at && !replaced && s->state == MV_COLL_OK && mv_coll__probe_same(c, s)) {
        *same_at = now;
        return 0;
    }
    /* Every catalog read is preceded by a check (a quarantined segment's recheck too), so a
     * file of another size is never validated through the old mapping. */
    if (!s->cat && !replaced && backing_changed(c, s, mono) < 0)
        return 0;
    if (!s->cat && load_catalog(c, s, now) != 0)
        return 0;
    uint32_t len = mv_seg_catalog_hot_size(s->cat->cat);
    if (ensure_buf(&s->work, &s->work_cap, mv_seg_catalog_fold_size(s->cat->cat)) != 0) {
        set_failure(c, s, MV_SEG_E_NOMEM, "out of memory", now);
        return 0;
    }
    return len;
}

/* A read refused because the segment is gone (RDMA: rkey revoked; file
 * removed): drop it rather than quarantine it. The agent's catalog brings it
 * back if it still exists. */
static int read_gone(int status)
{
    return status == -EACCES || status == -ENOENT;
}

/* Phase 3: validates and publishes a copy read in phase 2. A copy whose
 * catalog moved is re-read (catalog and values) right away. */
static void tick_finish(mv_coll *c, seg *s, int status, uint32_t len, uint64_t *torn_total)
{
    uint64_t now = mv_util_wall_ns();
    mv_seg_error err = {0};

    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            if ((len = tick_prepare(c, s, NULL, mv_util_mono_ns())) == 0)
                return;
            mv_coll_read rq = {.src = s->src, .off = 0, .len = len, .dst = s->work};
            mv_coll__seg_read(c, s, &rq, 1);
            status = rq.status;
        }
        if (status) {
            /* The bytes may not be those the catalog was parsed from when reads work again
             * (a file truncated and re-extended zeroes its pages): the next read validates
             * the whole segment. */
            mv_coll__cat_put(s->cat);
            s->cat = NULL;
            snprintf(err.detail, sizeof err.detail, "read failed: %s", strerror(-status));
            set_failure(c, s, MV_SEG_E_TRUNCATED, err.detail, now);
            return;
        }
        uint64_t hb = 0;
        mv_seg_reason r = mv_seg_hot_check(s->cat->cat, s->work, len, &hb, &err);
        if (r == MV_SEG_E_CHANGED) {
            mv_coll__cat_put(s->cat);
            s->cat = NULL;
            continue; /* re-read the catalog in this same tick */
        }
        if (r != MV_SEG_OK) {
            mv_coll__cat_put(s->cat);
            s->cat = NULL;
            set_failure(c, s, r, err.detail, now);
            return;
        }
        uint32_t stale, omitted;
        uint64_t torn = mv_coll__fix_torn(c, s, s->cat->cat, now, &stale, &omitted);
        *torn_total += torn;
        /* Sharded records summed past the copy, where the pipeline reads them (fold_offset);
         * their shards are consistent now, or replaced by fix_torn. */
        if (mv_seg_catalog_sharded(s->cat->cat))
            mv_seg_fold(s->cat->cat, s->work);
        s->fail_since_ns = 0;
        int fed = analyse(c, s, s->work, 0, now);
        publish(s, now, hb, torn, stale, omitted);
        /* The published copy: the tick worker owns its contents until the next publish. */
        watch_read(c, s, s->pub_hot, now);
        /* A whole copy, seen by the pipeline if there is one: the next may be `same`. */
        s->same_serial = !stale && !omitted && (fed || !c->o.analytics) ? s->cat->serial : 0;
        return;
    }
}

static int item_by_transport(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const tick_item *)a)->s->t;
    uintptr_t y = (uintptr_t)((const tick_item *)b)->s->t;
    return x < y ? -1 : x > y;
}

/* Asks for the lines of a segment's tick state (`lists` 0) or, once those are in, of its
 * probe's lists (1). */
static void prefetch_seg(const seg *s, int lists)
{
    if (!lists) {
        for (size_t b = 0; b < SEG_HOT_END; b += 64)
            __builtin_prefetch((const char *)s + b, 1);
        return;
    }
    for (size_t i = 0; i < s->nprobe && s->probe_offs; i += 16)
        __builtin_prefetch(&s->probe_offs[i], 0);
    for (size_t i = 0; i < s->nprobe && s->probe_want; i += 8)
        __builtin_prefetch(&s->probe_want[i], 0);
}

/* Whether phase 1 may feed the segment's pipeline this tick (a same read, tick_prepare):
 * it is due at `mono` (give or take) and the probe may find it unchanged. */
static int may_be_same(const mv_coll *c, const seg *s, uint64_t mono)
{
    return s->same_serial && s->t->probe && !c->o.no_probe &&
           !(s->rate && mono + (uint64_t)c->o.tick_us * 500ull < s->due_ns);
}

/* Segments a local transport copies before they are validated and analysed: their copies
 * (a few KiB each) stay in the worker's cache. */
#define LOCAL_GROUP 8

/* Phases 2 and 3 for items [from, to) of one transport: one read_many, then validate and
 * publish. */
static void read_finish(mv_coll *c, tick_worker *w, size_t from, size_t to)
{
    const mv_coll_transport *t = w->items[from].s->t;
    for (size_t i = from; i < to; i++) {
        w->reqs[i] = (mv_coll_read){.src = w->items[i].s->src,
                                    .off = 0,
                                    .len = w->items[i].len,
                                    .dst = w->items[i].s->work};
        /* On its way during the reads. */
        mv_pipe_seg_prefetch(w->items[i].s->pipe, MV_PIPE_PF_STATE);
    }
    mv_coll__read(c, t, &w->reqs[from], to - from);
    for (size_t i = from; i < to; i++) {
        seg *s = w->items[i].s;
        if (i + 1 < to)
            mv_pipe_seg_prefetch(w->items[i + 1].s->pipe, MV_PIPE_PF_RECORDS);
        int st = w->reqs[i].status;
        if (st == 0)
            __atomic_add_fetch(&s->read_bytes, w->reqs[i].len, __ATOMIC_RELAXED);
        if (read_gone(st))
            drop_gone(c, s, st);
        else
            tick_finish(c, s, st, w->items[i].len, &w->torn);
    }
}

/* One worker's share of a tick: prepare, read and finish `n` segments. */
void mv_coll__tick_chunk(mv_coll *c, tick_worker *w, seg *const *segs, size_t n)
{
    /* 1: choose what is due and size the copies; a segment the probe finds unchanged is
     * served from its published copy right away. */
    size_t m = 0;
    uint64_t mono = mv_util_mono_ns();
    for (size_t i = 0; i < n; i++) {
        /* What the next segments need, asked for ahead (each step needs the one before:
         * the segment, then its probe lists and its pipeline, then the pipeline's
         * records); the pipeline only for a segment that may be fed here (a same read). */
        if (i + 3 < n)
            prefetch_seg(segs[i + 3], 0);
        if (i + 2 < n) {
            prefetch_seg(segs[i + 2], 1);
            if (may_be_same(c, segs[i + 2], mono))
                mv_pipe_seg_prefetch(segs[i + 2]->pipe, MV_PIPE_PF_STATE);
        }
        if (i + 1 < n && may_be_same(c, segs[i + 1], mono))
            mv_pipe_seg_prefetch(segs[i + 1]->pipe, MV_PIPE_PF_SAME);
        uint64_t same_at = 0;
        uint32_t len = tick_prepare(c, segs[i], &same_at, mono);
        if (same_at)
            publish_same(c, segs[i], same_at);
        else if (len)
            w->items[m++] = (tick_item){segs[i], len};
    }
    /* 2 and 3: one read_many per transport, so RDMA posts every segment's READ of an
     * agent in batches instead of one round trip per segment; a local transport's copies
     * a few at a time. */
    if (m > 1)
        qsort(w->items, m, sizeof *w->items, item_by_transport);
    for (size_t i = 0, j; i < m; i = j) {
        const mv_coll_transport *t = w->items[i].s->t;
        for (j = i; j < m && w->items[j].s->t == t; j++)
            ;
        size_t step = t->local ? LOCAL_GROUP : j - i;
        for (size_t k = i; k < j; k += step)
            read_finish(c, w, k, k + step < j ? k + step : j);
    }
}

const double mv_coll_tick_bounds[MV_COLL_TICK_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
