/* mv_rdmax: registers the store's segments for remote READ and answers rdma lookups. */
#include "mv_rdmax.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_rdmatarget.h"
#include "mv_segment.h"

/* One segment the exporter has seen: registered, or the reason it is not. */
typedef struct entry {
    char id[MV_SEGSTORE_ID_LEN + 1];
    void *map; /* NULL if not mapped */
    size_t len;
    mv_rdmatarget_mr *mr; /* NULL if not registered */
    uint32_t rkey;
    char reason[256]; /* set when mr == NULL */
} entry;

struct mv_rdmax {
    mv_segstore *store;
    mv_rdmatarget *target;
    mv_segstore_sub *sub;
    pthread_mutex_t mu; /* guards the entries; taken after the store's lock */
    entry *v;
    size_t n, cap;
};

static entry *find(mv_rdmax *x, const char *id)
{
    for (size_t i = 0; i < x->n; i++)
        if (strcmp(x->v[i].id, id) == 0)
            return &x->v[i];
    return NULL;
}

/* Maps and registers `seg` into a new entry. Called with x->mu held. Returns the
 * entry (registered or carrying the reason), or NULL when the table is full or
 * out of memory. */
static entry *add(mv_rdmax *x, const mv_segstore_seg *seg)
{
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        if (cap > MV_SEGSTORE_SEGMENTS_MAX || cap > SIZE_MAX / sizeof *x->v)
            return NULL;
        entry *v = realloc(x->v, cap * sizeof *v);
        if (!v)
            return NULL;
        x->v = v;
        x->cap = cap;
    }
    entry *e = &x->v[x->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", seg->id);

    int fd = open(seg->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(e->reason, sizeof e->reason, "cannot open %s: %s", seg->path, strerror(errno));
        goto log_reason;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size != seg->size || seg->size == 0) {
        snprintf(e->reason, sizeof e->reason, "%s is not %llu bytes long", seg->path,
                 (unsigned long long)seg->size);
        goto close_fd;
    }
    /* Read-write: kernels before 6.2 refuse to pin a PROT_READ mapping (EFAULT).
     * The region is registered for remote read only and the agent never writes. */
    void *map = mmap(NULL, (size_t)seg->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(e->reason, sizeof e->reason, "mmap %s: %s", seg->path, strerror(errno));
        goto close_fd;
    }
    close(fd);
    fd = -1;
    if (!x->target) {
        snprintf(e->reason, sizeof e->reason, "no RDMA target (see agent start-up log)");
        goto unmap;
    }
    int rc = mv_rdmatarget_register(x->target, map, (size_t)seg->size, &e->mr, &e->rkey, e->reason,
                                    sizeof e->reason);
    if (rc < 0) {
        e->mr = NULL;
        goto unmap;
    }
    e->map = map;
    e->len = (size_t)seg->size;
    MV_INFO("segment.rdma_registered", "id=%s bytes=%zu rkey=0x%x", e->id, e->len, e->rkey);
    return e;
unmap:
    munmap(map, (size_t)seg->size);
close_fd:
    if (fd >= 0)
        close(fd);
log_reason:
    MV_WARN("segment.rdma_unavailable", "id=%s reason=%s hint=%s", e->id, mv_log_q(e->reason),
            mv_log_q("served to shm collectors only"));
    return e;
}

/* Deregisters (revoking the rkey) and then unmaps. Called with x->mu held. */
static void drop(mv_rdmax *x, entry *e)
{
    if (e->mr) {
        int rc = mv_rdmatarget_deregister(e->mr);
        MV_INFO("segment.rdma_revoked", "id=%s rkey=0x%x result=%s", e->id, e->rkey,
                mv_log_q(rc == 0 ? "ok" : strerror(rc < 0 ? -rc : rc)));
    }
    if (e->map)
        munmap(e->map, e->len);
    *e = x->v[--x->n];
}

static void on_store_event(void *arg, int event, const mv_segstore_seg *seg, uint64_t revision)
{
    mv_rdmax *x = arg;
    (void)revision;
    if (!seg)
        return;
    pthread_mutex_lock(&x->mu);
    entry *e = find(x, seg->id);
    /* CHANGED is the same file with new labels (or announced again): the entry
     * stays as it is, so collectors keep their rkey. */
    if ((event == MV_SEGSTORE_ADDED || event == MV_SEGSTORE_CHANGED) && !e) {
        if (!add(x, seg))
            MV_WARN("segment.rdma_unavailable", "id=%s reason=%s", seg->id,
                    mv_log_q("exporter table full or out of memory"));
    } else if (event == MV_SEGSTORE_REMOVED && e) {
        drop(x, e);
    }
    pthread_mutex_unlock(&x->mu);
}

int mv_rdmax_lookup(void *arg, const mv_segstore_seg *seg, int may_register,
                    mv_agentsvc_rdma_info *out)
{
    mv_rdmax *x = arg;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&x->mu);
    entry *e = find(x, seg->id);
    if (!e && may_register)
        e = add(x, seg);
    if (!e) {
        snprintf(out->reason, sizeof out->reason, "segment %s is not registered", seg->id);
    } else if (!e->mr) {
        snprintf(out->reason, sizeof out->reason, "%s", e->reason);
    } else {
        out->addr = (uint64_t)(uintptr_t)e->map;
        out->rkey = e->rkey;
        out->length = e->len;
        out->layout_version = MV_SEG_VERSION;
        out->readable = 1;
    }
    pthread_mutex_unlock(&x->mu);
    return 0;
}

/* Logs the memlock situation once at start: registrations pin segment pages. */
static void log_memlock(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0)
        return;
    if (rl.rlim_cur == RLIM_INFINITY) {
        MV_INFO("rdma.memlock", "limit=%s", "unlimited");
        return;
    }
    MV_INFO("rdma.memlock", "limit_bytes=%llu hint=%s", (unsigned long long)rl.rlim_cur,
            mv_log_q("registrations beyond this fail unless the agent has CAP_IPC_LOCK; "
                     "raise with ulimit -l, LimitMEMLOCK= or the IPC_LOCK capability"));
}

int mv_rdmax_create(const mv_rdmax_opts *o, mv_segstore *store, mv_rdmax **out, char *err,
                    size_t errlen)
{
    int rc;
    *out = NULL;
    mv_rdmax *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    x->store = store;
    pthread_mutex_init(&x->mu, NULL);
    rc = mv_rdmatarget_create(o->bind_ip, o->port, o->token, NULL, &x->target, err, errlen);
    if (rc < 0)
        goto destroy_mu;
    log_memlock();
    rc = mv_segstore_subscribe(store, on_store_event, x, &x->sub);
    if (rc < 0) {
        snprintf(err, errlen, "cannot watch the segment store: %s", strerror(-rc));
        goto destroy_target;
    }
    MV_INFO("rdma.exporter_started", "ip=%s port=%u registered=%zu", mv_log_q(o->bind_ip),
            (unsigned)mv_rdmatarget_port(x->target), mv_rdmax_registered(x));
    *out = x;
    return 0;
destroy_target:
    mv_rdmatarget_destroy(x->target);
destroy_mu:
    pthread_mutex_destroy(&x->mu);
    free(x);
    return rc;
}

void mv_rdmax_destroy(mv_rdmax *x)
{
    if (!x)
        return;
    mv_segstore_unsubscribe(x->store, x->sub);
    pthread_mutex_lock(&x->mu);
    while (x->n)
        drop(x, &x->v[x->n - 1]);
    pthread_mutex_unlock(&x->mu);
    mv_rdmatarget_destroy(x->target);
    pthread_mutex_destroy(&x->mu);
    free(x->v);
    free(x);
}

uint16_t mv_rdmax_port(const mv_rdmax *x)
{
    return mv_rdmatarget_port(x->target);
}

size_t mv_rdmax_registered(mv_rdmax *x)
{
    size_t k = 0;
    pthread_mutex_lock(&x->mu);
    for (size_t i = 0; i < x->n; i++)
        k += x->v[i].mr != NULL;
    pthread_mutex_unlock(&x->mu);
    return k;
}
