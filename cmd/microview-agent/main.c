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
#include "mv_log.h"
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
            "  --log-level LEVEL        debug, info, warn or error (default info)\n",
            MV_SEGSTORE_DEFAULT_DIR, MV_SEGSTORE_DEFAULT_MAX_SIZE);
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
    enum { O_STANDALONE = 1, O_DIR, O_SOCKET, O_LISTEN, O_MAXSIZE, O_REAP, O_LOGLEVEL, O_HELP };
    static const struct option longopts[] = {
        {"standalone", no_argument, NULL, O_STANDALONE},
        {"dir", required_argument, NULL, O_DIR},
        {"socket", required_argument, NULL, O_SOCKET},
        {"listen", required_argument, NULL, O_LISTEN},
        {"max-segment-size", required_argument, NULL, O_MAXSIZE},
        {"reap-interval-ms", required_argument, NULL, O_REAP},
        {"log-level", required_argument, NULL, O_LOGLEVEL},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    int standalone = 0;
    (void)standalone;
    const char *dir = MV_SEGSTORE_DEFAULT_DIR, *sock = NULL, *tcp_listen = NULL;
    uint64_t max_size = 0, reap_ms = 0;
    mv_log_level level = MV_LOG_INFO;
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
    mv_log_init("agent", level);

    /* Signals are taken synchronously by the main thread; block them before any
     * thread starts so that every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    int rc = 1;
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
    mv_agentsvc_destroy(svc);
destroy_server:
    mv_rpc_server_destroy(srv);
close_store:
    mv_segstore_close(store);
    if (rc == 0)
        MV_INFO("agent.stopped", "%s", "");
    return rc;
}
