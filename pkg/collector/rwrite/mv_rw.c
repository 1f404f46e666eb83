/* mv_rw: the remote write sender: interval thread, sharded bounded queues, HTTP senders with
 * retry and backoff. See mv_rw.h. */
#include "mv_rw.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "mv_log.h"

#define MAX_SHARDS      64
#define MAX_LABELS      64
#define STAGE_MAX       65536 /* items staged per shard before they are queued */
#define RETRY_AFTER_MAX 300   /* seconds */
#define TOKEN_MAX       8192
#define USER_AGENT      "microview-collector"

/* One series of the visit plan as it is sent: its labels sorted by name (__name__ and the
 * external labels included), the same packed once as a 1.0 TimeSeries' label fields, and a
 * histogram's bounds (is_hist 1: a pod histogram; 2: a gauge histogram, native buckets in
 * each item). It lives in a `names` block and never changes once described. */
typedef struct series {
    const mv_rw_label *labels;
    const uint8_t *pb;
    size_t nlabels, pb_len;
    const double *bounds;
    size_t nbounds;
    int is_hist;
} series;

/* The series and strings of one visit plan, in chunks allocated while the plan is described.
 * Freed when the plan has been replaced and the last item queued from it is sent or dropped:
 * `refs` counts the plan (1 while it is current) and the items in queues. */
typedef struct chunk {
    struct chunk *next;
    size_t len, cap;
    max_align_t data[];
} chunk;

typedef struct names {
    atomic_size_t refs;
    chunk *chunks;
} names;

/* One queued sample: its series (kept alive by a reference to its names block), value and
 * time; a pod histogram's cumulative counts, or a gauge histogram's native buckets, follow it. */
typedef struct item {
    uint64_t enq_ns; /* CLOCK_MONOTONIC */
    int64_t ts_ms;
    double value; /* a histogram's sum */
    uint64_t count;
    const series *s;
    names *nm;
    int32_t nschema; /* gauge histogram: schema, zero bucket's count, buckets in cum */
    uint32_t nnb;
    uint64_t nzero;
    uint64_t cum[];
} item;

typedef struct shard {
    struct mv_rw *rw;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item **ring;
    size_t cap, head, n;
    size_t inflight;       /* items of the batch being sent (not yet acknowledged or dropped) */
    uint64_t inflight_enq; /* when the oldest of them was queued */
    CURL *curl;
    char retry_after[64];
    int written_seen;
    /* The interval thread's items for this shard not yet queued: moved into the ring under one
     * lock (and one wake-up of the sender) per request's worth, not one per sample. */
    item **stage;
    size_t nstage, stage_cap;
} shard;

/* Last time queued per series (hash of its labels), for this interval and the previous. */
typedef struct {
    uint64_t *key; /* 0: empty */
    int64_t *ts;
    size_t nslot, n;
} seen_tab;

struct mv_rw {
    mv_rw_config c;
    mv_coll *coll;
    char *url;
    mv_rw_label *ext;
    size_t next;
    char *strs; /* external labels' strings */
    shard sh[MAX_SHARDS];
    pthread_t tick;
    pthread_mutex_t mu; /* stop flag, stats, token, version */
    pthread_cond_t cv;
    int stop;
    int version;
    mv_rw_stats st;
    char token[TOKEN_MAX];
    uint64_t token_read_ns;
    char password[TOKEN_MAX];
    /* The interval thread's: the visit plan (mv_export_visit_cached), its names block and,
     * per series number, what to send; the last times of the previous plan's series by
     * identity, carried over to the next plan. */
    mv_export_cache *plan;
    names *nm;
    struct slot *slots;
    size_t nslots, cap_slots;
    seen_tab seen;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mv_rw_config_default(mv_rw_config *c)
{
    memset(c, 0, sizeof *c);
    c->interval_ms = 1000;
    c->version = 1;
    c->shards = 2;
    c->queue_samples = 500000;
    c->max_per_send = 2000;
    c->min_backoff_ms = 30;
    c->max_backoff_ms = 5000;
    c->timeout_ms = 10000;
}

const char *mv_rw_config_check(const mv_rw_config *c)
{
    if (!c->url || (strncmp(c->url, "http://", 7) != 0 && strncmp(c->url, "https://", 8) != 0))
        return "the remote write URL must start with http:// or https://";
    if (c->interval_ms < 10 || c->interval_ms > 3600000)
        return "the remote write interval must be 10 ms .. 1 h";
    if (c->version != 1 && c->version != 2)
        return "the remote write version must be 1 or 2";
    if (c->shards < 1 || c->shards > MAX_SHARDS)
        return "remote write shards must be 1..64";
    if (c->queue_samples < c->shards || c->max_per_send < 1)
        return "the remote write queue must hold at least one sample per shard";
    if (c->min_backoff_ms < 1 || c->max_backoff_ms < c->min_backoff_ms)
        return "remote write backoff: 1 <= min <= max";
    if (c->bearer_token_file && c->basic_user)
        return "remote write takes a bearer token or basic auth, not both";
    if (c->basic_user && !c->basic_password_file)
        return "remote write basic auth needs a password file";
    if (c->nexternal > 32)
        return "at most 32 external labels";
    return NULL;
}

/* ---- Files ------------------------------------------------------------------------------------
 */

/* Reads a small secret file, without its trailing newline. 0 or -errno. */
static int read_secret(const char *path, char *out, size_t outsz)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    size_t n = fread(out, 1, outsz - 1, f);
    int err = ferror(f);
    fclose(f);
    if (err)
        return -EIO;
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        n--;
    out[n] = '\0';
    return 0;
}

/* ---- Series dedup ------------------------------------------------------------------------------
 */

static int seen_put(seen_tab *t, uint64_t key, int64_t ts)
{
    if (2 * (t->n + 1) > t->nslot) {
        size_t ns = t->nslot ? 2 * t->nslot : 1024;
        uint64_t *k = calloc(ns, sizeof *k);
        int64_t *v = malloc(ns * sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            return -ENOMEM;
        }
        for (size_t i = 0; i < t->nslot; i++) {
            if (!t->key[i])
                continue;
            size_t j = t->key[i] & (ns - 1);
            while (k[j])
                j = (j + 1) & (ns - 1);
            k[j] = t->key[i];
            v[j] = t->ts[i];
        }
        free(t->key);
        free(t->ts);
        t->key = k;
        t->ts = v;
        t->nslot = ns;
    }
    size_t j = key & (t->nslot - 1);
    while (t->key[j] && t->key[j] != key)
        j = (j + 1) & (t->nslot - 1);
    if (!t->key[j])
        t->n++;
    t->key[j] = key;
    t->ts[j] = ts;
    return 0;
}

static int seen_get(const seen_tab *t, uint64_t key, int64_t *ts)
{
    if (!t->nslot)
        return 0;
    size_t j = key & (t->nslot - 1);
    while (t->key[j]) {
        if (t->key[j] == key) {
            *ts = t->ts[j];
            return 1;
        }
        j = (j + 1) & (t->nslot - 1);
    }
    return 0;
}

static void seen_clear(seen_tab *t)
{
    if (t->key)
        memset(t->key, 0, t->nslot * sizeof *t->key);
    t->n = 0;
}

/* ---- Names blocks ------------------------------------------------------------------------------
 */

#define CHUNK_BYTES (1u << 20)

static names *names_new(void)
{
    names *nm = calloc(1, sizeof *nm);
    if (nm)
        atomic_init(&nm->refs, 1);
    return nm;
}

static void names_free(names *nm)
{
    while (nm->chunks) {
        chunk *c = nm->chunks;
        nm->chunks = c->next;
        free(c);
    }
    free(nm);
}

/* Drops n references (the plan's, or items'); the last one frees the block. */
static void names_release(names *nm, size_t n)
{
    if (nm && atomic_fetch_sub_explicit(&nm->refs, n, memory_order_acq_rel) == n)
        names_free(nm);
}

/* n bytes from the block, aligned for any type; NULL when out of memory. */
static void *names_alloc(names *nm, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    chunk *c = nm->chunks;
    if (!c || c->cap - c->len < n) {
        size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->len = 0;
        c->next = nm->chunks;
        nm->chunks = c;
    }
    void *p = (char *)c->data + c->len;
    c->len += n;
    return p;
}

/* Items of a batch are released in runs of the same block (one atomic operation per run). */
static void free_items(item **it, size_t n)
{
    size_t run = 0;
    names *cur = NULL;
    for (size_t i = 0; i < n; i++) {
        if (it[i]->nm != cur) {
            names_release(cur, run);
            cur = it[i]->nm;
            run = 0;
        }
        run++;
        free(it[i]);
    }
    names_release(cur, run);
}

/* ---- The interval: snapshot to queues -----------------------------------------------------------
 */

#define HIST_MAX (MV_SEG_BUCKETS_MAX + 1) /* finite bounds of a histogram */

enum { S_SKIP = 0, S_PLAIN, S_HBUCKET, S_HSUM, S_HCOUNT, S_NATIVE };

/* What to do with the value of one series number of the plan. */
typedef struct slot {
    const series *s; /* S_PLAIN, S_HCOUNT, S_NATIVE: what is sent */
    uint64_t h;      /* the same: identity (shard; last time across plans) */
    int64_t last;    /* the same: the time last queued (INT64_MIN: never) */
    uint32_t head;   /* histogram parts: the series number of its first bucket */
    uint16_t bucket; /* S_HBUCKET: index of its bound (nbounds: the +Inf bucket) */
    uint8_t kind;
} slot;

typedef struct visit_ctx {
    mv_rw *rw;
    uint64_t enq_ns; /* CLOCK_MONOTONIC at the start of the interval's walk */
    uint64_t queued, dropped;
    /* While describing: the histogram being described (its first bucket's number, labels
     * and bounds so far). */
    uint32_t dhead;
    int dopen;
    double db[HIST_MAX];
    size_t ndb;
    /* While valuing: the histogram whose counts are being gathered. */
    uint32_t vhead;
    uint64_t hc[HIST_MAX + 1];
    double hsum;
} visit_ctx;

/* Mixes `n` bytes into `h` eight at a time (a series' identity for the seen table and its
 * shard: not kept anywhere, so it may change between versions). */
static uint64_t hash_bytes(uint64_t h, const char *p, size_t n)
{
    uint64_t w;
    for (; n >= 8; n -= 8, p += 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w ^ (uint64_t)n << 56) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

/* Builds series `name`{a, b, xname=xval} with the external labels, sorted, in the names block.
 * Its identity goes to *h. NULL when out of memory. */
static series *series_make(mv_rw *rw, const char *family, const char *suffix,
                           const mv_expo_label *a, size_t na, const mv_expo_label *b, size_t nb,
                           const char *xname, double xval, int hist, uint64_t *h)
{
    mv_rw_label l[MAX_LABELS + 40];
    size_t ln[MAX_LABELS + 40], lv[MAX_LABELS + 40]; /* string lengths, NULs included */
    char name[1100], xv[40];
    size_t fl = strlen(family), sl = suffix ? strlen(suffix) : 0;
    if (fl + sl >= sizeof name)
        return NULL; /* metric names are at most 255 bytes */
    memcpy(name, family, fl);
    memcpy(name + fl, suffix ? suffix : "", sl);
    name[fl + sl] = '\0';
    size_t n = 0;
    l[n++] = (mv_rw_label){"__name__", name};
    for (size_t i = 0; i < na + nb && n < MAX_LABELS; i++) {
        const mv_expo_label *e = i < na ? &a[i] : &b[i - na];
        l[n++] = (mv_rw_label){e->name, e->value ? e->value : ""};
    }
    if (xname) {
        mv_expo_format_double(xval, 0, xv, sizeof xv);
        l[n++] = (mv_rw_label){xname, xv};
    }
    size_t own = n;
    for (size_t i = 0; i < rw->next; i++) {
        int dup = 0;
        for (size_t j = 0; j < own && !dup; j++)
            dup = strcmp(l[j].name, rw->ext[i].name) == 0;
        if (!dup)
            l[n++] = rw->ext[i];
    }
    /* Sorted by name: insertion sort, as a series has a handful of labels, mostly in order. */
    for (size_t i = 1; i < n; i++) {
        mv_rw_label x = l[i];
        size_t j = i;
        while (j > 0 && strcmp(l[j - 1].name, x.name) > 0) {
            l[j] = l[j - 1];
            j--;
        }
        l[j] = x;
    }
    uint64_t hh = 0x9e3779b97f4a7c15ull;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        ln[i] = strlen(l[i].name) + 1;
        lv[i] = strlen(l[i].value) + 1;
        /* The NULs are hashed too: they separate names from values. */
        hh = hash_bytes(hh, l[i].name, ln[i]);
        hh = hash_bytes(hh, l[i].value, lv[i]);
        bytes += ln[i] + lv[i];
    }
    hh ^= hh >> 29;
    *h = hh | 1;
    size_t pb_len = hist ? 0 : mv_rw_labels_pb_size(l, n);
    series *s = names_alloc(rw->nm, sizeof *s + n * sizeof(mv_rw_label) + pb_len + bytes);
    if (!s)
        return NULL;
    mv_rw_label *sl_ = (mv_rw_label *)(s + 1);
    uint8_t *pb = (uint8_t *)(sl_ + n);
    char *o = (char *)pb + pb_len;
    for (size_t i = 0; i < n; i++) {
        memcpy(o, l[i].name, ln[i]);
        sl_[i].name = o;
        o += ln[i];
        memcpy(o, l[i].value, lv[i]);
        sl_[i].value = o;
        o += lv[i];
    }
    if (pb_len)
        mv_rw_labels_pb_pack(sl_, n, pb);
    *s = (series){
        .labels = sl_, .nlabels = n, .pb = pb_len ? pb : NULL, .pb_len = pb_len, .is_hist = hist};
    return s;
}

/* A new plan: the last times of the old one's series are kept by identity, its series numbers
 * and names block let go (items still queued keep the block alive). */
static int v_begin(void *arg)
{
    visit_ctx *v = arg;
    mv_rw *rw = v->rw;
    seen_clear(&rw->seen);
    for (size_t i = 0; i < rw->nslots; i++) {
        const slot *sl = &rw->slots[i];
        if (sl->s && sl->last != INT64_MIN && seen_put(&rw->seen, sl->h, sl->last) != 0)
            return -ENOMEM;
    }
    rw->nslots = 0;
    names *nm = names_new();
    if (!nm)
        return -ENOMEM;
    names_release(rw->nm, 1);
    rw->nm = nm;
    v->dopen = 0;
    v->vhead = UINT32_MAX;
    return 0;
}

static int v_describe(void *arg, uint32_t id, const char *family, mv_expo_type t,
                      const char *suffix, const mv_expo_label *a, size_t na, const mv_expo_label *b,
                      size_t nb, const char *xname, double xval)
{
    visit_ctx *v = arg;
    mv_rw *rw = v->rw;
    if (id != rw->nslots)
        return -EINVAL; /* numbered 0, 1, ... */
    if (rw->nslots == rw->cap_slots) {
        size_t cap = rw->cap_slots ? 2 * rw->cap_slots : 4096;
        slot *ns = realloc(rw->slots, cap * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        rw->slots = ns;
        rw->cap_slots = cap;
    }
    slot *sl = &rw->slots[rw->nslots++];
    *sl = (slot){.kind = S_SKIP, .last = INT64_MIN, .head = UINT32_MAX};
    if (suffix && strcmp(suffix, "_created") == 0)
        return 1;
    if (t == MV_EXPO_GAUGE_HISTOGRAM) {
        series *s = series_make(rw, family, suffix, a, na, b, nb, NULL, 0, 2, &sl->h);
        if (!s)
            return -ENOMEM;
        sl->s = s;
        sl->kind = S_NATIVE;
        seen_get(&rw->seen, sl->h, &sl->last);
        return 0;
    }
    int part = t == MV_EXPO_HISTOGRAM && suffix;
    if (part && strcmp(suffix, "_bucket") == 0) {
        /* One item per histogram series: its buckets, _sum and _count come in that order. */
        if (!v->dopen) {
            v->dopen = 1;
            v->dhead = id;
            v->ndb = 0;
        }
        sl->kind = S_HBUCKET;
        sl->head = v->dhead;
        sl->bucket = (uint16_t)v->ndb;
        if (!(isinf(xval) && xval > 0) && v->ndb < HIST_MAX)
            v->db[v->ndb++] = xval;
        return 0;
    }
    if (part && v->dopen && strcmp(suffix, "_sum") == 0) {
        sl->kind = S_HSUM;
        sl->head = v->dhead;
        return 0;
    }
    if (part && v->dopen && strcmp(suffix, "_count") == 0) {
        v->dopen = 0;
        series *s = series_make(rw, family, NULL, a, na, b, nb, NULL, 0, 1, &sl->h);
        double *bounds = s ? names_alloc(rw->nm, (v->ndb ? v->ndb : 1) * sizeof *bounds) : NULL;
        if (!bounds)
            return -ENOMEM;
        memcpy(bounds, v->db, v->ndb * sizeof *bounds);
        s->bounds = bounds;
        s->nbounds = v->ndb;
        sl->s = s;
        sl->kind = S_HCOUNT;
        sl->head = v->dhead;
        sl->bucket = (uint16_t)v->ndb;
        seen_get(&rw->seen, sl->h, &sl->last);
        return 0;
    }
    sl->s = series_make(rw, family, suffix, a, na, b, nb, xname, xval, 0, &sl->h);
    if (!sl->s)
        return -ENOMEM;
    sl->kind = S_PLAIN;
    seen_get(&rw->seen, sl->h, &sl->last);
    return 0;
}

/* Moves a shard's staged items into its queue, dropping (and counting) what does not fit, and
 * wakes its sender once. */
static void stage_flush(visit_ctx *v, shard *s)
{
    if (!s->nstage)
        return;
    /* The items' references to their names blocks, before a sender can see them. */
    for (size_t i = 0, j; i < s->nstage; i = j) {
        for (j = i + 1; j < s->nstage && s->stage[j]->nm == s->stage[i]->nm;)
            j++;
        atomic_fetch_add_explicit(&s->stage[i]->nm->refs, j - i, memory_order_relaxed);
    }
    pthread_mutex_lock(&s->mu);
    size_t room = s->cap - s->n, k = s->nstage < room ? s->nstage : room;
    for (size_t i = 0; i < k; i++)
        s->ring[(s->head + s->n + i) % s->cap] = s->stage[i];
    s->n += k;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free_items(s->stage + k, s->nstage - k);
    v->queued += k;
    v->dropped += s->nstage - k;
    s->nstage = 0;
}

/* A new item for series slot sl at ts_ms with `words` of counts after it, or NULL: the series'
 * time did not move since it was last queued (not queued again), or no memory (counted). */
static item *item_new(visit_ctx *v, slot *sl, int64_t ts_ms, size_t words)
{
    if (ts_ms <= sl->last)
        return NULL;
    sl->last = ts_ms;
    item *it = malloc(sizeof *it + words * sizeof(uint64_t));
    if (!it) {
        v->dropped++;
        return NULL;
    }
    *it = (item){.enq_ns = v->enq_ns, .ts_ms = ts_ms, .s = sl->s, .nm = v->rw->nm};
    return it;
}

/* Stages an item for its series' shard (a request's worth is queued at once). */
static void item_stage(visit_ctx *v, const slot *sl, item *it)
{
    shard *s = &v->rw->sh[(sl->h >> 17) % v->rw->c.shards];
    s->stage[s->nstage++] = it;
    if (s->nstage == s->stage_cap)
        stage_flush(v, s);
}

static int v_value(void *arg, uint32_t id, double d, uint64_t u, int is_u, int64_t ts_ms)
{
    visit_ctx *v = arg;
    mv_rw *rw = v->rw;
    if (id >= rw->nslots)
        return 0;
    slot *sl = &rw->slots[id];
    switch (sl->kind) {
    case S_SKIP:
        return 0;
    case S_HBUCKET:
        if (sl->bucket == 0)
            v->vhead = sl->head;
        if (v->vhead == sl->head)
            v->hc[sl->bucket] = is_u ? u : (uint64_t)d;
        return 0;
    case S_HSUM:
        if (v->vhead == sl->head)
            v->hsum = is_u ? (double)u : d;
        return 0;
    case S_HCOUNT:
        if (v->vhead != sl->head)
            return 0; /* its buckets were not shown */
        v->vhead = UINT32_MAX;
        v->hc[sl->bucket] = is_u ? u : (uint64_t)d;
        break;
    default:
        break;
    }
    item *it = item_new(v, sl, ts_ms, sl->s->is_hist ? sl->s->nbounds + 1 : 0);
    if (!it)
        return 0;
    if (sl->s->is_hist) {
        it->value = v->hsum;
        it->count = v->hc[sl->s->nbounds];
        memcpy(it->cum, v->hc, (sl->s->nbounds + 1) * sizeof(uint64_t));
    } else {
        it->value = is_u ? (double)u : d;
    }
    item_stage(v, sl, it);
    return 0;
}

/* A gauge histogram's window (mv_export_plan_visitor.native): one item with its buckets. */
static int v_native(void *arg, uint32_t id, const mv_expo_native_in *in, int64_t ts_ms)
{
    visit_ctx *v = arg;
    if (id >= v->rw->nslots || v->rw->slots[id].kind != S_NATIVE)
        return 0;
    slot *sl = &v->rw->slots[id];
    size_t words = in->nb * (sizeof(mv_expo_nh_bkt) / sizeof(uint64_t));
    item *it = item_new(v, sl, ts_ms, words);
    if (!it)
        return 0;
    it->value = in->sum;
    it->count = in->count;
    it->nschema = in->schema;
    it->nnb = (uint32_t)in->nb;
    it->nzero = in->zero_count;
    if (in->nb)
        memcpy(it->cum, in->b, in->nb * sizeof(mv_expo_nh_bkt));
    item_stage(v, sl, it);
    return 0;
}

static void interval_once(mv_rw *rw)
{
    mv_coll_snap *snap = mv_coll_snapshot(rw->coll);
    if (!snap)
        return;
    visit_ctx v = {.rw = rw, .enq_ns = mono_ns(), .vhead = UINT32_MAX};
    /* Gauge histograms (--native-gauge-histograms) go to 2.0 receivers only: 1.0 has no
     * classic form of them. */
    mv_export_plan_visitor vis = {.begin = v_begin,
                                  .describe = v_describe,
                                  .value = v_value,
                                  .native = rw->c.version == 2 ? v_native : NULL,
                                  .arg = &v};
    int rc = mv_export_visit_cached(rw->plan, snap, rw->c.sel, &vis);
    mv_coll_snap_free(snap);
    for (uint32_t i = 0; i < rw->c.shards; i++)
        stage_flush(&v, &rw->sh[i]);
    if (rc < 0)
        MV_WARN("remote_write.interval_failed", "error=%s effect=%s", mv_log_q(strerror(-rc)),
                mv_log_q("this interval's samples were not all queued"));
    pthread_mutex_lock(&rw->mu);
    rw->st.samples_queued += v.queued;
    rw->st.dropped_queue_full += v.dropped;
    pthread_mutex_unlock(&rw->mu);
    if (v.dropped)
        MV_WARN("remote_write.queue_full", "dropped=%llu hint=%s", (unsigned long long)v.dropped,
                mv_log_q("the receiver is slow or down; raise --remote-write-queue-samples"));
}

static void *tick_main(void *arg)
{
    mv_rw *rw = arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&rw->mu);
    while (!rw->stop) {
        pthread_mutex_unlock(&rw->mu);
        interval_once(rw);
        pthread_mutex_lock(&rw->mu);
        uint64_t ns = (uint64_t)next.tv_nsec + (uint64_t)rw->c.interval_ms * 1000000ull;
        next.tv_sec += (time_t)(ns / 1000000000ull);
        next.tv_nsec = (long)(ns % 1000000000ull);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec + 5) /* far behind (a stopped process): skip ahead */
            next = now;
        while (!rw->stop && pthread_cond_timedwait(&rw->cv, &rw->mu, &next) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&rw->mu);
    return NULL;
}

/* ---- Senders ------------------------------------------------------------------------------------
 */

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
    shard *s = arg;
    size_t len = size * n;
    if (len > 12 && strncasecmp(buf, "Retry-After:", 12) == 0) {
        size_t o = 12;
        while (o < len && (buf[o] == ' ' || buf[o] == '\t'))
            o++;
        size_t m = len - o;
        while (m && (buf[o + m - 1] == '\r' || buf[o + m - 1] == '\n' || buf[o + m - 1] == ' '))
            m--;
        if (m >= sizeof s->retry_after)
            m = sizeof s->retry_after - 1;
        memcpy(s->retry_after, buf + o, m);
        s->retry_after[m] = '\0';
    } else if (len > 34 && strncasecmp(buf, "X-Prometheus-Remote-Write-", 26) == 0) {
        const char *colon = memchr(buf, ':', len);
        /* *-Samples-Written, *-Histograms-Written, *-Exemplars-Written */
        if (colon && colon - buf > 34 && strncasecmp(colon - 8, "-Written", 8) == 0)
            s->written_seen = 1;
    }
    return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg)
{
    (void)buf;
    (void)arg;
    return size * n; /* the answer's body is not needed (its status says it all) */
}

/* Milliseconds a Retry-After asks for, or -1. */
static long retry_after_ms(const char *v)
{
    if (!*v)
        return -1;
    char *end;
    long s = strtol(v, &end, 10);
    if (end != v && *end == '\0' && s >= 0)
        return (s > RETRY_AFTER_MAX ? RETRY_AFTER_MAX : s) * 1000;
    time_t t = curl_getdate(v, NULL);
    if (t < 0)
        return -1;
    long d = (long)(t - time(NULL));
    if (d < 0)
        d = 0;
    return (d > RETRY_AFTER_MAX ? RETRY_AFTER_MAX : d) * 1000;
}

/* Sleeps ms unless stopping; returns 1 when stopping. */
static int nap(mv_rw *rw, long ms)
{
    struct timespec until; /* rw->cv runs on CLOCK_MONOTONIC */
    clock_gettime(CLOCK_MONOTONIC, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)ms * 1000000ull;
    until.tv_sec += (time_t)(ns / 1000000000ull);
    until.tv_nsec = (long)(ns % 1000000000ull);
    pthread_mutex_lock(&rw->mu);
    while (!rw->stop && pthread_cond_timedwait(&rw->cv, &rw->mu, &until) != ETIMEDOUT)
        ;
    int stop = rw->stop;
    pthread_mutex_unlock(&rw->mu);
    return stop;
}

/* One POST. Returns the HTTP status, or 0 for a transport error. */
static long post(shard *s, const uint8_t *body, size_t len, int version)
{
    mv_rw *rw = s->rw;
    CURL *c = s->curl;
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Encoding: snappy");
    if (version == 2) {
        h = curl_slist_append(h, "Content-Type: application/x-protobuf;proto=io.prometheus.write."
                                 "v2.Request");
        h = curl_slist_append(h, "X-Prometheus-Remote-Write-Version: 2.0.0");
    } else {
        h = curl_slist_append(h, "Content-Type: application/x-protobuf");
        h = curl_slist_append(h, "X-Prometheus-Remote-Write-Version: 0.1.0");
    }
    char auth[TOKEN_MAX + 32];
    if (rw->c.bearer_token_file) {
        pthread_mutex_lock(&rw->mu);
        uint64_t now = mono_ns();
        if (!rw->token_read_ns || now - rw->token_read_ns > 60000000000ull) {
            if (read_secret(rw->c.bearer_token_file, rw->token, sizeof rw->token) == 0)
                rw->token_read_ns = now;
        }
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rw->token);
        pthread_mutex_unlock(&rw->mu);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, (const char *)body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    s->retry_after[0] = '\0';
    s->written_seen = 0;
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    long code = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    else
        MV_WARN("remote_write.error", "url=%s error=%s", mv_log_q(rw->url),
                mv_log_q(curl_easy_strerror(rc)));
    return code;
}

/* Samples a batch carries on the wire: a histogram is its classic series in 1.0, one native
 * histogram in 2.0. */
static uint64_t wire_samples(item **it, size_t n, int version)
{
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += version == 2             ? 1
             : it[i]->s->is_hist == 1 ? it[i]->s->nbounds + 3
             : it[i]->s->is_hist == 2 ? 0
                                      : 1;
    return k;
}

/* Sends one batch until it is acknowledged, refused or the sender stops. */
static void send_batch(shard *s, item **it, size_t n)
{
    mv_rw *rw = s->rw;
    mv_rw_series *ser = malloc(n * sizeof *ser);
    if (!ser) {
        free_items(it, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const series *se = it[i]->s;
        ser[i] = (mv_rw_series){.labels = se->labels,
                                .nlabels = se->nlabels,
                                .value = it[i]->value,
                                .ts_ms = it[i]->ts_ms,
                                .is_hist = se->is_hist,
                                .bounds = se->bounds,
                                .cum = it[i]->cum,
                                .nbounds = se->nbounds,
                                .sum = it[i]->value,
                                .count = it[i]->count,
                                .pb_labels = se->pb,
                                .pb_len = se->pb_len,
                                .native_schema = it[i]->nschema,
                                .zero_count = it[i]->nzero,
                                .nbkt = (const mv_expo_nh_bkt *)it[i]->cum,
                                .nnbkt = it[i]->nnb};
    }
    long backoff = rw->c.min_backoff_ms;
    int encoded_version = 0;
    uint8_t *body = NULL;
    size_t len = 0, raw = 0;
    for (;;) {
        pthread_mutex_lock(&rw->mu);
        int version = rw->version;
        pthread_mutex_unlock(&rw->mu);
        if (version != encoded_version) {
            free(body);
            body = NULL;
            if (mv_rw_encode(version, ser, n, rw->c.native_set ? rw->c.native_schema : 6, &body,
                             &len, &raw) != 0) {
                MV_WARN("remote_write.encode_failed", "samples=%zu error=%s", n,
                        mv_log_q("out of memory"));
                break;
            }
            encoded_version = version;
            /* After a fallback to 1.0, the gauge histograms of the batch are not sent. */
            uint64_t nat = 0;
            for (size_t i = 0; version == 1 && i < n; i++)
                nat += ser[i].is_hist == 2;
            if (nat) {
                pthread_mutex_lock(&rw->mu);
                rw->st.dropped_native_v1 += nat;
                pthread_mutex_unlock(&rw->mu);
                if (nat == n)
                    break;
            }
        }
        long code = post(s, body, len, version);
        uint64_t ns = wire_samples(it, n, version);
        pthread_mutex_lock(&rw->mu);
        rw->st.requests++;
        if (code >= 200 && code < 300 && version == 2 && !s->written_seen) {
            /* A 2xx without the written headers: the spec has the sender assume nothing was
             * written (typically a 1.0 receiver that ignored Content-Type and found none of
             * its fields in the body). Send the batch again as 1.0, and 1.0 from now on. */
            rw->st.written_missing++;
            rw->version = 1;
            rw->st.version = 1;
            rw->st.fallbacks_v1++;
            pthread_mutex_unlock(&rw->mu);
            MV_WARN("remote_write.fallback", "url=%s status=%ld effect=%s", mv_log_q(rw->url), code,
                    mv_log_q("2.0 answer without X-Prometheus-Remote-Write-*-Written headers: "
                             "batch sent again, remote write 1.0 from now on"));
            continue;
        }
        if (code >= 200 && code < 300) {
            rw->st.samples_sent += ns;
            rw->st.bytes_sent += len;
            rw->st.bytes_uncompressed += raw;
            pthread_mutex_unlock(&rw->mu);
            break;
        }
        rw->st.requests_failed++;
        if (code == 415 && version == 2) {
            /* The receiver does not take 2.0: remote write 1.0 from now on. */
            rw->version = 1;
            rw->st.version = 1;
            rw->st.fallbacks_v1++;
            pthread_mutex_unlock(&rw->mu);
            MV_WARN("remote_write.fallback", "url=%s status=415 effect=%s", mv_log_q(rw->url),
                    mv_log_q("remote write 1.0 from now on"));
            continue;
        }
        if (code >= 400 && code < 500 && code != 429) {
            rw->st.dropped_http_4xx += ns;
            pthread_mutex_unlock(&rw->mu);
            MV_WARN("remote_write.refused", "url=%s status=%ld samples=%zu effect=%s",
                    mv_log_q(rw->url), code, n, mv_log_q("batch dropped, not retried"));
            break;
        }
        rw->st.samples_retried += ns;
        pthread_mutex_unlock(&rw->mu);
        long wait = backoff;
        long ra = (code == 429 || code == 503) ? retry_after_ms(s->retry_after) : -1;
        if (ra >= 0)
            wait = ra;
        else if (backoff < (long)rw->c.max_backoff_ms)
            backoff =
                backoff * 2 > (long)rw->c.max_backoff_ms ? (long)rw->c.max_backoff_ms : backoff * 2;
        if (nap(rw, wait))
            break;
    }
    free(body);
    free(ser);
    free_items(it, n);
}

static void *shard_main(void *arg)
{
    shard *s = arg;
    mv_rw *rw = s->rw;
    item **batch = malloc(rw->c.max_per_send * sizeof *batch);
    if (!batch)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->n == 0) {
            pthread_mutex_lock(&rw->mu);
            int stop = rw->stop;
            pthread_mutex_unlock(&rw->mu);
            if (stop)
                break;
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 200000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->cv, &s->mu, &until);
        }
        if (s->n == 0) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        size_t n = s->n < rw->c.max_per_send ? s->n : rw->c.max_per_send;
        for (size_t i = 0; i < n; i++)
            batch[i] = s->ring[(s->head + i) % s->cap];
        s->head = (s->head + n) % s->cap;
        s->n -= n;
        s->inflight = n;
        s->inflight_enq = batch[0]->enq_ns;
        pthread_mutex_unlock(&s->mu);
        send_batch(s, batch, n);
        pthread_mutex_lock(&s->mu);
        s->inflight = 0;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&rw->mu);
        int stop = rw->stop;
        pthread_mutex_unlock(&rw->mu);
        if (stop)
            break;
    }
    free(batch);
    return NULL;
}

/* ---- Lifecycle
 * ----------------------------------------------------------------------------------- */

static int curl_setup(mv_rw *rw, shard *s)
{
    CURL *c = s->curl = curl_easy_init();
    if (!c)
        return -ENOMEM;
    curl_easy_setopt(c, CURLOPT_URL, rw->url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)rw->c.timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)rw->c.timeout_ms);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (rw->c.ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, rw->c.ca_file);
    if (rw->c.cert_file)
        curl_easy_setopt(c, CURLOPT_SSLCERT, rw->c.cert_file);
    if (rw->c.key_file)
        curl_easy_setopt(c, CURLOPT_SSLKEY, rw->c.key_file);
    if (rw->c.insecure_skip_verify) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (rw->c.basic_user) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERNAME, rw->c.basic_user);
        curl_easy_setopt(c, CURLOPT_PASSWORD, rw->password);
    }
    return 0;
}

int mv_rw_create(const mv_rw_config *c, mv_coll *coll, mv_rw **out)
{
    *out = NULL;
    if (mv_rw_config_check(c))
        return -EINVAL;
    mv_rw *rw = calloc(1, sizeof *rw);
    if (!rw)
        return -ENOMEM;
    rw->c = *c;
    rw->coll = coll;
    rw->version = rw->st.version = c->version;
    rw->url = strdup(c->url);
    rw->plan = mv_export_cache_create();
    size_t sb = 1;
    for (size_t i = 0; i < c->nexternal; i++)
        sb += strlen(c->external[i].name) + strlen(c->external[i].value) + 2;
    rw->ext = calloc(c->nexternal + 1, sizeof *rw->ext);
    rw->strs = malloc(sb);
    if (!rw->url || !rw->ext || !rw->strs || !rw->plan) {
        mv_export_cache_destroy(rw->plan);
        free(rw->url);
        free(rw->ext);
        free(rw->strs);
        free(rw);
        return -ENOMEM;
    }
    char *o = rw->strs;
    for (size_t i = 0; i < c->nexternal; i++) {
        size_t ln = strlen(c->external[i].name) + 1, lv = strlen(c->external[i].value) + 1;
        rw->ext[i].name = memcpy(o, c->external[i].name, ln);
        o += ln;
        rw->ext[i].value = memcpy(o, c->external[i].value, lv);
        o += lv;
    }
    rw->next = c->nexternal;
    rw->c.external = NULL;
    if (c->basic_password_file &&
        read_secret(c->basic_password_file, rw->password, sizeof rw->password) != 0)
        MV_WARN("remote_write.secret", "file=%s error=%s", mv_log_q(c->basic_password_file),
                mv_log_q("cannot read the basic auth password"));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    pthread_mutex_init(&rw->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rw->cv, &ca);
    pthread_condattr_destroy(&ca);
    size_t per = (size_t)(c->queue_samples / c->shards);
    uint32_t started = 0;
    int rc = 0;
    for (uint32_t i = 0; i < c->shards; i++) {
        shard *s = &rw->sh[i];
        s->rw = rw;
        s->cap = per;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        s->ring = malloc(per * sizeof *s->ring);
        s->stage_cap = c->max_per_send < per ? c->max_per_send : per;
        if (s->stage_cap > STAGE_MAX)
            s->stage_cap = STAGE_MAX;
        s->stage = malloc(s->stage_cap * sizeof *s->stage);
        if (!s->ring || !s->stage || curl_setup(rw, s)) {
            rc = -ENOMEM;
            break;
        }
    }
    for (uint32_t i = 0; rc == 0 && i < c->shards; i++, started++)
        if (pthread_create(&rw->sh[i].th, NULL, shard_main, &rw->sh[i]))
            rc = -ENOMEM;
    if (rc == 0 && pthread_create(&rw->tick, NULL, tick_main, rw))
        rc = -ENOMEM;
    if (rc) {
        pthread_mutex_lock(&rw->mu);
        rw->stop = 1;
        pthread_cond_broadcast(&rw->cv);
        pthread_mutex_unlock(&rw->mu);
        for (uint32_t i = 0; i < started; i++)
            pthread_join(rw->sh[i].th, NULL);
        rw->c.shards = c->shards;
        rw->tick = 0;
        /* fall through to the common free */
        for (uint32_t i = 0; i < c->shards; i++) {
            if (rw->sh[i].curl)
                curl_easy_cleanup(rw->sh[i].curl);
            free(rw->sh[i].ring);
            free(rw->sh[i].stage);
        }
        mv_export_cache_destroy(rw->plan);
        free(rw->url);
        free(rw->ext);
        free(rw->strs);
        free(rw);
        return rc;
    }
    MV_INFO("remote_write.started",
            "url=%s version=%d interval_ms=%u shards=%u queue_samples=%llu max_per_send=%u "
            "external_labels=%zu auth=%s",
            mv_log_q(rw->url), c->version, c->interval_ms, c->shards,
            (unsigned long long)c->queue_samples, c->max_per_send, c->nexternal,
            c->bearer_token_file ? "bearer"
            : c->basic_user      ? "basic"
                                 : "none");
    *out = rw;
    return 0;
}

void mv_rw_destroy(mv_rw *rw)
{
    if (!rw)
        return;
    pthread_mutex_lock(&rw->mu);
    rw->stop = 1;
    pthread_cond_broadcast(&rw->cv);
    pthread_mutex_unlock(&rw->mu);
    pthread_join(rw->tick, NULL);
    for (uint32_t i = 0; i < rw->c.shards; i++) {
        shard *s = &rw->sh[i];
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        for (size_t k = 0; k < s->n; k++)
            free_items(&s->ring[(s->head + k) % s->cap], 1);
        free(s->ring);
        free(s->stage);
        curl_easy_cleanup(s->curl);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    free(rw->seen.key);
    free(rw->seen.ts);
    free(rw->slots);
    names_release(rw->nm, 1);
    mv_export_cache_destroy(rw->plan);
    pthread_mutex_destroy(&rw->mu);
    pthread_cond_destroy(&rw->cv);
    free(rw->url);
    free(rw->ext);
    free(rw->strs);
    free(rw);
}

void mv_rw_get_stats(mv_rw *rw, mv_rw_stats *st)
{
    uint64_t now = mono_ns(), oldest = 0, q = 0;
    for (uint32_t i = 0; i < rw->c.shards; i++) {
        shard *s = &rw->sh[i];
        pthread_mutex_lock(&s->mu);
        q += s->n + s->inflight;
        if (s->n || s->inflight) {
            uint64_t t = s->inflight ? s->inflight_enq : s->ring[s->head]->enq_ns;
            if (!oldest || t < oldest)
                oldest = t;
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_lock(&rw->mu);
    *st = rw->st;
    pthread_mutex_unlock(&rw->mu);
    st->queue_samples = q;
    st->oldest_age_s = oldest ? (double)(now - oldest) / 1e9 : 0;
}

static void fam_u64(mv_expo *e, const char *name, mv_expo_type t, const char *help,
                    const char *lname, const char *lval, uint64_t v)
{
    mv_expo_label l = {lname, lval};
    mv_expo_family(e, name, t, help, NULL);
    mv_expo_sample_u64(e, NULL, &l, lname ? 1 : 0, NULL, 0, NULL, 0, v, MV_EXPO_NO_TS);
}

int mv_rw_render(mv_rw *rw, mv_expo *e)
{
    mv_rw_stats st;
    mv_rw_get_stats(rw, &st);
    fam_u64(e, "microview_remote_write_samples_total", MV_EXPO_COUNTER,
            "Samples acknowledged by the remote write receiver.", NULL, NULL, st.samples_sent);
    mv_expo_family(
        e, "microview_remote_write_samples_dropped_total", MV_EXPO_COUNTER,
        "Samples not delivered: reason queue_full (the queue was full when they were "
        "taken), http_4xx (refused by the receiver, not retried) or native_in_1.0 (gauge "
        "histograms after a fallback to remote write 1.0).",
        NULL);
    mv_expo_label r1 = {"reason", "queue_full"}, r2 = {"reason", "http_4xx"},
                  r3 = {"reason", "native_in_1.0"};
    mv_expo_sample_u64(e, NULL, &r1, 1, NULL, 0, NULL, 0, st.dropped_queue_full, MV_EXPO_NO_TS);
    mv_expo_sample_u64(e, NULL, &r2, 1, NULL, 0, NULL, 0, st.dropped_http_4xx, MV_EXPO_NO_TS);
    mv_expo_sample_u64(e, NULL, &r3, 1, NULL, 0, NULL, 0, st.dropped_native_v1, MV_EXPO_NO_TS);
    fam_u64(e, "microview_remote_write_samples_retried_total", MV_EXPO_COUNTER,
            "Samples in requests that were tried again (5xx, 429, transport errors).", NULL, NULL,
            st.samples_retried);
    fam_u64(e, "microview_remote_write_requests_total", MV_EXPO_COUNTER,
            "Remote write requests sent, each try counted.", NULL, NULL, st.requests);
    fam_u64(e, "microview_remote_write_requests_failed_total", MV_EXPO_COUNTER,
            "Remote write tries that did not get a 2xx answer.", NULL, NULL, st.requests_failed);
    fam_u64(e, "microview_remote_write_bytes_total", MV_EXPO_COUNTER,
            "Compressed bytes of acknowledged remote write requests.", NULL, NULL, st.bytes_sent);
    fam_u64(e, "microview_remote_write_queue_samples", MV_EXPO_GAUGE,
            "Items (a histogram is one) not yet acknowledged: queued or being sent.", NULL, NULL,
            st.queue_samples);
    mv_expo_family(e, "microview_remote_write_queue_oldest_age_seconds", MV_EXPO_GAUGE,
                   "Age of the oldest item not yet acknowledged (0: none).", NULL);
    mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, st.oldest_age_s, MV_EXPO_NO_TS);
    fam_u64(e, "microview_remote_write_version", MV_EXPO_GAUGE,
            "Remote write protocol in use (1 or 2; 2 falls back to 1 after a 415).", NULL, NULL,
            (uint64_t)st.version);
    fam_u64(e, "microview_remote_write_fallbacks_total", MV_EXPO_COUNTER,
            "Falls back from remote write 2.0 to 1.0 (a 415, or a 2xx without the written "
            "headers).",
            NULL, NULL, st.fallbacks_v1);
    fam_u64(e, "microview_remote_write_written_headers_missing_total", MV_EXPO_COUNTER,
            "Remote write 2.0 answers without X-Prometheus-Remote-Write-*-Written headers.", NULL,
            NULL, st.written_missing);
    return 0;
}
