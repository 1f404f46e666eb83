/* microview-agent: node agent entry point: standalone mode flags and wiring; Kubernetes mode is in
 * k8s.c. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "mv_agentsvc.h"
#include "mv_config.h"
#include "mv_log.h"
#include "mv_rdma.h"
#include "mv_rdmax.h"
#include "mv_rpc.h"
#include "mv_segstore.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: microview-agent --standalone [options]\n"
            "  --standalone             serve segments without Kubernetes (default: Kubernetes\n"
            "                           mode; see microview-agent --help)\n"
            "  --dir DIR                segment directory (default %s)\n"
            "  --socket PATH            control-plane unix socket (default DIR/agent.sock)\n"
            "  --listen HOST:PORT       also listen on TCP (default: off)\n"
            "  --max-segment-size BYTES largest segment handed out (default %u)\n"
            "  --reap-interval-ms MS    owner liveness check period (default 2000)\n"
            "  --log-level LEVEL        debug, info, warn or error (default info)\n"
            "RDMA (remote collectors):\n"
            "  --rdma-listen IP:PORT    register segments for RDMA READ; rdma_cm listener on\n"
            "                           IP (an address of the RDMA netdev), PORT (default %u)\n"
            "  --token-file PATH        shared secret: collectors present it on the rdma_cm\n"
            "                           connect and on every TCP control-plane call\n"
            "  --require-rdma           fail segment creation (and start-up) without RDMA\n",
            MV_SEGSTORE_DEFAULT_DIR, MV_SEGSTORE_DEFAULT_MAX_SIZE, MV_CONFIG_RDMA_PORT);
}

/* ---- RDMA flags ---------------------------------------------------------------- */

typedef struct rdma_flags {
    const char *listen;     /* --rdma-listen IP[:PORT] */
    const char *token_file; /* --token-file */
    int require;            /* --require-rdma */
    char ip[64];
    uint16_t port;
    char token[MV_RDMA_TOKEN_MAX + 1];
} rdma_flags;

/* Validates the RDMA flags and loads the token. Returns 0 or -1 (message printed). */
static int rdma_flags_check(rdma_flags *r, const char *tcp_listen)
{
    char err[256];
    if (r->require && !r->listen) {
        fprintf(stderr, "microview-agent: --require-rdma needs --rdma-listen\n");
        return -1;
    }
    if (r->listen && !r->token_file) {
        fprintf(stderr, "microview-agent: --rdma-listen needs --token-file "
                        "(collectors must present the shared token)\n");
        return -1;
    }
    if (tcp_listen && !r->token_file)
        fprintf(stderr,
                "microview-agent: warning: --listen without --token-file: anyone who "
                "reaches %s can create and release segments\n",
                tcp_listen);
    if (r->token_file &&
        mv_rdma_token_load(r->token_file, r->token, sizeof r->token, err, sizeof err) < 0) {
        fprintf(stderr, "microview-agent: --token-file: %s\n", err);
        return -1;
    }
    if (r->listen && mv_config_split_endpoint(r->listen, MV_CONFIG_RDMA_PORT, r->ip, sizeof r->ip,
                                              &r->port) < 0) {
        fprintf(stderr, "microview-agent: --rdma-listen wants IP[:PORT], got %s\n", r->listen);
        return -1;
    }
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    int standalone_flag = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--standalone") == 0)
            standalone_flag = 1;
    if (!standalone_flag)
        return agent_k8s_main(argc, argv);
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
        O_REQUIRE_RDMA
    };
    static const struct option longopts[] = {
        {"standalone", no_argument, NULL, O_STANDALONE},
        {"dir", required_argument, NULL, O_DIR},
        {"socket", required_argument, NULL, O_SOCKET},
        {"listen", required_argument, NULL, O_LISTEN},
        {"max-segment-size", required_argument, NULL, O_MAXSIZE},
        {"reap-interval-ms", required_argument, NULL, O_REAP},
        {"log-level", required_argument, NULL, O_LOGLEVEL},
        {"help", no_argument, NULL, O_HELP},
        {"rdma-listen", required_argument, NULL, O_RDMA_LISTEN},
        {"token-file", required_argument, NULL, O_TOKEN_FILE},
        {"require-rdma", no_argument, NULL, O_REQUIRE_RDMA},
        {NULL, 0, NULL, 0},
    };
    int standalone = 0;
    (void)standalone;
    const char *dir = MV_SEGSTORE_DEFAULT_DIR, *sock = NULL, *tcp_listen = NULL;
    uint64_t max_size = 0, reap_ms = 0;
    mv_log_level level = MV_LOG_INFO;
    rdma_flags rf = {0};
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case O_STANDALONE:
            standalone = 1;
            break;
        case O_DIR:
            dir = optarg;
            break;
        case O_SOCKET:
            sock = optarg;
            break;
        case O_LISTEN:
            tcp_listen = optarg;
            break;
        case O_MAXSIZE:
            if (parse_u64(optarg, &max_size) || max_size < MV_SEGSTORE_MIN_SIZE) {
                fprintf(stderr, "microview-agent: --max-segment-size: need bytes >= %u\n",
                        MV_SEGSTORE_MIN_SIZE);
                return 2;
            }
            break;
        case O_REAP:
            if (parse_u64(optarg, &reap_ms) || reap_ms == 0 || reap_ms > 3600000) {
                fprintf(stderr, "microview-agent: --reap-interval-ms: need 1..3600000\n");
                return 2;
            }
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
    if (rdma_flags_check(&rf, tcp_listen) < 0)
        return 2;
    mv_log_init("agent", level);

    /* Signals are taken synchronously by the main thread; block them before any
     * thread starts so that every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    int rc = 1;
    mv_rdmax *rdmax = NULL;
    char sockbuf[4096];
    if (!sock) {
        snprintf(sockbuf, sizeof sockbuf, "%s/agent.sock", dir);
        sock = sockbuf;
    }
    char unixaddr[4200];
    snprintf(unixaddr, sizeof unixaddr, "unix:%s", sock);

    mv_segstore_opts so = {.dir = dir, .max_size = max_size, .reap_interval_ms = (int)reap_ms};
    mv_segstore *store;
    if (mv_segstore_open(&so, &store) < 0)
        return 1;
    mv_rpc_server *srv;
    if (mv_rpc_server_create(NULL, &srv) < 0)
        goto close_store;
    mv_agentsvc *svc;
    if (mv_agentsvc_register(srv, store, &svc) < 0)
        goto destroy_server;
    /* RDMA export and control-plane token (optional). */
    if (rf.token[0] && mv_rpc_server_set_token(srv, rf.token) < 0)
        goto destroy_svc;
    if (rf.listen) {
        char err[256];
        mv_rdmax_opts xo = {.bind_ip = rf.ip, .port = rf.port, .token = rf.token};
        if (mv_rdmax_create(&xo, store, &rdmax, err, sizeof err) < 0) {
            mv_log(rf.require ? MV_LOG_ERROR : MV_LOG_WARN, "rdma.unavailable",
                   "listen=%s error=%s segments=%s", mv_log_q(rf.listen), mv_log_q(err),
                   rf.require ? "refused_require_rdma" : "shm_only");
            if (rf.require)
                goto destroy_svc;
        } else {
            mv_agentsvc_set_rdma(svc, mv_rdmax_lookup, rdmax, rf.require);
        }
    }
    int port = 0;
    if (mv_rpc_server_listen(srv, unixaddr) < 0 ||
        (tcp_listen && (port = mv_rpc_server_listen(srv, tcp_listen)) < 0))
        goto destroy_svc;
    if (mv_rpc_server_start(srv) < 0)
        goto destroy_svc;
    MV_INFO("agent.started", "mode=standalone dir=%s socket=%s listen=%s tcp_port=%d pid=%d",
            mv_log_q(dir), mv_log_q(sock), mv_log_q(tcp_listen ? tcp_listen : "off"), port,
            (int)getpid());

    int sig = 0;
    sigwait(&sigs, &sig);
    MV_INFO("agent.stopping", "signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
destroy_svc:
    mv_rpc_server_destroy(srv); /* ends every open watch before the service goes */
    srv = NULL;
    mv_rdmax_destroy(rdmax); /* revokes every rkey */
    mv_agentsvc_destroy(svc);
destroy_server:
    mv_rpc_server_destroy(srv);
close_store:
    mv_segstore_close(store);
    if (rc == 0)
        MV_INFO("agent.stopped", "%s", "");
    return rc;
}
