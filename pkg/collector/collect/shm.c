/* shm transport: same-host segments mapped read-only, copied word by word. */
#include "mv_collect.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct shm_src {
    const unsigned char *base;
    uint64_t size;
    /* What shm_changed compares: the file as it was mapped (or last seen changed). */
    char *path;
    dev_t dev;
    ino_t ino;
    struct timespec ctim, mtim;
} shm_src;

/* A pod can truncate its segment file; touching the vanished pages raises
 * SIGBUS. Copies run under a per-thread jump buffer so that turns into an
 * error for that segment only, on whichever tick worker made the copy (a
 * SIGBUS is delivered to the thread that faulted). volatile: the stores
 * around the copy must not move across it, the handler reads them. */
static _Thread_local sigjmp_buf *volatile tl_guard;
static struct sigaction old_bus;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    if (tl_guard)
        siglongjmp(*tl_guard, 1);
    /* Not ours: behave as before. */
    sigaction(SIGBUS, &old_bus, NULL);
    (void)si;
    (void)uc;
    raise(sig);
}

static void install_bus_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old_bus);
}

static int guarded_copy(void *dst, const void *src, size_t len)
{
    sigjmp_buf jb;
    volatile int faulted = 0;
    /* The mask is not saved (a sigprocmask syscall per copy, 1,000 per tick at 1,000
     * segments): the handler runs with SA_NODEFER and an empty sa_mask, so the mask at
     * the fault is the one at the copy, and the jump leaves it as it was. */
    if (sigsetjmp(jb, 0) == 0) {
        tl_guard = &jb;
        mv_seg_copy_words(dst, src, len);
    } else {
        faulted = 1;
    }
    tl_guard = NULL;
    return faulted ? -EIO : 0;
}

static void shm_read_many(void *ctx, mv_coll_read *reqs, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        mv_coll_read *r = &reqs[i];
        shm_src *s = r->src;
        if (!s || r->off > s->size || r->len > s->size - r->off || (r->off | r->len) % 8) {
            r->status = -EINVAL;
            continue;
        }
        r->status = guarded_copy(r->dst, s->base + r->off, r->len);
    }
}

/* Outside the guarded function, so that its locals need not survive a siglongjmp. */
static __attribute__((noinline)) int words_differ(const unsigned char *base, uint64_t size,
                                                  const uint32_t *offs, const uint64_t *want,
                                                  size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (offs[i] % 8 || (uint64_t)offs[i] + 8 > size)
            return -EINVAL;
        if (__atomic_load_n((const uint64_t *)(const void *)(base + offs[i]), __ATOMIC_RELAXED) !=
            want[i])
            return 1;
    }
    return 0;
}

static int shm_probe(void *ctx, void *src, const uint32_t *offs, const uint64_t *want, size_t n)
{
    shm_src *s = src;
    (void)ctx;
    if (!s || (n && (!offs || !want)))
        return -EINVAL;
    sigjmp_buf jb;
    volatile int rc = -EIO;
    if (sigsetjmp(jb, 0) == 0) {
        tl_guard = &jb;
        rc = words_differ(s->base, s->size, offs, want, n);
    }
    tl_guard = NULL;
    return rc;
}

static void shm_src_close(void *ctx, void *src)
{
    shm_src *s = src;
    (void)ctx;
    if (!s)
        return;
    munmap((void *)s->base, s->size);
    free(s->path);
    free(s);
}

static int ts_eq(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* One stat of the path (no descriptor is kept per segment): a size other than the mapping's
 * cannot be served (reads past the end fault, and a collector opening the file now would
 * refuse it); another inode, change or modification time means the bytes may have been
 * replaced without a read noticing (a truncation and a re-extension between two reads zero
 * the pages), so the whole segment is validated again. mmap stores move neither time on
 * tmpfs (the state directory's usual home); on a disk file system they can, which costs a
 * catalog read per check of a written segment. */
static int shm_changed(void *ctx, void *src, char *detail, size_t len)
{
    shm_src *s = src;
    struct stat st;
    (void)ctx;
    if (!s || !s->path)
        return 0;
    if (fstatat(AT_FDCWD, s->path, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return 0; /* removed: the catalog's removal drops it; the mapping stays valid */
        snprintf(detail, len, "stat %s: %s", s->path, strerror(errno));
        return 1;
    }
    if ((uint64_t)st.st_size != s->size) {
        snprintf(detail, len, "%s is %lld bytes, mapped at %llu", s->path, (long long)st.st_size,
                 (unsigned long long)s->size);
        return -EFBIG;
    }
    if (st.st_dev == s->dev && st.st_ino == s->ino && ts_eq(st.st_ctim, s->ctim) &&
        ts_eq(st.st_mtim, s->mtim))
        return 0;
    snprintf(detail, len, "%s changed (%s)", s->path,
             st.st_ino != s->ino || st.st_dev != s->dev ? "another inode"
                                                        : "truncated or rewritten");
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->ctim = st.st_ctim;
    s->mtim = st.st_mtim;
    return 1;
}

static const mv_coll_transport shm_transport = {
    .name = "shm",
    .ctx = NULL,
    .read_many = shm_read_many,
    .concurrent = 1, /* plain copies; the SIGBUS guard is per thread */
    .src_close = shm_src_close,
    .probe = shm_probe,
    .local = 1,
    .changed = shm_changed,
};

const mv_coll_transport *mv_coll_shm_transport(void)
{
    pthread_once(&bus_once, install_bus_handler);
    return &shm_transport;
}

int mv_coll_shm_open(const char *path, uint64_t size, void **src, uint64_t *size_out, char *errbuf,
                     size_t errlen)
{
    struct stat st;
    int fd, rc;
    shm_src *s;

    *src = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        rc = -errno;
        snprintf(errbuf, errlen, "open %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(errbuf, errlen, "%s is not a regular file", path);
        rc = -EINVAL;
        goto close_fd;
    }
    if (size && (uint64_t)st.st_size != size) {
        snprintf(errbuf, errlen, "%s is %lld bytes, the catalog says %llu", path,
                 (long long)st.st_size, (unsigned long long)size);
        rc = -EINVAL;
        goto close_fd;
    }
    if (st.st_size < (off_t)MV_SEG_MIN_SIZE || st.st_size > (off_t)MV_SEG_MAX_SIZE ||
        st.st_size % 8) {
        snprintf(errbuf, errlen, "%s: size %lld is not a segment size", path,
                 (long long)st.st_size);
        rc = -EINVAL;
        goto close_fd;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        rc = -ENOMEM;
        snprintf(errbuf, errlen, "out of memory");
        goto close_fd;
    }
    s->size = (uint64_t)st.st_size;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->ctim = st.st_ctim;
    s->mtim = st.st_mtim;
    if (!(s->path = strdup(path))) {
        rc = -ENOMEM;
        snprintf(errbuf, errlen, "out of memory");
        free(s);
        goto close_fd;
    }
    s->base = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        rc = -errno;
        snprintf(errbuf, errlen, "mmap %s: %s", path, strerror(errno));
        free(s->path);
        free(s);
        goto close_fd;
    }
    close(fd);
    *src = s;
    if (size_out)
        *size_out = s->size;
    return 0;

close_fd:
    close(fd);
    return rc;
}
