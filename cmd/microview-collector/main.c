/* microview-collector: read segments every tick, validate, serve /metrics. The option table
 * and the checks between flags; the collector itself runs in mv_collector_run
 * (pkg/collector/daemon). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_agentc.h"
#include "mv_collector.h"
#include "mv_expo.h"
#include "mv_log.h"
#include "mv_opts.h"
#include "mv_rdmatoken.h"
#include "mv_util.h"

#define DEFAULT_AGENT "unix:/run/microview/agent.sock"
#define MAX_STATIC    256
#define MAX_AGENTS    64
#define MAX_DERIVED   64
#define RDMA_PORT     7471 /* the agent's default --rdma-listen port */
#define P             "microview-collector"
#define NATIVE_AUTO   INT32_MAX /* --native-schema auto */
#define MAX_EXTERNAL  32

/* --agent and --no-agent: the last one given decides whether and which agent is followed. */
typedef struct {
    const char *agent;
    const char *agents[MAX_AGENTS];
    size_t nagents;
} agent_flags;

static int agent_flag(void *arg, const char *value, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    agent_flags *a = arg;
    a->agent = value;
    a->agents[a->nagents++] = value;
    return 0;
}

static int no_agent_flag(void *arg, const char *value, char *err, size_t errlen)
{
    (void)value, (void)err, (void)errlen;
    ((agent_flags *)arg)->agent = NULL;
    return 0;
}

static int derived_flag(void *arg, const char *value, char *err, size_t errlen)
{
    int rc = mv_export_sel_add(arg, value, err, errlen);
    return rc == -ENOMEM ? rc : rc ? -EINVAL : 0;
}

/* --native-schema: -4..8, auto or off. */
static int native_schema_flag(void *arg, const char *value, char *err, size_t errlen)
{
    int32_t *out = arg;
    char *end;
    if (strcmp(value, "off") == 0) {
        *out = MV_EXPO_NH_OFF;
        return 0;
    }
    if (strcmp(value, "auto") == 0) {
        *out = NATIVE_AUTO;
        return 0;
    }
    long v = strtol(value, &end, 10);
    if (end == value || *end || v < MV_EXPO_NH_SCHEMA_MIN || v > MV_EXPO_NH_SCHEMA_MAX) {
        snprintf(err, errlen, "'%s' is not -4..8, auto or off", value);
        return -EINVAL;
    }
    *out = (int32_t)v;
    return 0;
}

/* --remote-write-external-label NAME=VALUE, repeatable. */
typedef struct {
    mv_rw_label l[MAX_EXTERNAL];
    size_t n;
} ext_labels;

static int external_label_flag(void *arg, const char *value, char *err, size_t errlen)
{
    ext_labels *x = arg;
    const char *eq = strchr(value, '=');
    if (!eq || eq == value) {
        snprintf(err, errlen, "'%s' is not NAME=VALUE", value);
        return -EINVAL;
    }
    char *name = strndup(value, (size_t)(eq - value)); /* kept for the process's life */
    if (!name)
        return -ENOMEM;
    x->l[x->n++] = (mv_rw_label){name, eq + 1};
    return 0;
}

static int log_level_flag(void *arg, const char *value, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    if (mv_log_parse_level(value, arg) == 0)
        return 0;
    fprintf(stderr, P ": unknown log level %s\n", value);
    return -EINVAL;
}

/* The flags, checked, then the collector; `derived` (empty, the default choice) receives the
 * --derived specs as they are parsed, so that a bad one is refused before anything starts. */
static int run(int argc, char **argv, mv_export_sel *derived)
{
    static const char *const align_words[] = {"segment", "wall", NULL};
    static const char *const auth_words[] = {"none", "kubernetes", NULL};
    agent_flags ag = {.agent = DEFAULT_AGENT};
    const char *listen = "127.0.0.1:9469", *transport = "shm", *rdma_token_file = NULL,
               *rdma_src_ip = NULL, *statics[MAX_STATIC];
    mv_opts_list seg = {.items = statics};
    mv_coll_opts co;
    mv_coll_opts_default(&co);
    co.analytics = 1;
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    mv_agentc_tls agent_tls = {0};
    mv_authz_opts zo = {0};
    mv_log_level level = MV_LOG_INFO;
    int32_t native_schema = NATIVE_AUTO;
    uint64_t native_max = MV_EXPO_NH_MAX_BUCKETS;
    mv_rw_config rw;
    mv_rw_config_default(&rw);
    static ext_labels ext;
    uint64_t rw_interval = rw.interval_ms, rw_version = 1, rw_shards = rw.shards,
             rw_queue = rw.queue_samples, rw_per_send = rw.max_per_send, rw_timeout = rw.timeout_ms,
             rw_min_backoff = rw.min_backoff_ms, rw_max_backoff = rw.max_backoff_ms;
    int rw_insecure = 0;
    int auth = 0, align = 0, tick_poll = 0, no_probe = 0, no_analytics = 0, no_detect = 0;
    int native_gauges = 0;
    uint64_t rdma_port = RDMA_PORT, tick_ms = co.tick_us / 1000, workers = co.tick_workers,
             max_interval_ms = 0, window_ms = co.pipe.window_ns / 1000000,
             buckets = co.pipe.sketch_buckets, detect_ms = co.pipe.detect_period_ns / 1000000,
             quarantine_ms = co.quarantine_after_ms, body_cap = 64u << 20, cache_cap = 0,
             auth_timeout_ms = 0, auth_inflight = 0, max_conns = hc.max_conns,
             max_conns_client = hc.max_conns_per_client, idle_s = hc.timeout_s,
             deadline_s = hc.request_deadline_s;
    mv_live_opts lo;
    mv_live_opts_default(&lo);
    uint64_t ui_streams = lo.max_streams, ui_per_client = lo.max_streams_per_client,
             ui_series = lo.max_series, ui_ring = lo.ring_len, ui_ring_bytes = lo.max_ring_bytes,
             ui_lifetime_s = lo.max_lifetime_s;
    /* One row per flag, in --help's order. A new flag: a row here, then its value wired below;
     * `scripts/flag-docs.py --write build` updates the docs' table. */
    mv_opts_opt opts[] = {
        {.name = "transport",
         .kind = MV_OPTS_STRING,
         .meta = "shm|verbs",
         .dest = &transport,
         .help = "how segments are read (shm: same host; verbs: RDMA READ from remote agents)"},
        {.name = "agent",
         .kind = MV_OPTS_STRING,
         .meta = "TARGET",
         .max = MAX_AGENTS,
         .fn = agent_flag,
         .arg = &ag,
         .def = DEFAULT_AGENT,
         .help = "follow this agent's catalog; with verbs: IP:PORT of an agent's --listen"},
        {.name = "rdma-token-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rdma_token_file,
         .help = "verbs: the agents' shared token (their --token-file)"},
        {.name = "rdma-port",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 65535,
         .dest = &rdma_port,
         .help = "verbs: the agents' rdma_cm port"},
        {.name = "rdma-src-ip",
         .kind = MV_OPTS_STRING,
         .meta = "IP",
         .dest = &rdma_src_ip,
         .def = "routed",
         .help = "verbs: local address for RDMA"},
        {.name = "agent-ca",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &agent_tls.ca_file,
         .help = "TLS to agents on TCP (their --tls-cert): the CA that signed their "
                 "certificates (PEM); without it, plaintext"},
        {.name = "agent-cert",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &agent_tls.cert_file,
         .help = "client certificate for agents with --tls-client-ca"},
        {.name = "agent-key",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &agent_tls.key_file,
         .help = "its private key"},
        {.name = "agent-server-name",
         .kind = MV_OPTS_STRING,
         .meta = "NAME",
         .dest = &agent_tls.server_name,
         .def = "the host of --agent",
         .help = "name the agents' certificates carry"},
        {.name = "no-agent",
         .kind = MV_OPTS_FLAG,
         .fn = no_agent_flag,
         .arg = &ag,
         .help = "do not follow an agent (use --segment only)"},
        {.name = "segment",
         .kind = MV_OPTS_STRING,
         .meta = "PATH[,k=v...]",
         .max = MAX_STATIC,
         .dest = &seg,
         .help = "also read this segment file, with identity labels"},
        {.name = "listen",
         .kind = MV_OPTS_LISTEN,
         .meta = "[HOST]:PORT",
         .dest = &listen,
         .lo = MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO,
         .help = "HTTP address for /metrics (the default: this host only); a numeric HOST, IPv6 "
                 "as [ADDR]:PORT, none = 0.0.0.0. Other addresses serve every tenant's metrics "
                 "to whoever reaches them: use --auth kubernetes"},
        {.name = "auth",
         .kind = MV_OPTS_ENUM,
         .meta = "none|kubernetes",
         .words = auth_words,
         .dest = &auth,
         .help = "who may read /metrics, /api/v1/value, /debug/* (none: whoever reaches "
                 "--listen); kubernetes: a bearer token the API server accepts (TokenReview) "
                 "whose identity may get the path (SubjectAccessReview on the non-resource "
                 "URL); /healthz and / stay open"},
        {.name = "kube-api-server",
         .kind = MV_OPTS_STRING,
         .meta = "URL",
         .dest = &zo.api_server,
         .def = "in a pod, from $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT",
         .help = "kubernetes: the API server"},
        {.name = "kube-token-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &zo.token_file,
         .def = MV_AUTHZ_IN_CLUSTER_DIR "/token",
         .help = "kubernetes: the collector's own token, re-read every 60 s"},
        {.name = "kube-ca-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &zo.ca_file,
         .def = MV_AUTHZ_IN_CLUSTER_DIR "/ca.crt if present",
         .help = "kubernetes: CA of the API server"},
        {.name = "auth-timeout-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 100,
         .hi = 30000,
         .dest = &auth_timeout_ms,
         .def = "2000",
         .help = "kubernetes: limit of one API call; a request waits at most twice this"},
        {.name = "auth-max-inflight",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = MV_COLLECTOR_AUTH_HTTP_THREADS - 1,
         .dest = &auth_inflight,
         .def = "4",
         .help = "kubernetes: reviews waiting at once; more are answered 503 at once. A "
                 "review holds one of the HTTP threads (8 with --auth kubernetes), so the rest "
                 "keep serving cached decisions and /healthz"},
        {.name = "tick-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 60000,
         .dest = &tick_ms,
         .help = "fast read interval: the tick, in ms"},
        {.name = "tick-workers",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = MV_COLL_MAX_TICK_WORKERS,
         .dest = &workers,
         .help = "threads sharing each tick's segments (one per core the collector may use at a "
                 "1 ms tick)"},
        {.name = "tick-poll",
         .kind = MV_OPTS_FLAG,
         .dest = &tick_poll,
         .help = "idle tick workers poll for the next tick instead of sleeping (each keeps a "
                 "core busy): for cores of the collector's own, which can wake late from sleep "
                 "on VMs"},
        {.name = "max-interval-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 3600000,
         .dest = &max_interval_ms,
         .def = "1000",
         .help = "slowest adaptive read interval of a calm segment (equal to --tick-ms: no "
                 "adaptation)"},
        {.name = "no-probe",
         .kind = MV_OPTS_FLAG,
         .dest = &no_probe,
         .help = "do not probe backed-off same-host segments every tick (a write then waits for "
                 "the segment's interval)"},
        {.name = "window-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 10,
         .hi = 86400000,
         .dest = &window_ms,
         .help = "export window of the derived series"},
        {.name = "window-align",
         .kind = MV_OPTS_ENUM,
         .meta = "MODE",
         .words = align_words,
         .dest = &align,
         .help = "segment: each segment's windows start at its own offset, so their closes "
                 "spread over the window; wall: every window starts at a multiple of "
                 "--window-ms"},
        {.name = "sketch-alpha",
         .kind = MV_OPTS_NUMBER,
         .meta = "A",
         .dlo = 1e-4,
         .dhi = 0.5,
         .dest = &co.pipe.alpha,
         .help = "relative accuracy of window quantiles"},
        {.name = "sketch-buckets",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 16,
         .hi = 1u << 20,
         .dest = &buckets,
         .help = "sketch key budget per sign, bounds memory (the default covers 1 ns .. 1 h at "
                 "1%; pages of 16 keys are taken on use)"},
        {.name = "derived",
         .kind = MV_OPTS_STRING,
         .meta = "KEY=ITEMS",
         .max = MAX_DERIVED,
         .fn = derived_flag,
         .arg = derived,
         .def = "counter=rate,rate_short gauge=max,mean histogram=p50,p99",
         .help = "derived series on /metrics; KEY: counter, gauge, histogram or a metric name; "
                 "ITEMS: rate, rate_max, rate_short, resets, p50, p90, p99, p999, quantiles, "
                 "min, max, mean, last, changes, all, none (/api/v1/value serves them all)"},
        {.name = "no-analytics",
         .kind = MV_OPTS_FLAG,
         .dest = &no_analytics,
         .help = "raw values only: no derived series, no adaptation"},
        {.name = "no-detect",
         .kind = MV_OPTS_FLAG,
         .dest = &no_detect,
         .help = "no change detection (and no adaptation)"},
        {.name = "detect-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 60000,
         .dest = &detect_ms,
         .help = "change detection steps at most every N ms: counter rates over the step, gauge "
                 "values at it, histogram means over it; 0: every read"},
        {.name = "quarantine-after-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 3600000,
         .dest = &quarantine_ms,
         .help = "quarantine segments invalid this long"},
        {.name = "max-body-bytes",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 4096,
         .hi = 1ull << 32,
         .dest = &body_cap,
         .help = "cap on a /metrics body: bytes, or with Ki, Mi, Gi"},
        {.name = "expo-cache-max-bytes",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 4096,
         .hi = 1ull << 40,
         .dest = &cache_cap,
         .def = "twice --max-body-bytes",
         .help = "memory the exposition cache may hold; past it, scrapes render uncached"},
        {.name = "http-max-conns",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 1000000,
         .dest = &max_conns,
         .help = "concurrent HTTP connections (the open-files limit is raised to fit)"},
        {.name = "http-max-conns-per-client",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 1000000,
         .dest = &max_conns_client,
         .help = "of which from one client address"},
        {.name = "http-idle-timeout-s",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 3600,
         .dest = &idle_s,
         .help = "close idle HTTP connections after N s"},
        {.name = "http-request-deadline-s",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 3600,
         .dest = &deadline_s,
         .help = "close a connection that has not sent a whole request N s after connecting or "
                 "after its last response, however slowly it sends; 0: idle timeout only"},
        {.name = "ui-max-streams",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 100000,
         .dest = &ui_streams,
         .help = "live view streams (/ui, /api/v1/stream) in all; 0: no live view"},
        {.name = "ui-max-streams-per-client",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 100000,
         .dest = &ui_per_client,
         .help = "of which from one client address"},
        {.name = "ui-max-series",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 100000,
         .dest = &ui_series,
         .help = "distinct series the live view watches at once"},
        {.name = "ui-ring-len",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 16,
         .hi = 1048576,
         .dest = &ui_ring,
         .help = "reads kept per watched series: the live view's history is N ticks"},
        {.name = "ui-max-ring-bytes",
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 4096,
         .hi = 1ull << 40,
         .dest = &ui_ring_bytes,
         .help = "memory of all the live view's rings"},
        {.name = "ui-max-lifetime-s",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 86400,
         .dest = &ui_lifetime_s,
         .help = "a live view stream ends after N s"},
        {.name = "native-schema",
         .kind = MV_OPTS_STRING,
         .meta = "S",
         .fn = native_schema_flag,
         .arg = &native_schema,
         .def = "auto",
         .help = "native histograms of the protobuf exposition: schema -4..8 (bucket growth "
                 "2^(2^-S)), off (classic buckets only) or auto (the coarsest schema no wider "
                 "than the sketch's buckets: 6 for --sketch-alpha 0.01; docs/exposition.md)"},
        {.name = "native-max-buckets",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 100000,
         .dest = &native_max,
         .help = "halve a native histogram's resolution while it has more than N buckets"},
        {.name = "native-gauge-histograms",
         .kind = MV_OPTS_FLAG,
         .dest = &native_gauges,
         .help = "also serve each gauge's window as a native gauge histogram "
                 "NAME_window_distribution in the protobuf exposition (schema of "
                 "--native-schema, auto when off; docs/exposition.md)"},
        {.name = "remote-write-url",
         .kind = MV_OPTS_STRING,
         .meta = "URL",
         .dest = &rw.url,
         .def = "",
         .help = "send every series by Prometheus remote write (http:// or https://) at its own "
                 "interval, whether or not anything scrapes"},
        {.name = "remote-write-interval-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 10,
         .hi = 3600000,
         .dest = &rw_interval,
         .help = "milliseconds between sends"},
        {.name = "remote-write-version",
         .kind = MV_OPTS_U64,
         .meta = "1|2",
         .lo = 1,
         .hi = 2,
         .dest = &rw_version,
         .help = "1: prometheus.WriteRequest; 2: io.prometheus.write.v2.Request, falling back "
                 "to 1 on a 415 or an answer without the written headers"},
        {.name = "remote-write-bearer-token-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rw.bearer_token_file,
         .help = "bearer token sent with each request (the file is re-read every minute)"},
        {.name = "remote-write-basic-user",
         .kind = MV_OPTS_STRING,
         .meta = "USER",
         .dest = &rw.basic_user,
         .help = "basic auth user (with --remote-write-basic-password-file)"},
        {.name = "remote-write-basic-password-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rw.basic_password_file,
         .help = "basic auth password"},
        {.name = "remote-write-ca-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rw.ca_file,
         .def = "the system's",
         .help = "CAs that verify an https receiver"},
        {.name = "remote-write-cert-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rw.cert_file,
         .help = "client certificate (PEM) for an https receiver"},
        {.name = "remote-write-key-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &rw.key_file,
         .help = "its private key"},
        {.name = "remote-write-insecure-skip-verify",
         .kind = MV_OPTS_FLAG,
         .dest = &rw_insecure,
         .help = "do not verify an https receiver (tests only)"},
        {.name = "remote-write-external-label",
         .kind = MV_OPTS_STRING,
         .meta = "NAME=VALUE",
         .max = MAX_EXTERNAL,
         .fn = external_label_flag,
         .arg = &ext,
         .help = "a label added to every series (a series' own label of that name wins)"},
        {.name = "remote-write-shards",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 64,
         .dest = &rw_shards,
         .help = "queues and senders; a series always goes to the same one, in order"},
        {.name = "remote-write-queue-samples",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 64,
         .hi = 1ull << 32,
         .dest = &rw_queue,
         .help = "samples held while the receiver is slow or down; beyond it the newest are "
                 "dropped and counted"},
        {.name = "remote-write-max-per-send",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 1000000,
         .dest = &rw_per_send,
         .help = "samples per request"},
        {.name = "remote-write-timeout-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 100,
         .hi = 600000,
         .dest = &rw_timeout,
         .help = "per request"},
        {.name = "remote-write-min-backoff-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 600000,
         .dest = &rw_min_backoff,
         .help = "first wait before a retry (5xx, 429, transport errors); doubles each time"},
        {.name = "remote-write-max-backoff-ms",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 600000,
         .dest = &rw_max_backoff,
         .help = "longest wait between retries (a Retry-After is honoured up to 5 minutes)"},
        {.name = "log-level",
         .kind = MV_OPTS_STRING,
         .meta = "LEVEL",
         .fn = log_level_flag,
         .arg = &level,
         .def = "info",
         .help = "debug, info, warn, error"},
        {0},
    };
    const mv_opts_spec spec = {.prog = P, .synopsis = "[options]", .opts = opts};
    int first, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first != argc) {
        mv_opts_usage(&spec, stderr);
        return 2;
    }

    /* The values into the collector's options. */
    co.tick_us = (uint32_t)(tick_ms * 1000);
    co.tick_workers = (uint32_t)workers;
    co.tick_poll = tick_poll;
    co.no_probe = no_probe;
    co.analytics = !no_analytics;
    co.pipe.detect = !no_detect;
    co.pipe.detect_period_ns = detect_ms * 1000000ull;
    co.pipe.window_ns = window_ms * 1000000ull;
    co.pipe.sketch_buckets = (uint32_t)buckets;
    co.window_aligned = align;
    co.quarantine_after_ms = (uint32_t)quarantine_ms;
    co.max_interval_us = (uint32_t)((max_interval_ms ? max_interval_ms : 1000) * 1000);
    hc.max_conns = (unsigned)max_conns;
    hc.max_conns_per_client = (unsigned)max_conns_client;
    hc.timeout_s = (unsigned)idle_s;
    hc.request_deadline_s = (unsigned)deadline_s;
    lo.max_streams = (unsigned)ui_streams;
    lo.max_streams_per_client = (unsigned)ui_per_client;
    lo.max_series = (unsigned)ui_series;
    lo.ring_len = (uint32_t)ui_ring;
    lo.max_ring_bytes = ui_ring_bytes;
    lo.max_lifetime_s = (unsigned)ui_lifetime_s;
    zo.timeout_ms = (int)auth_timeout_ms;
    zo.max_inflight = (unsigned)auth_inflight;
    mv_authz_mode auth_mode = MV_AUTHZ_NONE;
    mv_authz_mode_parse(auth_words[auth], &auth_mode);

    rw.interval_ms = (uint32_t)rw_interval;
    rw.version = (int)rw_version;
    rw.shards = (uint32_t)rw_shards;
    rw.queue_samples = rw_queue;
    rw.max_per_send = (uint32_t)rw_per_send;
    rw.timeout_ms = (uint32_t)rw_timeout;
    rw.min_backoff_ms = (uint32_t)rw_min_backoff;
    rw.max_backoff_ms = (uint32_t)rw_max_backoff;
    rw.insecure_skip_verify = rw_insecure;
    rw.external = ext.l;
    rw.nexternal = ext.n;
    if (rw.url && !*rw.url)
        rw.url = NULL;

    /* Checks between flags. */
    mv_log_init("collector", level);
    if (rw.url && mv_rw_config_check(&rw)) {
        fprintf(stderr, P ": %s\n", mv_rw_config_check(&rw));
        return 2;
    }
    if (!rw.url && (ext.n || rw.bearer_token_file || rw.basic_user)) {
        fprintf(stderr, P ": --remote-write-* flags need --remote-write-url\n");
        return 2;
    }
    if (co.analytics && mv_pipe_config_check(&co.pipe)) {
        fprintf(stderr, P ": %s\n", mv_pipe_config_check(&co.pipe));
        return 2;
    }
    /* TLS to agents' TCP listeners */
    if (agent_tls.ca_file || agent_tls.cert_file || agent_tls.key_file || agent_tls.server_name) {
        char err[MV_ERR_MAX];
        if (mv_agentc_set_tls(&agent_tls, err, sizeof err) < 0) {
            fprintf(stderr, P ": --agent-ca/--agent-cert/--agent-key: %s\n", err);
            return 2;
        }
    }
    if (max_interval_ms && co.max_interval_us < co.tick_us) {
        fprintf(stderr, P ": --max-interval-ms must be >= --tick-ms\n");
        return 2;
    }
    if (co.max_interval_us < co.tick_us || !co.pipe.detect)
        co.max_interval_us = 0; /* read every segment every tick */
    /* --transport verbs: remote agents over TCP + RDMA, instead of a local agent. */
    int verbs = strcmp(transport, "verbs") == 0;
    char rdma_token[MV_RDMA_TOKEN_MAX + 1] = "";
    if (!verbs && strcmp(transport, "shm") != 0) {
        fprintf(stderr, P ": transport '%s' is not available (shm or verbs)\n", transport);
        return 2;
    }
    if (!verbs && ag.nagents > 1) {
        fprintf(stderr, P ": several --agent need --transport verbs\n");
        return 2;
    }
    if (verbs) {
        char err[MV_ERR_MAX];
        if (ag.nagents == 0 || !rdma_token_file) {
            fprintf(stderr, P ": --transport verbs needs --agent IP:PORT "
                              "(repeatable) and --rdma-token-file\n");
            return 2;
        }
        if (mv_rdmatoken_load(rdma_token_file, rdma_token, sizeof rdma_token, err, sizeof err)) {
            fprintf(stderr, P ": --rdma-token-file: %s\n", err);
            return 2;
        }
        ag.agent = NULL; /* the verbs agents replace the shm catalog watch */
    }

    char host[256], err[MV_ERR_MAX];
    uint16_t port = 0; /* --listen was checked by the same parser */
    if (mv_util_parse_listen(listen, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, host, sizeof host,
                             &port, err, sizeof err) < 0) {
        fprintf(stderr, P ": --listen: %s\n", err);
        return 2;
    }

    /* auto: native buckets no wider than the sketch's (docs/exposition.md) */
    int32_t auto_schema = mv_expo_nh_schema_for_gamma((1 + co.pipe.alpha) / (1 - co.pipe.alpha));
    if (native_schema == NATIVE_AUTO)
        native_schema = auto_schema;
    rw.native_set = 1; /* remote write 2.0's native histograms: the same schema */
    rw.native_schema = native_schema == MV_EXPO_NH_OFF ? auto_schema : native_schema;
    /* The gauge windows' native buckets, built at each window's close (docs/exposition.md). */
    co.pipe.native_schema = native_gauges ? rw.native_schema : MV_PIPE_NATIVE_OFF;
    mv_collector_opts o = {.coll = co,
                           .agent = ag.agent,
                           .verbs = verbs,
                           .agents = ag.agents,
                           .nagents = ag.nagents,
                           .rdma_token = rdma_token,
                           .rdma_port = (uint16_t)rdma_port,
                           .rdma_src_ip = rdma_src_ip,
                           .statics = (char *const *)seg.items,
                           .nstatic = seg.n,
                           .listen = listen,
                           .listen_host = host,
                           .listen_port = port,
                           .http = hc,
                           .auth = auth_mode,
                           .authz = zo,
                           .body_cap = body_cap,
                           .cache_cap = cache_cap,
                           .derived = derived,
                           .live = lo,
                           .native_set = 1,
                           .native_schema = native_schema,
                           .native_max_buckets = (uint32_t)native_max,
                           .rw = rw};
    return mv_collector_run(&o);
}

int main(int argc, char **argv)
{
    mv_export_sel *derived = mv_export_sel_create(); /* run() borrows it */
    if (!derived) {
        fprintf(stderr, P ": out of memory\n");
        return 1;
    }
    int rc = run(argc, argv, derived);
    mv_export_sel_destroy(derived);
    return rc;
}
