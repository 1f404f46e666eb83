/* mv_segstore: segment files, the in-memory catalog and watchers (the reaper and the
 * file-size checks: mv_segstore_reap.c). */
#include "mv_segstore_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_segment.h"
#include "mv_util.h"

#define DEFAULT_FILEMODE 0660

/* ---- Store ---------------------------------------------------------------------------- */

static void notify(mv_segstore *st, int ev, const mv_segstore_seg *seg)
{
    for (mv_segstore_sub *s = st->subs; s; s = s->next)
        s->fn(s->arg, ev, seg, st->revision);
}

/* Keeps a copy of catalog bytes that could not all be loaded beside the catalog, as
 * <name>.bad-<unix ns>, before the next snapshot replaces them. */
static void set_aside(mv_segstore *st, const char *name, const void *buf, size_t len,
                      const char *reason)
{
    char path[4096];
    if (mv_util_fmt(path, sizeof path, "%s/%s.bad-%" PRIu64, st->dir, name, mv_util_wall_ns()) < 0)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = fd < 0 ? -errno : mv_segstore__write_all(fd, buf, len);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        unlink(path);
    MV_WARN("catalog.quarantined", "file=%s kept=%s bytes=%zu reason=%s", mv_log_q(name),
            mv_log_q(rc == 0 ? path : strerror(-rc)), len, mv_log_q(reason));
}

/* Reads one catalog file; a missing file is empty. A file too large to read, or not a regular
 * file, is renamed aside (logged) and read as missing. */
static int read_catalog_file(mv_segstore *st, const char *name, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    char *path = mv_segstore__path_join(st->dir, name);
    if (!path)
        return -ENOMEM;
    int rc = mv_segstore__read_file(path, text, len);
    if (rc == -EFBIG) {
        char aside[4096];
        mv_util_fmt(aside, sizeof aside, "%s.bad-%" PRIu64, path, mv_util_wall_ns());
        int mv = rename(path, aside) == 0 ? 0 : -errno;
        MV_ERROR("catalog.quarantined", "file=%s kept=%s reason=%s", mv_log_q(name),
                 mv_log_q(mv == 0 ? aside : strerror(-mv)),
                 mv_log_q("larger than 1 GiB or not a regular file"));
        rc = mv == 0 ? -ENOENT : rc;
    }
    if (rc == -ENOENT)
        rc = 0;
    else if (rc < 0)
        MV_ERROR("catalog.load_failed", "path=%s err=%s", mv_log_q(path), mv_log_q(strerror(-rc)));
    free(path);
    return rc;
}

/* Loads the snapshot and replays the journal. Never refuses to start over content: entries
 * and records that cannot be loaded are logged and their file's bytes kept aside; a torn last
 * journal record (a crash mid-append) is dropped. */
static int load(mv_segstore *st)
{
    char *snap, *jr;
    size_t snaplen, jlen;
    int rc = read_catalog_file(st, CATALOG_NAME, &snap, &snaplen);
    if (rc < 0)
        return rc;
    rc = read_catalog_file(st, JOURNAL_NAME, &jr, &jlen);
    if (rc < 0) {
        free(snap);
        return rc;
    }
    segstore_loaded l;
    rc = mv_segstore__catalog_build(snap, snaplen, (const uint8_t *)jr, jlen, st->dir, 1, &l);
    if (rc < 0) {
        MV_ERROR("catalog.load_failed", "dir=%s err=%s", mv_log_q(st->dir),
                 mv_log_q(strerror(-rc)));
        free(snap);
        free(jr);
        return rc;
    }
    if (l.snap_bad)
        set_aside(st, CATALOG_NAME, snap, snaplen, l.snap_reason);
    else if (l.bad_entries)
        set_aside(st, CATALOG_NAME, snap, snaplen, "entries that cannot be loaded (logged)");
    if (l.jr_broken || l.bad_records)
        set_aside(st, JOURNAL_NAME, jr, jlen,
                  l.jr_broken ? "a damaged record: the records after it were not read"
                              : "records that cannot be loaded (logged)");
    else if (l.jr_torn)
        MV_WARN("catalog.journal_torn", "dropped_bytes=%zu note=%s", jlen - l.jr_valid,
                mv_log_q("the last record was cut short (a crash while it was written); it "
                         "was never acknowledged"));
    free(snap);
    free(jr);
    mv_segstore_seg *v = l.segs;
    size_t n = l.n;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        int frc = mv_segstore__fix_size(&v[i]);
        if (frc != 0) {
            /* Not a segment we can keep: drop the entry, and remove what is at its path
             * (a file, or an empty directory) unless nothing is there, so that no stray is
             * left behind. */
            int removed = frc != -ENOENT && (unlink(v[i].path) == 0 || rmdir(v[i].path) == 0);
            MV_WARN("catalog.entry_dropped", "id=%s path=%s reason=%s removed=%d", v[i].id,
                    mv_log_q(v[i].path),
                    mv_log_q(frc == -ENOENT   ? "segment file missing"
                             : frc == -EINVAL ? "not a regular file"
                                              : strerror(-frc)),
                    removed);
            mv_segstore_seg_clear(&v[i]);
            continue;
        }
        struct stat sb;
        v[i].uid = lstat(v[i].path, &sb) == 0 ? (int64_t)sb.st_uid : -1;
        if (kept != i)
            v[kept] = v[i];
        kept++;
    }
    st->segs = v;
    st->nsegs = kept;
    st->cap = n ? n : 1;
    /* After a restart the owners are known by pid only: a pidfd opened now names whoever
     * has the pid now (the owner, unless it died while the agent was down and the pid was
     * reused). */
    if (mv_segstore__owner_fds_fit(st, st->cap) < 0) {
        MV_ERROR("catalog.load_failed", "dir=%s err=%s", mv_log_q(st->dir),
                 mv_log_q("out of memory"));
        return -ENOMEM;
    }
    for (size_t i = 0; i < kept; i++) {
        st->owner_fds[i] = mv_segstore__owner_open(st, v[i].owner_pid);
        mv_segstore__owner_by_pid(st, i, 1);
    }
    for (size_t i = 0; i < kept; i++)
        mv_segstore__watch_file(st, v[i].path);
    st->revision = l.revision;
    for (size_t i = 0; i < kept; i++)
        st->pages_used += v[i].ndevices;
    if (st->pages_used > st->pool_pages && st->pool_pages)
        MV_WARN("pool.overcommitted", "used=%" PRIu64 " pool=%" PRIu64 " action=%s", st->pages_used,
                st->pool_pages,
                mv_log_q("existing segments kept; new allocations wait for pages to be freed"));
    MV_INFO("catalog.loaded",
            "count=%zu dropped=%zu quarantined=%zu journal_records=%zu revision=%" PRIu64 " dir=%s",
            kept, n - kept,
            l.bad_entries + l.bad_records + (size_t)l.snap_bad + (size_t)l.jr_broken, l.jr_records,
            l.revision, mv_log_q(st->dir));
    if (kept != n)
        st->revision++;
    /* A fresh snapshot, and an empty journal from here on. When the snapshot cannot be
     * written (a full disk), the journal goes on from its last whole record. */
    rc = mv_segstore__journal_open(st);
    if (rc < 0)
        return rc;
    if (mv_segstore__compact(st) < 0 && st->jr_len != l.jr_valid) {
        if (ftruncate(st->jr_fd, (off_t)l.jr_valid) < 0 || fsync(st->jr_fd) < 0) {
            rc = -errno;
            MV_ERROR("catalog.journal_cut_failed", "dir=%s err=%s", mv_log_q(st->dir),
                     mv_log_q(strerror(-rc)));
            return rc;
        }
        st->jr_len = l.jr_valid;
    }
    return 0;
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Files in the directory that no entry names (ids sorted once: a start with 10,000 segments
 * looks each name up in O(log n), not O(n)). */
static void log_strays(mv_segstore *st)
{
    DIR *d = opendir(st->dir);
    if (!d)
        return;
    const char **ids = malloc((st->nsegs ? st->nsegs : 1) * sizeof *ids);
    for (size_t i = 0; ids && i < st->nsegs; i++)
        ids[i] = st->segs[i].id;
    if (ids)
        qsort(ids, st->nsegs, sizeof *ids, cmp_id);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (nm[0] == '.' || strncmp(nm, "catalog.", 8) == 0 || strcmp(nm, "agent.sock") == 0)
            continue;
        int known = 0;
        if (ids)
            known = bsearch(&nm, ids, st->nsegs, sizeof *ids, cmp_id) != NULL;
        for (size_t i = 0; !ids && i < st->nsegs && !known; i++)
            known = strcmp(st->segs[i].id, nm) == 0;
        if (!known)
            MV_WARN("segment.stray_file", "dir=%s name=%s action=%s", mv_log_q(st->dir),
                    mv_log_q(nm), mv_log_q("left alone: not in the catalog"));
    }
    free(ids);
    closedir(d);
}

static int mkdir_p(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return -ENOMEM;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
            int e = -errno;
            free(p);
            return e;
        }
        *c = '/';
    }
    free(p);
    if (mkdir(dir, 0755) < 0) {
        if (errno != EEXIST)
            return -errno;
    } else {
        chmod(dir, 0755); /* not subject to umask */
    }
    struct stat sb;
    if (stat(dir, &sb) < 0)
        return -errno;
    return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

#define LOCK_NAME ".lock"

/* Takes DIR/.lock exclusively, so a second agent on the same directory is refused instead of
 * taking over its socket and racing its catalog writes. The holder's pid is written into the
 * file for the message. Returns the fd, or -EBUSY (logged) / another negative errno. */
static int lock_dir(const char *dir)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/" LOCK_NAME, dir) >= sizeof path)
        return -ENAMETOOLONG;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        MV_ERROR("segstore.lock_failed", "path=%s err=%s", mv_log_q(path), mv_log_q(strerror(e)));
        return -e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (e != EWOULDBLOCK) {
            MV_ERROR("segstore.lock_failed", "path=%s err=%s", mv_log_q(path),
                     mv_log_q(strerror(e)));
            return -e;
        }
        MV_ERROR("segstore.dir_in_use", "dir=%s holder_pid=%s msg=%s", mv_log_q(dir),
                 mv_log_q(pid[0] ? pid : "unknown"),
                 mv_log_q("another microview-agent already uses this directory; stop it, or "
                          "give this agent its own directory"));
        return -EBUSY;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        MV_WARN("segstore.lock_pid", "path=%s err=%s", mv_log_q(path), mv_log_q(strerror(errno)));
    return fd;
}

int mv_segstore_open(const mv_segstore_opts *opts, mv_segstore **out)
{
    int rc;
    *out = NULL;
    mv_segstore *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->remove_at = mv_segstore__remove_at;
    st->lock_fd = st->ino_fd = st->ep_fd = st->wake_fd = st->jr_fd = -1;
    st->dir = strdup(opts && opts->dir ? opts->dir : MV_SEGSTORE_DEFAULT_DIR);
    if (!st->dir) {
        rc = -ENOMEM;
        goto free_st;
    }
    size_t dl = strlen(st->dir);
    while (dl > 1 && st->dir[dl - 1] == '/')
        st->dir[--dl] = 0;
    st->max_size = opts && opts->max_size ? opts->max_size : MV_SEGSTORE_DEFAULT_MAX_SIZE;
    st->file_mode = opts && opts->file_mode ? opts->file_mode : DEFAULT_FILEMODE;
    st->reap_ms = opts && opts->reap_interval_ms ? opts->reap_interval_ms : DEFAULT_REAP_MS;
    mv_segstore__watch_open(st); /* after reap_ms: it times the first full check */
    if (st->max_size < MV_SEGSTORE_MIN_SIZE || st->max_size > MV_SEG_MAX_SIZE) {
        MV_ERROR("segstore.bad_option", "max_size=%" PRIu64 " valid=%s", st->max_size,
                 mv_log_q("4096..1073741824"));
        rc = -EINVAL;
        goto free_dir;
    }
    st->max_size -= st->max_size % MV_SEGSTORE_PAGE;
    if (opts) {
        st->max_segs_per_uid = opts->max_segments_per_uid;
        st->max_bytes_per_uid = opts->max_bytes_per_uid;
        st->min_free_bytes = opts->min_free_bytes;
        st->min_free_percent = opts->min_free_percent;
    }
    if (st->min_free_percent > 99) {
        MV_ERROR("segstore.bad_option", "min_free_percent=%u valid=%s", st->min_free_percent,
                 mv_log_q("0..99"));
        rc = -EINVAL;
        goto free_dir;
    }
    st->pool_pages = opts ? opts->pool_pages : 0;
    st->page_size = opts && opts->page_size ? opts->page_size : MV_SEGSTORE_PAGE;
    if (st->page_size % MV_SEGSTORE_PAGE || st->page_size > st->max_size ||
        st->pool_pages > UINT32_MAX) {
        MV_ERROR("segstore.bad_option", "page_size=%" PRIu64 " pool_pages=%" PRIu64 " valid=%s",
                 st->page_size, st->pool_pages,
                 mv_log_q("page_size a multiple of 4096 up to max_size"));
        rc = -EINVAL;
        goto free_dir;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);

    rc = mkdir_p(st->dir);
    if (rc < 0) {
        MV_ERROR("segstore.dir_failed", "dir=%s err=%s", mv_log_q(st->dir),
                 mv_log_q(strerror(-rc)));
        goto destroy_sync;
    }
    rc = st->lock_fd = lock_dir(st->dir);
    if (rc < 0)
        goto destroy_sync;
    rc = load(st);
    if (rc < 0) {
        mv_segstore__owner_fds_close(st);
        mv_segstore_segs_free(st->segs, st->nsegs);
        goto unlock;
    }
    log_strays(st);
    MV_INFO("segstore.limits",
            "max_segments_per_uid=%" PRIu64 " max_bytes_per_uid=%" PRIu64 " min_free_bytes=%" PRIu64
            " min_free_percent=%u",
            st->max_segs_per_uid, st->max_bytes_per_uid, st->min_free_bytes, st->min_free_percent);
    if (st->reap_ms > 0) {
        int e = pthread_create(&st->reaper, NULL, mv_segstore__reaper_main, st);
        if (e) {
            rc = -e;
            goto free_segs;
        }
        st->reaper_running = 1;
    }
    *out = st;
    return 0;
free_segs:
    mv_segstore__owner_fds_close(st);
    mv_segstore_segs_free(st->segs, st->nsegs);
unlock:
    mv_segstore__journal_close(st);
    close(st->lock_fd);
destroy_sync:
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
free_dir:
    free(st->dir);
free_st:
    mv_segstore__watch_close(st);
    free(st);
    return rc;
}

void mv_segstore_close(mv_segstore *st)
{
    if (!st)
        return;
    mv_segstore__reaper_stop(st);
    if (st->reaper_running)
        pthread_join(st->reaper, NULL);
    while (st->subs) {
        mv_segstore_sub *s = st->subs;
        st->subs = s->next;
        free(s);
    }
    mv_segstore__watch_close(st);
    if (st->jr_records)
        mv_segstore__compact(st); /* the next start reads one snapshot */
    mv_segstore__journal_close(st);
    mv_segstore__owner_fds_close(st);
    mv_segstore_segs_free(st->segs, st->nsegs);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    if (st->lock_fd >= 0)
        close(st->lock_fd); /* releases the directory */
    free(st->dir);
    free(st);
}

/* Creates, sizes and formats the file. Returns 0 or a negative errno. */
static int make_file(mv_segstore *st, mv_segstore_seg *seg, int in_dir, char *err, size_t errlen)
{
    int rc, fd = -1;
    char *segdir = NULL;
    for (int attempt = 0; attempt < 8; attempt++) {
        uint8_t rnd[8];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
            mv_util_err_set(err, errlen, "getrandom failed: %s", strerror(errno));
            return -EIO;
        }
        snprintf(seg->id, sizeof seg->id, "seg-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
                 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
        free(seg->path);
        seg->path = mv_segstore__seg_path(st->dir, seg->id, in_dir);
        if (!seg->path)
            return -ENOMEM;
        if (in_dir) {
            free(segdir);
            segdir = mv_segstore__path_join(st->dir, seg->id);
            if (!segdir)
                return -ENOMEM;
            if (mkdir(segdir, 0755) < 0) {
                if (errno == EEXIST)
                    continue;
                rc = -errno;
                mv_util_err_set(err, errlen, "cannot create %s: %s", segdir, strerror(errno));
                free(segdir);
                return rc;
            }
            chmod(segdir, 0755); /* not subject to umask */
        }
        fd = open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = -errno;
        mv_util_err_set(err, errlen, "cannot create %s: %s", seg->path, strerror(errno));
        goto remove_dir;
    }
    if (fchmod(fd, st->file_mode) < 0) {
        rc = -errno;
        mv_util_err_set(err, errlen, "chmod %s: %s", seg->path, strerror(errno));
        goto unlink_file;
    }
    rc = -posix_fallocate(fd, 0, (off_t)seg->size);
    if (rc < 0) {
        mv_util_err_set(err, errlen, "cannot reserve %" PRIu64 " bytes for %s: %s", seg->size,
                        seg->path, strerror(-rc));
        goto unlink_file;
    }
    void *base = mmap(NULL, seg->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = -errno;
        mv_util_err_set(err, errlen, "mmap %s: %s", seg->path, strerror(errno));
        goto unlink_file;
    }
    mv_seg_error serr;
    mv_seg_reason r = mv_seg_format(base, seg->size, 0, &serr);
    munmap(base, seg->size);
    if (r != MV_SEG_OK) {
        rc = -EIO;
        mv_util_err_set(err, errlen, "formatting %s failed: %s", seg->path, serr.detail);
        goto unlink_file;
    }
    close(fd);
    free(segdir);
    return 0;
unlink_file:
    unlink(seg->path);
    close(fd);
remove_dir:
    if (segdir)
        rmdir(segdir);
    free(segdir);
    return rc;
}

/* Caller holds st->mu. Index of the segment backed by `device`, or -1. */
static long find_device_locked(mv_segstore *st, const char *device)
{
    for (size_t i = 0; i < st->nsegs; i++)
        for (size_t j = 0; j < st->segs[i].ndevices; j++)
            if (strcmp(st->segs[i].devices[j], device) == 0)
                return (long)i;
    return -1;
}

/* Caller holds st->mu. Segments and bytes whose files `uid` owns. */
static void usage_locked(mv_segstore *st, int64_t uid, uint64_t *count, uint64_t *bytes)
{
    uint64_t c = 0, b = 0;
    for (size_t i = 0; i < st->nsegs; i++)
        if (st->segs[i].uid == uid) {
            c++;
            b += st->segs[i].size;
        }
    *count = c;
    *bytes = b;
}

void mv_segstore_usage(mv_segstore *st, int64_t uid, uint64_t *count, uint64_t *bytes)
{
    pthread_mutex_lock(&st->mu);
    usage_locked(st, uid, count, bytes);
    pthread_mutex_unlock(&st->mu);
}

void mv_segstore_catalog_written(mv_segstore *st, uint64_t *journal, uint64_t *snapshots)
{
    pthread_mutex_lock(&st->mu);
    *journal = st->jr_bytes_written;
    *snapshots = st->snap_bytes_written;
    pthread_mutex_unlock(&st->mu);
}

/* Caller holds st->mu. The per-uid quotas for a create of `size` bytes by `uid` (root and
 * unidentified callers are not held to them): 0, or -EDQUOT with the reason. */
static int quota_check_locked(mv_segstore *st, int64_t uid, uint64_t size, char *err, size_t errlen)
{
    if (uid <= 0 || (!st->max_segs_per_uid && !st->max_bytes_per_uid))
        return 0;
    uint64_t count, bytes;
    usage_locked(st, uid, &count, &bytes);
    if (st->max_segs_per_uid && count + 1 > st->max_segs_per_uid) {
        mv_util_err_set(err, errlen,
                        "quota exceeded: uid %lld already owns %" PRIu64 " segments, the limit per "
                        "uid is %" PRIu64 " (--max-segments-per-uid); release segments or raise it",
                        (long long)uid, count, st->max_segs_per_uid);
        return -EDQUOT;
    }
    if (st->max_bytes_per_uid && bytes + size > st->max_bytes_per_uid) {
        mv_util_err_set(err, errlen,
                        "quota exceeded: uid %lld owns %" PRIu64
                        " bytes of segments and asks for %" PRIu64
                        " more, the limit per uid is %" PRIu64
                        " bytes (--max-bytes-per-uid); release segments or raise it",
                        (long long)uid, bytes, size, st->max_bytes_per_uid);
        return -EDQUOT;
    }
    return 0;
}

/* The free-space reserve: 0, or -ENOSPC with the reason (a failed statvfs lets the create go
 * on: the create itself then meets the real limit). */
static int reserve_check(mv_segstore *st, uint64_t size, char *err, size_t errlen)
{
    if (!st->min_free_bytes && !st->min_free_percent)
        return 0;
    struct statvfs vf;
    if (statvfs(st->dir, &vf) < 0)
        return 0;
    uint64_t bs = vf.f_frsize ? vf.f_frsize : vf.f_bsize;
    uint64_t total = (uint64_t)vf.f_blocks * bs, avail = (uint64_t)vf.f_bavail * bs;
    uint64_t reserve = total / 100 * st->min_free_percent;
    if (st->min_free_bytes > reserve)
        reserve = st->min_free_bytes;
    if (avail >= reserve && avail - reserve >= size)
        return 0;
    mv_util_err_set(err, errlen,
                    "disk reserve: %s has %" PRIu64 " bytes free of %" PRIu64
                    "; a segment of %" PRIu64 " bytes would leave less than the %" PRIu64
                    " bytes kept free (--min-free-bytes %" PRIu64 ", --min-free-percent %u)",
                    st->dir, avail, total, size, reserve, st->min_free_bytes, st->min_free_percent);
    return -ENOSPC;
}

static int create_common(mv_segstore *st, int64_t uid, uint64_t size, uint32_t owner_pid,
                         const char *const *devices, size_t ndevices,
                         const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                         char *err, size_t errlen)
{
    int rc;
    mv_segstore_seg seg;
    memset(&seg, 0, sizeof seg);
    if (out)
        memset(out, 0, sizeof *out);
    if (size == 0 || size > st->max_size) {
        mv_util_err_set(err, errlen, "size_bytes %" PRIu64 " is outside [1, %" PRIu64 "]", size,
                        st->max_size);
        return size ? -EFBIG : -EINVAL;
    }
    size = (size + MV_SEGSTORE_PAGE - 1) / MV_SEGSTORE_PAGE * MV_SEGSTORE_PAGE;
    if (owner_pid > INT32_MAX) {
        mv_util_err_set(err, errlen, "owner_pid %" PRIu32 " is not a valid pid", owner_pid);
        return -EINVAL;
    }
    rc = mv_segstore__check_labels(labels, nlabels, err, errlen);
    if (rc < 0)
        return rc;
    mv_segstore_seg tmpl = {.size = size,
                            .owner_pid = owner_pid,
                            .created_ns = mv_util_wall_ns(),
                            .nlabels = nlabels,
                            .labels = (mv_segstore_label *)labels,
                            .ndevices = ndevices,
                            .devices = (char **)devices,
                            .path = (char *)""};
    rc = mv_segstore_seg_copy(&seg, &tmpl);
    if (rc < 0) {
        mv_util_err_set(err, errlen, "out of memory");
        return rc;
    }
    seg.uid = uid >= 0 ? uid : 0; /* a file the agent cannot hand over stays root's */
    /* Checked before the file exists, and again under the lock below. */
    pthread_mutex_lock(&st->mu);
    rc = quota_check_locked(st, uid, size, err, errlen);
    pthread_mutex_unlock(&st->mu);
    if (rc == 0)
        rc = reserve_check(st, size, err, errlen);
    if (rc < 0) {
        MV_WARN("segment.quota_refused", "uid=%lld size=%" PRIu64 " err=%s", (long long)uid, size,
                mv_log_q(err));
        goto clear_seg;
    }
    if (ndevices) {
        /* Checked before the file exists, and again under the lock below. */
        pthread_mutex_lock(&st->mu);
        rc = 0;
        for (size_t i = 0; i < ndevices && !rc; i++) {
            long at = find_device_locked(st, devices[i]);
            if (at >= 0) {
                mv_util_err_set(err, errlen, "device %s already backs segment %s", devices[i],
                                st->segs[at].id);
                rc = -EBUSY;
            }
        }
        if (!rc && st->pages_used + ndevices > st->pool_pages) {
            mv_util_err_set(err, errlen,
                            "page pool exhausted: %zu pages requested, %" PRIu64 " of %" PRIu64
                            " free",
                            ndevices, st->pool_pages - st->pages_used, st->pool_pages);
            rc = -ENOSPC;
        }
        pthread_mutex_unlock(&st->mu);
        if (rc < 0)
            goto clear_seg;
    }
    rc = make_file(st, &seg, ndevices > 0, err, errlen);
    if (rc < 0)
        goto clear_seg;

    pthread_mutex_lock(&st->mu);
    /* The owner as a process, as soon as the request is taken (a pid number alone could
     * be handed to another process once the owner dies). */
    int owner_fd = mv_segstore__owner_open(st, owner_pid);
    for (size_t i = 0; i < ndevices; i++) {
        long at = find_device_locked(st, devices[i]);
        if (at >= 0) {
            mv_util_err_set(err, errlen, "device %s already backs segment %s", devices[i],
                            st->segs[at].id);
            rc = -EBUSY;
            goto unlock;
        }
    }
    if (ndevices && st->pages_used + ndevices > st->pool_pages) {
        mv_util_err_set(err, errlen, "page pool exhausted");
        rc = -ENOSPC;
        goto unlock;
    }
    if (st->nsegs >= MV_SEGSTORE_SEGMENTS_MAX) {
        rc = -ENOSPC;
        mv_util_err_set(err, errlen, "the agent already manages %d segments",
                        MV_SEGSTORE_SEGMENTS_MAX);
        goto unlock;
    }
    rc = quota_check_locked(st, uid, seg.size, err, errlen);
    if (rc < 0)
        goto unlock;
    if (st->nsegs == st->cap || !st->segs) {
        size_t ncap = st->cap ? st->cap * 2 : 16;
        mv_segstore_seg *nv = realloc(st->segs, ncap * sizeof *nv);
        if (!nv) {
            rc = -ENOMEM;
            mv_util_err_set(err, errlen, "out of memory");
            goto unlock;
        }
        st->segs = nv;
        if (mv_segstore__owner_fds_fit(st, ncap) < 0) {
            rc = -ENOMEM;
            mv_util_err_set(err, errlen, "out of memory");
            goto unlock;
        }
        st->cap = ncap;
    }
    if (out && mv_segstore_seg_copy(out, &seg) < 0) {
        rc = -ENOMEM;
        mv_util_err_set(err, errlen, "out of memory");
        goto unlock;
    }
    /* Acknowledged only once its catalog entry is durable. */
    rc = mv_segstore__journal_put(st, &seg, st->revision + 1, err, errlen);
    if (rc < 0) {
        if (out)
            mv_segstore_seg_clear(out);
        goto unlock;
    }
    st->owner_fds[st->nsegs] = owner_fd;
    owner_fd = -1;
    st->segs[st->nsegs] = seg;
    mv_segstore__owner_by_pid(st, st->nsegs++, 1);
    mv_segstore__watch_file(st, seg.path);
    st->pages_used += ndevices;
    st->revision++;
    mv_segstore__journal_maybe_compact(st);
    notify(st, MV_SEGSTORE_ADDED, &st->segs[st->nsegs - 1]);
    MV_INFO("segment.created",
            "id=%s path=%s size=%" PRIu64 " owner_pid=%" PRIu32 " labels=%zu devices=%zu "
            "revision=%" PRIu64,
            seg.id, mv_log_q(seg.path), seg.size, seg.owner_pid, seg.nlabels, seg.ndevices,
            st->revision);
    pthread_mutex_unlock(&st->mu);
    return 0;
unlock:
    pthread_mutex_unlock(&st->mu);
    if (owner_fd >= 0)
        close(owner_fd);
    unlink(seg.path);
    if (ndevices) {
        char dbuf[4096];
        if (mv_segstore_seg_dir(st, seg.id, dbuf, sizeof dbuf) == 0)
            rmdir(dbuf);
    }
clear_seg:
    mv_segstore_seg_clear(&seg);
    return rc;
}

int mv_segstore_create(mv_segstore *st, uint64_t size, uint32_t owner_pid,
                       const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                       char *err, size_t errlen)
{
    return create_common(st, -1, size, owner_pid, NULL, 0, labels, nlabels, out, err, errlen);
}

int mv_segstore_create_for(mv_segstore *st, int64_t uid, uint64_t size, uint32_t owner_pid,
                           const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                           char *err, size_t errlen)
{
    return create_common(st, uid, size, owner_pid, NULL, 0, labels, nlabels, out, err, errlen);
}

int mv_segstore_create_dev(mv_segstore *st, const char *const *devices, size_t ndevices,
                           const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                           char *err, size_t errlen)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!st->pool_pages) {
        mv_util_err_set(err, errlen, "this store has no page pool");
        return -EINVAL;
    }
    if (!devices || ndevices == 0 || ndevices > MV_SEGSTORE_DEVICES_MAX) {
        mv_util_err_set(err, errlen, "%zu devices: need 1..%d", ndevices, MV_SEGSTORE_DEVICES_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < ndevices; i++) {
        if (!devices[i] || !mv_segstore__valid_device(devices[i], strlen(devices[i]))) {
            mv_util_err_set(err, errlen, "device %zu is not a valid device ID", i);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(devices[i], devices[j]) == 0) {
                mv_util_err_set(err, errlen, "device %s is listed twice", devices[i]);
                return -EINVAL;
            }
    }
    if (ndevices > st->max_size / st->page_size) {
        mv_util_err_set(err, errlen,
                        "%zu pages of %" PRIu64 " bytes exceed the largest segment (%" PRIu64
                        " bytes)",
                        ndevices, st->page_size, st->max_size);
        return -EFBIG;
    }
    return create_common(st, -1, (uint64_t)ndevices * st->page_size, 0, devices, ndevices, labels,
                         nlabels, out, err, errlen);
}

static int labels_equal(const mv_segstore_seg *s, const mv_segstore_label *labels, size_t n)
{
    if (s->nlabels != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->labels[i].name, labels[i].name) ||
            strcmp(s->labels[i].value, labels[i].value))
            return 0;
    return 1;
}

static int pod_labels_equal(const mv_segstore_seg *s, const mv_segstore_label *labels, size_t n)
{
    if (s->npod_labels != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->pod_labels[i].name, labels[i].name) ||
            strcmp(s->pod_labels[i].value, labels[i].value))
            return 0;
    return 1;
}

int mv_segstore_set_owner(mv_segstore *st, const char *id, int64_t uid, int64_t gid, char *err,
                          size_t errlen)
{
    char path[4096] = "";
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; id && i < st->nsegs && !path[0]; i++)
        if (strcmp(st->segs[i].id, id) == 0)
            mv_util_fmt(path, sizeof path, "%s", st->segs[i].path);
    pthread_mutex_unlock(&st->mu);
    if (!path[0]) {
        mv_util_err_set(err, errlen, "no segment with id %.40s", id ? id : "");
        return -ENOENT;
    }
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        mv_util_err_set(err, errlen, "open %s: %s", path, strerror(e));
        return -e;
    }
    mode_t mode = uid < 0 && gid < 0 ? 0666 : 0660;
    int rc = 0;
    if ((uid >= 0 || gid >= 0) &&
        fchown(fd, uid >= 0 ? (uid_t)uid : (uid_t)-1, gid >= 0 ? (gid_t)gid : (gid_t)-1) < 0)
        rc = -errno;
    if (rc == 0 && fchmod(fd, mode) < 0)
        rc = -errno;
    close(fd);
    if (rc < 0) {
        mv_util_err_set(err, errlen, "chown/chmod %s: %s", path, strerror(-rc));
        return rc;
    }
    if (uid >= 0) {
        pthread_mutex_lock(&st->mu);
        for (size_t i = 0; i < st->nsegs; i++)
            if (strcmp(st->segs[i].id, id) == 0)
                st->segs[i].uid = uid;
        pthread_mutex_unlock(&st->mu);
    }
    MV_INFO("segment.owner_set", "id=%s uid=%lld gid=%lld mode=%04o", id, (long long)uid,
            (long long)gid, (unsigned)mode);
    return 0;
}

int mv_segstore_file_owner(mv_segstore *st, const char *id, int64_t *uid, int *file_errno)
{
    int rc = -ENOENT;
    *uid = -1;
    *file_errno = 0;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; id && i < st->nsegs; i++)
        if (strcmp(st->segs[i].id, id) == 0) {
            struct stat sb;
            if (lstat(st->segs[i].path, &sb) == 0) {
                *uid = sb.st_uid;
                rc = 0;
            } else {
                *file_errno = errno;
                rc = -EIO;
            }
            break;
        }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* A segment's identity labels (pod = 0) or its pod's labels (pod = 1), one list of each. */
static mv_segstore_label **label_list(mv_segstore_seg *s, int pod, size_t **n)
{
    *n = pod ? &s->npod_labels : &s->nlabels;
    return pod ? &s->pod_labels : &s->labels;
}

/* Replaces one of a segment's label lists, durably (journal first) and with one CHANGED
 * event; the list is left as it was when the journal cannot take the change. Returns 1
 * (changed), 0 (already so), -ENOENT or -errno with a message. */
static int replace_labels(mv_segstore *st, const char *id, const mv_segstore_label *labels,
                          size_t nlabels, int pod, char *err, size_t errlen)
{
    mv_segstore_seg tmpl = {.path = (char *)""}, nl;
    size_t *ntmpl;
    *label_list(&tmpl, pod, &ntmpl) = (mv_segstore_label *)labels;
    *ntmpl = nlabels;
    if (mv_segstore_seg_copy(&nl, &tmpl) < 0) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t *nnew;
    mv_segstore_label **newl = label_list(&nl, pod, &nnew);
    int rc = -ENOENT;
    mv_util_err_set(err, errlen, "no segment with id %.40s", id ? id : "");
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; id && i < st->nsegs; i++) {
        mv_segstore_seg *s = &st->segs[i];
        if (strcmp(s->id, id) != 0)
            continue;
        if (pod ? pod_labels_equal(s, labels, nlabels) : labels_equal(s, labels, nlabels)) {
            rc = 0;
            break;
        }
        size_t *ncur;
        mv_segstore_label **cur = label_list(s, pod, &ncur);
        mv_segstore_label *old = *cur;
        size_t nold = *ncur;
        *cur = *newl;
        *ncur = *nnew;
        *newl = old;
        *nnew = nold;
        rc = mv_segstore__journal_put(st, s, st->revision + 1, err, errlen);
        if (rc < 0) { /* not durable: the labels stay as they were */
            *newl = *cur;
            *nnew = *ncur;
            *cur = old;
            *ncur = nold;
            break;
        }
        st->revision++;
        mv_segstore__journal_maybe_compact(st);
        notify(st, MV_SEGSTORE_CHANGED, s);
        if (pod)
            MV_INFO("segment.pod_labels_set", "id=%s pod_labels=%zu revision=%" PRIu64, s->id,
                    *ncur, st->revision);
        else
            MV_INFO("segment.labels_set", "id=%s labels=%zu revision=%" PRIu64, s->id, *ncur,
                    st->revision);
        rc = 1;
        break;
    }
    pthread_mutex_unlock(&st->mu);
    mv_segstore_seg_clear(&nl);
    return rc;
}

int mv_segstore_set_labels(mv_segstore *st, const char *id, const mv_segstore_label *labels,
                           size_t nlabels, char *err, size_t errlen)
{
    int rc = mv_segstore__check_labels(labels, nlabels, err, errlen);
    return rc < 0 ? rc : replace_labels(st, id, labels, nlabels, 0, err, errlen);
}

int mv_segstore_set_pod_labels(mv_segstore *st, const char *id, const mv_segstore_label *labels,
                               size_t nlabels, char *err, size_t errlen)
{
    int rc = mv_segstore_check_pod_labels(labels, nlabels, err, errlen);
    return rc < 0 ? rc : replace_labels(st, id, labels, nlabels, 1, err, errlen);
}

int mv_segstore_find_device(mv_segstore *st, const char *device, mv_segstore_seg *out)
{
    int rc = -ENOENT;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->mu);
    long at = device ? find_device_locked(st, device) : -1;
    if (at >= 0)
        rc = mv_segstore_seg_copy(out, &st->segs[at]);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void mv_segstore_pool(mv_segstore *st, uint64_t *total, uint64_t *used)
{
    pthread_mutex_lock(&st->mu);
    if (total)
        *total = st->pool_pages;
    if (used)
        *used = st->pages_used;
    pthread_mutex_unlock(&st->mu);
}

int mv_segstore_seg_dir(const mv_segstore *st, const char *id, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", st->dir, id);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Removes entry i. Caller holds st->mu. */
void mv_segstore__remove_at(mv_segstore *st, size_t i, const char *event, pid_t dead_pid)
{
    mv_segstore__owner_by_pid(st, i, 0);
    mv_segstore_seg seg = st->segs[i];
    st->segs[i] = st->segs[--st->nsegs];
    if (st->owner_fds) {
        if (st->owner_fds[i] >= 0)
            close(st->owner_fds[i]);
        st->owner_fds[i] = st->owner_fds[st->nsegs];
        st->owner_fds[st->nsegs] = -1;
    }
    st->revision++;
    st->pages_used -= seg.ndevices <= st->pages_used ? seg.ndevices : st->pages_used;
    if (unlink(seg.path) < 0 && errno != ENOENT)
        MV_WARN("segment.unlink_failed", "id=%s path=%s err=%s", seg.id, mv_log_q(seg.path),
                mv_log_q(strerror(errno)));
    if (seg.ndevices) {
        char dbuf[4096];
        if (mv_segstore_seg_dir(st, seg.id, dbuf, sizeof dbuf) == 0 && rmdir(dbuf) < 0 &&
            errno != ENOENT)
            MV_WARN("segment.rmdir_failed", "id=%s dir=%s err=%s", seg.id, mv_log_q(dbuf),
                    mv_log_q(strerror(errno)));
    }
    /* The file is gone already: should the record not be written, the next start drops the
     * entry as a segment whose file is missing. */
    char jerr[MV_ERR_MAX];
    if (mv_segstore__journal_del(st, seg.id, st->revision, jerr, sizeof jerr) == 0)
        mv_segstore__journal_maybe_compact(st);
    notify(st, MV_SEGSTORE_REMOVED, &seg);
    if (dead_pid)
        MV_INFO(event, "id=%s owner_pid=%d revision=%" PRIu64, seg.id, (int)dead_pid, st->revision);
    else
        MV_INFO(event, "id=%s revision=%" PRIu64, seg.id, st->revision);
    mv_segstore_seg_clear(&seg);
}

int mv_segstore_release(mv_segstore *st, const char *id)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; id && i < st->nsegs; i++)
        if (strcmp(st->segs[i].id, id) == 0) {
            mv_segstore__remove_at(st, i, "segment.released", 0);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int mv_segstore_list(mv_segstore *st, mv_segstore_seg **out, size_t *n, uint64_t *revision)
{
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    mv_segstore_seg *v = calloc(st->nsegs ? st->nsegs : 1, sizeof *v);
    size_t i = 0;
    if (!v) {
        rc = -ENOMEM;
        goto unlock;
    }
    for (; i < st->nsegs; i++)
        if (mv_segstore_seg_copy(&v[i], &st->segs[i]) < 0) {
            mv_segstore_segs_free(v, i);
            v = NULL;
            i = 0;
            rc = -ENOMEM;
            break;
        }
    if (revision)
        *revision = st->revision;
unlock:
    pthread_mutex_unlock(&st->mu);
    *out = v;
    *n = i;
    return rc;
}

int mv_segstore_subscribe(mv_segstore *st, mv_segstore_watch_fn fn, void *arg,
                          mv_segstore_sub **out)
{
    mv_segstore_sub *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->fn = fn;
    s->arg = arg;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->nsegs; i++)
        fn(arg, MV_SEGSTORE_ADDED, &st->segs[i], st->revision);
    fn(arg, MV_SEGSTORE_SYNCED, NULL, st->revision);
    s->next = st->subs;
    st->subs = s;
    pthread_mutex_unlock(&st->mu);
    *out = s;
    return 0;
}

size_t mv_segstore_announce_all(mv_segstore *st)
{
    pthread_mutex_lock(&st->mu);
    size_t n = st->nsegs;
    for (size_t i = 0; i < n; i++)
        notify(st, MV_SEGSTORE_CHANGED, &st->segs[i]);
    pthread_mutex_unlock(&st->mu);
    return n;
}

void mv_segstore_unsubscribe(mv_segstore *st, mv_segstore_sub *sub)
{
    if (!sub)
        return;
    pthread_mutex_lock(&st->mu);
    for (mv_segstore_sub **pp = &st->subs; *pp; pp = &(*pp)->next)
        if (*pp == sub) {
            *pp = sub->next;
            break;
        }
    pthread_mutex_unlock(&st->mu);
    free(sub);
}
