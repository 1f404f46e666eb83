/* microview-scaler: KEDA's external scaler (externalscaler.ExternalScaler over gRPC) reading
 * the node collectors directly. The option table, its defaults from the pod's service account,
 * and the checks; the service itself runs in mv_scsvc_run (pkg/scaler/service). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_opts.h"
#include "mv_scsvc.h"
#include "mv_util.h"

#define P      "microview-scaler"
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static int fail_flag(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, P ": %s %s: %s\n", flag, value ? value : "", why);
    fprintf(stderr, "run " P " --help for the flags\n");
    return 2;
}

/* The pod's namespace from the service account, or NULL. */
static const char *pod_namespace(char *buf, size_t len)
{
    int fd = open(SA_DIR "/namespace", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return n ? buf : NULL;
}

int main(int argc, char **argv)
{
    mv_scsvc_config c;
    mv_scsvc_config_default(&c);
    const char *level = "info", *api = NULL, *token = NULL, *ca = NULL, *cns = NULL, *ctoken = NULL;
    c.collector_selector = "app.kubernetes.io/name=microview,app.kubernetes.io/component=collector";
    uint64_t port = c.collector_port, workers = c.workers, pending = c.max_pending,
             streams = c.max_streams, cache = c.cache_ms, ttl = c.discovery_ttl_ms,
             interval = c.stream_interval_ms;
    mv_opts_opt opts[] = {
        {.name = "listen",
         .kind = MV_OPTS_LISTEN,
         .meta = "[HOST]:PORT",
         .dest = &c.listen,
         .lo = MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO,
         .help = "gRPC address KEDA calls (scalerAddress). The host must be numeric; an empty "
                 "host means every address; port 0 takes any free port"},
        {.name = "tls-cert-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &c.tls_cert_file,
         .def = "",
         .help = "serving certificate (chain), PEM: TLS on the gRPC port (with --tls-key-file)"},
        {.name = "tls-key-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &c.tls_key_file,
         .def = "",
         .help = "its private key, PEM"},
        {.name = "tls-client-ca-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &c.tls_client_ca_file,
         .def = "",
         .help = "with TLS: a client certificate signed by this CA is required (KEDA's "
                 "tlsClientCert)"},
        {.name = "metrics-listen",
         .kind = MV_OPTS_LISTEN,
         .meta = "[HOST]:PORT",
         .dest = &c.metrics_listen,
         .lo = MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO,
         .help = "HTTP address of /metrics and /healthz"},
        {.name = "api-server",
         .kind = MV_OPTS_STRING,
         .meta = "URL",
         .dest = &api,
         .def = "in a pod, from $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT",
         .help = "the Kubernetes API server: pods of workloads and collectors, ScaledObjects "
                 "and scale subresources are read from it"},
        {.name = "api-token-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &token,
         .def = SA_DIR "/token",
         .help = "bearer token for the API server, re-read every 60 s"},
        {.name = "api-ca-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &ca,
         .def = SA_DIR "/ca.crt if present",
         .help = "CA of the API server"},
        {.name = "collector-namespace",
         .kind = MV_OPTS_STRING,
         .meta = "NAME",
         .dest = &cns,
         .def = "the pod's namespace (service account), else microview",
         .help = "namespace of the collector pods"},
        {.name = "collector-selector",
         .kind = MV_OPTS_STRING,
         .meta = "SELECTOR",
         .dest = &c.collector_selector,
         .help = "label selector of the collector pods (the chart's collector labels)"},
        {.name = "collector-port",
         .kind = MV_OPTS_U64,
         .meta = "PORT",
         .lo = 1,
         .hi = 65535,
         .dest = &port,
         .help = "the collectors' HTTP port (/api/v1/value)"},
        {.name = "collector-token-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &ctoken,
         .def = "the --api-token-file",
         .help = "bearer token sent to the collectors (for their --auth kubernetes), re-read "
                 "every 60 s"},
        {.name = "workers",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 256,
         .dest = &workers,
         .help = "threads evaluating calls (API server and collector requests)"},
        {.name = "max-pending",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 100000,
         .dest = &pending,
         .help = "calls waiting for an evaluation; one more is refused at once with "
                 "RESOURCE_EXHAUSTED"},
        {.name = "max-streams",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 1,
         .hi = 100000,
         .dest = &streams,
         .help = "StreamIsActive streams open at once; more are refused with RESOURCE_EXHAUSTED"},
        {.name = "cache-ms",
         .kind = MV_OPTS_U64,
         .meta = "MS",
         .lo = 0,
         .hi = 60000,
         .dest = &cache,
         .help = "calls for the same ScaledObject and metadata within this share one "
                 "evaluation's result (0: only calls during an evaluation share it)"},
        {.name = "discovery-ttl-ms",
         .kind = MV_OPTS_U64,
         .meta = "MS",
         .lo = 0,
         .hi = 3600000,
         .dest = &ttl,
         .help = "how long a workload's collectors and a scale target's selector are reused "
                 "before the API server is asked again"},
        {.name = "stream-interval-ms",
         .kind = MV_OPTS_U64,
         .meta = "MS",
         .lo = 10,
         .hi = 3600000,
         .dest = &interval,
         .help = "StreamIsActive: how often each stream is evaluated again (a change is sent "
                 "within one interval)"},
        {.name = "log-level",
         .kind = MV_OPTS_STRING,
         .meta = "LEVEL",
         .dest = &level,
         .help = "debug, info, warn or error"},
        {0},
    };
    const mv_opts_spec spec = {.prog = P,
                               .synopsis = "[options]",
                               .opts = opts,
                               .value_in_errors = 1,
                               .hint = "run " P " --help for the flags"};
    int first, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first < argc)
        return fail_flag("argument", argv[first], "unexpected; every setting is a --flag");
    mv_log_level lvl;
    if (mv_log_parse_level(level, &lvl) != 0)
        return fail_flag("--log-level", level, "want debug, info, warn or error");
    if (!c.tls_cert_file != !c.tls_key_file)
        return fail_flag(c.tls_cert_file ? "--tls-key-file" : "--tls-cert-file", "",
                         "required with the other: TLS needs a certificate and its key");
    if (c.tls_client_ca_file && !c.tls_cert_file)
        return fail_flag("--tls-client-ca-file", c.tls_client_ca_file,
                         "needs --tls-cert-file and --tls-key-file");
    char apibuf[300], nsbuf[128];
    if (!api) {
        const char *h = getenv("KUBERNETES_SERVICE_HOST"), *p = getenv("KUBERNETES_SERVICE_PORT");
        if (!h || !*h)
            return fail_flag("--api-server", "",
                             "required outside a pod (no $KUBERNETES_SERVICE_HOST)");
        snprintf(apibuf, sizeof apibuf, strchr(h, ':') ? "https://[%s]:%s" : "https://%s:%s", h,
                 p && *p ? p : "443");
        api = apibuf;
    }
    if (strncmp(api, "http://", 7) != 0 && strncmp(api, "https://", 8) != 0)
        return fail_flag("--api-server", api, "want an http:// or https:// URL");
    if (!token && access(SA_DIR "/token", R_OK) == 0)
        token = SA_DIR "/token";
    if (!ca && access(SA_DIR "/ca.crt", R_OK) == 0)
        ca = SA_DIR "/ca.crt";
    if (!cns)
        cns = pod_namespace(nsbuf, sizeof nsbuf);
    if (!cns)
        cns = "microview";
    c.api_server = api;
    c.api_token_file = token;
    c.api_ca_file = ca;
    c.collector_namespace = cns;
    c.collector_token_file = ctoken ? ctoken : token;
    c.collector_port = (unsigned)port;
    c.workers = (unsigned)workers;
    c.max_pending = (unsigned)pending;
    c.max_streams = (unsigned)streams;
    c.cache_ms = (unsigned)cache;
    c.discovery_ttl_ms = (unsigned)ttl;
    c.stream_interval_ms = (unsigned)interval;
    mv_log_init("scaler", lvl);
    return mv_scsvc_run(&c);
}
