/* mv_segstore_internal: what the store and its catalog file code share. Not part of the
 * module's interface: include mv_segstore.h outside this directory. */
#ifndef MV_SEGSTORE_INTERNAL_H
#define MV_SEGSTORE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "mv_segstore.h"

struct json_object;

#define DEFAULT_REAP_MS 2000

struct mv_segstore_sub {
    mv_segstore_watch_fn fn;
    void *arg;
    struct mv_segstore_sub *next;
};

struct mv_segstore {
    /* Removes entry i (the reaper's way back into the store, set by mv_segstore_open: the
     * reaper is a layer below the store and does not call into mv_segstore.c). */
    void (*remove_at)(mv_segstore *st, size_t i, const char *event, pid_t dead_pid);
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
    /* The catalog on disk: the journal's descriptor (-1: none), its length and records since
     * the last snapshot, the record count of the next compaction (0: the default rule), and
     * bytes written to the journal and to snapshots since open (for benchmarks). */
    int jr_fd;
    uint64_t jr_len;
    size_t jr_records, compact_at, snap_segs; /* snap_segs: entries in the last snapshot */
    uint64_t jr_bytes_written, snap_bytes_written;
    /* Quotas: per uid of a segment's file (0: unlimited), and the space kept free. */
    uint64_t max_segs_per_uid, max_bytes_per_uid, min_free_bytes;
    unsigned min_free_percent;
    /* reaper */
    pthread_t reaper;
    int reaper_running;
    int stopping;
    pthread_cond_t cv;
};

/* mv_segstore.c: removes entry i (file, catalog, watchers told). Caller holds st->mu. */
void mv_segstore__remove_at(mv_segstore *st, size_t i, const char *event, pid_t dead_pid);

/* mv_segstore_reap.c: the inotify descriptor of the size checks (st->ino_fd, -1 if none) and
 * the reaper's epoll set and wake eventfd (opened; closed);
 * a watch on one segment file (caller holds st->mu or owns st); a file back to its recorded
 * size (0, -ENOENT, -EINVAL: not a regular file, or -errno); the reaper thread's body. */
void mv_segstore__watch_open(mv_segstore *st);
void mv_segstore__watch_close(mv_segstore *st);
void mv_segstore__watch_file(mv_segstore *st, const char *path);
/* mv_segstore_reap.c: entry i's owner is known by pid number only (caller holds st->mu or
 * owns st), or no longer (called before the entry goes): keeps st->by_pid and wakes the
 * reaper, which then passes every interval. */
void mv_segstore__owner_by_pid(mv_segstore *st, size_t i, int add);
int mv_segstore__fix_size(const mv_segstore_seg *s);
void *mv_segstore__reaper_main(void *arg);
/* Tells the reaper thread to end (it is then joined). */
void mv_segstore__reaper_stop(mv_segstore *st);
/* mv_segstore_reap.c: a pidfd of process `pid` (0: none) or -1 (logged once per store when
 * the system refuses one for a reason other than the process being gone, or when it would
 * take one of the descriptors kept for the rest of the agent: the top quarter of
 * RLIMIT_NOFILE, at least 64; caller holds st->mu or owns st); owner_fds sized for `cap`
 * entries (new ones -1): 0 or -ENOMEM; every owner pidfd closed. */
int mv_segstore__owner_open(mv_segstore *st, uint32_t pid);
int mv_segstore__owner_fds_fit(mv_segstore *st, size_t cap);
void mv_segstore__owner_fds_close(mv_segstore *st);

#define CATALOG_NAME "catalog.json"
#define CATALOG_TMP  "catalog.json.tmp"
#define JOURNAL_NAME "catalog.journal"
/* A journal record's payload (one segment entry) at most; a longer one is damage. */
#define JR_RECORD_MAX (32u << 20)
/* The journal is folded into a new snapshot once it holds as many records as the last snapshot
 * has entries (at least this many): each snapshot's O(n) write is paid for by as many changes. */
#define JR_COMPACT_MIN 1024

/* mv_segstore_journal.c: the journal (catalog.journal) beside the snapshot (catalog.json).
 * open: st->jr_fd, st->jr_len (0 or -errno, logged); put/del: one record appended and
 * fdatasync'd before returning (0, or -errno with the reason in err; the journal is cut back
 * to where it was); compact: a new snapshot of st's catalog, then the journal emptied (0 or
 * -errno, logged; the journal stays correct on failure); maybe_compact: compacts when the
 * journal is long enough. All with st->mu held or st owned. */
int mv_segstore__journal_open(mv_segstore *st);
void mv_segstore__journal_close(mv_segstore *st);
int mv_segstore__journal_put(mv_segstore *st, const mv_segstore_seg *s, uint64_t revision,
                             char *err, size_t errlen);
int mv_segstore__journal_del(mv_segstore *st, const char *id, uint64_t revision, char *err,
                             size_t errlen);
int mv_segstore__compact(mv_segstore *st);
void mv_segstore__journal_maybe_compact(mv_segstore *st);
uint32_t mv_segstore__crc32(const void *buf, size_t len);

/* What mv_segstore__catalog_build made of a snapshot and a journal. */
typedef struct segstore_loaded {
    mv_segstore_seg *segs; /* malloc'd; mv_segstore_segs_free(segs, n) */
    size_t n;
    uint64_t revision;
    int have_snapshot; /* the snapshot was read (entries may still have been set aside) */
    int snap_bad;      /* the snapshot as a whole could not be read: snap_reason */
    char snap_reason[256];
    size_t bad_entries; /* snapshot entries set aside (logged when `log`) */
    size_t bad_records; /* journal records set aside (logged when `log`) */
    size_t jr_records;  /* journal records read */
    size_t jr_valid;    /* bytes of the journal up to its first broken or torn record */
    int jr_torn;        /* the journal ends in a record cut short (a crash mid-append) */
    int jr_broken;      /* a record is damaged before the end: the rest was not read */
} segstore_loaded;

/* Rebuilds the catalog from snapshot text (NULL: none) and journal bytes. Never fails over
 * content: what cannot be loaded is counted (and logged when `log`) and the rest is
 * returned. 0, or -ENOMEM. */
int mv_segstore__catalog_build(const char *snap, size_t snaplen, const uint8_t *jr, size_t jlen,
                               const char *dir, int log, segstore_loaded *out);

/* "<dir>/<name>", malloc'd; NULL without memory. */
char *mv_segstore__path_join(const char *dir, const char *name);
/* The file of segment `id`: "<dir>/<id>" or, in a per-segment directory,
 * "<dir>/<id>/" MV_SEGSTORE_SEG_FILE. malloc'd; NULL without memory. */
char *mv_segstore__seg_path(const char *dir, const char *id, int in_dir);
/* "seg-" + 16 lowercase hex digits. */
int mv_segstore__valid_id(const char *id, size_t len);
/* Device IDs: 1..MV_SEGSTORE_DEVICE_ID_MAX bytes of [A-Za-z0-9._-]. */
int mv_segstore__valid_device(const char *d, size_t len);
/* The offset of the first control byte (below 0x20, or 0x7f; NUL included) in s[0..len), or
 * -1 when there is none. */
long mv_segstore__control_byte(const char *s, size_t len);
/* Label names and values as Prometheus takes them, no duplicates; no control byte in a value
 * (a name allows only [a-zA-Z0-9_] anyway). 0 or -EINVAL + err. */
int mv_segstore__check_labels(const mv_segstore_label *labels, size_t n, char *err, size_t errlen);

/* Told of an entry that cannot be loaded (index in the file, reason); the rest is served. */
typedef void (*segstore_bad_fn)(void *arg, size_t idx, const char *reason);
/* As mv_segstore__catalog_parse, with entries that fail validation (or, for `bad` non-NULL, are
 * duplicates: the caller checks those) handed to `bad` and skipped instead of failing the
 * whole file. */
int mv_segstore__catalog_parse_ex(const char *text, size_t len, const char *dir, uint64_t max_size,
                                  segstore_bad_fn bad, void *bad_arg, mv_segstore_seg **out,
                                  size_t *n, uint64_t *revision, char *err, size_t errlen);
/* One catalog entry (a JSON object as in catalog.json's "segments") into *seg. 0, -EINVAL or
 * -ENOMEM, reason in err. */
int mv_segstore__entry_parse(const char *text, size_t len, const char *dir, uint64_t max_size,
                             mv_segstore_seg *seg, char *err, size_t errlen);
/* The same from a parsed json-c object. */
int mv_segstore__entry_from_json(struct json_object *e, const char *dir, uint64_t max_size,
                                 mv_segstore_seg *seg, char *err, size_t errlen);
/* The catalog.json entry of `s` (a json-c object: put it), or NULL without memory. */
struct json_object *mv_segstore__entry_json(const mv_segstore_seg *s);
/* write(2) until done: 0 or -errno. fsync of a directory: 0 or -errno. */
int mv_segstore__write_all(int fd, const void *buf, size_t len);
int mv_segstore__fsync_dir(const char *dir);
/* Parses catalog.json text of a store in `dir` (see mv_segstore_catalog_parse). */
int mv_segstore__catalog_parse(const char *text, size_t len, const char *dir, uint64_t max_size,
                               mv_segstore_seg **out, size_t *n, uint64_t *revision, char *err,
                               size_t errlen);
/* Writes <dir>/catalog.json atomically (tmp + fsync + rename + fsync of the directory).
 * 0 or -errno (logged). */
int mv_segstore__catalog_save(const char *dir, uint64_t revision, const mv_segstore_seg *segs,
                              size_t nsegs);
/* Reads a regular file of at most MV_SEGSTORE_CATALOG_MAX bytes into a
 * malloc'd NUL-terminated buffer. 0, -errno, -EFBIG or -ENOMEM. */
int mv_segstore__read_file(const char *path, char **out, size_t *len);

#endif
