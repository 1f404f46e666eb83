/* mv_config: defaults, flat YAML parsing with libyaml, overrides and checks. */
#include "mv_config.h"
#include "mv_util.h"

#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#define GiB (1ull << 30)

typedef enum { K_STR, K_SIZE, K_UINT, K_BOOL } kind;

typedef struct key {
    const char *name;
    kind k;
    size_t off;
    size_t cap;   /* K_STR: field size */
    uint64_t max; /* K_SIZE / K_UINT */
} key;

#define S(f)                                                                                       \
    {                                                                                              \
#f, K_STR, offsetof(mv_config, f), sizeof(((mv_config *)0)->f), 0                          \
    }
#define Z(f, mx)                                                                                   \
    {                                                                                              \
#f, K_SIZE, offsetof(mv_config, f), 0, mx                                                  \
    }
#define U(f, mx)                                                                                   \
    {                                                                                              \
#f, K_UINT, offsetof(mv_config, f), 0, mx                                                  \
    }
#define B(f)                                                                                       \
    {                                                                                              \
#f, K_BOOL, offsetof(mv_config, f), 0, 1                                                   \
    }

static const key KEYS[] = {
    S(resource_name),
    Z(page_size, GiB),
    Z(pool_size, 1024 * GiB),
    Z(max_segment_size, GiB),
    S(device_plugin_dir),
    S(endpoint),
    S(pod_resources_socket),
    S(api_server),
    S(token_file),
    S(ca_file),
    U(token_reread_seconds, 86400),
    S(node_name),
    S(state_dir),
    S(container_path),
    S(agent_socket),
    U(gc_interval_ms, 3600000),
    U(gc_grace_ms, 3600000),
    U(identity_retry_ms, 3600000),
    U(api_timeout_ms, 600000),
    S(log_level),
    S(listen),
    S(rdma_listen),
    S(collector_token_file),
    B(require_rdma),
    U(rdma_retry_ms, 3600000),
    S(tls_cert_file),
    S(tls_key_file),
    S(tls_client_ca_file),
    B(tls_require_client_cert),
    S(admin_token_file),
    B(insecure_listen),
    S(segment_group),
    Z(min_free_bytes, 1024 * GiB),
    U(min_free_percent, 99),
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

const char *const *mv_config_keys(void)
{
    static const char *names[NKEYS + 1];
    for (size_t i = 0; i < NKEYS; i++)
        names[i] = KEYS[i].name;
    names[NKEYS] = NULL;
    return names;
}

static void put(char *dst, size_t cap, const char *s)
{
    snprintf(dst, cap, "%s", s);
}

void mv_config_defaults(mv_config *c)
{
    memset(c, 0, sizeof *c);
    c->segment_gid = -1;
    put(c->resource_name, sizeof c->resource_name, "microview.io/metrics");
    c->page_size = 4096;
    c->pool_size = 16u << 20;
    c->max_segment_size = 64u << 20;
    put(c->device_plugin_dir, sizeof c->device_plugin_dir, "/var/lib/kubelet/device-plugins");
    put(c->endpoint, sizeof c->endpoint, "microview.sock");
    put(c->pod_resources_socket, sizeof c->pod_resources_socket,
        "/var/lib/kubelet/pod-resources/kubelet.sock");
    put(c->token_file, sizeof c->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
    put(c->ca_file, sizeof c->ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
    c->token_reread_seconds = 60;
    put(c->state_dir, sizeof c->state_dir, "/run/microview");
    put(c->container_path, sizeof c->container_path, "/var/run/microview");
    c->gc_interval_ms = 10000;
    c->gc_grace_ms = 30000;
    c->identity_retry_ms = 5000;
    c->api_timeout_ms = 5000;
    put(c->log_level, sizeof c->log_level, "info");
    c->rdma_retry_ms = 5000;
    c->min_free_percent = MV_CONFIG_MIN_FREE_PERCENT;
}

int mv_config_set(mv_config *c, const char *name, const char *value, char *err, size_t errlen)
{
    char norm[64];
    size_t nl = strlen(name);
    if (nl >= sizeof norm) {
        mv_util_err_set(err, errlen, "unknown key %.64s", name);
        return -EINVAL;
    }
    for (size_t i = 0; i <= nl; i++)
        norm[i] = name[i] == '-' ? '_' : name[i];
    for (size_t i = 0; i < NKEYS; i++) {
        const key *k = &KEYS[i];
        if (strcmp(k->name, norm) != 0)
            continue;
        char *field = (char *)c + k->off;
        if (k->k == K_STR) {
            size_t vl = strlen(value);
            if (vl >= k->cap) {
                mv_util_err_set(err, errlen, "%s: value longer than %zu bytes", k->name,
                                k->cap - 1);
                return -EINVAL;
            }
            memcpy(field, value, vl + 1);
            return 0;
        }
        if (k->k == K_BOOL) {
            int b;
            if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "1"))
                b = 1;
            else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "0"))
                b = 0;
            else {
                mv_util_err_set(err, errlen, "%s: %.64s is not true or false", k->name, value);
                return -EINVAL;
            }
            memcpy(field, &b, sizeof b);
            return 0;
        }
        uint64_t v = 0;
        char why[MV_ERR_MAX];
        int rc = k->k == K_SIZE ? mv_util_parse_size(value, 0, k->max, &v, why, sizeof why)
                                : mv_util_parse_u64(value, 0, k->max, &v, why, sizeof why);
        if (rc < 0) {
            mv_util_err_set(err, errlen, "%s: %s", k->name, why);
            return -EINVAL;
        }
        memcpy(field, &v, sizeof v);
        return 0;
    }
    mv_util_err_set(err, errlen, "unknown key %.64s", name);
    return -EINVAL;
}

int mv_config_parse(mv_config *c, const char *text, size_t len, char *err, size_t errlen)
{
    int rc = -EINVAL;
    if (len > MV_CONFIG_FILE_MAX) {
        mv_util_err_set(err, errlen, "configuration larger than %u bytes", MV_CONFIG_FILE_MAX);
        return -EINVAL;
    }
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    /* States: 0 before the mapping, 1 expecting a key, 2 expecting a value, 3 after. */
    int state = 0, docs = 0;
    char keybuf[64] = "";
    /* Keys seen so far (spelled with '_'), to refuse one given twice: YAML keeps the last
     * silently, which hides an edit that did not take. */
    char seen[sizeof KEYS / sizeof KEYS[0]][64];
    size_t seen_line[sizeof KEYS / sizeof KEYS[0]], nseen = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            mv_util_err_set(err, errlen, "YAML error at line %zu: %s", p.problem_mark.line + 1,
                            p.problem ? p.problem : "syntax");
            goto done;
        }
        size_t line = ev.start_mark.line + 1;
        yaml_event_type_t t = ev.type;
        int ok = 1;
        switch (t) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                mv_util_err_set(err, errlen, "line %zu: only one YAML document is allowed", line);
                ok = 0;
            }
            break;
        case YAML_STREAM_END_EVENT:
            yaml_event_delete(&ev);
            rc = 0;
            goto done;
        case YAML_MAPPING_START_EVENT:
            if (state != 0) {
                mv_util_err_set(err, errlen,
                                "line %zu: nested mappings are not allowed (keys are flat)", line);
                ok = 0;
            }
            state = 1;
            break;
        case YAML_MAPPING_END_EVENT:
            state = 3;
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            if (strlen(v) != ev.data.scalar.length) {
                mv_util_err_set(err, errlen, "line %zu: NUL byte in a scalar", line);
                ok = 0;
            } else if (state == 1) {
                if (ev.data.scalar.length >= sizeof keybuf) {
                    mv_util_err_set(err, errlen, "line %zu: unknown key", line);
                    ok = 0;
                } else {
                    memcpy(keybuf, v, ev.data.scalar.length + 1);
                    for (char *q = keybuf; *q; q++)
                        if (*q == '-')
                            *q = '_';
                    for (size_t i = 0; i < nseen && ok; i++)
                        if (strcmp(seen[i], keybuf) == 0) {
                            mv_util_err_set(err, errlen,
                                            "line %zu: key %s given twice (first on line %zu)",
                                            line, keybuf, seen_line[i]);
                            ok = 0;
                        }
                    if (ok && nseen < sizeof seen / sizeof seen[0]) {
                        memcpy(seen[nseen], keybuf, sizeof keybuf);
                        seen_line[nseen++] = line;
                    }
                    state = 2;
                }
            } else if (state == 2) {
                char e2[256];
                if (mv_config_set(c, keybuf, v, e2, sizeof e2) < 0) {
                    mv_util_err_set(err, errlen, "line %zu: %s", line, e2);
                    ok = 0;
                }
                state = 1;
            } else if (state == 0 && ev.data.scalar.length == 0) {
                state = 3; /* an empty document */
            } else {
                mv_util_err_set(err, errlen, "line %zu: the document must be a mapping of keys",
                                line);
                ok = 0;
            }
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_SEQUENCE_END_EVENT:
        case YAML_ALIAS_EVENT:
        default:
            mv_util_err_set(err, errlen, "line %zu: only scalar values are allowed%s", line,
                            state == 2 ? " (got a list or alias)" : "");
            ok = 0;
            break;
        }
        yaml_event_delete(&ev);
        if (!ok)
            goto done;
    }
done:
    yaml_parser_delete(&p);
    return rc;
}

int mv_config_load_file(mv_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        mv_util_err_set(err, errlen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > MV_CONFIG_FILE_MAX) {
        mv_util_err_set(err, errlen, "%s: not a regular file of at most %u bytes", path,
                        MV_CONFIG_FILE_MAX);
        fclose(f);
        return -EINVAL;
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    buf[got] = 0;
    char e2[512];
    int rc = mv_config_parse(c, buf, got, e2, sizeof e2);
    if (rc < 0)
        mv_util_err_set(err, errlen, "%s: %s", path, e2);
    free(buf);
    return rc;
}

/* The TCP control plane's TLS and token keys together. */
static int config_tcp_security(const mv_config *c, char *err, size_t errlen)
{
    const char *e = NULL;
    if (!c->tls_cert_file[0] != !c->tls_key_file[0])
        e = "tls_cert_file and tls_key_file go together";
    else if (c->tls_require_client_cert && !c->tls_client_ca_file[0])
        e = "tls_require_client_cert needs tls_client_ca_file";
    else if (c->tls_client_ca_file[0] && !c->tls_cert_file[0])
        e = "tls_client_ca_file needs tls_cert_file and tls_key_file";
    else if (c->tls_cert_file[0] && !c->listen[0])
        e = "tls_cert_file needs listen";
    else if (c->tls_cert_file[0] && c->insecure_listen)
        e = "insecure_listen and tls_cert_file contradict each other";
    else if (c->listen[0] && !c->tls_cert_file[0] && !c->insecure_listen)
        e = "listen needs TLS (tls_cert_file and tls_key_file) or, to serve plaintext HTTP/2 "
            "where tokens cross the network in clear, insecure_listen: true";
    else if (c->admin_token_file[0] && !c->listen[0])
        e = "admin_token_file needs listen";
    if (e) {
        mv_util_err_set(err, errlen, "%s", e);
        return -EINVAL;
    }
    return 0;
}

/* segment_group: a group name or a numeric gid. */
static int config_group(mv_config *c, char *err, size_t errlen)
{
    c->segment_gid = -1;
    if (!c->segment_group[0])
        return 0;
    uint64_t v;
    char why[128];
    if (c->segment_group[0] >= '0' && c->segment_group[0] <= '9') {
        if (mv_util_parse_u64(c->segment_group, 0, UINT32_MAX - 1, &v, why, sizeof why) < 0) {
            mv_util_err_set(err, errlen, "segment_group: %s", why);
            return -EINVAL;
        }
        c->segment_gid = (int64_t)v;
        return 0;
    }
    struct group *g = getgrnam(c->segment_group);
    if (!g) {
        mv_util_err_set(err, errlen, "segment_group: no group named %s", c->segment_group);
        return -EINVAL;
    }
    c->segment_gid = g->gr_gid;
    return 0;
}

/* A listen address of the configuration, read as the flags read theirs. */
static int config_listen(const char *text, unsigned flags, const char *name, char *host,
                         size_t hostlen, uint16_t *port, char *err, size_t errlen)
{
    char why[MV_ERR_MAX];
    if (mv_util_parse_listen(text, flags, host, hostlen, port, why, sizeof why) < 0) {
        mv_util_err_set(err, errlen, "%s: %s", name, why);
        return -EINVAL;
    }
    return 0;
}

int mv_config_finish(mv_config *c, char *err, size_t errlen)
{
    if (c->page_size == 0 || c->page_size % 4096) {
        mv_util_err_set(err, errlen, "page_size %llu: must be a positive multiple of 4096",
                        (unsigned long long)c->page_size);
        return -EINVAL;
    }
    if (c->pool_size < c->page_size || c->pool_size / c->page_size > MV_CONFIG_MAX_PAGES) {
        mv_util_err_set(
            err, errlen,
            "pool_size %llu / page_size %llu = %llu pages: must be 1 to %u (one device per "
            "page; the device list must stay well under the kubelet's 4 MiB gRPC message "
            "limit); raise page_size for a larger pool",
            (unsigned long long)c->pool_size, (unsigned long long)c->page_size,
            (unsigned long long)(c->pool_size / c->page_size), (unsigned)MV_CONFIG_MAX_PAGES);
        return -EINVAL;
    }
    if (c->max_segment_size < c->page_size) {
        mv_util_err_set(err, errlen, "max_segment_size must be at least page_size");
        return -EINVAL;
    }
    const char *slash = strchr(c->resource_name, '/');
    if (!slash || slash == c->resource_name || !slash[1] || strchr(slash + 1, '/')) {
        mv_util_err_set(err, errlen, "resource_name %s: must be <domain>/<name>", c->resource_name);
        return -EINVAL;
    }
    if (!c->endpoint[0] || strchr(c->endpoint, '/') || strcmp(c->endpoint, "kubelet.sock") == 0) {
        mv_util_err_set(err, errlen, "endpoint must be a socket file name other than kubelet.sock");
        return -EINVAL;
    }
    if (c->container_path[0] != '/') {
        mv_util_err_set(err, errlen, "container_path must be absolute");
        return -EINVAL;
    }
    if (!c->state_dir[0] || !c->device_plugin_dir[0] || !c->pod_resources_socket[0]) {
        mv_util_err_set(err, errlen,
                        "state_dir, device_plugin_dir and pod_resources_socket are required");
        return -EINVAL;
    }
    if (!c->gc_interval_ms || !c->identity_retry_ms || !c->token_reread_seconds ||
        !c->api_timeout_ms || !c->rdma_retry_ms) {
        mv_util_err_set(err, errlen, "intervals and timeouts must be positive");
        return -EINVAL;
    }
    if (c->require_rdma && !c->rdma_listen[0]) {
        mv_util_err_set(err, errlen, "require_rdma needs rdma_listen (the RDMA netdev's IP)");
        return -EINVAL;
    }
    if (c->rdma_listen[0] && !c->collector_token_file[0]) {
        mv_util_err_set(
            err, errlen,
            "rdma_listen needs collector_token_file (collectors must present the token)");
        return -EINVAL;
    }
    c->rdma_ip[0] = 0;
    c->rdma_port = c->rdma_listen[0] ? MV_CONFIG_RDMA_PORT : 0;
    if (c->rdma_listen[0] &&
        config_listen(c->rdma_listen, MV_LISTEN_PORT_OPTIONAL, "rdma_listen", c->rdma_ip,
                      sizeof c->rdma_ip, &c->rdma_port, err, errlen) < 0)
        return -EINVAL;
    char host[sizeof c->listen];
    uint16_t port;
    if (c->listen[0] && config_listen(c->listen, MV_LISTEN_PORT_ZERO, "listen", host, sizeof host,
                                      &port, err, errlen) < 0)
        return -EINVAL;
    if (config_tcp_security(c, err, errlen) < 0 || config_group(c, err, errlen) < 0)
        return -EINVAL;
    if (!c->agent_socket[0]) {
        int n = snprintf(c->agent_socket, sizeof c->agent_socket, "%s/agent.sock", c->state_dir);
        if (n < 0 || (size_t)n >= sizeof c->agent_socket) {
            mv_util_err_set(err, errlen, "state_dir is too long");
            return -EINVAL;
        }
    }
    if (!c->node_name[0]) {
        const char *nn = getenv("NODE_NAME");
        if (nn)
            snprintf(c->node_name, sizeof c->node_name, "%s", nn);
    }
    if (!c->api_server[0]) {
        const char *h = getenv("KUBERNETES_SERVICE_HOST"), *p = getenv("KUBERNETES_SERVICE_PORT");
        if (h && h[0]) {
            int v6 = strchr(h, ':') != NULL;
            snprintf(c->api_server, sizeof c->api_server, "https://%s%s%s:%s", v6 ? "[" : "", h,
                     v6 ? "]" : "", p && p[0] ? p : "443");
        }
    }
    return 0;
}
