/* microview-webhook: the mutating admission webhook that turns microview.io/metrics-memory into
 * requests and limits of microview.io/metrics, served over HTTPS. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_config.h"
#include "mv_log.h"
#include "mv_util.h"
#include "mv_webhook.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: microview-webhook --tls-cert-file PEM --tls-key-file PEM [options]\n"
            "  --listen [HOST]:PORT       HTTPS address (default :8443, every address)\n"
            "  --tls-cert-file PATH       serving certificate (chain), PEM; reloaded on change\n"
            "  --tls-key-file PATH        its private key, PEM; reloaded on change\n"
            "  --page-size SIZE           bytes per page, as the agent's page_size: a multiple\n"
            "                             of 4096, bytes or with Ki, Mi, Gi (default 4Ki)\n"
            "  --max-pages-per-pod N      pages one pod may hold in total (default: the agent's\n"
            "                             pool_size / page_size, 4096)\n"
            "  --resource-name NAME       extended resource (default microview.io/metrics)\n"
            "  --log-level LEVEL          debug, info, warn, error (default info)\n"
            "  --config FILE              the agent's YAML configuration: page_size,\n"
            "                             pool_size, resource_name and log_level are read from\n"
            "                             it; flags win\n");
}

static int fail_flag(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, "microview-webhook: %s %s: %s\n", flag, value ? value : "", why);
    fprintf(stderr, "run microview-webhook --help for the flags\n");
    return 2;
}

int main(int argc, char **argv)
{
    enum { O_LISTEN = 256, O_CERT, O_KEY, O_PAGE, O_MAXP, O_RES, O_LEVEL, O_CONFIG };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"tls-cert-file", required_argument, NULL, O_CERT},
        {"tls-key-file", required_argument, NULL, O_KEY},
        {"page-size", required_argument, NULL, O_PAGE},
        {"max-pages-per-pod", required_argument, NULL, O_MAXP},
        {"resource-name", required_argument, NULL, O_RES},
        {"log-level", required_argument, NULL, O_LEVEL},
        {"config", required_argument, NULL, O_CONFIG},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = ":8443", *cert = NULL, *key = NULL, *page = NULL, *maxp = NULL,
               *res = NULL, *level = NULL, *config = NULL;
    int opt;
    opterr = 0;
    if (mv_util_opts_exact("microview-webhook", argc, argv, longopts) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case O_LISTEN:
            listen = optarg;
            break;
        case O_CERT:
            cert = optarg;
            break;
        case O_KEY:
            key = optarg;
            break;
        case O_PAGE:
            page = optarg;
            break;
        case O_MAXP:
            maxp = optarg;
            break;
        case O_RES:
            res = optarg;
            break;
        case O_LEVEL:
            level = optarg;
            break;
        case O_CONFIG:
            config = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            if (optopt)
                fprintf(stderr, "microview-webhook: option needs a value or is unknown: %s\n",
                        argv[optind - 1]);
            else
                fprintf(stderr, "microview-webhook: unknown option %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        return fail_flag("argument", argv[optind], "unexpected; every setting is a --flag");

    /* The agent's keys, so that a page means the same on both sides. */
    mv_config ac;
    char err[MV_ERR_MAX];
    mv_config_defaults(&ac);
    if (config && mv_config_load_file(&ac, config, err, sizeof err) != 0)
        return fail_flag("--config", config, err);
    if (page && mv_config_set(&ac, "page_size", page, err, sizeof err) != 0)
        return fail_flag("--page-size", page, err);
    if (res && mv_config_set(&ac, "resource_name", res, err, sizeof err) != 0)
        return fail_flag("--resource-name", res, err);
    if (level && mv_config_set(&ac, "log_level", level, err, sizeof err) != 0)
        return fail_flag("--log-level", level, err);
    if (mv_config_finish(&ac, err, sizeof err) != 0)
        return fail_flag(page     ? "--page-size"
                         : config ? "--config"
                                  : "--resource-name",
                         page     ? page
                         : config ? config
                                  : res,
                         err);
    mv_log_level lvl;
    if (mv_log_parse_level(ac.log_level, &lvl) != 0)
        return fail_flag("--log-level", ac.log_level, "want debug, info, warn or error");

    mv_wh_server_config sc;
    memset(&sc, 0, sizeof sc);
    mv_wh_config_default(&sc.review);
    sc.review.page_size = ac.page_size;
    sc.review.max_pages_per_pod = ac.pool_size / ac.page_size;
    if (strlen(ac.resource_name) > MV_WH_RESOURCE_MAX)
        return fail_flag("--resource-name", ac.resource_name, "longer than 253 bytes");
    memcpy(sc.review.resource_name, ac.resource_name, strlen(ac.resource_name) + 1);
    if (maxp &&
        mv_util_parse_u64(maxp, 1, 100000000, &sc.review.max_pages_per_pod, err, sizeof err))
        return fail_flag("--max-pages-per-pod", maxp, err);
    if (mv_wh_config_check(&sc.review, err, sizeof err) != 0)
        return fail_flag("--page-size/--max-pages-per-pod/--resource-name", "", err);
    if (!cert || !key)
        return fail_flag(cert ? "--tls-key-file" : "--tls-cert-file", "",
                         "required: the API server calls webhooks over HTTPS only");
    char host[64];
    uint16_t port;
    if (mv_util_parse_listen(listen, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, host, sizeof host,
                             &port, err, sizeof err) != 0)
        return fail_flag("--listen", listen, err);

    mv_log_init("webhook", lvl);
    sc.listen = listen;
    sc.cert_file = cert;
    sc.key_file = key;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by every thread started below */
    signal(SIGPIPE, SIG_IGN);

    mv_wh_server *s;
    if (mv_wh_server_create(&sc, &s) != 0)
        return 1;
    if (mv_wh_server_start(s) != 0) {
        mv_wh_server_destroy(s);
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    MV_INFO("webhook.stopping", "signal=%d", sig);
    mv_wh_server_destroy(s);
    return 0;
}
