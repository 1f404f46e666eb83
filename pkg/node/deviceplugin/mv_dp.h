/* mv_dp: a kubelet device plugin (v1beta1): serves DevicePlugin on a socket in
 * the device-plugin directory, registers with the kubelet, keeps ListAndWatch
 * streams fed, and re-registers when the kubelet restarts.
 *
 * Threading: the gRPC server drains its queue on its own thread, so the kubelet's
 * call back into the plugin during Register is answered while the registering
 * thread waits. A manager thread owns the server's lifecycle: it registers, then
 * watches the directory with inotify (and a 250 ms check) for a re-created
 * kubelet.sock or a deleted plugin socket, and re-registers within a second; a
 * failed registration or a dropped ListAndWatch stream is retried with backoff.
 * Allocate and PreStartContainer run their callbacks on a worker thread per call,
 * so callbacks may block (file creation, PodResources, the API server).
 *
 * Ownership: mv_dp_start copies the configuration strings. mv_dp_stop joins every
 * thread, waits for callbacks in flight, and frees the handle.
 */
#ifndef MV_DP_H
#define MV_DP_H

#include <stddef.h>

#define MV_DP_VERSION          "v1beta1"
#define MV_DP_KUBELET_SOCKET   "kubelet.sock"
#define MV_DP_ENVS_MAX         8
#define MV_DP_MOUNTS_MAX       4
#define MV_DP_ENV_KEY_MAX      128
#define MV_DP_PATH_MAX         1024
#define MV_DP_DEVICES_PER_CALL 262144 /* device IDs accepted in one request */

/* What one container gets from Allocate. */
typedef struct mv_dp_alloc {
    size_t nenvs;
    struct {
        char key[MV_DP_ENV_KEY_MAX];
        char value[MV_DP_PATH_MAX];
    } envs[MV_DP_ENVS_MAX];
    size_t nmounts;
    struct {
        char container_path[MV_DP_PATH_MAX];
        char host_path[MV_DP_PATH_MAX];
        int read_only;
    } mounts[MV_DP_MOUNTS_MAX];
} mv_dp_alloc;

typedef struct mv_dp_callbacks {
    /* Fills *out for a container given device IDs `ids`. Returns 0, or a negative
     * errno with a message for the kubelet in `err` (the allocation is refused). */
    int (*allocate)(void *arg, const char *const *ids, size_t n, mv_dp_alloc *out, char *err,
                    size_t errlen);
    /* Before each container start (also restarts). Returns 0, or a negative errno
     * with a message in `err` (the container fails to start). */
    int (*prestart)(void *arg, const char *const *ids, size_t n, char *err, size_t errlen);
    void *arg;
} mv_dp_callbacks;

typedef struct mv_dp_config {
    const char *plugin_dir;    /* holds kubelet.sock; our socket is created here */
    const char *endpoint;      /* our socket's file name, e.g. "microview.sock" */
    const char *resource_name; /* e.g. "microview.io/metrics" */
    const char *device_prefix; /* device IDs are <prefix><index>; NULL = "page-" */
    size_t ndevices;           /* devices advertised, all with the same health */
    int start_unhealthy;       /* nonzero: report them Unhealthy until mv_dp_set_healthy */
    int register_timeout_ms;   /* per Register attempt; 0 = 5000 */
    int backoff_max_ms;        /* retry backoff cap; 0 = 5000 */
} mv_dp_config;

typedef struct mv_dp mv_dp;

/* Starts the manager thread, which serves and registers in the background.
 * Returns 0 or a negative errno (bad configuration is logged). */
int mv_dp_start(const mv_dp_config *cfg, const mv_dp_callbacks *cb, mv_dp **out);

/* Stops serving (the kubelet sees the plugin go away) and frees. NULL-safe. */
void mv_dp_stop(mv_dp *dp);

/* Sets the health every device reports (the node's ability to serve the resource,
 * e.g. RDMA when it is required) and sends the new list on every open
 * ListAndWatch stream; the kubelet stops admitting pods for Unhealthy devices.
 * Logs the change with `reason`. Returns 0 or -ENOMEM. Thread-safe. */
int mv_dp_set_healthy(mv_dp *dp, int healthy, const char *reason);

#endif
