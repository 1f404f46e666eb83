/* mv_collector: the collector's lifecycle behind its main: one start-up/shutdown routine over
 * flag values already parsed and checked.
 *
 * mv_collector_run does, in this order: keep freed heap in the process (MV_COLL_HEAP_KEEP),
 * block SIGINT/SIGTERM in every thread (and ignore SIGPIPE), create the segment table and add
 * the --segment files, start the tick thread(s), create the access checks (--auth kubernetes),
 * the HTTP handlers and the HTTP server, route and start serving, start following the agent's
 * catalog (shm) or create the verbs agent set (--transport verbs), log collector.started, wait
 * for SIGINT/SIGTERM (polling the verbs agent set every 500 ms), log collector.stopping, then
 * undo everything in reverse: the verbs connections are stopped, the catalog follower, the
 * HTTP server, the segment table (its tick threads), the verbs agent set (the table's sources
 * used its connections), the handlers, the access checks (the server's handlers used them).
 *
 * Before it: mv_log_init, and mv_agentc_set_tls when the agents' TCP control plane uses TLS
 * (a process-wide setting of the agent client).
 *
 * Errors: mv_collector_run returns the process exit code; every failure is logged (or, for a
 * bad --segment, written to stderr) before it returns.
 */
#ifndef MV_COLLECTOR_H
#define MV_COLLECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "mv_authz.h"
#include "mv_collect.h"
#include "mv_export.h"
#include "mv_httpd.h"
#include "mv_rw.h"
#include "mv_live.h"

#ifdef __cplusplus
extern "C" {
#endif

/* HTTP threads with --auth kubernetes: a review blocks the thread that asks it, so at most
 * one less may wait for reviews at once (--auth-max-inflight). */
#define MV_COLLECTOR_AUTH_HTTP_THREADS 8

typedef struct mv_collector_opts {
    mv_coll_opts coll; /* the tick, its workers, adaptation, analytics (checked) */
    /* Same host: the agent whose catalog is followed (unix:PATH or HOST:PORT); NULL: none
     * (--no-agent, or --transport verbs). */
    const char *agent;
    /* --transport verbs: RDMA READ from these agents (IP:PORT of their --listen), with the
     * token read from --rdma-token-file, their rdma_cm port and an optional local address. */
    int verbs;
    const char *const *agents;
    size_t nagents;
    const char *rdma_token;
    uint16_t rdma_port;
    const char *rdma_src_ip; /* NULL: routed */
    /* --segment PATH[,k=v...] specs, split in place when added. */
    char *const *statics;
    size_t nstatic;
    /* The HTTP server: --listen as given (for the logs), its numeric host ("": any) and port
     * (0: any), and the server's limits; addr and port of `http` are set from these. */
    const char *listen;
    const char *listen_host;
    uint16_t listen_port;
    mv_httpd_config http;
    /* Who may read: MV_AUTHZ_KUBERNETES raises http.threads to MV_COLLECTOR_AUTH_HTTP_THREADS
     * and defaults authz.max_inflight to 4. */
    mv_authz_mode auth;
    mv_authz_opts authz;
    size_t body_cap;        /* cap on a /metrics body */
    size_t cache_cap;       /* exposition cache; 0: twice body_cap */
    mv_export_sel *derived; /* derived series on /metrics (borrowed) */
    /* Native histograms of the protobuf exposition (mv_api_opts): schema and bucket limit. */
    int native_set;
    int32_t native_schema;
    uint32_t native_max_buckets;
    /* Remote write (rw.url NULL: off); rw.sel is set to `derived`. */
    mv_rw_config rw;
    /* The live view (/ui, /api/v1/stream): its limits; coll and tick_us are set here.
     * max_streams 0: no live view. */
    mv_live_opts live;
} mv_collector_opts;

/* Runs the collector until SIGINT or SIGTERM. Returns the process exit code: 0 after a
 * signal once everything started, 1 when start-up failed (the reason is logged). */
int mv_collector_run(const mv_collector_opts *o);

#ifdef __cplusplus
}
#endif

#endif
