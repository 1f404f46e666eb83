/* mv_segstore_internal: what the store and its catalog file code share. Not part of the
 * module's interface: include mv_segstore.h outside this directory. */
#ifndef MV_SEGSTORE_INTERNAL_H
#define MV_SEGSTORE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "mv_segstore.h"

#define DEFAULT_REAP_MS 2000

struct mv_segstore_sub {
    mv_segstore_watch_fn fn;
    void *arg;
    struct mv_segstore_sub *next;
};

struct mv_segstore {
    char *dir;
    int lock_fd; /* flock(LOCK_EX) on DIR/.lock while open: one agent per directory */
    uint64_t max_size;
    mode_t file_mode;
    int reap_ms;
    pthread_mutex_t mu;
    mv_segstore_seg *segs;
    size_t nsegs, cap;
    /* A pidfd of each entry's owner process (same index as segs, cap entries), or -1: no
     * owner, or none could be opened (the reaper then checks the pid number). A pidfd names
     * the process, not its number: a dead owner whose pid was given to another process is
     * still seen dead. */
    int *owner_fds;
    int owner_fd_warned;
    uint64_t revision;
    uint64_t pool_pages, page_size, pages_used;
    mv_segstore_sub *subs;
    /* The reaper's size check (seg_fix_size) runs on every file only when something may
     * have changed one: an inotify watch on each file reports a truncation, a write(2) or
     * an attribute change (stores through a mapping report nothing), so a quiet pass costs
     * no path lookups. Without inotify, or once a watch could not be added (the
     * fs.inotify.max_user_watches limit), every pass checks every file, as does every
     * FULL_CHECK_EVERY-th pass in any case. */
    int ino_fd;
    int unwatched;
    int64_t next_full_ms; /* CLOCK_MONOTONIC ms of the next size check of every file */
    /* The reaper sleeps until something happens instead of passing every interval: ep_fd
     * (epoll) holds every owner pidfd (readable once the owner exits), the inotify
     * descriptor, and wake_fd (an eventfd: stop, or a reason to poll again). It falls back
     * to a pass every interval while an owner is known by pid number only (by_pid such
     * entries: nothing signals their exit), while a file is unwatched, or once the epoll
     * set could not take a descriptor (ep_broken). */
    int ep_fd, wake_fd;
    int ep_broken;
    size_t by_pid;
    /* reaper */
    pthread_t reaper;
    int reaper_running;
    int stopping;
    pthread_cond_t cv;
};

/* mv_segstore.c: removes entry i (file, catalog, watchers told). Caller holds st->mu. */
void segstore_remove_at(mv_segstore *st, size_t i, const char *event, pid_t dead_pid);

/* mv_segstore_reap.c: the inotify descriptor of the size checks (st->ino_fd, -1 if none) and
 * the reaper's epoll set and wake eventfd (opened; closed);
 * a watch on one segment file (caller holds st->mu or owns st); a file back to its recorded
 * size (0, -ENOENT, -EINVAL: not a regular file, or -errno); the reaper thread's body. */
void segstore_watch_open(mv_segstore *st);
void segstore_watch_close(mv_segstore *st);
void segstore_watch_file(mv_segstore *st, const char *path);
/* mv_segstore_reap.c: entry i's owner is known by pid number only (caller holds st->mu or
 * owns st), or no longer (called before the entry goes): keeps st->by_pid and wakes the
 * reaper, which then passes every interval. */
void segstore_owner_by_pid(mv_segstore *st, size_t i, int add);
int segstore_fix_size(const mv_segstore_seg *s);
void *segstore_reaper_main(void *arg);
/* Tells the reaper thread to end (it is then joined). */
void segstore_reaper_stop(mv_segstore *st);
/* mv_segstore_reap.c: a pidfd of process `pid` (0: none) or -1 (logged once per store when
 * the system refuses one for a reason other than the process being gone, or when it would
 * take one of the descriptors kept for the rest of the agent: the top quarter of
 * RLIMIT_NOFILE, at least 64; caller holds st->mu or owns st); owner_fds sized for `cap`
 * entries (new ones -1): 0 or -ENOMEM; every owner pidfd closed. */
int segstore_owner_open(mv_segstore *st, uint32_t pid);
int segstore_owner_fds_fit(mv_segstore *st, size_t cap);
void segstore_owner_fds_close(mv_segstore *st);

#define CATALOG_NAME "catalog.json"
#define CATALOG_TMP  "catalog.json.tmp"

/* "<dir>/<name>", malloc'd; NULL without memory. */
char *segstore_path_join(const char *dir, const char *name);
/* The file of segment `id`: "<dir>/<id>" or, in a per-segment directory,
 * "<dir>/<id>/" MV_SEGSTORE_SEG_FILE. malloc'd; NULL without memory. */
char *segstore_seg_path(const char *dir, const char *id, int in_dir);
/* "seg-" + 16 lowercase hex digits. */
int segstore_valid_id(const char *id, size_t len);
/* Device IDs: 1..MV_SEGSTORE_DEVICE_ID_MAX bytes of [A-Za-z0-9._-]. */
int segstore_valid_device(const char *d, size_t len);
/* The offset of the first control byte (below 0x20, or 0x7f; NUL included) in s[0..len), or
 * -1 when there is none. */
long segstore_control_byte(const char *s, size_t len);
/* Label names and values as Prometheus takes them, no duplicates; no control byte in a value
 * (a name allows only [a-zA-Z0-9_] anyway). 0 or -EINVAL + err. */
int segstore_check_labels(const mv_segstore_label *labels, size_t n, char *err, size_t errlen);

/* Parses catalog.json text of a store in `dir` (see mv_segstore_catalog_parse). */
int segstore_catalog_parse(const char *text, size_t len, const char *dir, uint64_t max_size,
                           mv_segstore_seg **out, size_t *n, uint64_t *revision, char *err,
                           size_t errlen);
/* Writes <dir>/catalog.json atomically (tmp + fsync + rename). 0 or -errno (logged). */
int segstore_catalog_save(const char *dir, uint64_t revision, const mv_segstore_seg *segs,
                          size_t nsegs);
/* Reads a regular file of at most MV_SEGSTORE_CATALOG_MAX bytes into a
 * malloc'd NUL-terminated buffer. 0, -errno, -EFBIG or -ENOMEM. */
int segstore_read_file(const char *path, char **out, size_t *len);

#endif
