/* mv_config: the agent's Kubernetes-mode configuration: defaults, a flat YAML
 * file (libyaml) and key=value overrides (from command-line flags).
 *
 * Every key of the YAML mapping is also a flag: `pool_size: 16Mi` in the file is
 * `--pool-size 16Mi` on the command line, and flags win. Values are read with the
 * parsers every flag uses (mv_util.h): sizes are mv_util_parse_size (bytes, or Ki/Mi/Gi),
 * numbers mv_util_parse_u64, `listen` and `rdma_listen` mv_util_parse_listen. Values live in
 * fixed-size fields of the struct, so there is nothing to free.
 */
#ifndef MV_CONFIG_H
#define MV_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define MV_CONFIG_STR_MAX  1024
#define MV_CONFIG_FILE_MAX (1u << 20) /* bytes of YAML accepted */
/* Most pages (devices) a pool may have: their ListAndWatch list, ~30 bytes a device, stays
 * under 2 MiB, half of the kubelet's 4 MiB gRPC message limit. */
#define MV_CONFIG_MAX_PAGES 65536u

typedef struct mv_config {
    char resource_name[256];                   /* microview.io/metrics */
    uint64_t page_size;                        /* 4096: bytes per device (page) */
    uint64_t pool_size;                        /* 16 MiB: pages advertised = pool/page */
    uint64_t max_segment_size;                 /* 64 MiB: largest segment one container gets */
    char device_plugin_dir[MV_CONFIG_STR_MAX]; /* /var/lib/kubelet/device-plugins */
    char endpoint[256];                        /* microview.sock */
    char pod_resources_socket[MV_CONFIG_STR_MAX];
    char api_server[MV_CONFIG_STR_MAX]; /* "" = in-cluster from KUBERNETES_SERVICE_HOST/PORT */
    char token_file[MV_CONFIG_STR_MAX];
    char ca_file[MV_CONFIG_STR_MAX];
    uint64_t token_reread_seconds;
    char node_name[256];                    /* "" = $NODE_NAME */
    char state_dir[MV_CONFIG_STR_MAX];      /* segments and catalog.json */
    char container_path[MV_CONFIG_STR_MAX]; /* where a container sees its segment dir */
    char agent_socket[MV_CONFIG_STR_MAX];   /* "" = <state_dir>/agent.sock */
    uint64_t gc_interval_ms;
    uint64_t gc_grace_ms; /* a new segment is not collected before this age */
    uint64_t identity_retry_ms;
    uint64_t api_timeout_ms;
    char log_level[16];
    /* Remote collectors (off by default): */
    char listen[256];                             /* HOST:PORT of the TCP control plane */
    char rdma_listen[256];                        /* IP[:PORT] of the rdma_cm listener */
    char collector_token_file[MV_CONFIG_STR_MAX]; /* the shared secret collectors present */
    int require_rdma;       /* devices Unhealthy and Allocate refused while RDMA is down */
    uint64_t rdma_retry_ms; /* how often an RDMA target that failed is tried again */
    /* TCP control plane security (listen): */
    char tls_cert_file[MV_CONFIG_STR_MAX];      /* "" = no TLS */
    char tls_key_file[MV_CONFIG_STR_MAX];       /* with tls_cert_file */
    char tls_client_ca_file[MV_CONFIG_STR_MAX]; /* ask clients for a certificate it signed */
    int tls_require_client_cert;                /* refuse clients without one */
    char admin_token_file[MV_CONFIG_STR_MAX];   /* token allowing ReleaseSegment over TCP */
    int insecure_listen;                        /* plaintext listen chosen explicitly */
    /* Non-root collector: the group segment files and the agent socket get (name or gid). */
    char segment_group[256];
    /* Space a new segment leaves free on state_dir's filesystem: the larger of the two
     * (0 and 0: no reserve). */
    uint64_t min_free_bytes;   /* 0 */
    uint64_t min_free_percent; /* MV_CONFIG_MIN_FREE_PERCENT, 0..99 */
    /* Derived by mv_config_finish from rdma_listen: */
    char rdma_ip[64];
    uint16_t rdma_port;
    int64_t segment_gid; /* from segment_group, -1 = none */
} mv_config;

#define MV_CONFIG_RDMA_PORT        7471 /* rdma_cm port when rdma_listen names none */
#define MV_CONFIG_MIN_FREE_PERCENT 5    /* default free-space reserve, percent of the filesystem */

/* Fills the defaults (the node paths a DaemonSet mounts). */
void mv_config_defaults(mv_config *c);

/* Applies a YAML document: one mapping of scalar keys to scalar values.
 * Unknown keys, nested values and bad values are errors. Returns 0 or -EINVAL
 * with a reason naming the line in `err`. */
int mv_config_parse(mv_config *c, const char *text, size_t len, char *err, size_t errlen);

/* Reads and applies a YAML file. Returns 0, a negative errno, or -EINVAL. */
int mv_config_load_file(mv_config *c, const char *path, char *err, size_t errlen);

/* Sets one key (YAML name, or the flag spelling with dashes). 0 or -EINVAL. */
int mv_config_set(mv_config *c, const char *key, const char *value, char *err, size_t errlen);

/* Checks the combination (page size a multiple of 4 KiB, pool >= one page, ...)
 * and fills derived defaults. Returns 0 or -EINVAL with a reason. */
int mv_config_finish(mv_config *c, char *err, size_t errlen);

/* The known keys, in YAML spelling, NULL-terminated. */
const char *const *mv_config_keys(void);

#endif
