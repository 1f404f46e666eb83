/* microview-collector: read segments every tick, validate, serve /metrics. The flags and
 * their checks; the collector itself runs in mv_collector_run (pkg/collector/daemon). */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_agentc.h"
#include "mv_collector.h"
#include "mv_expo.h"
#include "mv_log.h"
#include "mv_rdma.h"
#include "mv_util.h"

#define DEFAULT_AGENT "unix:/run/microview/agent.sock"
#define MAX_STATIC    256
#define MAX_AGENTS    64
#define RDMA_PORT     7471 /* the agent's default --rdma-listen port */
#define P             "microview-collector"
#define NATIVE_AUTO   INT32_MAX /* --native-schema auto */
#define MAX_EXTERNAL  32

static void usage(FILE *f)
{
    fprintf(
        f, "usage: microview-collector [options]\n"
           "  --transport shm|verbs    how segments are read (shm: same host, default;\n"
           "                           verbs: RDMA READ from remote agents)\n"
           "  --agent TARGET           follow this agent's catalog (default " DEFAULT_AGENT ");\n"
           "                           with verbs: IP:PORT of an agent's --listen, repeatable\n"
           "  --rdma-token-file PATH   verbs: the agents' shared token (their --token-file)\n"
           "  --rdma-port N            verbs: the agents' rdma_cm port (default 7471)\n"
           "  --rdma-src-ip IP         verbs: local address for RDMA (default: routed)\n"
           "  --agent-ca PATH          TLS to agents on TCP (their --tls-cert): the CA that\n"
           "                           signed their certificates (PEM); without it, plaintext\n"
           "  --agent-cert PATH        client certificate for agents with --tls-client-ca\n"
           "  --agent-key PATH         its private key\n"
           "  --agent-server-name NAME name the agents' certificates carry (default: the\n"
           "                           host of --agent)\n"
           "  --no-agent               do not follow an agent (use --segment only)\n"
           "  --segment PATH[,k=v...]  also read this segment file, with identity labels\n"
           "  --listen [HOST]:PORT     HTTP address for /metrics (default 127.0.0.1:9469:\n"
           "                           this host only); a numeric HOST, IPv6 as [ADDR]:PORT,\n"
           "                           none = 0.0.0.0. Other addresses serve every tenant's\n"
           "                           metrics to whoever reaches them: use --auth kubernetes\n"
           "  --auth none|kubernetes   who may read /metrics, /api/v1/value, /debug/*\n"
           "                           (default none: whoever reaches --listen); kubernetes:\n"
           "                           a bearer token the API server accepts (TokenReview)\n"
           "                           whose identity may get the path (SubjectAccessReview\n"
           "                           on the non-resource URL); /healthz and / stay open\n"
           "  --kube-api-server URL    kubernetes: the API server (default in a pod: https://\n"
           "                           $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)\n"
           "  --kube-token-file PATH   kubernetes: the collector's own token, re-read every\n"
           "                           60 s (default " MV_AUTHZ_IN_CLUSTER_DIR "/token)\n"
           "  --kube-ca-file PATH      kubernetes: CA of the API server (default\n"
           "                           " MV_AUTHZ_IN_CLUSTER_DIR "/ca.crt if present)\n"
           "  --auth-timeout-ms N      kubernetes: limit of one API call (100..30000, default\n"
           "                           2000); a request waits at most twice this\n"
           "  --auth-max-inflight N    kubernetes: reviews waiting at once (1..7, default 4);\n"
           "                           more are answered 503 at once. A review holds one of\n"
           "                           the HTTP threads (8 with --auth kubernetes), so the\n"
           "                           rest keep serving cached decisions and /healthz\n"
           "  --tick-ms N              fast read interval: the tick, in ms (1..60000, default 10)\n"
           "  --tick-workers N         threads sharing each tick's segments (1..64, default 1;\n"
           "                           one per core the collector may use at a 1 ms tick)\n"
           "  --tick-poll              idle tick workers poll for the next tick instead of\n"
           "                           sleeping (each keeps a core busy): for cores of the\n"
           "                           collector's own, which can wake late from sleep on VMs\n"
           "  --max-interval-ms N      slowest adaptive read interval of a calm segment\n"
           "                           (default 1000; equal to --tick-ms: no adaptation)\n"
           "  --no-probe               do not probe backed-off same-host segments every tick\n"
           "                           (a write then waits for the segment's interval)\n"
           "  --window-ms N            export window of the derived series (default 15000)\n"
           "  --window-align MODE      segment (default): each segment's windows start at its\n"
           "                           own offset, so their closes spread over the window;\n"
           "                           wall: every window starts at a multiple of --window-ms\n"
           "  --sketch-alpha A         relative accuracy of window quantiles, 0.0001..0.5 (default "
           "0.01)\n"
           "  --sketch-buckets N       sketch key budget per sign, bounds memory (default 1536:\n"
           "                           1 ns .. 1 h at 1%%; pages of 16 keys are taken on use)\n"
           "  --derived KEY=ITEMS      derived series on /metrics (repeatable); KEY: counter,\n"
           "                           gauge, histogram or a metric name; ITEMS: rate,\n"
           "                           rate_max, rate_short, resets, p50, p90, p99, p999,\n"
           "                           quantiles, min, max, mean, last, changes, all, none\n"
           "                           (default counter=rate,rate_short gauge=max,mean\n"
           "                           histogram=p50,p99; /api/v1/value serves them all)\n"
           "  --no-analytics           raw values only: no derived series, no adaptation\n"
           "  --no-detect              no change detection (and no adaptation)\n"
           "  --detect-ms N            change detection steps at most every N ms: counter\n"
           "                           rates over the step, gauge values at it, histogram\n"
           "                           means over it (0..60000, default 10; 0: every read)\n"
           "  --quarantine-after-ms N  quarantine segments invalid this long (default 1000)\n"
           "  --max-body-bytes SIZE    cap on a /metrics body: bytes, or with Ki, Mi, Gi\n"
           "                           (4Ki..4Gi, default 64Mi)\n"
           "  --expo-cache-max-bytes SIZE  memory the exposition cache may hold; past it,\n"
           "                           scrapes render uncached (default twice --max-body-bytes)\n"
           "  --http-max-conns N       concurrent HTTP connections (default 8192; the\n"
           "                           open-files limit is raised to fit)\n"
           "  --http-max-conns-per-client N  of which from one client address (default 64)\n"
           "  --http-idle-timeout-s N  close idle HTTP connections after N s (default 10)\n"
           "  --http-request-deadline-s N  close a connection that has not sent a whole\n"
           "                           request N s after connecting or after its last\n"
           "                           response, however slowly it sends (0..3600,\n"
           "                           default 10; 0: idle timeout only)\n"
           "  --native-schema S        native histograms of the protobuf exposition: schema\n"
           "                           -4..8 (bucket growth 2^(2^-S)), off (classic buckets\n"
           "                           only) or auto (default: the coarsest schema no wider\n"
           "                           than the sketch's buckets; 6 for --sketch-alpha 0.01)\n"
           "  --native-max-buckets N   halve a native histogram's resolution while it has\n"
           "                           more than N buckets (default 160)\n"
           "  --remote-write-url URL   send the series by Prometheus remote write (http or\n"
           "                           https; docs/exposition.md), every interval, whether\n"
           "                           or not anything scrapes\n"
           "  --remote-write-interval-ms N      default 1000\n"
           "  --remote-write-version 1|2        default 1; 2 falls back to 1 on a 415\n"
           "  --remote-write-bearer-token-file PATH   (re-read every minute)\n"
           "  --remote-write-basic-user U, --remote-write-basic-password-file PATH\n"
           "  --remote-write-ca-file PATH, --remote-write-cert-file PATH,\n"
           "  --remote-write-key-file PATH, --remote-write-insecure-skip-verify\n"
           "  --remote-write-external-label NAME=VALUE   (repeatable)\n"
           "  --remote-write-shards N (2)  --remote-write-queue-samples N (500000: samples\n"
           "                           held while the receiver is slow or down; beyond it\n"
           "                           the newest are dropped and counted)\n"
           "  --remote-write-max-per-send N (2000)  --remote-write-timeout-ms N (10000)\n"
           "  --remote-write-min-backoff-ms N (30)  --remote-write-max-backoff-ms N (5000)\n"
           "  --log-level LEVEL        debug, info, warn, error (default info)\n");
}

/* The flags, checked, then the collector; `derived` (empty, the default choice) receives the
 * --derived specs as they are parsed, so that a bad one is refused before anything starts. */
static int run(int argc, char **argv, mv_export_sel *derived)
{
    const char *agent = DEFAULT_AGENT, *listen = "127.0.0.1:9469", *transport = "shm";
    const char *agents[MAX_AGENTS], *rdma_token_file = NULL, *rdma_src_ip = NULL;
    size_t nagents = 0;
    uint64_t rdma_port = RDMA_PORT;
    char *statics[MAX_STATIC];
    size_t nstatic = 0;
    uint64_t v;
    mv_coll_opts co;
    mv_log_level level = MV_LOG_INFO;
    size_t body_cap = 64u << 20, cache_cap = 0;
    int32_t native_schema = NATIVE_AUTO;
    mv_rw_config rw;
    mv_rw_config_default(&rw);
    mv_rw_label ext[MAX_EXTERNAL];
    size_t next = 0;
    uint32_t native_max = 0;
    int opt;

    mv_coll_opts_default(&co);
    size_t nderived = 0;
    co.analytics = 1;
    co.max_interval_us = 1000000;
    int max_interval_set = 0;
    static const struct option opts[] = {
        {"transport", required_argument, 0, 't'},
        {"agent", required_argument, 0, 'a'},
        {"no-agent", no_argument, 0, 'N'},
        {"segment", required_argument, 0, 's'},
        {"listen", required_argument, 0, 'l'},
        {"tick-ms", required_argument, 0, 'T'},
        {"tick-workers", required_argument, 0, 'w'},
        {"tick-poll", no_argument, 0, 'Y'},
        {"quarantine-after-ms", required_argument, 0, 'Q'},
        {"max-body-bytes", required_argument, 0, 'B'},
        {"expo-cache-max-bytes", required_argument, 0, 'E'},
        {"log-level", required_argument, 0, 'L'},
        {"max-interval-ms", required_argument, 0, 'M'},
        {"window-ms", required_argument, 0, 'W'},
        {"window-align", required_argument, 0, 'G'},
        {"sketch-alpha", required_argument, 0, 'A'},
        {"sketch-buckets", required_argument, 0, 'K'},
        {"no-analytics", no_argument, 0, 'n'},
        {"derived", required_argument, 0, 'X'},
        {"no-detect", no_argument, 0, 'D'},
        {"detect-ms", required_argument, 0, 'd'},
        {"no-probe", no_argument, 0, 'O'},
        {"help", no_argument, 0, 'h'},
        {"rdma-token-file", required_argument, 0, 'R'},
        {"rdma-port", required_argument, 0, 'P'},
        {"rdma-src-ip", required_argument, 0, 'S'},
        {"http-max-conns", required_argument, 0, 'C'},
        {"http-max-conns-per-client", required_argument, 0, 'c'},
        {"http-idle-timeout-s", required_argument, 0, 'I'},
        {"http-request-deadline-s", required_argument, 0, 1000},
        /* TLS to agents' TCP listeners */
        {"agent-ca", required_argument, 0, 1001},
        {"agent-cert", required_argument, 0, 1002},
        {"agent-key", required_argument, 0, 1003},
        {"agent-server-name", required_argument, 0, 1004},
        {"auth", required_argument, 0, 'z'},
        {"kube-api-server", required_argument, 0, 'k'},
        {"kube-token-file", required_argument, 0, 'j'},
        {"kube-ca-file", required_argument, 0, 'J'},
        {"auth-timeout-ms", required_argument, 0, 'o'},
        {"auth-max-inflight", required_argument, 0, 'i'},
        {"native-schema", required_argument, 0, 1010},
        {"native-max-buckets", required_argument, 0, 1011},
        /* remote write */
        {"remote-write-url", required_argument, 0, 1020},
        {"remote-write-interval-ms", required_argument, 0, 1021},
        {"remote-write-version", required_argument, 0, 1022},
        {"remote-write-bearer-token-file", required_argument, 0, 1023},
        {"remote-write-basic-user", required_argument, 0, 1024},
        {"remote-write-basic-password-file", required_argument, 0, 1025},
        {"remote-write-ca-file", required_argument, 0, 1026},
        {"remote-write-cert-file", required_argument, 0, 1027},
        {"remote-write-key-file", required_argument, 0, 1028},
        {"remote-write-insecure-skip-verify", no_argument, 0, 1029},
        {"remote-write-external-label", required_argument, 0, 1030},
        {"remote-write-shards", required_argument, 0, 1031},
        {"remote-write-queue-samples", required_argument, 0, 1032},
        {"remote-write-max-per-send", required_argument, 0, 1033},
        {"remote-write-timeout-ms", required_argument, 0, 1034},
        {"remote-write-min-backoff-ms", required_argument, 0, 1035},
        {"remote-write-max-backoff-ms", required_argument, 0, 1036},
        {0, 0, 0, 0}};
    mv_agentc_tls agent_tls = {0};
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    mv_authz_mode auth = MV_AUTHZ_NONE;
    mv_authz_opts zo = {0};
    if (mv_opts_exact("microview-collector", argc, argv, opts) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 't':
            transport = optarg;
            break;
        case 'a':
            agent = optarg;
            if (nagents == MAX_AGENTS) {
                fprintf(stderr, "microview-collector: at most %d --agent\n", MAX_AGENTS);
                return 2;
            }
            agents[nagents++] = optarg;
            break;
        case 'R':
            rdma_token_file = optarg;
            break;
        case 'z':
            if (mv_authz_mode_parse(optarg, &auth) < 0) {
                fprintf(stderr, "microview-collector: --auth: '%s' is not none or kubernetes\n",
                        optarg);
                return 2;
            }
            break;
        case 'k':
            zo.api_server = optarg;
            break;
        case 'j':
            zo.token_file = optarg;
            break;
        case 'J':
            zo.ca_file = optarg;
            break;
        case 'o':
            if (mv_flag_u64(P, "--auth-timeout-ms", optarg, 100, 30000, &v))
                return 2;
            zo.timeout_ms = (int)v;
            break;
        case 'i':
            if (mv_flag_u64(P, "--auth-max-inflight", optarg, 1, MV_COLLECTOR_AUTH_HTTP_THREADS - 1,
                            &v))
                return 2;
            zo.max_inflight = (unsigned)v;
            break;
        case 'C':
            if (mv_flag_u64(P, "--http-max-conns", optarg, 1, 1000000, &v))
                return 2;
            hc.max_conns = (unsigned)v;
            break;
        case 'c':
            if (mv_flag_u64(P, "--http-max-conns-per-client", optarg, 1, 1000000, &v))
                return 2;
            hc.max_conns_per_client = (unsigned)v;
            break;
        case 'I':
            if (mv_flag_u64(P, "--http-idle-timeout-s", optarg, 1, 3600, &v))
                return 2;
            hc.timeout_s = (unsigned)v;
            break;
        case 1000:
            if (mv_flag_u64(P, "--http-request-deadline-s", optarg, 0, 3600, &v))
                return 2;
            hc.request_deadline_s = (unsigned)v;
            break;
        case 'P':
            if (mv_flag_u64(P, "--rdma-port", optarg, 1, 65535, &rdma_port))
                return 2;
            break;
        case 'S':
            rdma_src_ip = optarg;
            break;
        case 'N':
            agent = NULL;
            break;
        case 's':
            if (nstatic == MAX_STATIC) {
                fprintf(stderr, "microview-collector: at most %d --segment\n", MAX_STATIC);
                return 2;
            }
            statics[nstatic++] = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'T':
            if (mv_flag_u64(P, "--tick-ms", optarg, 1, 60000, &v))
                return 2;
            co.tick_us = (uint32_t)(v * 1000);
            break;
        case 'w':
            if (mv_flag_u64(P, "--tick-workers", optarg, 1, MV_COLL_MAX_TICK_WORKERS, &v))
                return 2;
            co.tick_workers = (uint32_t)v;
            break;
        case 'Y':
            co.tick_poll = 1;
            break;
        case 'Q':
            if (mv_flag_u64(P, "--quarantine-after-ms", optarg, 0, 3600000, &v))
                return 2;
            co.quarantine_after_ms = (uint32_t)v;
            break;
        case 'B':
            if (mv_flag_size(P, "--max-body-bytes", optarg, 4096, 1ull << 32, &v))
                return 2;
            body_cap = v;
            break;
        case 'E':
            if (mv_flag_size(P, "--expo-cache-max-bytes", optarg, 4096, 1ull << 40, &v))
                return 2;
            cache_cap = v;
            break;
        case 'M':
            if (mv_flag_u64(P, "--max-interval-ms", optarg, 1, 3600000, &v))
                return 2;
            co.max_interval_us = (uint32_t)(v * 1000);
            max_interval_set = 1;
            break;
        case 'W':
            if (mv_flag_u64(P, "--window-ms", optarg, 10, 86400000, &v))
                return 2;
            co.pipe.window_ns = (uint64_t)v * 1000000ull;
            break;
        case 'G':
            if (strcmp(optarg, "segment") == 0)
                co.window_aligned = 0;
            else if (strcmp(optarg, "wall") == 0)
                co.window_aligned = 1;
            else {
                fprintf(stderr,
                        "microview-collector: --window-align: '%s' is not segment or wall\n",
                        optarg);
                return 2;
            }
            break;
        case 'A':
            if (mv_flag_number(P, "--sketch-alpha", optarg, 1e-4, 0.5, &co.pipe.alpha))
                return 2;
            break;
        case 'K':
            if (mv_flag_u64(P, "--sketch-buckets", optarg, 16, 1u << 20, &v))
                return 2;
            co.pipe.sketch_buckets = (uint32_t)v;
            break;
        case 'n':
            co.analytics = 0;
            break;
        case 'X': {
            char err[256];
            if (nderived++ == 64) {
                fprintf(stderr, "microview-collector: at most 64 --derived\n");
                return 2;
            }
            int bad = mv_export_sel_add(derived, optarg, err, sizeof err);
            if (bad == -ENOMEM) {
                fprintf(stderr, "microview-collector: out of memory\n");
                return 1;
            }
            if (bad) {
                fprintf(stderr, "microview-collector: --derived: %s\n", err);
                return 2;
            }
            break;
        }
        case 'D':
            co.pipe.detect = 0;
            break;
        case 'd':
            if (mv_flag_u64(P, "--detect-ms", optarg, 0, 60000, &v))
                return 2;
            co.pipe.detect_period_ns = v * 1000000ull;
            break;
        case 'O':
            co.no_probe = 1;
            break;
        case 'L':
            if (mv_log_parse_level(optarg, &level)) {
                fprintf(stderr, "microview-collector: unknown log level %s\n", optarg);
                return 2;
            }
            break;
        /* TLS to agents' TCP listeners */
        case 1001:
            agent_tls.ca_file = optarg;
            break;
        case 1002:
            agent_tls.cert_file = optarg;
            break;
        case 1003:
            agent_tls.key_file = optarg;
            break;
        case 1004:
            agent_tls.server_name = optarg;
            break;
        case 1010:
            if (strcmp(optarg, "off") == 0) {
                native_schema = MV_EXPO_NH_OFF;
            } else if (strcmp(optarg, "auto") == 0) {
                native_schema = NATIVE_AUTO;
            } else {
                char *end;
                long sv = strtol(optarg, &end, 10);
                if (end == optarg || *end || sv < MV_EXPO_NH_SCHEMA_MIN ||
                    sv > MV_EXPO_NH_SCHEMA_MAX) {
                    fprintf(stderr,
                            "microview-collector: --native-schema: '%s' is not -4..8, auto or "
                            "off\n",
                            optarg);
                    return 2;
                }
                native_schema = (int32_t)sv;
            }
            break;
        case 1011:
            if (mv_flag_u64(P, "--native-max-buckets", optarg, 1, 100000, &v))
                return 2;
            native_max = (uint32_t)v;
            break;
        case 1020:
            rw.url = optarg;
            break;
        case 1021:
            if (mv_flag_u64(P, "--remote-write-interval-ms", optarg, 10, 3600000, &v))
                return 2;
            rw.interval_ms = (uint32_t)v;
            break;
        case 1022:
            if (mv_flag_u64(P, "--remote-write-version", optarg, 1, 2, &v))
                return 2;
            rw.version = (int)v;
            break;
        case 1023:
            rw.bearer_token_file = optarg;
            break;
        case 1024:
            rw.basic_user = optarg;
            break;
        case 1025:
            rw.basic_password_file = optarg;
            break;
        case 1026:
            rw.ca_file = optarg;
            break;
        case 1027:
            rw.cert_file = optarg;
            break;
        case 1028:
            rw.key_file = optarg;
            break;
        case 1029:
            rw.insecure_skip_verify = 1;
            break;
        case 1030: {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || next == MAX_EXTERNAL) {
                fprintf(stderr,
                        "microview-collector: --remote-write-external-label: want NAME=VALUE "
                        "(at most %d)\n",
                        MAX_EXTERNAL);
                return 2;
            }
            *eq = '\0';
            ext[next++] = (mv_rw_label){optarg, eq + 1};
            break;
        }
        case 1031:
            if (mv_flag_u64(P, "--remote-write-shards", optarg, 1, 64, &v))
                return 2;
            rw.shards = (uint32_t)v;
            break;
        case 1032:
            if (mv_flag_u64(P, "--remote-write-queue-samples", optarg, 64, 1ull << 32, &v))
                return 2;
            rw.queue_samples = v;
            break;
        case 1033:
            if (mv_flag_u64(P, "--remote-write-max-per-send", optarg, 1, 1000000, &v))
                return 2;
            rw.max_per_send = (uint32_t)v;
            break;
        case 1034:
            if (mv_flag_u64(P, "--remote-write-timeout-ms", optarg, 100, 600000, &v))
                return 2;
            rw.timeout_ms = (uint32_t)v;
            break;
        case 1035:
            if (mv_flag_u64(P, "--remote-write-min-backoff-ms", optarg, 1, 600000, &v))
                return 2;
            rw.min_backoff_ms = (uint32_t)v;
            break;
        case 1036:
            if (mv_flag_u64(P, "--remote-write-max-backoff-ms", optarg, 1, 600000, &v))
                return 2;
            rw.max_backoff_ms = (uint32_t)v;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    mv_log_init("collector", level);
    rw.external = ext;
    rw.nexternal = next;
    if (rw.url && mv_rw_config_check(&rw)) {
        fprintf(stderr, "microview-collector: %s\n", mv_rw_config_check(&rw));
        return 2;
    }
    if (!rw.url && (next || rw.bearer_token_file || rw.basic_user)) {
        fprintf(stderr, "microview-collector: --remote-write-* flags need --remote-write-url\n");
        return 2;
    }
    if (co.analytics && mv_pipe_config_check(&co.pipe)) {
        fprintf(stderr, "microview-collector: %s\n", mv_pipe_config_check(&co.pipe));
        return 2;
    }
    /* TLS to agents' TCP listeners */
    if (agent_tls.ca_file || agent_tls.cert_file || agent_tls.key_file || agent_tls.server_name) {
        char err[MV_ERR_MAX];
        if (mv_agentc_set_tls(&agent_tls, err, sizeof err) < 0) {
            fprintf(stderr, "microview-collector: --agent-ca/--agent-cert/--agent-key: %s\n", err);
            return 2;
        }
    }
    if (max_interval_set && co.max_interval_us < co.tick_us) {
        fprintf(stderr, "microview-collector: --max-interval-ms must be >= --tick-ms\n");
        return 2;
    }
    if (co.max_interval_us < co.tick_us || !co.pipe.detect)
        co.max_interval_us = 0; /* read every segment every tick */
    /* --transport verbs: remote agents over TCP + RDMA, instead of a local agent. */
    int verbs = strcmp(transport, "verbs") == 0;
    char rdma_token[MV_RDMA_TOKEN_MAX + 1] = "";
    if (!verbs && strcmp(transport, "shm") != 0) {
        fprintf(stderr, "microview-collector: transport '%s' is not available (shm or verbs)\n",
                transport);
        return 2;
    }
    if (!verbs && nagents > 1) {
        fprintf(stderr, "microview-collector: several --agent need --transport verbs\n");
        return 2;
    }
    if (verbs) {
        char err[MV_ERR_MAX];
        if (nagents == 0 || !rdma_token_file) {
            fprintf(stderr, "microview-collector: --transport verbs needs --agent IP:PORT "
                            "(repeatable) and --rdma-token-file\n");
            return 2;
        }
        if (mv_rdma_token_load(rdma_token_file, rdma_token, sizeof rdma_token, err, sizeof err)) {
            fprintf(stderr, "microview-collector: --rdma-token-file: %s\n", err);
            return 2;
        }
        agent = NULL; /* the verbs agents replace the shm catalog watch */
    }

    char host[256];
    uint16_t port = 0;
    {
        char err[MV_ERR_MAX];
        if (mv_parse_listen(listen, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, host, sizeof host,
                            &port, err, sizeof err) < 0) {
            fprintf(stderr, "microview-collector: --listen: %s\n", err);
            return 2;
        }
    }

    mv_collector_opts o = {.coll = co,
                           .agent = agent,
                           .verbs = verbs,
                           .agents = agents,
                           .nagents = nagents,
                           .rdma_token = rdma_token,
                           .rdma_port = (uint16_t)rdma_port,
                           .rdma_src_ip = rdma_src_ip,
                           .statics = statics,
                           .nstatic = nstatic,
                           .listen = listen,
                           .listen_host = host,
                           .listen_port = port,
                           .http = hc,
                           .auth = auth,
                           .authz = zo,
                           .body_cap = body_cap,
                           .cache_cap = cache_cap,
                           .derived = derived,
                           .native_set = 1,
                           /* auto: buckets no wider than the sketch's (docs/exposition.md) */
                           .native_schema = native_schema != NATIVE_AUTO
                                                ? native_schema
                                                : mv_expo_nh_schema_for_gamma((1 + co.pipe.alpha) /
                                                                              (1 - co.pipe.alpha)),
                           .native_max_buckets = native_max,
                           .rw = rw};
    return mv_collector_run(&o);
}

int main(int argc, char **argv)
{
    mv_export_sel *derived = mv_export_sel_create(); /* run() borrows it */
    if (!derived) {
        fprintf(stderr, "microview-collector: out of memory\n");
        return 1;
    }
    int rc = run(argc, argv, derived);
    mv_export_sel_destroy(derived);
    return rc;
}
