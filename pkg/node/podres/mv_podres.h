/* mv_podres: client of the kubelet's PodResources v1 List: which container holds
 * which device IDs of a resource.
 *
 * Ownership: mv_podres_list returns a malloc'd array; free it with
 * mv_podres_free. Strings inside belong to the array.
 */
#ifndef MV_PODRES_H
#define MV_PODRES_H

#include <stddef.h>

#define MV_PODRES_MAX_ENTRIES 65536 /* containers accepted in one answer */

/* One container's devices of the requested resource. */
typedef struct mv_podres_entry {
    char *namespace_;
    char *pod;
    char *container;
    size_t ndevices;
    char **devices;
} mv_podres_entry;

/* Calls List on `socket_path` (the PodResources unix socket) with a deadline of
 * `timeout_ms` and keeps the containers holding devices of `resource`. Returns 0
 * or a negative errno / gRPC failure (-EIO, reason in `err`). */
int mv_podres_list(const char *socket_path, const char *resource, int timeout_ms,
                   mv_podres_entry **out, size_t *n, char *err, size_t errlen);

/* Parses a packed ListPodResourcesResponse (for tests and the client above). */
int mv_podres_parse(const void *buf, size_t len, const char *resource, mv_podres_entry **out,
                    size_t *n, char *err, size_t errlen);

void mv_podres_free(mv_podres_entry *v, size_t n);

/* The entry (in v) holding `device`, or NULL. */
const mv_podres_entry *mv_podres_find(const mv_podres_entry *v, size_t n, const char *device);

#endif
