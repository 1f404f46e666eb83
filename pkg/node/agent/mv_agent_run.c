/* mv_agent_run: the agent's start-up and shutdown, shared by the standalone and Kubernetes modes.
 */
#include "mv_agent.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_util.h"

/* Signals are taken synchronously by the main thread; they are blocked before
 * any thread starts so that every thread inherits the mask. A peer closing a
 * socket must not kill the process. */
static void signals_block(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int mv_agent_run(const mv_agent_run_opts *o, const mv_agent_mode *m)
{
    sigset_t sigs;
    signals_block(&sigs);

    int rc = 1;
    const char *tcp = o->tcp_listen && o->tcp_listen[0] ? o->tcp_listen : NULL;
    char unixaddr[4096 + 8];
    if (mv_fmt(unixaddr, sizeof unixaddr, "unix:%s", o->socket_path) < 0) {
        MV_ERROR("agent.config_invalid", "socket=%s err=%s", mv_log_q(o->socket_path),
                 mv_log_q("the socket path is too long"));
        return 1;
    }
    mv_segstore *store;
    if (mv_segstore_open(&o->store, &store) < 0)
        return 1;
    if (m->setup && m->setup(m->arg, store) < 0)
        goto close_store;
    mv_rpc_server *srv = NULL;
    mv_agentsvc *svc = NULL;
    if (mv_rpc_server_create(NULL, &srv) < 0)
        goto teardown;
    if (mv_agentsvc_register(srv, store, &svc) < 0 ||
        (o->token && o->token[0] && mv_rpc_server_set_token(srv, o->token) < 0))
        goto destroy_server;
    if (m->before_listen && m->before_listen(m->arg, svc) < 0)
        goto destroy_server;
    int tcp_port = 0;
    if (mv_rpc_server_listen(srv, unixaddr) < 0 ||
        (tcp && (tcp_port = mv_rpc_server_listen(srv, tcp)) < 0) || mv_rpc_server_start(srv) < 0) {
        MV_ERROR("agent.listen_failed", "socket=%s listen=%s", mv_log_q(o->socket_path),
                 mv_log_q(tcp ? tcp : "off"));
        goto destroy_server;
    }
    if (m->started && m->started(m->arg, tcp_port) < 0)
        goto destroy_server;

    int sig = 0;
    sigwait(&sigs, &sig);
    MV_INFO("agent.stopping", "signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
    if (m->stopping)
        m->stopping(m->arg);
destroy_server:
    mv_rpc_server_destroy(srv); /* ends every open watch before the service goes */
    if (m->after_server)
        m->after_server(m->arg); /* e.g. revokes every rkey */
    mv_agentsvc_destroy(svc);
teardown:
    if (m->teardown)
        m->teardown(m->arg);
close_store:
    mv_segstore_close(store);
    if (rc == 0)
        MV_INFO("agent.stopped", "mode=%s", o->mode);
    return rc;
}
