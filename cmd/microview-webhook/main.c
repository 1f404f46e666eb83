/* microview-webhook: the mutating admission webhook that turns microview.io/metrics-memory into
 * requests and limits of microview.io/metrics, served over HTTPS. The option table and its
 * checks; the webhook itself runs in mv_wh_run (pkg/webhook). */
#include <stdio.h>
#include <string.h>

#include "mv_config.h"
#include "mv_log.h"
#include "mv_opts.h"
#include "mv_util.h"
#include "mv_webhook.h"

#define P "microview-webhook"

static int fail_flag(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, P ": %s %s: %s\n", flag, value ? value : "", why);
    fprintf(stderr, "run " P " --help for the flags\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *listen = ":8443", *cert = NULL, *key = NULL, *page = NULL, *res = NULL,
               *level = NULL, *config = NULL;
    uint64_t maxp = 0;
    mv_opts_opt opts[] = {
        {.name = "listen",
         .kind = MV_OPTS_LISTEN,
         .meta = "[HOST]:PORT",
         .dest = &listen,
         .lo = MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO,
         .help = "HTTPS address. The host must be numeric (127.0.0.1:8443, [::1]:8443); an "
                 "empty host means every address (IPv6 and IPv4, or IPv4 alone on hosts without "
                 "IPv6); port 0 takes any free port"},
        {.name = "tls-cert-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &cert,
         .help = "serving certificate (chain), PEM; reloaded on change. Required"},
        {.name = "tls-key-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &key,
         .help = "its private key, PEM; reloaded on change. Required"},
        {.name = "page-size",
         .kind = MV_OPTS_STRING,
         .meta = "SIZE",
         .dest = &page,
         .key = "page_size",
         .def = "4Ki",
         .help = "bytes per page, as the agent's page_size (the same parser): a multiple of "
                 "4096, bytes or with Ki, Mi, Gi (decimal 4k is refused). It must equal the "
                 "agent's value, or pods get the wrong amount of memory"},
        {.name = "max-pages-per-pod",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .dest = &maxp,
         .lo = 1,
         .hi = 100000000,
         .def = "pool_size / page_size, 4096",
         .help = "pages one pod may hold in total; by default one node's pool: a pod asking "
                 "for more could never be scheduled"},
        {.name = "resource-name",
         .kind = MV_OPTS_STRING,
         .meta = "NAME",
         .dest = &res,
         .key = "resource_name",
         .def = "microview.io/metrics",
         .help = "the extended resource (the agent's resource_name)"},
        {.name = "log-level",
         .kind = MV_OPTS_STRING,
         .meta = "LEVEL",
         .dest = &level,
         .key = "log_level",
         .def = "info",
         .help = "debug, info, warn or error"},
        {.name = "config",
         .kind = MV_OPTS_STRING,
         .meta = "FILE",
         .dest = &config,
         .help = "the agent's YAML configuration (e.g. the same ConfigMap): page_size, "
                 "pool_size, resource_name and log_level are read from it and checked as the "
                 "agent checks them; flags win"},
        {0},
    };
    const mv_opts_spec spec = {.prog = P,
                               .synopsis = "--tls-cert-file PEM --tls-key-file PEM [options]",
                               .opts = opts,
                               .value_in_errors = 1,
                               .hint = "run " P " --help for the flags"};
    int first, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first < argc)
        return fail_flag("argument", argv[first], "unexpected; every setting is a --flag");

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
    sc.review.max_pages_per_pod = maxp ? maxp : ac.pool_size / ac.page_size;
    if (strlen(ac.resource_name) > MV_WH_RESOURCE_MAX)
        return fail_flag("--resource-name", ac.resource_name, "longer than 253 bytes");
    memcpy(sc.review.resource_name, ac.resource_name, strlen(ac.resource_name) + 1);
    if (mv_wh_config_check(&sc.review, err, sizeof err) != 0)
        return fail_flag("--page-size/--max-pages-per-pod/--resource-name", "", err);
    if (!cert || !key)
        return fail_flag(cert ? "--tls-key-file" : "--tls-cert-file", "",
                         "required: the API server calls webhooks over HTTPS only");

    mv_log_init("webhook", lvl);
    sc.listen = listen;
    sc.cert_file = cert;
    sc.key_file = key;
    return mv_wh_run(&sc);
}
