/* microview-agent: node agent entry point: flags of both modes; the logic is in pkg/node/agent. */
#include <errno.h>
#include <getopt.h>
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
#include "mv_rdmatoken.h"
#include "mv_rdmax.h"
#include "mv_segstore.h"
#include "mv_util.h"

/* Quota defaults: a uid fills at most this much; the reserve keeps the rest of the disk. */
#define QUOTA_SEGMENTS_DEFAULT   1024u
#define QUOTA_BYTES_DEFAULT      (4ull << 30)
#define QUOTA_BYTES_DEFAULT_TEXT "4Gi"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: microview-agent --standalone [options]\n"
        "  --standalone             serve segments without Kubernetes (default: Kubernetes\n"
        "                           mode; see microview-agent --help)\n"
        "  --dir DIR                segment directory (default %s)\n"
        "  --socket PATH            control-plane unix socket (default DIR/agent.sock)\n"
        "  --socket-mode MODE       the socket's permission bits, octal, e.g. 0660 or 0666\n"
        "                           (connecting needs write permission; root needs none).\n"
        "                           Default: 0777 less the agent's umask, so 0755 under the\n"
        "                           usual umask 022: only root (and the agent's user) connect\n"
        "  --socket-group GROUP     the socket's group, a name or a numeric gid (default: the\n"
        "                           agent's); with --socket-mode 0660 its members connect.\n"
        "                           Both apply at start and whenever a deleted socket is made\n"
        "                           again. Standalone only: the Kubernetes mode's socket stays\n"
        "                           root's. A caller on the socket may create segments (they\n"
        "                           are handed to it) and release only those whose file it\n"
        "                           owns (root: any); TCP callers (--listen) are not\n"
        "                           identified: their token's scope is their only check\n"
        "  --listen HOST:PORT       also listen on TCP (default: off); IPv6 as [ADDR]:PORT,\n"
        "                           PORT 0 = any free port. Needs TLS (--tls-cert/--tls-key)\n"
        "                           or --insecure-listen\n"
        "  --max-segment-size SIZE  largest segment handed out: bytes, or with Ki, Mi, Gi\n"
        "                           (default %u)\n"
        "  --reap-interval-ms MS    least time between reaper passes (a dead owner's\n"
        "                           segments go at once, a burst of exits in groups); the\n"
        "                           period for owners without a pidfd (default 2000)\n"
        "  --log-level LEVEL        debug, info, warn or error (default info)\n"
        "Quotas (callers on the unix socket other than root, per uid; 0 = no limit):\n"
        "  --max-segments-per-uid N segments one uid's files may hold (default %u)\n"
        "  --max-bytes-per-uid SIZE bytes of segments one uid may hold (default %s)\n"
        "  --min-free-bytes SIZE    space every create leaves free on --dir's filesystem\n"
        "                           (default 0); the larger of this and:\n"
        "  --min-free-percent P     the same, percent of the filesystem's size (default %u)\n"
        "RDMA (remote collectors):\n"
        "  --rdma-listen IP[:PORT]  register segments for RDMA READ; rdma_cm listener on\n"
        "                           IP (an address of the RDMA netdev), PORT (default %u)\n"
        "  --token-file PATH        read token: collectors present it on the rdma_cm\n"
        "                           connect and on TCP control-plane calls; it allows\n"
        "                           ListSegments and WatchSegments only\n"
        "  --require-rdma           fail segment creation (and start-up) without RDMA\n"
        "TCP control plane security (--listen):\n"
        "  --tls-cert PATH          the agent's TLS certificate chain (PEM)\n"
        "  --tls-key PATH           its private key (PEM)\n"
        "  --tls-client-ca PATH     ask clients for a certificate signed by this CA (PEM)\n"
        "  --tls-require-client-cert  refuse clients without one (needs --tls-client-ca)\n"
        "  --admin-token-file PATH  admin token: also allows CreateSegment and ReleaseSegment\n"
        "                           over TCP (without it, TCP callers cannot change segments\n"
        "                           once --token-file is set)\n"
        "  --insecure-listen        serve --listen in plaintext HTTP/2: tokens cross the\n"
        "                           network in clear. Without any token, anyone who reaches\n"
        "                           the port may create and release segments\n",
        MV_SEGSTORE_DEFAULT_DIR, MV_SEGSTORE_DEFAULT_MAX_SIZE, QUOTA_SEGMENTS_DEFAULT,
        QUOTA_BYTES_DEFAULT_TEXT, MV_CONFIG_MIN_FREE_PERCENT, MV_CONFIG_RDMA_PORT);
}

/* ---- Quota flags ------------------------------------------------------------------ */

enum { O_QUOTA_SEGS = 200, O_QUOTA_BYTES, O_MIN_FREE_BYTES, O_MIN_FREE_PERCENT };
#define QUOTA_LONGOPTS                                                                             \
    {"max-segments-per-uid", required_argument, NULL, O_QUOTA_SEGS},                               \
        {"max-bytes-per-uid", required_argument, NULL, O_QUOTA_BYTES},                             \
        {"min-free-bytes", required_argument, NULL, O_MIN_FREE_BYTES},                             \
    {                                                                                              \
        "min-free-percent", required_argument, NULL, O_MIN_FREE_PERCENT                            \
    }

static void quota_defaults(mv_segstore_opts *o)
{
    o->max_segments_per_uid = QUOTA_SEGMENTS_DEFAULT;
    o->max_bytes_per_uid = QUOTA_BYTES_DEFAULT;
    o->min_free_bytes = 0;
    o->min_free_percent = MV_CONFIG_MIN_FREE_PERCENT;
}

/* A quota flag into `o`: 1 when `opt` is one (0 = not a quota flag), -1 on a bad value
 * (message printed). */
static int quota_flag(int opt, const char *arg, mv_segstore_opts *o)
{
    uint64_t v;
    switch (opt) {
    case O_QUOTA_SEGS:
        if (mv_util_flag_u64("microview-agent", "--max-segments-per-uid", arg, 0,
                             MV_SEGSTORE_SEGMENTS_MAX, &o->max_segments_per_uid) < 0)
            return -1;
        return 1;
    case O_QUOTA_BYTES:
        if (mv_util_flag_size("microview-agent", "--max-bytes-per-uid", arg, 0, UINT64_MAX,
                              &o->max_bytes_per_uid) < 0)
            return -1;
        return 1;
    case O_MIN_FREE_BYTES:
        if (mv_util_flag_size("microview-agent", "--min-free-bytes", arg, 0, UINT64_MAX,
                              &o->min_free_bytes) < 0)
            return -1;
        return 1;
    case O_MIN_FREE_PERCENT:
        if (mv_util_flag_u64("microview-agent", "--min-free-percent", arg, 0, 99, &v) < 0)
            return -1;
        o->min_free_percent = (unsigned)v;
        return 1;
    default:
        return 0;
    }
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

static void k8s_usage(FILE *f)
{
    fprintf(f,
            "usage: microview-agent [--config FILE] [--KEY VALUE]...   (Kubernetes mode)\n"
            "       microview-agent --standalone [options]            (see --standalone --help)\n"
            "Every configuration key is also a flag (dashes or underscores), e.g.\n"
            "  --resource-name microview.io/metrics --page-size 4Ki --pool-size 16Mi\n"
            "The agent's socket (agent_socket) is for root only in this mode: --socket-mode\n"
            "and --socket-group are --standalone flags; segment_group GROUP gives the socket\n"
            "(0660) and the segment files (0660) that group, for a non-root collector.\n"
            "listen (TCP) needs tls_cert_file + tls_key_file (tls_client_ca_file,\n"
            "tls_require_client_cert) or insecure_listen: true. collector_token_file is the\n"
            "read token (List/Watch, rdma_cm); admin_token_file may also release over TCP;\n"
            "creates over TCP are refused in this mode.\n"
            "Keys:");
    for (const char *const *k = mv_config_keys(); *k; k++)
        fprintf(f, " %s", *k);
    fprintf(f, "\n");
}

/* Kubernetes mode: every configuration key is a flag too. */
static int k8s_main(int argc, char **argv)
{
    static const char *const standalone_only[] = {"--socket-mode", "--socket-group"};
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        for (size_t k = 0; k < sizeof standalone_only / sizeof standalone_only[0]; k++) {
            size_t n = strlen(standalone_only[k]);
            if (strncmp(argv[i], standalone_only[k], n) == 0 &&
                (argv[i][n] == '\0' || argv[i][n] == '=')) {
                fprintf(stderr,
                        "microview-agent: %s is a --standalone flag: the Kubernetes mode's "
                        "socket is for root only (the kubelet's, the host collector's)\n",
                        standalone_only[k]);
                return 2;
            }
        }
    const char *const *keys = mv_config_keys();
    size_t nkeys = 0;
    while (keys[nkeys])
        nkeys++;
    struct option *lo = calloc(nkeys * 2 + 3, sizeof *lo);
    char(*names)[64] = calloc(nkeys, sizeof *names);
    const char **ovk = calloc((size_t)argc + 1, sizeof *ovk),
               **ovv = calloc((size_t)argc + 1, sizeof *ovv);
    int rc = 2;
    size_t nov = 0;
    const char *cfg_file = NULL;
    mv_config *cfg = calloc(1, sizeof *cfg);
    if (!lo || !names || !ovk || !ovv || !cfg) {
        fprintf(stderr, "microview-agent: out of memory\n");
        goto free_opts;
    }
    size_t no = 0;
    for (size_t i = 0; i < nkeys; i++) {
        lo[no++] = (struct option){keys[i], required_argument, NULL, 1000 + (int)i};
        snprintf(names[i], sizeof names[i], "%s", keys[i]);
        for (char *c = names[i]; *c; c++)
            if (*c == '_')
                *c = '-';
        lo[no++] = (struct option){names[i], required_argument, NULL, 1000 + (int)i};
    }
    lo[no++] = (struct option){"config", required_argument, NULL, 'c'};
    lo[no++] = (struct option){"help", no_argument, NULL, 'h'};
    int opt;
    if (mv_util_opts_exact("microview-agent", argc, argv, lo) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        if (opt == 'c') {
            cfg_file = optarg;
        } else if (opt == 'h') {
            k8s_usage(stdout);
            rc = 0;
            goto free_opts;
        } else if (opt >= 1000 && opt < 1000 + (int)nkeys) {
            ovk[nov] = keys[opt - 1000];
            ovv[nov++] = optarg;
        } else {
            k8s_usage(stderr);
            goto free_opts;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "microview-agent: unexpected argument %s\n", argv[optind]);
        goto free_opts;
    }
    char err[MV_ERR_MAX];
    mv_config_defaults(cfg);
    if (cfg_file && mv_config_load_file(cfg, cfg_file, err, sizeof err) < 0) {
        fprintf(stderr, "microview-agent: config: %s\n", err);
        goto free_opts;
    }
    for (size_t i = 0; i < nov; i++)
        if (mv_config_set(cfg, ovk[i], ovv[i], err, sizeof err) < 0) {
            fprintf(stderr, "microview-agent: --%s: %s\n", ovk[i], err);
            goto free_opts;
        }
    mv_log_level level;
    if (mv_config_finish(cfg, err, sizeof err) < 0 ||
        mv_log_parse_level(cfg->log_level, &level) < 0) {
        fprintf(stderr, "microview-agent: config: %s\n",
                err[0] ? err : "log_level: debug, info, warn or error");
        goto free_opts;
    }
    mv_log_init("agent", level);
    mv_agent_k8s *a;
    if (mv_agent_k8s_create(cfg, &a) < 0) {
        fprintf(stderr, "microview-agent: out of memory\n");
        goto free_opts;
    }
    mv_agent_run_opts ro;
    mv_agent_mode mode;
    mv_agent_k8s_mode(a, &ro, &mode);
    rc = mv_agent_run(&ro, &mode);
    mv_agent_k8s_destroy(a);
free_opts:
    free(cfg);
    free(ovv);
    free(ovk);
    free(names);
    free(lo);
    return rc;
}

int main(int argc, char **argv)
{
    int standalone_flag = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--standalone") == 0)
            standalone_flag = 1;
    if (!standalone_flag)
        return k8s_main(argc, argv);
    enum {
        O_STANDALONE = 1,
        O_DIR,
        O_SOCKET,
        O_LISTEN,
        O_MAXSIZE,
        O_REAP,
        O_LOGLEVEL,
        O_HELP,
        O_RDMA_LISTEN,
        O_TOKEN_FILE,
        O_REQUIRE_RDMA,
        O_SOCKET_MODE,
        O_SOCKET_GROUP,
        /* TCP control plane security */
        O_TLS_CERT,
        O_TLS_KEY,
        O_TLS_CLIENT_CA,
        O_TLS_REQUIRE_CLIENT,
        O_ADMIN_TOKEN_FILE,
        O_INSECURE_LISTEN
    };
    static const struct option longopts[] = {
        {"standalone", no_argument, NULL, O_STANDALONE},
        {"dir", required_argument, NULL, O_DIR},
        {"socket", required_argument, NULL, O_SOCKET},
        {"socket-mode", required_argument, NULL, O_SOCKET_MODE},
        {"socket-group", required_argument, NULL, O_SOCKET_GROUP},
        {"listen", required_argument, NULL, O_LISTEN},
        {"max-segment-size", required_argument, NULL, O_MAXSIZE},
        {"reap-interval-ms", required_argument, NULL, O_REAP},
        {"log-level", required_argument, NULL, O_LOGLEVEL},
        {"help", no_argument, NULL, O_HELP},
        {"rdma-listen", required_argument, NULL, O_RDMA_LISTEN},
        {"token-file", required_argument, NULL, O_TOKEN_FILE},
        {"require-rdma", no_argument, NULL, O_REQUIRE_RDMA},
        /* TCP control plane security */
        {"tls-cert", required_argument, NULL, O_TLS_CERT},
        {"tls-key", required_argument, NULL, O_TLS_KEY},
        {"tls-client-ca", required_argument, NULL, O_TLS_CLIENT_CA},
        {"tls-require-client-cert", no_argument, NULL, O_TLS_REQUIRE_CLIENT},
        {"admin-token-file", required_argument, NULL, O_ADMIN_TOKEN_FILE},
        {"insecure-listen", no_argument, NULL, O_INSECURE_LISTEN},
        QUOTA_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    mv_segstore_opts quota;
    quota_defaults(&quota);
    const char *dir = MV_SEGSTORE_DEFAULT_DIR, *sock = NULL, *tcp_listen = NULL;
    uint64_t max_size = 0, reap_ms = 0;
    mv_log_level level = MV_LOG_INFO;
    rdma_flags rf = {0};
    mv_rpc_unix_perms perms = {.mode = -1, .gid = -1};
    const char *sock_mode = NULL, *sock_group = NULL;
    mv_rpc_tls_server_opts tls = {0};
    int insecure_listen = 0;
    int opt;
    if (mv_util_opts_exact("microview-agent", argc, argv, longopts) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int q = quota_flag(opt, optarg, &quota);
        if (q < 0)
            return 2;
        if (q > 0)
            continue;
        switch (opt) {
        case O_STANDALONE: /* the mode was chosen above */
            break;
        case O_DIR:
            dir = optarg;
            break;
        case O_SOCKET:
            sock = optarg;
            break;
        case O_SOCKET_MODE: {
            uint32_t m;
            if (mv_util_flag_mode("microview-agent", "--socket-mode", optarg, &m) < 0)
                return 2;
            perms.mode = (int)m;
            sock_mode = optarg;
            break;
        }
        case O_SOCKET_GROUP: {
            uint32_t g;
            if (mv_util_flag_group("microview-agent", "--socket-group", optarg, &g) < 0)
                return 2;
            perms.gid = g;
            sock_group = optarg;
            break;
        }
        case O_LISTEN:
            tcp_listen = optarg;
            break;
        case O_MAXSIZE:
            if (mv_util_flag_size("microview-agent", "--max-segment-size", optarg,
                                  MV_SEGSTORE_MIN_SIZE, UINT64_MAX, &max_size) < 0)
                return 2;
            break;
        case O_REAP:
            if (mv_util_flag_u64("microview-agent", "--reap-interval-ms", optarg, 1, 3600000,
                                 &reap_ms))
                return 2;
            break;
        case O_LOGLEVEL:
            if (mv_log_parse_level(optarg, &level) < 0) {
                fprintf(stderr, "microview-agent: --log-level: debug, info, warn or error\n");
                return 2;
            }
            break;
        case O_RDMA_LISTEN:
            rf.listen = optarg;
            break;
        case O_TOKEN_FILE:
            rf.token_file = optarg;
            break;
        case O_REQUIRE_RDMA:
            rf.require = 1;
            break;
        /* TCP control plane security */
        case O_TLS_CERT:
            tls.cert_file = optarg;
            break;
        case O_TLS_KEY:
            tls.key_file = optarg;
            break;
        case O_TLS_CLIENT_CA:
            tls.client_ca_file = optarg;
            break;
        case O_TLS_REQUIRE_CLIENT:
            tls.require_client_cert = 1;
            break;
        case O_ADMIN_TOKEN_FILE:
            rf.admin_token_file = optarg;
            break;
        case O_INSECURE_LISTEN:
            insecure_listen = 1;
            break;
        case O_HELP:
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "microview-agent: unexpected argument %s\n", argv[optind]);
        return 2;
    }
    if (tcp_listen) {
        char err[MV_ERR_MAX], host[256];
        uint16_t port;
        if (mv_util_parse_listen(tcp_listen, MV_LISTEN_PORT_ZERO, host, sizeof host, &port, err,
                                 sizeof err) < 0) {
            fprintf(stderr, "microview-agent: --listen: %s\n", err);
            return 2;
        }
    }
    if (rdma_flags_check(&rf, tcp_listen) < 0 ||
        tcp_security_check(&tls, insecure_listen, tcp_listen) < 0)
        return 2;
    mv_log_init("agent", level);

    char sockbuf[4096];
    if (!sock) {
        if (mv_util_fmt(sockbuf, sizeof sockbuf, "%s/agent.sock", dir) < 0) {
            fprintf(stderr, "microview-agent: --dir: path too long for the socket\n");
            return 2;
        }
        sock = sockbuf;
    }
    sa_mode sa = {.rf = rf,
                  .dir = dir,
                  .sock = sock,
                  .tcp_listen = tcp_listen,
                  .sock_mode = sock_mode,
                  .sock_group = sock_group,
                  .tls = tls.cert_file != NULL};
    mv_agent_run_opts ro = {.mode = "standalone",
                            .store = {.dir = dir,
                                      .max_size = max_size,
                                      .reap_interval_ms = (int)reap_ms,
                                      .max_segments_per_uid = quota.max_segments_per_uid,
                                      .max_bytes_per_uid = quota.max_bytes_per_uid,
                                      .min_free_bytes = quota.min_free_bytes,
                                      .min_free_percent = quota.min_free_percent},
                            .socket_path = sock,
                            .socket_perms = sock_mode || sock_group ? &perms : NULL,
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
