/* mv_segstore: the agent's segment manager: segment files in a directory, the
 * persisted catalog (catalog.json, a snapshot, and catalog.journal, the changes since: see
 * docs/architecture.md), per-uid quotas, watchers, and reaping of dead owners.
 *
 * Thread-safe. Watcher callbacks run with the store's lock held: they must be
 * quick and must not call back into the store.
 *
 * Ownership: mv_segstore_seg values handed out are deep copies owned by the
 * caller; free their contents with mv_segstore_seg_clear (or a whole array with
 * mv_segstore_segs_free). Segments passed to watcher callbacks belong to the
 * store and are valid only during the callback.
 */
#ifndef MV_SEGSTORE_H
#define MV_SEGSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MV_SEGSTORE_DEFAULT_DIR      "/run/microview"
#define MV_SEGSTORE_PAGE             4096u
#define MV_SEGSTORE_MIN_SIZE         MV_SEGSTORE_PAGE
#define MV_SEGSTORE_DEFAULT_MAX_SIZE (64u << 20)
#define MV_SEGSTORE_ID_LEN           20 /* "seg-" + 16 hex digits */
#define MV_SEGSTORE_LABELS_MAX       16
#define MV_SEGSTORE_LABEL_NAME_MAX   127
#define MV_SEGSTORE_LABEL_VALUE_MAX  255
/* The pod's Kubernetes labels, kept for label selectors (not series labels): keys and values
 * as the API server validates them (mv_labelsel), at most this many per segment. */
#define MV_SEGSTORE_POD_LABELS_MAX      32
#define MV_SEGSTORE_POD_LABEL_KEY_MAX   317 /* 253-byte prefix, '/', 63-byte name */
#define MV_SEGSTORE_POD_LABEL_VALUE_MAX 63
#define MV_SEGSTORE_SEGMENTS_MAX        65536
#define MV_SEGSTORE_CATALOG_MAX         (1u << 30) /* bytes of catalog.json read; larger: set aside */
#define MV_SEGSTORE_DEVICE_ID_MAX       63         /* bytes of a device ID (kubelet limit) */
#define MV_SEGSTORE_DEVICES_MAX         262144     /* device IDs backing one segment */
#define MV_SEGSTORE_SEG_FILE            "segment" /* file name in per-segment directories */

typedef struct mv_segstore mv_segstore;

typedef struct mv_segstore_label {
    char *name;
    char *value;
} mv_segstore_label;

typedef struct mv_segstore_seg {
    char id[MV_SEGSTORE_ID_LEN + 1];
    char *path; /* host path of the segment file */
    uint64_t size;
    uint32_t owner_pid; /* 0 = no owner to watch */
    uint64_t created_ns;
    size_t nlabels;
    mv_segstore_label *labels;
    size_t npod_labels; /* the pod's Kubernetes labels (catalog.json "pod_labels") */
    mv_segstore_label *pod_labels;
    size_t ndevices; /* device IDs backing the segment (Kubernetes mode); 0 otherwise */
    char **devices;
    /* The uid its file belongs to, as the agent set it or (after a restart) found it; what the
     * per-uid quotas count. Not in catalog.json: the file's owner is the record. */
    int64_t uid;
} mv_segstore_seg;

typedef struct mv_segstore_opts {
    const char *dir;      /* NULL = MV_SEGSTORE_DEFAULT_DIR */
    uint64_t max_size;    /* 0 = MV_SEGSTORE_DEFAULT_MAX_SIZE; at most 1 GiB */
    mode_t file_mode;     /* 0 = 0660 */
    int reap_interval_ms; /* 0 = 2000; < 0 disables the reaper thread */
    /* Page pool (Kubernetes mode): pool_pages device IDs of page_size bytes each
     * (page_size a multiple of 4 KiB; 0 = 4 KiB). 0 pages = no pool accounting. */
    uint64_t pool_pages;
    uint64_t page_size;
    /* Quotas of mv_segstore_create_for's non-root callers, counted per uid of the segments'
     * files (0 = unlimited): segments, and bytes of them. */
    uint64_t max_segments_per_uid;
    uint64_t max_bytes_per_uid;
    /* Space every create leaves free on the directory's filesystem (statvfs before the
     * create): the larger of min_free_bytes and min_free_percent of its size (0 = none). */
    uint64_t min_free_bytes;
    unsigned min_free_percent; /* 0..99 */
} mv_segstore_opts;

/* Opens the store: creates the directory (0755) if needed, locks it (flock on
 * DIR/.lock, held until mv_segstore_close: a second store on the same directory,
 * in this or another process, gets -EBUSY with the holder's pid in the log),
 * reloads the catalog (catalog.json and catalog.journal; entries that cannot be loaded are
 * logged and set aside, entries whose file is gone dropped; then a fresh snapshot), and starts the
 * reaper. Returns 0 or a negative errno (the reason is logged). */
int mv_segstore_open(const mv_segstore_opts *opts, mv_segstore **out);

/* Stops the reaper and frees the store. Segment files are kept. NULL-safe. */
void mv_segstore_close(mv_segstore *st);

/* Creates a segment of `size` bytes rounded up to 4 KiB (must be within
 * [4 KiB, max_size]) with the given labels (validated: label names as in
 * Prometheus, values UTF-8 without control bytes, at most MV_SEGSTORE_LABELS_MAX). The file is
 * zero-filled and formatted with mv_seg_format. `out` may be NULL. On error
 * returns -EINVAL (bad argument), -EFBIG (too big), -ENOSPC, -EIO... and writes a
 * human-readable reason into `err` (may be NULL). */
int mv_segstore_create(mv_segstore *st, uint64_t size, uint32_t owner_pid,
                       const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                       char *err, size_t errlen);

/* mv_segstore_create on behalf of a caller running as `uid` (-1: not known, e.g. TCP; 0: root),
 * whose segment's file will be handed to that uid: a caller other than root or unknown is held
 * to max_segments_per_uid and max_bytes_per_uid, counted over the segments whose files its
 * uid owns: over either, nothing is created and -EDQUOT comes back, `err` naming the limit,
 * the usage and the flag. The free-space reserve (min_free_*) holds for every create:
 * -ENOSPC naming it. A create returns only once its catalog entry is durable (journal
 * record fdatasync'd); when that fails the file is removed and the error returned. */
int mv_segstore_create_for(mv_segstore *st, int64_t uid, uint64_t size, uint32_t owner_pid,
                           const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                           char *err, size_t errlen);

/* Segments and bytes whose files `uid` owns (as mv_segstore_seg.uid counts them). */
void mv_segstore_usage(mv_segstore *st, int64_t uid, uint64_t *count, uint64_t *bytes);

/* Bytes written to the catalog since open: journal records and snapshots (benchmarks). */
void mv_segstore_catalog_written(mv_segstore *st, uint64_t *journal, uint64_t *snapshots);

/* Checks label `idx` as it arrived, with its lengths (before it becomes C strings, where a NUL
 * would cut it): a control byte (below 0x20, or 0x7f; NUL included) in the name or the value is
 * refused. Returns 0, or -EINVAL with a reason naming the label, the byte and its offset. */
int mv_segstore_check_label_bytes(size_t idx, const char *name, size_t nlen, const char *value,
                                  size_t vlen, char *err, size_t errlen);

/* Creates a segment backed by `ndevices` pool pages named by `devices` (its size
 * is ndevices * page_size). It lives in its own directory, dir/<id>/segment, so
 * that the directory alone can be mounted into a container. Refuses with -EBUSY if a device already
 * backs another segment, -ENOSPC if the pool has too few free pages, -EINVAL for bad IDs; the
 * reason goes to `err`. Otherwise as mv_segstore_create (no owner pid). */
int mv_segstore_create_dev(mv_segstore *st, const char *const *devices, size_t ndevices,
                           const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                           char *err, size_t errlen);

/* Hands a segment file to the user and group its writer runs as (uid/gid -1: unknown):
 * a known uid becomes the owner, a known gid the group, and the file is made 0660; with
 * neither known (the container runs as its image's USER, which the agent cannot see) the
 * file is made 0666 instead, so any user of that one container can write it (see
 * docs/kubernetes.md for why that is safe). Idempotent. Returns 0, or -ENOENT / -errno with
 * the reason in `err`. */
int mv_segstore_set_owner(mv_segstore *st, const char *id, int64_t uid, int64_t gid, char *err,
                          size_t errlen);

/* The owner of a segment's file as it is now (lstat: the file, never a link's target).
 * Returns 0 with *uid set, -ENOENT when no segment has that id, or -EIO when the file cannot
 * be examined (gone, say), with the lstat errno in *file_errno and *uid -1. */
int mv_segstore_file_owner(mv_segstore *st, const char *id, int64_t *uid, int *file_errno);

/* Replaces a segment's labels (validated as in create). Setting the labels it
 * already has changes nothing. Otherwise the change is persisted and watchers see
 * CHANGED with the new labels (the file and its mapping stay as they were). Returns 1 if changed, 0
 * if unchanged, -ENOENT or -EINVAL (reason in `err`). */
int mv_segstore_set_labels(mv_segstore *st, const char *id, const mv_segstore_label *labels,
                           size_t nlabels, char *err, size_t errlen);

/* Replaces a segment's pod labels (the pod's Kubernetes labels, for label selectors), checked
 * with mv_segstore_check_pod_labels. Persisted and announced (CHANGED) like mv_segstore_set_labels;
 * same returns. */
int mv_segstore_set_pod_labels(mv_segstore *st, const char *id, const mv_segstore_label *labels,
                               size_t n, char *err, size_t errlen);

/* Checks pod labels: at most MV_SEGSTORE_POD_LABELS_MAX, keys and values valid Kubernetes label
 * keys and values, no key twice. Returns 0, or -EINVAL with a reason naming the label. */
int mv_segstore_check_pod_labels(const mv_segstore_label *labels, size_t n, char *err,
                                 size_t errlen);

/* Copies the segment backed by `device` into *out. 0 or -ENOENT. */
int mv_segstore_find_device(mv_segstore *st, const char *device, mv_segstore_seg *out);

/* Pool accounting: total and used pages (both 0 without a pool). */
void mv_segstore_pool(mv_segstore *st, uint64_t *total, uint64_t *used);

/* The directory of a device-backed segment (dir/<id>), written to buf.
 * Returns 0 or -ENAMETOOLONG. */
int mv_segstore_seg_dir(const mv_segstore *st, const char *id, char *buf, size_t len);

/* Removes a segment from the catalog and unlinks its file. 0 or -ENOENT. */
int mv_segstore_release(mv_segstore *st, const char *id);

/* Copies the catalog. *out is malloc'd (free with mv_segstore_segs_free). */
int mv_segstore_list(mv_segstore *st, mv_segstore_seg **out, size_t *n, uint64_t *revision);

/* Runs one reaping pass now (what the reaper thread does every interval): a segment file
 * whose size changed (truncated or extended by its writer) is put back to its recorded size
 * (event segment.size_changed); segments of dead owners are released. Returns the number
 * of segments released. */
int mv_segstore_reap(mv_segstore *st);

void mv_segstore_seg_clear(mv_segstore_seg *s);
void mv_segstore_segs_free(mv_segstore_seg *v, size_t n);
int mv_segstore_seg_copy(mv_segstore_seg *dst, const mv_segstore_seg *src);

/* ---- Watchers --------------------------------------------------------------- */

/* ADDED: a new segment. REMOVED: it is gone (file unlinked). CHANGED: the same
 * segment (same file) with new labels, or announced again by
 * mv_segstore_announce_all; a watcher that forwards to clients that know only
 * ADDED/REMOVED sends REMOVED then ADDED. SYNCED: the initial replay is over. */
enum {
    MV_SEGSTORE_ADDED = 1,
    MV_SEGSTORE_REMOVED = 2,
    MV_SEGSTORE_SYNCED = 3,
    MV_SEGSTORE_CHANGED = 4
};

/* `seg` is NULL for SYNCED. `revision` is the catalog revision after the event. */
typedef void (*mv_segstore_watch_fn)(void *arg, int event, const mv_segstore_seg *seg,
                                     uint64_t revision);

typedef struct mv_segstore_sub mv_segstore_sub;

/* Subscribes: `fn` first gets one ADDED per existing segment and a SYNCED, then
 * every later change, in order. Returns 0 or -ENOMEM. */
int mv_segstore_subscribe(mv_segstore *st, mv_segstore_watch_fn fn, void *arg,
                          mv_segstore_sub **out);
/* After this returns, `fn` is not running and will not be called again. */
void mv_segstore_unsubscribe(mv_segstore *st, mv_segstore_sub *sub);
/* Sends CHANGED for every segment to every watcher (no change to the catalog):
 * used when what watchers derive from a segment changed, e.g. it became
 * RDMA-readable. Returns the number of segments announced. */
size_t mv_segstore_announce_all(mv_segstore *st);

/* ---- Catalog file ------------------------------------------------------------ */

/* Parses catalog.json text (untrusted): validates every field and builds segment
 * entries whose paths are `dir`/id (paths in the file are ignored; entries with
 * devices, i.e. Kubernetes-mode ones, get `dir`/id/segment). Returns 0 and
 * a malloc'd array (free with mv_segstore_segs_free), or -EINVAL with a reason in
 * `err`. Exposed for tests and fuzzing. */
int mv_segstore_catalog_parse(const char *text, size_t len, const char *dir, mv_segstore_seg **out,
                              size_t *n, uint64_t *revision, char *err, size_t errlen);

/* Rebuilds a catalog from catalog.json text (`snap`, NULL: none) and catalog.journal bytes, as
 * the store does at open: entries and records that cannot be loaded are skipped and counted
 * in *quarantined, never failing the rest. Returns 0 and a malloc'd array (free with
 * mv_segstore_segs_free), or -ENOMEM. Exposed for tests and fuzzing. */
int mv_segstore_catalog_load_mem(const char *snap, size_t snaplen, const uint8_t *journal,
                                 size_t jlen, const char *dir, mv_segstore_seg **out, size_t *n,
                                 uint64_t *revision, size_t *quarantined);

#endif
