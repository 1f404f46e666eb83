/* mv_scsvc_run: microview-scaler's lifecycle, from a checked configuration to a clean stop:
 * signals, the service started, a wait for SIGTERM or SIGINT, the service stopped. The top of
 * the module: it calls the server (mv_scsvc_server.c) and nothing calls it. */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>

#include "mv_log.h"
#include "mv_scsvc.h"
#include "mv_util.h"

int mv_scsvc_run(const mv_scsvc_config *c)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by every thread started below */
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    mv_scsvc *s;
    char err[MV_ERR_MAX];
    if (mv_scsvc_start(c, &s, err, sizeof err) != 0) {
        MV_ERROR("scaler.start_failed", "msg=%s", mv_log_q(err));
        curl_global_cleanup();
        return 1;
    }
    MV_INFO("scaler.started",
            "grpc_port=%u metrics_port=%u tls=%d api_server=%s collector_namespace=%s "
            "collector_selector=%s workers=%u max_pending=%u max_streams=%u",
            mv_scsvc_grpc_port(s), mv_scsvc_metrics_port(s), c->tls_cert_file != NULL,
            mv_log_q(c->api_server), mv_log_q(c->collector_namespace),
            mv_log_q(c->collector_selector), c->workers, c->max_pending, c->max_streams);
    int sig = 0;
    sigwait(&set, &sig);
    MV_INFO("scaler.stopping", "signal=%d", sig);
    mv_scsvc_stop(s);
    curl_global_cleanup();
    return 0;
}
