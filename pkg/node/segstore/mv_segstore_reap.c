/* mv_segstore_reap: the store's health checks: segment files kept at their recorded size
 * (inotify says when one may have changed) and segments of dead owners removed, on the
 * reaper thread when an owner exits or a file changes, and every FULL_CHECK_EVERY intervals
 * in any case. */
#include "mv_segstore_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_util.h"

/* Puts a segment file back to its recorded size when something (its pod: the file is
 * writable in the container) truncated or extended it: a truncated segment makes readers
 * fault or read zeros inside the first page, an extended one no longer matches what was
 * registered for RDMA and announced. Bytes cut off come back as zeros. Returns 0 (size
 * right or restored), -ENOENT (no file), -EINVAL (not a regular file) or another -errno. */
int mv_segstore__fix_size(const mv_segstore_seg *s)
{
    struct stat sb;
    if (lstat(s->path, &sb) != 0)
        return -errno;
    if (!S_ISREG(sb.st_mode))
        return -EINVAL;
    if ((uint64_t)sb.st_size == s->size)
        return 0;
    int fd = open(s->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 || ftruncate(fd, (off_t)s->size) != 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    MV_WARN("segment.size_changed", "id=%s path=%s recorded=%" PRIu64 " found=%lld action=%s",
            s->id, mv_log_q(s->path), s->size, (long long)sb.st_size,
            mv_log_q(rc == 0 ? "restored to the recorded size" : strerror(-rc)));
    return rc;
}

/* Every file's size is checked every FULL_CHECK_EVERY reap intervals even when inotify
 * reported nothing (a watch lost to an unmount or a bind mount over the file). */
#define FULL_CHECK_EVERY 15

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t full_check_ms(const mv_segstore *st)
{
    return (int64_t)(st->reap_ms > 0 ? st->reap_ms : DEFAULT_REAP_MS) * FULL_CHECK_EVERY;
}

/* Puts fd in the reaper's epoll set. A descriptor the set cannot take (the epoll watch
 * limit, fs.epoll.max_user_watches) turns the reaper back to a pass every interval. */
static void events_add(mv_segstore *st, int fd)
{
    if (st->ep_fd < 0 || st->ep_broken)
        return;
    struct epoll_event ev = {.events = EPOLLIN};
    if (epoll_ctl(st->ep_fd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return;
    st->ep_broken = 1;
    MV_WARN("segstore.epoll_failed", "err=%s effect=%s", mv_log_q(strerror(errno)),
            mv_log_q("the reaper checks every owner every interval"));
}

/* Wakes the reaper out of its wait for events (a stop, or a reason to pass every interval). */
static void events_kick(mv_segstore *st)
{
    uint64_t one = 1;
    if (st->wake_fd >= 0 && write(st->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        MV_DEBUG("segstore.kick_failed", "err=%s", mv_log_q(strerror(errno)));
}

void mv_segstore__owner_by_pid(mv_segstore *st, size_t i, int add)
{
    if (st->segs[i].owner_pid == 0 || (st->owner_fds && st->owner_fds[i] >= 0))
        return;
    if (add) {
        st->by_pid++;
        events_kick(st);
    } else if (st->by_pid > 0) {
        st->by_pid--;
    }
}

/* The highest descriptor an owner's pidfd may have: a quarter of RLIMIT_NOFILE (at least 64
 * descriptors) stays for the agent's sockets, segment files and catalog writes. */
static long owner_fd_ceiling(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (rlim_t)1 << 30)
        return 1L << 30;
    long cur = (long)rl.rlim_cur, keep = cur / 4 > 64 ? cur / 4 : 64;
    return cur - keep;
}

int mv_segstore__owner_open(mv_segstore *st, uint32_t pid)
{
    if (pid == 0)
        return -1;
    const char *why;
    int e;
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0u);
    if (fd >= 0 && fd < owner_fd_ceiling()) {
        events_add(st, (int)fd); /* closing the pidfd takes it out of the set */
        return (int)fd;          /* close-on-exec, as every pidfd is */
    }
    e = fd >= 0 ? EMFILE : errno;
    if (fd >= 0)
        close((int)fd);
    why = fd >= 0 ? "a quarter of the descriptor limit (RLIMIT_NOFILE) is kept for the rest"
                  : strerror(e);
#else
    e = ENOSYS;
    why = strerror(e);
#endif
    if (e != ESRCH && !st->owner_fd_warned) {
        st->owner_fd_warned = 1;
        MV_WARN("segstore.pidfd_unavailable", "pid=%" PRIu32 " err=%s effect=%s", pid,
                mv_log_q(why),
                mv_log_q("owners without a pidfd are checked by pid number: a dead owner whose "
                         "pid is reused keeps its segment until that process exits"));
    }
    return -1;
}

int mv_segstore__owner_fds_fit(mv_segstore *st, size_t cap)
{
    size_t had = st->owner_fds ? st->cap : 0;
    if (st->owner_fds && cap <= had)
        return 0;
    int *v = realloc(st->owner_fds, cap * sizeof *v);
    if (!v)
        return -ENOMEM;
    for (size_t i = had; i < cap; i++)
        v[i] = -1;
    st->owner_fds = v;
    return 0;
}

void mv_segstore__owner_fds_close(mv_segstore *st)
{
    for (size_t i = 0; st->owner_fds && i < st->nsegs; i++)
        if (st->owner_fds[i] >= 0)
            close(st->owner_fds[i]);
    free(st->owner_fds);
    st->owner_fds = NULL;
}

/* Whether entry i's owner has exited: its pidfd turns readable then; without one, no
 * process has the owner's pid. */
static int owner_gone(const mv_segstore *st, size_t i)
{
    pid_t pid = (pid_t)st->segs[i].owner_pid;
    int fd = st->owner_fds ? st->owner_fds[i] : -1;
    if (pid <= 0)
        return 0;
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR));
    }
    return kill(pid, 0) < 0 && errno == ESRCH;
}

void mv_segstore__watch_open(mv_segstore *st)
{
    st->next_full_ms = mono_ms() + full_check_ms(st);
    st->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    st->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (st->ep_fd < 0 || st->wake_fd < 0) {
        st->ep_broken = 1;
        MV_WARN("segstore.epoll_unavailable", "err=%s effect=%s", mv_log_q(strerror(errno)),
                mv_log_q("the reaper checks every owner every interval"));
    }
    events_add(st, st->wake_fd);
    st->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (st->ino_fd < 0)
        MV_WARN("segstore.inotify_unavailable", "err=%s effect=%s", mv_log_q(strerror(errno)),
                mv_log_q("every reaper pass checks every file's size"));
    else
        events_add(st, st->ino_fd);
}

void mv_segstore__watch_close(mv_segstore *st)
{
    int *fds[] = {&st->ino_fd, &st->ep_fd, &st->wake_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}

/* Watches a segment file for the changes mv_segstore__fix_size looks for. Caller holds st->mu (or
 * owns st alone). */
void mv_segstore__watch_file(mv_segstore *st, const char *path)
{
    if (st->ino_fd < 0 || st->unwatched)
        return;
    if (inotify_add_watch(st->ino_fd, path, IN_MODIFY | IN_ATTRIB | IN_DONT_FOLLOW) >= 0)
        return;
    st->unwatched = 1;
    events_kick(st);
    MV_WARN("segstore.watch_failed", "path=%s err=%s effect=%s", mv_log_q(path),
            mv_log_q(strerror(errno)),
            mv_log_q(errno == ENOSPC ? "every reaper pass checks every file's size "
                                       "(raise fs.inotify.max_user_watches)"
                                     : "every reaper pass checks every file's size"));
}

/* Whether a segment file may have changed since the last pass (drains the events). */
static int files_changed(mv_segstore *st)
{
    if (st->ino_fd < 0 || st->unwatched)
        return 1;
    _Alignas(struct inotify_event) char buf[4096];
    int any = 0;
    while (read(st->ino_fd, buf, sizeof buf) > 0)
        any = 1;
    return any;
}

/* Whether the reaper may sleep until an owner exits or a file changes: only when every
 * owner has a pidfd in the epoll set and every file an inotify watch. Caller holds st->mu. */
static int events_enough(const mv_segstore *st)
{
    return !st->ep_broken && st->by_pid == 0 && st->ino_fd >= 0 && !st->unwatched;
}

/* Sleeps until a descriptor in the epoll set is ready or ms pass; empties the wake eventfd. */
static void events_wait(mv_segstore *st, int64_t ms)
{
    struct epoll_event ev[8];
    int n = epoll_wait(st->ep_fd, ev, 8, ms > INT32_MAX ? INT32_MAX : (int)ms);
    uint64_t count;
    if (n > 0 && read(st->wake_fd, &count, sizeof count) < 0 && errno != EAGAIN)
        MV_DEBUG("segstore.wake_read_failed", "err=%s", mv_log_q(strerror(errno)));
}

/* Sleeps on st->cv until CLOCK_MONOTONIC ms `until` or a stop. Caller holds st->mu. */
static void reaper_sleep(mv_segstore *st, int64_t until)
{
    struct timespec ts = {.tv_sec = (time_t)(until / 1000),
                          .tv_nsec = (long)(until % 1000) * 1000000L};
    while (!st->stopping && mono_ms() < until &&
           pthread_cond_timedwait(&st->cv, &st->mu, &ts) != ETIMEDOUT)
        ;
}

/* The reaper thread. Passes are at least one interval apart (the first need not wait), so a
 * burst of exits or a pod that keeps writing its file is handled in groups. Between passes
 * it sleeps until an event or the next full size check when events_enough, and one interval
 * otherwise. */
void *mv_segstore__reaper_main(void *arg)
{
    mv_util_thread_name("mv-reaper");
    mv_segstore *st = arg;
    pthread_mutex_lock(&st->mu);
    int64_t last = mono_ms() - st->reap_ms;
    while (!st->stopping) {
        reaper_sleep(st, last + st->reap_ms);
        if (!st->stopping && events_enough(st)) {
            int64_t left = st->next_full_ms - mono_ms();
            pthread_mutex_unlock(&st->mu);
            if (left > 0)
                events_wait(st, left);
            pthread_mutex_lock(&st->mu);
        }
        if (st->stopping)
            break;
        last = mono_ms();
        pthread_mutex_unlock(&st->mu);
        mv_segstore_reap(st);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

void mv_segstore__reaper_stop(mv_segstore *st)
{
    pthread_mutex_lock(&st->mu);
    st->stopping = 1;
    pthread_cond_broadcast(&st->cv);
    events_kick(st);
    pthread_mutex_unlock(&st->mu);
}

/* Marks in gone[i] whether entry i's owner has exited, as owner_gone does, but with one poll
 * of every pidfd (pf: room for one per entry): one system call a pass instead of one per
 * segment, which is most of what an idle agent spends. */
static void owners_gone(const mv_segstore *st, uint8_t *gone, struct pollfd *pf)
{
    size_t np = 0;
    for (size_t i = 0; i < st->nsegs; i++) {
        pid_t pid = (pid_t)st->segs[i].owner_pid;
        int fd = st->owner_fds ? st->owner_fds[i] : -1;
        gone[i] = 0;
        if (pid > 0 && fd >= 0)
            pf[np++] = (struct pollfd){.fd = fd, .events = POLLIN};
        else if (pid > 0)
            gone[i] = kill(pid, 0) < 0 && errno == ESRCH;
    }
    if (np == 0 || poll(pf, np, 0) <= 0)
        return; /* none readable (or the poll failed: the next pass asks again) */
    for (size_t i = 0, k = 0; i < st->nsegs && k < np; i++)
        if (st->segs[i].owner_pid > 0 && st->owner_fds && st->owner_fds[i] >= 0)
            gone[i] = (pf[k++].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

int mv_segstore_reap(mv_segstore *st)
{
    int n = 0;
    pthread_mutex_lock(&st->mu);
    int64_t now = mono_ms();
    int full = now >= st->next_full_ms;
    if (full)
        st->next_full_ms = now + full_check_ms(st);
    if (files_changed(st) || full)
        for (size_t i = 0; i < st->nsegs; i++)
            mv_segstore__fix_size(
                &st->segs[i]); /* logs and restores a truncated or extended file */
    /* Without memory for the poll, each owner is asked on its own. */
    uint8_t *gone = st->nsegs ? malloc(st->nsegs) : NULL;
    struct pollfd *pf = gone ? malloc(st->nsegs * sizeof *pf) : NULL;
    if (pf)
        owners_gone(st, gone, pf);
    /* From the last entry down: a removal moves the last entry into the removed one's place,
     * and that entry has been looked at already. */
    for (size_t i = st->nsegs; i-- > 0;) {
        if (pf ? gone[i] : owner_gone(st, i)) {
            st->remove_at(st, i, "segment.reaped", (pid_t)st->segs[i].owner_pid);
            n++;
        }
    }
    free(pf);
    free(gone);
    pthread_mutex_unlock(&st->mu);
    return n;
}
