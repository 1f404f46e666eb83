/* microview-agent: node agent entry point: the option table of the standalone mode, the
 * configuration keys of the Kubernetes mode, the checks between flags; the agent runs in
 * mv_agent_run (pkg/node/agent). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mv_agent.h"
#include "mv_agentsvc.h"
#include "mv_config.h"
#include "mv_log.h"
#include "mv_opts.h"
#include "mv_rdmatoken.h"
#include "mv_rdmax.h"
#include "mv_segstore.h"
#include "mv_util.h"

/* Quota defaults: a uid fills at most this much; the reserve keeps the rest of the disk. */
#define QUOTA_SEGMENTS_DEFAULT 1024u
#define QUOTA_BYTES_DEFAULT    (4ull << 30)
#define P                      "microview-agent"
#define MV_STR_(x)             #x
#define MV_STR(x)              MV_STR_(x)

/* ---- Flags with a callback ------------------------------------------------------------ */

/* --socket-mode and --socket-group: the value (already checked by the table's parser) and the
 * text as given, for the start-up log. */
typedef struct {
    mv_rpc_unix_perms perms;
    const char *mode, *group; /* as given, NULL: not given */
} socket_flags;

static int socket_mode_flag(void *arg, const char *value, char *err, size_t errlen)
{
    socket_flags *sf = arg;
    uint32_t m;
    if (mv_util_parse_mode(value, &m, err, errlen) < 0)
        return -EINVAL;
    sf->perms.mode = (int)m;
    sf->mode = value;
    return 0;
}

static int socket_group_flag(void *arg, const char *value, char *err, size_t errlen)
{
    socket_flags *sf = arg;
    uint32_t g;
    if (mv_util_parse_group(value, &g, err, errlen) < 0)
        return -EINVAL;
    sf->perms.gid = g;
    sf->group = value;
    return 0;
}

static int log_level_flag(void *arg, const char *value, char *err, size_t errlen)
{
    if (mv_log_parse_level(value, arg) == 0)
        return 0;
    snprintf(err, errlen, "debug, info, warn or error");
    return -EINVAL;
}

/* ---- RDMA flags ---------------------------------------------------------------- */

typedef struct rdma_flags {
    const char *listen;     /* --rdma-listen IP[:PORT] */
    const char *token_file; /* --token-file */
    int require;            /* --require-rdma */
    char ip[64];
    uint16_t port;
    char token[MV_RDMA_TOKEN_MAX + 1];
    const char *admin_token_file; /* --admin-token-file */
    char admin_token[MV_RDMA_TOKEN_MAX + 1];
} rdma_flags;

/* Validates the RDMA flags and loads the token. Returns 0 or -1 (message printed). */
static int rdma_flags_check(rdma_flags *r, const char *tcp_listen)
{
    char err[MV_ERR_MAX];
    if (r->require && !r->listen) {
        fprintf(stderr, "microview-agent: --require-rdma needs --rdma-listen\n");
        return -1;
    }
    if (r->listen && !r->token_file) {
        fprintf(stderr, "microview-agent: --rdma-listen needs --token-file "
                        "(collectors must present the shared token)\n");
        return -1;
    }
    if (tcp_listen && !r->token_file && !r->admin_token_file)
        fprintf(stderr,
                "microview-agent: warning: --listen without --token-file or "
                "--admin-token-file: anyone who reaches %s can create and release segments\n",
                tcp_listen);
    if (r->admin_token_file && mv_rdmatoken_load(r->admin_token_file, r->admin_token,
                                                 sizeof r->admin_token, err, sizeof err) < 0) {
        fprintf(stderr, "microview-agent: --admin-token-file: %s\n", err);
        return -1;
    }
    if (r->token_file &&
        mv_rdmatoken_load(r->token_file, r->token, sizeof r->token, err, sizeof err) < 0) {
        fprintf(stderr, "microview-agent: --token-file: %s\n", err);
        return -1;
    }
    if (r->token[0] && strcmp(r->token, r->admin_token) == 0) {
        fprintf(stderr, "microview-agent: --token-file and --admin-token-file hold the same "
                        "token: the read token would allow everything\n");
        return -1;
    }
    r->port = MV_CONFIG_RDMA_PORT;
    if (r->listen && mv_util_parse_listen(r->listen, MV_LISTEN_PORT_OPTIONAL, r->ip, sizeof r->ip,
                                          &r->port, err, sizeof err) < 0) {
        fprintf(stderr, "microview-agent: --rdma-listen: %s\n", err);
        return -1;
    }
    return 0;
}

/* ---- TCP control plane security flags ------------------------------------------------ */

/* Returns 0 or -1 (message printed). */
static int tcp_security_check(const mv_rpc_tls_server_opts *t, int insecure, const char *listen)
{
    const char *e = NULL;
    if (!t->cert_file != !t->key_file)
        e = "--tls-cert and --tls-key go together";
    else if (t->require_client_cert && !t->client_ca_file)
        e = "--tls-require-client-cert needs --tls-client-ca";
    else if (t->client_ca_file && !t->cert_file)
        e = "--tls-client-ca needs --tls-cert and --tls-key";
    else if (t->cert_file && !listen)
        e = "--tls-cert needs --listen";
    else if (t->cert_file && insecure)
        e = "--insecure-listen and --tls-cert contradict each other";
    else if (listen && !t->cert_file && !insecure)
        e = "--listen needs TLS (--tls-cert and --tls-key) or, to serve plaintext HTTP/2 "
            "where tokens cross the network in clear, --insecure-listen";
    if (e) {
        fprintf(stderr, "microview-agent: %s\n", e);
        return -1;
    }
    if (listen && insecure)
        fprintf(stderr,
                "microview-agent: WARNING: --insecure-listen: the control plane on %s "
                "is plaintext; tokens and segment metadata cross the network in clear\n",
                listen);
    return 0;
}

/* ---- Standalone mode hooks ---------------------------------------------------------- */

typedef struct sa_mode {
    rdma_flags rf;
    const char *dir, *sock, *tcp_listen;
    const char *sock_mode, *sock_group; /* as given, NULL: not given */
    int tls;                            /* --tls-cert given */
    mv_segstore *store;
    mv_rdmax *rdmax;
} sa_mode;

static int sa_setup(void *arg, mv_segstore *store)
{
    ((sa_mode *)arg)->store = store;
    return 0;
}

/* RDMA export (optional): segments are registered as they come and go. */
static int sa_before_listen(void *arg, mv_agentsvc *svc)
{
    sa_mode *sa = arg;
    rdma_flags *rf = &sa->rf;
    if (!rf->listen)
        return 0;
    char err[MV_ERR_MAX];
    mv_rdmax_opts xo = {.bind_ip = rf->ip, .port = rf->port, .token = rf->token};
    if (mv_rdmax_create(&xo, sa->store, &sa->rdmax, err, sizeof err) < 0) {
        mv_log(rf->require ? MV_LOG_ERROR : MV_LOG_WARN, "rdma.unavailable",
               "listen=%s error=%s segments=%s", mv_log_q(rf->listen), mv_log_q(err),
               rf->require ? "refused_require_rdma" : "shm_only");
        return rf->require ? -ENODEV : 0;
    }
    mv_agentsvc_set_rdma(svc, mv_rdmax_lookup, sa->rdmax, rf->require);
    return 0;
}

static int sa_started(void *arg, int tcp_port)
{
    sa_mode *sa = arg;
    struct stat sb; /* what the socket got, whatever gave it */
    if (lstat(sa->sock, &sb) < 0)
        memset(&sb, 0, sizeof sb);
    MV_INFO("agent.started",
            "mode=standalone dir=%s socket=%s socket_mode=%04o socket_mode_from=%s "
            "socket_gid=%u socket_group=%s listen=%s tcp_port=%d tls=%s pid=%d",
            mv_log_q(sa->dir), mv_log_q(sa->sock), (unsigned)(sb.st_mode & 07777),
            sa->sock_mode ? "flag" : "umask", (unsigned)sb.st_gid,
            mv_log_q(sa->sock_group ? sa->sock_group : "agent"),
            mv_log_q(sa->tcp_listen ? sa->tcp_listen : "off"), tcp_port,
            !sa->tcp_listen ? "off"
            : sa->tls       ? "on"
                            : "off_insecure_listen",
            (int)getpid());
    return 0;
}

static void sa_after_server(void *arg)
{
    sa_mode *sa = arg;
    mv_rdmax_destroy(sa->rdmax); /* revokes every rkey */
    sa->rdmax = NULL;
}

/* Kubernetes mode: every configuration key is a flag too (--page-size or --page_size); the
 * values are set on the configuration after the file, in the order given. */
typedef struct {
    const char **key, **val;
    size_t n;
} k8s_overrides;

typedef struct {
    const char *key;
    k8s_overrides *ov;
} k8s_key_row;

static int k8s_key_flag(void *arg, const char *value, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    k8s_key_row *r = arg;
    r->ov->key[r->ov->n] = r->key;
    r->ov->val[r->ov->n++] = value;
    return 0;
}

static int k8s_main(int argc, char **argv)
{
    static const char *const standalone_only[] = {"--socket-mode", "--socket-group"};
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        for (size_t k = 0; k < sizeof standalone_only / sizeof standalone_only[0]; k++) {
            size_t n = strlen(standalone_only[k]);
            if (strncmp(argv[i], standalone_only[k], n) == 0 &&
                (argv[i][n] == '\0' || argv[i][n] == '=')) {
                fprintf(stderr,
                        P ": %s is a --standalone flag: the Kubernetes mode's socket is for root "
                          "only (the kubelet's, the host collector's)\n",
                        standalone_only[k]);
                return 2;
            }
        }
    const char *const *keys = mv_config_keys();
    size_t nkeys = 0;
    while (keys[nkeys])
        nkeys++;
    /* The table: --config, then two rows a key (the dashed spelling shown, the key's own
     * hidden), built from mv_config's list so that a new key is a flag at once. */
    mv_opts_opt *opts = calloc(2 * nkeys + 2, sizeof *opts);
    char(*names)[64] = calloc(nkeys, sizeof *names), (*helps)[96] = calloc(nkeys, sizeof *helps);
    k8s_key_row *rows = calloc(nkeys, sizeof *rows);
    k8s_overrides ov = {.key = calloc((size_t)argc + 1, sizeof(char *)),
                        .val = calloc((size_t)argc + 1, sizeof(char *))};
    mv_config *cfg = calloc(1, sizeof *cfg);
    const char *cfg_file = NULL;
    int rc = 2;
    if (!opts || !names || !helps || !rows || !ov.key || !ov.val || !cfg) {
        fprintf(stderr, P ": out of memory\n");
        goto out;
    }
    size_t no = 0;
    opts[no++] = (mv_opts_opt){.name = "config",
                               .kind = MV_OPTS_STRING,
                               .meta = "FILE",
                               .dest = &cfg_file,
                               .help = "the YAML configuration file; flags win"};
    for (size_t i = 0; i < nkeys; i++) {
        snprintf(names[i], sizeof names[i], "%s", keys[i]);
        for (char *c = names[i]; *c; c++)
            if (*c == '_')
                *c = '-';
        snprintf(helps[i], sizeof helps[i], "sets the configuration key %s", keys[i]);
        rows[i] = (k8s_key_row){.key = keys[i], .ov = &ov};
        opts[no++] = (mv_opts_opt){.name = names[i],
                                   .key = keys[i],
                                   .kind = MV_OPTS_STRING,
                                   .meta = "VALUE",
                                   .fn = k8s_key_flag,
                                   .arg = &rows[i],
                                   .help = helps[i]};
        if (strcmp(names[i], keys[i]) != 0)
            opts[no++] = (mv_opts_opt){.name = keys[i],
                                       .kind = MV_OPTS_STRING,
                                       .meta = "VALUE",
                                       .fn = k8s_key_flag,
                                       .arg = &rows[i],
                                       .hidden = 1};
    }
    const mv_opts_spec spec = {
        .prog = P,
        .synopsis = "[--config FILE] [--KEY VALUE]...   (Kubernetes mode)",
        .intro = "The standalone mode: microview-agent --standalone --help. Every configuration "
                 "key is also a flag (dashes or underscores), e.g. "
                 "--resource-name microview.io/metrics --page-size 4Ki --pool-size 16Mi. The "
                 "agent's socket (agent_socket) is for root only in this mode: --socket-mode and "
                 "--socket-group are --standalone flags; segment_group GROUP gives the socket "
                 "(0660) and the segment files (0660) that group, for a non-root collector. "
                 "listen (TCP) needs tls_cert_file + tls_key_file (tls_client_ca_file, "
                 "tls_require_client_cert) or insecure_listen: true. collector_token_file is the "
                 "read token (List/Watch, rdma_cm); admin_token_file may also release over TCP; "
                 "creates over TCP are refused in this mode. The keys, their values and "
                 "defaults: docs/kubernetes.md.",
        .opts = opts};
    int first;
    rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc) {
        rc = mv_opts_status(rc);
        goto out;
    }
    rc = 2;
    if (first < argc) {
        fprintf(stderr, P ": unexpected argument %s\n", argv[first]);
        goto out;
    }
    char err[MV_ERR_MAX];
    mv_config_defaults(cfg);
    if (cfg_file && mv_config_load_file(cfg, cfg_file, err, sizeof err) < 0) {
        fprintf(stderr, P ": config: %s\n", err);
        goto out;
    }
    for (size_t i = 0; i < ov.n; i++)
        if (mv_config_set(cfg, ov.key[i], ov.val[i], err, sizeof err) < 0) {
            fprintf(stderr, P ": --%s: %s\n", ov.key[i], err);
            goto out;
        }
    mv_log_level level;
    err[0] = '\0';
    if (mv_config_finish(cfg, err, sizeof err) < 0 ||
        mv_log_parse_level(cfg->log_level, &level) < 0) {
        fprintf(stderr, P ": config: %s\n", err[0] ? err : "log_level: debug, info, warn or error");
        goto out;
    }
    mv_log_init("agent", level);
    mv_agent_k8s *a;
    if (mv_agent_k8s_create(cfg, &a) < 0) {
        fprintf(stderr, P ": out of memory\n");
        goto out;
    }
    mv_agent_run_opts ro;
    mv_agent_mode mode;
    mv_agent_k8s_mode(a, &ro, &mode);
    rc = mv_agent_run(&ro, &mode);
    mv_agent_k8s_destroy(a);
out:
    free(cfg);
    free(ov.val);
    free(ov.key);
    free(rows);
    free(helps);
    free(names);
    free(opts);
    return rc;
}

/* Standalone mode: its option table, the checks between flags, then mv_agent_run. */
static int sa_main(int argc, char **argv)
{
    const char *dir = MV_SEGSTORE_DEFAULT_DIR, *sock = NULL, *tcp_listen = NULL;
    uint64_t max_size = MV_SEGSTORE_DEFAULT_MAX_SIZE, reap_ms = 0,
             quota_segs = QUOTA_SEGMENTS_DEFAULT, quota_bytes = QUOTA_BYTES_DEFAULT,
             min_free_bytes = 0, min_free_percent = MV_CONFIG_MIN_FREE_PERCENT;
    mv_log_level level = MV_LOG_INFO;
    rdma_flags rf = {0};
    socket_flags sf = {.perms = {.mode = -1, .gid = -1}};
    mv_rpc_tls_server_opts tls = {0};
    int insecure_listen = 0, standalone = 0;
    /* One row per flag, in --help's order; `key` names the Kubernetes mode's configuration key
     * for the same setting. A new flag: a row here, then its value wired below;
     * `scripts/flag-docs.py --write build` updates the docs' table. */
    mv_opts_opt opts[] = {
        {.name = "standalone",
         .kind = MV_OPTS_FLAG,
         .dest = &standalone,
         .help = "serve segments without Kubernetes (without it: Kubernetes mode; see "
                 "microview-agent --help)"},
        {.name = "dir",
         .kind = MV_OPTS_STRING,
         .meta = "DIR",
         .dest = &dir,
         .help = "segment directory"},
        {.name = "socket",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &sock,
         .def = "DIR/agent.sock",
         .help = "control-plane unix socket"},
        {.name = "socket-mode",
         .kind = MV_OPTS_MODE,
         .meta = "MODE",
         .fn = socket_mode_flag,
         .arg = &sf,
         .def = "0777 less the agent's umask",
         .help = "the socket's permission bits, octal, e.g. 0660 or 0666 (connecting needs "
                 "write permission; root needs none). The default is 0755 under the usual umask "
                 "022: only root (and the agent's user) connect"},
        {.name = "socket-group",
         .kind = MV_OPTS_GROUP,
         .meta = "GROUP",
         .fn = socket_group_flag,
         .arg = &sf,
         .def = "the agent's",
         .help = "the socket's group, a name or a numeric gid; with --socket-mode 0660 its "
                 "members connect. Both apply at start and whenever a deleted socket is made "
                 "again. Standalone only: the Kubernetes mode's socket stays root's. A caller on "
                 "the socket may create segments (they are handed to it) and release only those "
                 "whose file it owns (root: any); TCP callers (--listen) are not identified: "
                 "their token's scope is their only check"},
        {.name = "listen",
         .key = "listen",
         .kind = MV_OPTS_LISTEN,
         .meta = "HOST:PORT",
         .dest = &tcp_listen,
         .lo = MV_LISTEN_PORT_ZERO,
         .def = "off",
         .help = "also listen on TCP; IPv6 as [ADDR]:PORT, PORT 0 = any free port. Needs TLS "
                 "(--tls-cert/--tls-key) or --insecure-listen"},
        {.name = "max-segment-size",
         .key = "max_segment_size",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = MV_SEGSTORE_MIN_SIZE,
         .hi = UINT64_MAX,
         .dest = &max_size,
         .help = "largest segment handed out: bytes, or with Ki, Mi, Gi"},
        {.name = "reap-interval-ms",
         .kind = MV_OPTS_U64,
         .meta = "MS",
         .lo = 1,
         .hi = 3600000,
         .dest = &reap_ms,
         .def = "2000",
         .help = "least time between reaper passes (a dead owner's segments go at once, a burst "
                 "of exits in groups); the period for owners without a pidfd"},
        {.name = "log-level",
         .key = "log_level",
         .kind = MV_OPTS_STRING,
         .meta = "LEVEL",
         .fn = log_level_flag,
         .arg = &level,
         .def = "info",
         .help = "debug, info, warn or error"},
        {.kind = MV_OPTS_SECTION,
         .help = "Quotas (callers on the unix socket other than root, per uid; 0 = no limit):"},
        {.name = "max-segments-per-uid",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = MV_SEGSTORE_SEGMENTS_MAX,
         .dest = &quota_segs,
         .help = "segments one uid's files may hold"},
        {.name = "max-bytes-per-uid",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 0,
         .hi = UINT64_MAX,
         .dest = &quota_bytes,
         .help = "bytes of segments one uid may hold"},
        {.name = "min-free-bytes",
         .key = "min_free_bytes",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 0,
         .hi = UINT64_MAX,
         .dest = &min_free_bytes,
         .help = "space every create leaves free on --dir's filesystem; the larger of this and "
                 "--min-free-percent"},
        {.name = "min-free-percent",
         .key = "min_free_percent",
         .kind = MV_OPTS_U64,
         .meta = "P",
         .lo = 0,
         .hi = 99,
         .dest = &min_free_percent,
         .help = "the same, percent of the filesystem's size"},
        {.kind = MV_OPTS_SECTION, .help = "RDMA (remote collectors):"},
        {.name = "rdma-listen",
         .key = "rdma_listen",
         .kind = MV_OPTS_STRING,
         .meta = "IP[:PORT]",
         .dest = &rf.listen,
         .help = "register segments for RDMA READ; rdma_cm listener on IP (an address of the "
                 "RDMA netdev), PORT (default " MV_STR(MV_CONFIG_RDMA_PORT) ")"},
        {.name = "token-file",
         .key = "collector_token_file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rf.token_file,
         .help = "read token: collectors present it on the rdma_cm connect and on TCP "
                 "control-plane calls; it allows ListSegments and WatchSegments only"},
        {.name = "require-rdma",
         .key = "require_rdma",
         .kind = MV_OPTS_FLAG,
         .dest = &rf.require,
         .help = "fail segment creation (and start-up) without RDMA"},
        {.kind = MV_OPTS_SECTION, .help = "TCP control plane security (--listen):"},
        {.name = "tls-cert",
         .key = "tls_cert_file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &tls.cert_file,
         .help = "the agent's TLS certificate chain (PEM)"},
        {.name = "tls-key",
         .key = "tls_key_file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &tls.key_file,
         .help = "its private key (PEM)"},
        {.name = "tls-client-ca",
         .key = "tls_client_ca_file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &tls.client_ca_file,
         .help = "ask clients for a certificate signed by this CA (PEM)"},
        {.name = "tls-require-client-cert",
         .key = "tls_require_client_cert",
         .kind = MV_OPTS_FLAG,
         .dest = &tls.require_client_cert,
         .help = "refuse clients without one (needs --tls-client-ca)"},
        {.name = "admin-token-file",
         .key = "admin_token_file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rf.admin_token_file,
         .help = "admin token: also allows CreateSegment and ReleaseSegment over TCP (without "
                 "it, TCP callers cannot change segments once --token-file is set)"},
        {.name = "insecure-listen",
         .key = "insecure_listen",
         .kind = MV_OPTS_FLAG,
         .dest = &insecure_listen,
         .help = "serve --listen in plaintext HTTP/2: tokens cross the network in clear. Without "
                 "any token, anyone who reaches the port may create and release segments"},
        {0},
    };
    const mv_opts_spec spec = {.prog = P, .synopsis = "--standalone [options]", .opts = opts};
    int first, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first < argc) {
        fprintf(stderr, P ": unexpected argument %s\n", argv[first]);
        return 2;
    }
    if (rdma_flags_check(&rf, tcp_listen) < 0 ||
        tcp_security_check(&tls, insecure_listen, tcp_listen) < 0)
        return 2;
    mv_log_init("agent", level);

    char sockbuf[4096];
    if (!sock) {
        if (mv_util_fmt(sockbuf, sizeof sockbuf, "%s/agent.sock", dir) < 0) {
            fprintf(stderr, P ": --dir: path too long for the socket\n");
            return 2;
        }
        sock = sockbuf;
    }
    sa_mode sa = {.rf = rf,
                  .dir = dir,
                  .sock = sock,
                  .tcp_listen = tcp_listen,
                  .sock_mode = sf.mode,
                  .sock_group = sf.group,
                  .tls = tls.cert_file != NULL};
    mv_agent_run_opts ro = {.mode = "standalone",
                            .store = {.dir = dir,
                                      .max_size = max_size,
                                      .reap_interval_ms = (int)reap_ms,
                                      .max_segments_per_uid = quota_segs,
                                      .max_bytes_per_uid = quota_bytes,
                                      .min_free_bytes = min_free_bytes,
                                      .min_free_percent = (unsigned)min_free_percent},
                            .socket_path = sock,
                            .socket_perms = sf.mode || sf.group ? &sf.perms : NULL,
                            .tcp_listen = tcp_listen,
                            .tls = tls,
                            .insecure_tcp = insecure_listen,
                            .token = sa.rf.token,
                            .admin_token = sa.rf.admin_token};
    mv_agent_mode mode = {.arg = &sa,
                          .setup = sa_setup,
                          .before_listen = sa_before_listen,
                          .started = sa_started,
                          .after_server = sa_after_server};
    return mv_agent_run(&ro, &mode);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--standalone") == 0)
            return sa_main(argc, argv);
    return k8s_main(argc, argv);
}
