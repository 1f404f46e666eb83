/* libmicroview: open a segment, register metrics, update them with plain stores. */
#include "microview.h"
#include "mv_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* A histogram's bucket lookup: the bounds' order keys (ordered_key) cut into `cells` equal
 * ranges from the first bound's key to the last's. cell[c] holds the first and the last
 * bucket an observation whose key falls in range c can land in; the bounds between them
 * (none or one in most cells) are then compared as a binary search would. An observation
 * costs one table load and about one comparison instead of log2(n) hard-to-predict
 * branches (80 log-spaced bounds: ~7). */
#define BUCKET_CELLS_MAX 256

struct mv_histogram {
    uint64_t *w;          /* value words: count, sum, buckets..., checksum */
    double *bounds;       /* process-local copy */
    uint64_t *bucket_wt;  /* weight(2+i) + weight(0), per bucket */
    uint64_t sum_wt;      /* weight(1) */
    uint64_t key_first;   /* ordered_key of bounds[0] */
    uint64_t key_last;    /* ordered_key of bounds[n - 1] */
    uint8_t (*cell)[2];   /* per key range: first and last candidate bucket */
    uint8_t cell_shift;   /* key range of a cell: (key - key_first) >> cell_shift */
    uint16_t n;           /* finite bounds */
    uint16_t check_index; /* n + 3 */
    uint8_t pair;         /* count and sum updated by one 16-byte CAS (see observe) */
    uint32_t shard_mask;  /* shards - 1: 0 when the histogram is not sharded */
    uint32_t shard_words; /* words from one shard to the next */
    mv_histogram *next;
};

struct mv_segment {
    char *path;
    dev_t dev; /* the file's identity, to tell a live lock holder (it maps the file) */
    ino_t ino;
    unsigned char *base;
    size_t size;
    mv_seg_header *h;
    pthread_mutex_t mu; /* serialises registration within this process */
    int packed;         /* MICROVIEW_PLACEMENT=packed: slots back to back, not on lines */
    unsigned shards;    /* shards of the metrics registered next (mv_set_shards) */
    mv_histogram *hists;
};

static _Thread_local char g_detail[256];
static uint64_t g_scratch[8]; /* target of handles whose registration failed */
static struct mv_histogram g_scratch_hist;

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_detail, sizeof g_detail, fmt, ap);
    va_end(ap);
    return code;
}

const char *mv_errdetail(void)
{
    return g_detail;
}

const char *mv_strerror(int err)
{
    switch (err) {
    case MV_OK:
        return "ok";
    case MV_ERR_NOENV:
        return "MICROVIEW_SEGMENT is not set";
    case MV_ERR_NOSEGMENT:
        return "segment not found";
    case MV_ERR_FORMAT:
        return "not a valid MicroView segment";
    case MV_ERR_FULL:
        return "segment full (ask for a larger segment: pod annotation "
               "microview.io/metrics-memory)";
    case MV_ERR_NAME:
        return "invalid metric or label name";
    case MV_ERR_INVALID:
        return "invalid argument";
    case MV_ERR_CONFLICT:
        return "metric already registered with another type or buckets";
    case MV_ERR_BUSY:
        return "segment registration lock busy";
    case MV_ERR_NOMEM:
        return "out of memory";
    case MV_ERR_IO:
        return "I/O error";
    default:
        return "unknown error";
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mv_heartbeat(mv_segment *s)
{
    if (s)
        __atomic_store_n(&s->h->heartbeat_ns, now_ns(), __ATOMIC_RELAXED);
}

size_t mv_segment_size(const mv_segment *s)
{
    return s ? s->size : 0;
}

const char *mv_segment_path(const mv_segment *s)
{
    return s ? s->path : NULL;
}

int mv_segment_usage(const mv_segment *s, mv_usage *out)
{
    if (!s || !out)
        return fail(MV_ERR_INVALID, "segment handle or output is NULL");
    const mv_seg_header *h = s->h;
    out->segment_size = s->size;
    out->values_used = __atomic_load_n(&h->values_used, __ATOMIC_RELAXED);
    out->values_size = h->values_size;
    out->catalog_used = __atomic_load_n(&h->catalog_used, __ATOMIC_RELAXED);
    out->catalog_size = h->catalog_size;
    out->records = __atomic_load_n(&h->metric_count, __ATOMIC_RELAXED);
    double v = h->values_size ? (double)out->values_used / h->values_size : 1;
    double c = h->catalog_size ? (double)out->catalog_used / h->catalog_size : 1;
    out->fullness = v > c ? v : c;
    return MV_OK;
}

/* A size as a Kubernetes quantity: 128Ki, 1Mi, or bytes. */
static void quantity(uint64_t n, char *out, size_t cap)
{
    if (n % (1024ull * 1024 * 1024) == 0)
        snprintf(out, cap, "%lluGi", (unsigned long long)(n >> 30));
    else if (n % (1024ull * 1024) == 0)
        snprintf(out, cap, "%lluMi", (unsigned long long)(n >> 20));
    else if (n % 1024 == 0)
        snprintf(out, cap, "%lluKi", (unsigned long long)(n >> 10));
    else
        snprintf(out, cap, "%llu", (unsigned long long)n);
}

static const char *type_word(uint8_t type)
{
    switch (type) {
    case MV_SEG_COUNTER:
    case MV_SEG_COUNTER_F:
        return "counter";
    case MV_SEG_GAUGE:
        return "gauge";
    case MV_SEG_HISTOGRAM:
        return "histogram";
    default:
        return "tombstone of";
    }
}

/* The full-segment error (docs/segment-format.md section 8.1): the area, what it holds, what
 * did not fit, and the size to ask for in the pod annotation (twice this segment's). */
static int fail_full(const mv_segment *s, const char *area, uint32_t used, uint32_t cap,
                     const mv_seg_metric_desc *d, uint32_t need)
{
    char have[32], ask[32];
    quantity(s->size, have, sizeof have);
    quantity(2ull * s->size, ask, sizeof ask);
    return fail(MV_ERR_FULL,
                "segment full: %s area has %u of %u bytes used, %s %s needs %u; this segment is "
                "%s: ask for a larger one with the pod annotation microview.io/metrics-memory: %s "
                "(%s)",
                area, used, cap, type_word(d->type), d->name, need, have, ask, s->path);
}

int mv_open_from_env(mv_segment **out)
{
    const char *p = getenv(MICROVIEW_ENV_SEGMENT);
    *out = NULL;
    if (!p || !*p)
        return fail(MV_ERR_NOENV,
                    "environment variable " MICROVIEW_ENV_SEGMENT " is not set; request the "
                    "microview.io/metrics resource (or set it to a segment path)");
    return mv_open(p, out);
}

/* Formats an all-zero file under an exclusive flock so that two processes
 * opening a fresh file at once format it exactly once. */
static int format_if_zero(int fd, mv_segment *s)
{
    static const char zero[8];
    if (memcmp(s->h->magic, zero, 8) != 0)
        return MV_OK;
    if (flock(fd, LOCK_EX) != 0)
        return fail(MV_ERR_IO, "flock %s: %s", s->path, strerror(errno));
    int rc = MV_OK;
    if (memcmp(s->h->magic, zero, 8) == 0) {
        for (size_t i = 0; i < MV_SEG_HEADER_SIZE; i++) {
            if (s->base[i]) {
                rc = fail(MV_ERR_FORMAT, "%s: magic is zero but the header is not", s->path);
                break;
            }
        }
        mv_seg_error e;
        if (rc == MV_OK && mv_seg_format(s->base, s->size, 0, &e) != MV_SEG_OK)
            rc = fail(MV_ERR_FORMAT, "%s: cannot format: %s", s->path, e.detail);
    }
    flock(fd, LOCK_UN);
    return rc;
}

/* $MICROVIEW_SHARDS: a power of two from 2 to 64, else 1 (unset, "1", or not a valid count:
 * the process still runs, with metrics that are not sharded). */
static unsigned env_shards(void)
{
    const char *e = getenv(MICROVIEW_ENV_SHARDS);
    if (!e || !*e)
        return 1;
    char *end;
    unsigned long n = strtoul(e, &end, 10);
    return *end == '\0' && mv_seg_valid_shards((unsigned)(n > 64 ? 0 : n)) ? (unsigned)n : 1;
}

int mv_set_shards(mv_segment *s, unsigned shards)
{
    if (!s)
        return fail(MV_ERR_INVALID, "segment handle is NULL");
    if (shards != 1 && !mv_seg_valid_shards(shards))
        return fail(MV_ERR_INVALID, "shards must be 1 or a power of two from 2 to %d (got %u)",
                    MV_SEG_SHARDS_MAX, shards);
    pthread_mutex_lock(&s->mu);
    s->shards = shards;
    pthread_mutex_unlock(&s->mu);
    return MV_OK;
}

static int seg_lock(mv_segment *s);
static void seg_repair(mv_segment *s, uint64_t *gen);
static int have_cas16(void);

int mv_open(const char *path, mv_segment **out)
{
    struct stat st;
    int fd, rc;
    mv_segment *s;

    *out = NULL;
    if (!path)
        return fail(MV_ERR_INVALID, "segment path is NULL");
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return fail(errno == ENOENT ? MV_ERR_NOSEGMENT : MV_ERR_IO, "open %s: %s", path,
                    strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = fail(MV_ERR_IO, "stat %s: %s", path, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)MV_SEG_MIN_SIZE ||
        st.st_size > (off_t)MV_SEG_MAX_SIZE || st.st_size % MV_SEG_ALIGN) {
        rc = fail(MV_ERR_FORMAT, "%s: a segment is a regular file of 1 KiB..1 GiB (size %lld)",
                  path, (long long)st.st_size);
        goto close_fd;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        rc = fail(MV_ERR_NOMEM, "out of memory");
        goto free_s;
    }
    s->size = (size_t)st.st_size;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        rc = fail(MV_ERR_IO, "mmap %s: %s", path, strerror(errno));
        goto free_s;
    }
    s->h = (mv_seg_header *)(void *)s->base;
    if ((rc = format_if_zero(fd, s)) != MV_OK)
        goto unmap;

    /* Validate what is there now; a registration re-validates under the lock. */
    mv_seg_catalog *cat;
    mv_seg_error e;
    /* This parse runs without the registration lock, on the live mapping: a
     * concurrent append by another process can make the copy inconsistent in
     * any way (e.g. catalog_used from after the append, metric_count from
     * before). Only a rejection from a copy whose generation did not move is
     * a real one; otherwise retry. */
    mv_seg_reason r = MV_SEG_E_BUSY;
    int racing = 1;
    for (int tries = 0; tries < 200 && r != MV_SEG_OK && racing; tries++) {
        if (r == MV_SEG_E_BUSY && tries >= 40)
            break; /* busy for 200 ms: see below */
        uint64_t g0 = __atomic_load_n(&s->h->generation, __ATOMIC_ACQUIRE);
        r = mv_seg_catalog_parse(s->base, s->size, s->size, &cat, &e);
        uint64_t g1 = __atomic_load_n(&s->h->generation, __ATOMIC_ACQUIRE);
        racing = r == MV_SEG_E_BUSY || (g0 & 1) || g0 != g1;
        if (r != MV_SEG_OK && racing)
            usleep(5000);
    }
    if (r == MV_SEG_E_BUSY && seg_lock(s) == MV_OK) {
        /* Still busy after a second: its appender died (section 8, step 2). */
        uint64_t gen = __atomic_load_n(&s->h->generation, __ATOMIC_ACQUIRE);
        seg_repair(s, &gen);
        __atomic_store_n(&s->h->lock, 0, __ATOMIC_RELEASE);
        r = mv_seg_catalog_parse(s->base, s->size, s->size, &cat, &e);
        racing = 0;
    }
    if (r != MV_SEG_OK && !racing) {
        rc = fail(MV_ERR_FORMAT, "%s: %s (%s)", path, e.detail, mv_seg_reason_name(r));
        goto unmap;
    }
    if (r == MV_SEG_OK)
        mv_seg_catalog_free(cat);
    pthread_mutex_init(&s->mu, NULL);
    const char *placement = getenv(MICROVIEW_ENV_PLACEMENT);
    s->packed = placement && strcmp(placement, "packed") == 0;
    s->shards = env_shards();
    __atomic_store_n(&s->h->writer_pid, (uint32_t)getpid(), __ATOMIC_RELAXED);
    mv_heartbeat(s);
    close(fd);
    *out = s;
    return MV_OK;

unmap:
    munmap(s->base, s->size);
free_s:
    if (s)
        free(s->path);
    free(s);
close_fd:
    close(fd);
    return rc;
}

void mv_close(mv_segment *s)
{
    if (!s)
        return;
    for (mv_histogram *h = s->hists, *next; h; h = next) {
        next = h->next;
        free(h->bounds);
        free(h->bucket_wt);
        free(h->cell);
        free(h);
    }
    munmap(s->base, s->size);
    pthread_mutex_destroy(&s->mu);
    free(s->path);
    free(s);
}

/* ---- Registration ------------------------------------------------------------- */

/* Whether process `pid` can be the lock holder: it exists and maps this segment. A pid that
 * exists but maps no file of this device and inode is a reused pid: the holder died. When
 * /proc/PID/maps cannot be read (another user, no /proc), the holder counts as alive. */
static int holder_alive(const mv_segment *s, pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 1;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned maj, min;
        unsigned long long ino;
        /* address perms offset dev inode [path] */
        if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3)
            found = maj == major(s->dev) && min == minor(s->dev) && (ino_t)ino == s->ino;
        size_t n = strlen(line);
        while (n && line[n - 1] != '\n' && fgets(line, sizeof line, f)) /* skip a long tail */
            n = strlen(line);
    }
    fclose(f);
    return found;
}

/* Takes the cross-process registration lock (header word `lock` = owner pid). A lock whose
 * holder is gone (no such process, or a process that does not map the segment: its pid was
 * reused) is taken over. */
static int seg_lock(mv_segment *s)
{
    uint32_t self = (uint32_t)getpid();
    for (int i = 0; i < 4000; i++) {
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&s->h->lock, &expect, self, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return MV_OK;
        if (expect == self)
            return fail(MV_ERR_BUSY, "registration lock already held by this process");
        if (i > 10 && !holder_alive(s, (pid_t)expect) &&
            __atomic_compare_exchange_n(&s->h->lock, &expect, self, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return MV_OK;
        usleep(500);
    }
    return fail(MV_ERR_BUSY, "%s: registration lock held by pid %u for over 2 s", s->path,
                __atomic_load_n(&s->h->lock, __ATOMIC_RELAXED));
}

/* Spec section 8, step 2, under the lock: an odd generation means an appender died between
 * steps 6 and 10. Its counts may be half-stored (it can die inside step 9), so they are
 * recomputed from the records before the generation is made even again. */
static void seg_repair(mv_segment *s, uint64_t *gen)
{
    if (!(*gen & 1))
        return;
    uint32_t count, cused, vused;
    mv_seg_recount(s->base, s->size, &count, &cused, &vused);
    mv_seg_header *h = s->h;
    __atomic_store_n(&h->values_used, vused, __ATOMIC_RELAXED);
    __atomic_store_n(&h->catalog_used, cused, __ATOMIC_RELAXED);
    __atomic_store_n(&h->metric_count, count, __ATOMIC_RELAXED);
    __atomic_store_n(&h->generation, ++*gen, __ATOMIC_RELEASE);
}

static void seg_unlock(mv_segment *s)
{
    __atomic_store_n(&s->h->lock, 0, __ATOMIC_RELEASE);
}

static int same_labels(const mv_seg_metric *m, const mv_seg_metric_desc *d)
{
    if (m->label_count != d->label_count)
        return 0;
    for (uint16_t i = 0; i < d->label_count; i++) {
        const char *v = d->labels[i].value ? d->labels[i].value : "";
        if (strcmp(m->labels[i].key, d->labels[i].key) || strcmp(m->labels[i].value, v))
            return 0;
    }
    return 1;
}

static int map_reason(mv_seg_reason r)
{
    switch (r) {
    case MV_SEG_E_NAME:
        return MV_ERR_NAME;
    case MV_SEG_E_FULL:
        return MV_ERR_FULL;
    case MV_SEG_E_NOMEM:
        return MV_ERR_NOMEM;
    default:
        return MV_ERR_INVALID;
    }
}

/* Spec section 8, steps 4 to 10, under both locks: appends the record for `d` with its slot
 * at `voff` (a tombstone: the deleted record's value_offset, and no slot), checking room
 * first. *words gets the new slot. */
static int append_record(mv_segment *s, mv_seg_metric_desc *d, uint32_t voff, uint64_t gen,
                         uint64_t **words)
{
    mv_seg_header *h = s->h;
    uint32_t rsize = mv_seg_record_size(d), vsize = mv_seg_value_size(d);
    uint32_t coff = h->catalog_used;
    int tomb = d->type == MV_SEG_TOMBSTONE;
    if (!tomb && (uint64_t)voff + vsize > h->values_size)
        return fail_full(s, "value", h->values_used, h->values_size, d, vsize);
    if ((uint64_t)coff + rsize > h->catalog_size || h->metric_count >= MV_SEG_METRICS_MAX)
        return fail_full(s, "catalog", coff, h->catalog_size, d, rsize);
    __atomic_store_n(&h->generation, gen + 1, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t *w = (uint64_t *)(void *)(s->base + h->values_offset + voff);
    for (uint32_t i = 0; i < vsize / 8; i++)
        __atomic_store_n(&w[i], 0, __ATOMIC_RELAXED);
    mv_seg_record_encode(s->base + h->catalog_offset + coff, d, voff);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (!tomb)
        __atomic_store_n(&h->values_used, voff + vsize, __ATOMIC_RELAXED);
    __atomic_store_n(&h->catalog_used, coff + rsize, __ATOMIC_RELAXED);
    __atomic_store_n(&h->metric_count, h->metric_count + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&h->generation, gen + 2, __ATOMIC_RELEASE);
    if (words)
        *words = w;
    return MV_OK;
}

/* Spec section 8, steps 1 to 3: takes both locks, repairs, parses the catalog (*cat). */
static int begin_append(mv_segment *s, uint64_t *gen, mv_seg_catalog **cat)
{
    mv_seg_error e;
    mv_seg_reason r;
    int rc;
    pthread_mutex_lock(&s->mu);
    if ((rc = seg_lock(s)) != MV_OK) {
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    *gen = __atomic_load_n(&s->h->generation, __ATOMIC_ACQUIRE);
    seg_repair(s, gen); /* an appender died half-way */
    if ((r = mv_seg_catalog_parse(s->base, s->size, s->size, cat, &e)) != MV_SEG_OK) {
        seg_unlock(s);
        pthread_mutex_unlock(&s->mu);
        return fail(MV_ERR_FORMAT, "%s: %s (%s)", s->path, e.detail, mv_seg_reason_name(r));
    }
    return MV_OK;
}

static void end_append(mv_segment *s, mv_seg_catalog *cat, int rc)
{
    mv_seg_catalog_free(cat);
    seg_unlock(s);
    pthread_mutex_unlock(&s->mu);
    if (rc >= 0)
        mv_heartbeat(s);
}

/* Appends (or finds) the record for `d`, sharded as mv_set_shards said; *slot gets the value
 * words (the first shard's) and *shards the record's shard count (1: not sharded). */
static int do_register(mv_segment *s, mv_seg_metric_desc *d, uint64_t **slot, unsigned *shards)
{
    mv_seg_error e;
    mv_seg_reason r;
    mv_seg_catalog *cat;
    uint64_t gen;
    int rc;

    if (!s)
        return fail(MV_ERR_INVALID, "segment handle is NULL");
    if ((r = mv_seg_desc_check(d, &e)) != MV_SEG_OK)
        return fail(map_reason(r), "%s", e.detail);
    if ((rc = begin_append(s, &gen, &cat)) != MV_OK)
        return rc;
    d->shards = (uint16_t)(s->shards > 1 ? s->shards : 0);
    mv_seg_header *h = s->h;
    uint8_t had = mv_seg_catalog_name_type(cat, d->name); /* deleted records too */
    if (had && had != d->type) {
        rc = fail(MV_ERR_CONFLICT, "metric %s is already registered with type %u", d->name, had);
        goto done;
    }
    for (size_t i = 0; i < mv_seg_catalog_count(cat); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        if (strcmp(m->name, d->name) != 0 || !same_labels(m, d))
            continue;
        if (m->bucket_count != d->bucket_count ||
            (d->bucket_count && memcmp(m->bounds, d->bounds, 8u * d->bucket_count) != 0)) {
            rc = fail(MV_ERR_CONFLICT, "histogram %s is already registered with other buckets",
                      d->name);
            goto done;
        }
        *slot = (uint64_t *)(void *)(s->base + h->values_offset + m->value_offset);
        *shards = m->shards;
        rc = MV_OK;
        goto done;
    }

    uint32_t rsize = mv_seg_record_size(d), vsize = mv_seg_value_size(d);
    /* Each slot on its own cache line(s) while the value area has room to spare: threads
     * updating neighbouring metrics then do not contend for one line (spec section 5.1).
     * MICROVIEW_PLACEMENT=packed trades that for an 8x smaller per-tick copy of counters
     * and gauges. */
    uint32_t voff = s->packed && !d->shards
                        ? h->values_used
                        : mv_seg_place_slot(h->values_used, h->values_size, h->catalog_used,
                                            h->catalog_size, rsize, vsize);
    if ((rc = append_record(s, d, voff, gen, slot)) == MV_OK)
        *shards = d->shards ? d->shards : 1;

done:
    end_append(s, cat, rc);
    return rc;
}

int mv_delete(mv_segment *s, const char *name, const mv_label *labels, size_t nlabels)
{
    mv_seg_catalog *cat;
    uint64_t gen;
    int rc;
    if (!s || !name || nlabels > MV_SEG_LABELS_MAX || (nlabels && !labels))
        return fail(MV_ERR_INVALID, "mv_delete: NULL segment or name, or more than %d labels",
                    MV_SEG_LABELS_MAX);
    mv_seg_metric_desc want = {
        .type = MV_SEG_TOMBSTONE,
        .name = name,
        .labels = (const mv_seg_label *)labels,
        .label_count = (uint16_t)nlabels,
    };
    if ((rc = begin_append(s, &gen, &cat)) != MV_OK)
        return rc;
    rc = 0;
    for (size_t i = 0; i < mv_seg_catalog_count(cat); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        if (strcmp(m->name, name) != 0 || !same_labels(m, &want))
            continue;
        mv_seg_metric_desc d = {
            .type = MV_SEG_TOMBSTONE,
            .name = m->name,
            .labels = m->labels,
            .label_count = m->label_count,
        };
        rc = append_record(s, &d, m->value_offset, gen, NULL);
        if (rc == MV_OK)
            rc = 1;
        break;
    }
    end_append(s, cat, rc);
    return rc;
}

static int register_scalar(mv_segment *s, uint8_t type, const char *name, const char *help,
                           const char *unit, const mv_label *labels, size_t nlabels,
                           uint64_t **slot)
{
    *slot = &g_scratch[0];
    if (nlabels > MV_SEG_LABELS_MAX)
        return fail(MV_ERR_INVALID, "metric %s: %zu labels (at most %d)", name ? name : "", nlabels,
                    MV_SEG_LABELS_MAX);
    mv_seg_metric_desc d = {
        .type = type,
        .name = name,
        .help = help,
        .unit = unit,
        .labels = (const mv_seg_label *)labels,
        .label_count = (uint16_t)nlabels,
    };
    uint64_t *p;
    unsigned shards;
    int rc = do_register(s, &d, &p, &shards);
    if (rc == MV_OK) /* the shard count in the handle's low bits (microview.h, mv__word) */
        *slot = (uint64_t *)(void *)((uintptr_t)p | (uintptr_t)__builtin_ctz(shards));
    return rc;
}

_Static_assert(sizeof(mv_label) == sizeof(mv_seg_label), "label layouts match");

int mv_counter_register(mv_segment *s, const char *name, const char *help, const char *unit,
                        const mv_label *labels, size_t nlabels, mv_counter *out)
{
    return register_scalar(s, MV_SEG_COUNTER, name, help, unit, labels, nlabels, &out->slot);
}

int mv_counter_f_register(mv_segment *s, const char *name, const char *help, const char *unit,
                          const mv_label *labels, size_t nlabels, mv_counter_f *out)
{
    return register_scalar(s, MV_SEG_COUNTER_F, name, help, unit, labels, nlabels, &out->slot);
}

int mv_gauge_register(mv_segment *s, const char *name, const char *help, const char *unit,
                      const mv_label *labels, size_t nlabels, mv_gauge *out)
{
    return register_scalar(s, MV_SEG_GAUGE, name, help, unit, labels, nlabels, &out->slot);
}

/* A key whose unsigned order is the order of the doubles, -0.0 and 0.0 equal (NaN excluded):
 * a negative's bits inverted, a positive's with the sign bit set. */
static inline uint64_t ordered_key(double v)
{
    uint64_t b;
    v += 0.0; /* -0.0 becomes 0.0 */
    memcpy(&b, &v, sizeof b);
    return b >> 63 ? ~b : b | (1ull << 63);
}

/* The first bucket index from `i` on whose bound's key is >= k (bounds ascending). */
static uint32_t first_at_or_above(const mv_histogram *h, uint32_t i, uint64_t k)
{
    while (i < h->n && ordered_key(h->bounds[i]) < k)
        i++;
    return i;
}

/* Builds hg->cell for hg->bounds (ascending, as registration checks); 0 or -1 (ENOMEM). An
 * observation v with key_first < key(v) <= key_last lands in the first bucket whose bound is
 * >= v, which is at or after the first bound whose key reaches the start of v's cell and at or
 * before the first whose key reaches the cell's end. */
static int bucket_table(mv_histogram *hg)
{
    uint32_t cells = 16;
    while (cells < 4u * hg->n && cells < BUCKET_CELLS_MAX)
        cells *= 2;
    hg->key_first = ordered_key(hg->bounds[0]);
    hg->key_last = ordered_key(hg->bounds[hg->n - 1]);
    uint64_t span = hg->key_last - hg->key_first;
    hg->cell_shift = 0;
    while ((span >> hg->cell_shift) >= cells)
        hg->cell_shift++;
    if (!(hg->cell = malloc(cells * sizeof *hg->cell)))
        return -1;
    uint32_t i = 0;
    for (uint64_t c = 0; c < cells; c++) {
        uint64_t start = hg->key_first + (c << hg->cell_shift);
        uint64_t end =
            c < (span >> hg->cell_shift) ? start + ((1ull << hg->cell_shift) - 1) : hg->key_last;
        if (c > (span >> hg->cell_shift)) /* past the last bound: never looked up */
            start = end = hg->key_last;
        /* Both move forward with c: the bounds are walked once. */
        i = first_at_or_above(hg, i, start);
        hg->cell[c][0] = (uint8_t)i;
        i = first_at_or_above(hg, i, end);
        hg->cell[c][1] = (uint8_t)i;
    }
    return 0;
}

/* The bucket of v: the first bound >= v, n when none (NaN: n, no comparison holds). */
static inline uint32_t bucket_of(const mv_histogram *h, double v)
{
    if (v != v)
        return h->n;
    uint64_t k = ordered_key(v);
    if (k <= h->key_first)
        return 0;
    if (k > h->key_last)
        return h->n;
    const uint8_t *c = h->cell[(k - h->key_first) >> h->cell_shift];
    uint32_t lo = c[0], hi = c[1];
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

int mv_histogram_register(mv_segment *s, const char *name, const char *help, const char *unit,
                          const mv_label *labels, size_t nlabels, const double *bounds,
                          size_t nbounds, mv_histogram **out)
{
    *out = &g_scratch_hist;
    if (nlabels > MV_SEG_LABELS_MAX || nbounds == 0 || nbounds > MV_SEG_BUCKETS_MAX)
        return fail(MV_ERR_INVALID, "histogram %s: %zu labels (at most %d), %zu bounds (1..%d)",
                    name ? name : "", nlabels, MV_SEG_LABELS_MAX, nbounds, MV_SEG_BUCKETS_MAX);
    mv_histogram *hg = calloc(1, sizeof *hg);
    if (!hg || !(hg->bounds = malloc(nbounds * sizeof(double))) ||
        !(hg->bucket_wt = malloc((nbounds + 1) * sizeof(uint64_t)))) {
        if (hg)
            free(hg->bounds);
        free(hg);
        return fail(MV_ERR_NOMEM, "out of memory");
    }
    memcpy(hg->bounds, bounds, nbounds * sizeof(double));
    hg->n = (uint16_t)nbounds;
    if (bucket_table(hg) != 0) {
        free(hg->bounds);
        free(hg->bucket_wt);
        free(hg);
        return fail(MV_ERR_NOMEM, "out of memory");
    }
    hg->check_index = (uint16_t)(nbounds + 3);
    hg->sum_wt = mv_seg_hist_weight(1);
    for (size_t i = 0; i <= nbounds; i++)
        hg->bucket_wt[i] = mv_seg_hist_weight((uint32_t)(2 + i)) + mv_seg_hist_weight(0);
    mv_seg_metric_desc d = {
        .type = MV_SEG_HISTOGRAM,
        .name = name,
        .help = help,
        .unit = unit,
        .labels = (const mv_seg_label *)labels,
        .label_count = (uint16_t)nlabels,
        .bounds = bounds,
        .bucket_count = (uint16_t)nbounds,
    };
    unsigned shards;
    int rc = do_register(s, &d, &hg->w, &shards);
    if (rc != MV_OK) {
        free(hg->bounds);
        free(hg->bucket_wt);
        free(hg->cell);
        free(hg);
        return rc;
    }
    hg->pair = ((uintptr_t)hg->w & 15) == 0 && have_cas16(); /* shards: strides of 64 bytes */
    hg->shard_mask = shards - 1;
    hg->shard_words = mv_seg_shard_stride(MV_SEG_HISTOGRAM, hg->n) / 8;
    pthread_mutex_lock(&s->mu);
    hg->next = s->hists;
    s->hists = hg;
    pthread_mutex_unlock(&s->mu);
    *out = hg;
    return MV_OK;
}

int mv_exponential_buckets(double start, double factor, size_t count, double *out)
{
    if (!(start > 0) || !(factor > 1) || !isfinite(start) || !isfinite(factor) || count == 0 ||
        count > MV_SEG_BUCKETS_MAX || !out)
        return fail(MV_ERR_INVALID, "exponential buckets need start > 0, factor > 1, 1..%d buckets",
                    MV_SEG_BUCKETS_MAX);
    double b = start;
    for (size_t i = 0; i < count; i++, b *= factor) {
        if (!isfinite(b))
            return fail(MV_ERR_INVALID, "bucket %zu overflows", i);
        out[i] = b;
    }
    return MV_OK;
}

/* ---- Updates -------------------------------------------------------------- */

#if defined(__x86_64__)
/* Whether the CPU has CMPXCHG16B (CPUID.01H:ECX bit 13): every x86-64 CPU since 2006. */
static int have_cas16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 13));
}

/* 16-byte compare-and-swap of p[0..1] (16-aligned): if {p[0], p[1]} == {*lo, *hi}, stores
 * {nlo, nhi} and returns 1; else loads the current pair into *lo, *hi and returns 0. */
static inline int cas16(uint64_t *p, uint64_t *lo, uint64_t *hi, uint64_t nlo, uint64_t nhi)
{
    unsigned char ok;
    __asm__ __volatile__("lock cmpxchg16b %1\n\tsete %0"
                         : "=&q"(ok), "+m"(*(struct { uint64_t w[2]; } *)(void *)p), "+a"(*lo),
                           "+d"(*hi)
                         : "b"(nlo), "c"(nhi)
                         : "cc", "memory");
    return ok;
}
#else
static int have_cas16(void)
{
    return 0;
}

static inline int cas16(uint64_t *p, uint64_t *lo, uint64_t *hi, uint64_t nlo, uint64_t nhi)
{
    (void)p, (void)lo, (void)hi, (void)nlo, (void)nhi;
    return 0;
}
#endif

unsigned mv__shard_id(void)
{
    static unsigned next;
    static __thread unsigned id;
    while (id == 0) /* 0 means "not assigned yet" */
        id = __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
    return id;
}

/* The word this thread's last gauge add stored to, and what it stored. A thread that adds to
 * one gauge again (a worker keeping an in-flight count) offers that value as the
 * compare-and-swap's expected value instead of loading the word: a load right after a locked
 * store to the same word waits for the store to reach the cache, a load of this thread's own
 * plain store does not (measured in docs/benchmarks.md, "Gauge adds"). A wrong guess (another
 * thread or a gauge_set changed the word since) costs one failed compare-and-swap, which
 * hands back the value to retry with. Initial-exec: two words at a fixed offset from the
 * thread pointer, no __tls_get_addr call in the shared library. */
static __thread struct {
    uint64_t *w;
    uint64_t v;
} tl_add __attribute__((tls_model("initial-exec")));

/* Adds `delta` to the f64 at `w` with a compare-and-swap loop. */
static inline void add_f64(uint64_t *w, double delta)
{
    uint64_t old = tl_add.w == w ? tl_add.v : __atomic_load_n(w, __ATOMIC_RELAXED), nw;
    do {
        double v;
        memcpy(&v, &old, 8);
        v += delta;
        memcpy(&nw, &v, 8);
    } while (!__atomic_compare_exchange_n(w, &old, nw, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    tl_add.w = w;
    tl_add.v = nw;
}

/* A sharded gauge's add, out of line: the unsharded one needs no stack frame. */
__attribute__((noinline, cold)) static void gauge_add_sharded(uint64_t *slot, double delta)
{
    add_f64(mv__word(slot), delta);
}

void mv_gauge_add(mv_gauge g, double delta)
{
    if (delta != delta)
        delta = __builtin_nan(""); /* the one quiet NaN (spec section 9.5) */
    if (__builtin_expect(((uintptr_t)g.slot & 7u) != 0, 0)) {
        gauge_add_sharded(g.slot, delta);
        return;
    }
    add_f64(g.slot, delta);
}

/* A handle's first shard (its word, when it is not sharded); returns the shard count. */
static unsigned handle_shards(uint64_t *slot, const uint64_t **first)
{
    uintptr_t p = (uintptr_t)slot, k = p & 7u;
    *first = (const uint64_t *)(p - k);
    return 1u << k;
}

static double f64_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

uint64_t mv_counter_value(mv_counter c)
{
    const uint64_t *w;
    uint64_t v = 0;
    for (unsigned i = 0, n = handle_shards(c.slot, &w); i < n; i++)
        v += __atomic_load_n(&w[i * 8u], __ATOMIC_RELAXED);
    return v;
}

int mv__counter_f_add_slow(mv_counter_f c, double v)
{
    if (!(v >= 0)) /* NaN or negative */
        return fail(MV_ERR_INVALID, "counter add of %g refused: counters only grow", v);
    add_f64(mv__word(c.slot) + 1, v); /* word 1 of this thread's shard: the fractions */
    return MV_OK;
}

double mv_counter_f_value(mv_counter_f c)
{
    const uint64_t *w;
    uint64_t whole = 0;
    double frac = 0;
    for (unsigned i = 0, n = handle_shards(c.slot, &w); i < n; i++) {
        whole += __atomic_load_n(&w[i * 8u], __ATOMIC_RELAXED);
        frac += f64_bits(__atomic_load_n(&w[i * 8u + 1], __ATOMIC_RELAXED));
    }
    return (double)whole + frac;
}

double mv_gauge_value(mv_gauge g)
{
    const uint64_t *w;
    unsigned n = handle_shards(g.slot, &w);
    double v = f64_bits(__atomic_load_n(&w[0], __ATOMIC_RELAXED)); /* -0.0 stays -0.0 */
    for (unsigned i = 1; i < n; i++)
        v += f64_bits(__atomic_load_n(&w[i * 8u], __ATOMIC_RELAXED));
    return v;
}

/* A sharded gauge's set: shards 1.. to 0, then shard 0 to `v`. Every set stores into shard 0,
 * so of two sets at once the last store wins, as with one word. An add racing with a set on
 * another shard either lands before its zeroing (and is overwritten, as by a set after it) or
 * after it (and counts on top of `v`, as an add after the set); one on shard 0 retries its
 * compare-and-swap on `v`. */
void mv__gauge_set_sharded(mv_gauge g, double v)
{
    const uint64_t *first;
    unsigned n = handle_shards(g.slot, &first);
    uint64_t *w = (uint64_t *)(uintptr_t)first, bits;
    if (v != v)
        v = __builtin_nan("");       /* the one quiet NaN (spec section 9.5) */
    for (unsigned i = 1; i < n; i++) /* a load first: a shard already zero keeps its line */
        if (__atomic_load_n(&w[i * 8u], __ATOMIC_RELAXED) != 0)
            __atomic_store_n(&w[i * 8u], 0, __ATOMIC_RELAXED);
    memcpy(&bits, &v, sizeof bits);
    __atomic_store_n(&w[0], bits, __ATOMIC_RELAXED);
}

/* Every change to the record also adds (new - old) * weight(word) to the
 * checksum word, so in any quiescent state checksum == sum(word[i] *
 * weight(i)). A reader's copy that mixes words from before and after an
 * update fails that equation; see docs/segment-format.md. */
void mv_histogram_observe(mv_histogram *h, double v)
{
    if (h == NULL || h->w == NULL)
        return;
    uint32_t lo = bucket_of(h, v);
    /* NaN counts: no comparison holds, so it lands in the +Inf bucket, where it is made the
     * one quiet NaN (spec section 9.5) before it goes into the sum. */
    if (lo == h->n && v != v)
        v = __builtin_nan("");
    uint64_t *w = h->w, old, nw;
    if (h->shard_mask)
        w += (size_t)(mv__thread_shard() & h->shard_mask) * h->shard_words;
    __atomic_fetch_add(&w[2 + lo], 1, __ATOMIC_RELAXED);
    if (h->pair) {
        /* count and sum in one 16-byte CAS: three locked operations per observation
         * instead of four, and no window between the count and the sum update. */
        uint64_t count = __atomic_load_n(&w[0], __ATOMIC_RELAXED);
        old = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
        do {
            double sum;
            memcpy(&sum, &old, 8);
            sum += v;
            memcpy(&nw, &sum, 8);
        } while (!cas16(w, &count, &old, count + 1, nw));
    } else {
        __atomic_fetch_add(&w[0], 1, __ATOMIC_RELAXED);
        old = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
        do {
            double sum;
            memcpy(&sum, &old, 8);
            sum += v;
            memcpy(&nw, &sum, 8);
        } while (
            !__atomic_compare_exchange_n(&w[1], &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    }
    __atomic_fetch_add(&w[h->check_index], h->bucket_wt[lo] + (nw - old) * h->sum_wt,
                       __ATOMIC_RELEASE);
}

size_t mv_histogram_read(const mv_histogram *h, uint64_t *count, double *sum, uint64_t *buckets,
                         const double **bounds)
{
    uint64_t c = 0;
    double sm = 0;
    if (bounds)
        *bounds = h && h->w ? h->bounds : NULL;
    if (h == NULL || h->w == NULL) {
        *count = 0;
        *sum = 0;
        buckets[0] = 0;
        return 0;
    }
    for (uint32_t i = 0; i <= h->n; i++)
        buckets[i] = 0;
    for (uint32_t k = 0; k <= h->shard_mask; k++) { /* shards summed as a reader sums them */
        const uint64_t *w = h->w + (size_t)k * h->shard_words;
        c += __atomic_load_n(&w[0], __ATOMIC_RELAXED);
        double d = f64_bits(__atomic_load_n(&w[1], __ATOMIC_RELAXED));
        sm = k ? sm + d : d;
        for (uint32_t i = 0; i <= h->n; i++)
            buckets[i] += __atomic_load_n(&w[2 + i], __ATOMIC_RELAXED);
    }
    *count = c;
    *sum = sm;
    return h->n;
}
