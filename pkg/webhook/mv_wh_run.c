/* mv_wh_run: the webhook's lifecycle, from a checked configuration to a clean stop: signals,
 * the server created and started, a wait for SIGTERM or SIGINT, the server destroyed. The top
 * of the module: it calls the server (mv_wh_server.c) and nothing calls it. */
#include <pthread.h>
#include <signal.h>

#include "mv_log.h"
#include "mv_webhook.h"

int mv_wh_run(const mv_wh_server_config *cfg)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by every thread started below */
    signal(SIGPIPE, SIG_IGN);

    mv_wh_server *s;
    if (mv_wh_server_create(cfg, &s) != 0)
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
