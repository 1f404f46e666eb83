/* mv_segstore_internal: what the store and its catalog file code share. Not part of the
 * module's interface: include mv_segstore.h outside this directory. */
#ifndef MV_SEGSTORE_INTERNAL_H
#define MV_SEGSTORE_INTERNAL_H

#include "mv_segstore.h"

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
/* Label names and values as Prometheus takes them, no duplicates. 0 or -EINVAL + err. */
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
