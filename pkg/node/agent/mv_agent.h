/* mv_agent: the node agent's logic behind its main: one start-up/shutdown routine for both
 * modes, and the Kubernetes mode's device-plugin callbacks, pod identity, garbage collection
 * and RDMA export with device health.
 *
 * mv_agent_run does, in this order: block SIGINT/SIGTERM in every thread (and
 * ignore SIGPIPE), open the segment store, run the mode's `setup`, create the
 * control plane (gRPC server + microview.v1.Agent service, token on TCP), run
 * `before_listen`, listen on the unix socket (and TCP), start serving, run
 * `started`, wait for SIGINT/SIGTERM, then undo everything in reverse:
 * `stopping`, the control plane (ending open watches), `after_server`, the
 * service, `teardown`, the store.
 *
 * Kubernetes mode (mv_agent_k8s_*): Allocate hands out a segment backed by the
 * devices the kubelet picked, PreStartContainer labels it with its pod's
 * identity (PodResources, then the API server's annotation), a background
 * thread retries incomplete identities, collects segments whose devices left
 * PodResources and keeps trying to bring up the RDMA target.
 *
 * Errors: int functions return 0 or a negative errno value; where an `err`
 * buffer is taken it receives a sentence the operator can act on.
 */
#ifndef MV_AGENT_H
#define MV_AGENT_H

#include <stddef.h>

#include "mv_agentsvc.h"
#include "mv_config.h"
#include "mv_dp.h"
#include "mv_segstore.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- One start-up/shutdown routine for both modes --------------------------------------- */

typedef struct mv_agent_run_opts {
    const char *mode;        /* "standalone" or "kubernetes", for the logs */
    mv_segstore_opts store;  /* opened after the signals are blocked */
    const char *socket_path; /* control-plane unix socket */
    /* Its file's mode and group, applied whenever the socket is made (at start and each time
     * a deleted socket is recreated); NULL: 0777 less the umask, the agent's group. */
    const mv_rpc_unix_perms *socket_perms;
    const char *tcp_listen; /* HOST:PORT, or NULL/"" for none */
    /* TLS on tcp_listen (cert_file NULL: none). Without it the TCP listener is plaintext,
     * which is refused unless insecure_tcp is set. */
    mv_rpc_tls_server_opts tls;
    int insecure_tcp;
    /* Tokens required on TCP calls; NULL/"" for none. `token` is the read token (ListSegments,
     * WatchSegments), `admin_token` the admin one (also CreateSegment, ReleaseSegment). Read
     * after `setup` ran, so setup may fill the buffers they point to. */
    const char *token;
    const char *admin_token;
} mv_agent_run_opts;

/* What a mode adds to the routine. Every hook may be NULL. A hook returning < 0
 * stops the start-up: what ran before is undone and mv_agent_run returns 1. A
 * failing hook undoes its own partial work. */
typedef struct mv_agent_mode {
    void *arg;
    int (*setup)(void *arg, mv_segstore *store);       /* store is open */
    int (*before_listen)(void *arg, mv_agentsvc *svc); /* service registered */
    int (*started)(void *arg, int tcp_port);           /* serving; logs agent.started */
    void (*stopping)(void *arg);                       /* undoes `started` */
    void (*after_server)(void *arg);                   /* control plane gone */
    void (*teardown)(void *arg);                       /* undoes `setup` */
} mv_agent_mode;

/* Runs the agent until SIGINT or SIGTERM. Returns the process exit code: 0
 * after a signal, 1 when start-up failed (the reason is logged). */
int mv_agent_run(const mv_agent_run_opts *o, const mv_agent_mode *m);

/* ---- Kubernetes mode ---------------------------------------------------------------------- */

typedef struct mv_agent_k8s mv_agent_k8s;

/* Creates the Kubernetes mode over a finished configuration (copied). Returns
 * 0 or -ENOMEM. Free with mv_agent_k8s_destroy. */
int mv_agent_k8s_create(const mv_config *cfg, mv_agent_k8s **out);
/* NULL is a no-op. The agent must not be running. */
void mv_agent_k8s_destroy(mv_agent_k8s *a);
/* Fills the options and hooks that run this mode with mv_agent_run; they
 * refer to `a`, which must outlive the run. */
void mv_agent_k8s_mode(mv_agent_k8s *a, mv_agent_run_opts *o, mv_agent_mode *m);

/* The pieces the hooks use, callable on their own (tests): `setup` attaches
 * the store (and the API server client), `before_listen` the service. */
int mv_agent_k8s_attach(mv_agent_k8s *a, mv_segstore *store);
void mv_agent_k8s_detach(mv_agent_k8s *a);
/* Device plugin Allocate / PreStartContainer (see mv_dp_callbacks). */
int mv_agent_k8s_allocate(mv_agent_k8s *a, const char *const *ids, size_t n, mv_dp_alloc *out,
                          char *err, size_t errlen);
int mv_agent_k8s_prestart(mv_agent_k8s *a, const char *const *ids, size_t n, char *err,
                          size_t errlen);
/* One garbage-collection pass: releases device-backed segments older than
 * gc_grace_ms whose devices PodResources no longer lists. */
void mv_agent_k8s_gc_pass(mv_agent_k8s *a);
/* Retries the identity of segments whose identity is incomplete. */
void mv_agent_k8s_retry_pass(mv_agent_k8s *a);
/* Segments waiting for an identity retry. */
size_t mv_agent_k8s_pending(mv_agent_k8s *a);

#ifdef __cplusplus
}
#endif
#endif
