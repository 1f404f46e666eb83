/* mv_ctl_local: the microviewctl commands that work on a segment file directly: dump (decode
 * one) and gen (a synthetic workload; with --agent it leases its segment through
 * mv_ctl_agent.c, the layer below). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "microview.h"
#include "mv_ctl.h"
#include "mv_inspect.h"
#include "mv_log.h"
#include "mv_util.h"
#include "mv_workload.h"

int mv_ctl_dump(int argc, char **argv, mv_ctl_usage_fn *usage)
{
    int json = 0, opt;
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    if (mv_util_opts_exact("microviewctl", argc, argv, opts) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
        if (opt == 'j')
            json = 1;
        else {
            usage(opt == 'h' ? stdout : stderr);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "microviewctl dump: give exactly one segment path\n");
        return 2;
    }
    const char *path = argv[optind];
    char errbuf[MV_ERR_MAX];
    void *buf;
    size_t len;
    if (mv_inspect_load(path, &buf, &len, errbuf, sizeof errbuf) != 0) {
        fprintf(stderr, "microviewctl: %s\n", errbuf);
        return 1;
    }
    mv_seg_error err = {0};
    mv_seg_reason r = mv_inspect_print(stdout, path, buf, len, json, &err);
    free(buf);
    if (r != MV_SEG_OK) {
        fprintf(stderr, "microviewctl: %s: rejected: %s: %s\n", path, mv_seg_reason_name(r),
                err.detail);
        return 2;
    }
    return 0;
}

static int parse_d(const char *s, const char *what, double *out)
{
    return mv_util_flag_number("microviewctl", what, s, 0, 1e9, out);
}

int mv_ctl_gen(int argc, char **argv, mv_ctl_usage_fn *usage, const volatile int *stop)
{
    const char *agent = NULL, *segpath = NULL;
    uint64_t size = 65536, v;
    mv_workload_opts wo = {.counters = 4, .gauges = 2, .histograms = 1, .rate_hz = 100};
    const char *labels[2 * 16];
    size_t nlabels = 0;
    int opt;
    static const struct option opts[] = {{"agent", required_argument, 0, 'a'},
                                         {"segment", required_argument, 0, 's'},
                                         {"size", required_argument, 0, 'S'},
                                         {"counters", required_argument, 0, 'c'},
                                         {"gauges", required_argument, 0, 'g'},
                                         {"histograms", required_argument, 0, 'H'},
                                         {"rate", required_argument, 0, 'r'},
                                         {"duration", required_argument, 0, 'd'},
                                         {"label", required_argument, 0, 'l'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    if (mv_util_opts_exact("microviewctl", argc, argv, opts) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "a:s:S:c:g:H:r:d:l:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'a':
            agent = optarg;
            break;
        case 's':
            segpath = optarg;
            break;
        case 'S':
            if (mv_util_flag_size("microviewctl", "--size", optarg, 0, 1ull << 30, &size))
                return 2;
            break;
        case 'c':
            if (mv_util_flag_u64("microviewctl", "--counters", optarg, 0, 10000, &v))
                return 2;
            wo.counters = (unsigned)v;
            break;
        case 'g':
            if (mv_util_flag_u64("microviewctl", "--gauges", optarg, 0, 10000, &v))
                return 2;
            wo.gauges = (unsigned)v;
            break;
        case 'H':
            if (mv_util_flag_u64("microviewctl", "--histograms", optarg, 0, 1000, &v))
                return 2;
            wo.histograms = (unsigned)v;
            break;
        case 'r':
            if (parse_d(optarg, "--rate", &wo.rate_hz))
                return 2;
            break;
        case 'd':
            if (parse_d(optarg, "--duration", &wo.duration_s))
                return 2;
            break;
        case 'l': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || nlabels >= 16) {
                fprintf(stderr, "microviewctl: --label takes KEY=VALUE (at most 16)\n");
                return 2;
            }
            *eq = '\0';
            labels[2 * nlabels] = optarg;
            labels[2 * nlabels + 1] = eq + 1;
            nlabels++;
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || (agent && segpath)) {
        fprintf(stderr, "microviewctl gen: use either --agent or --segment\n");
        return 2;
    }
    mv_ctl_lease lease = {0};
    if (!segpath) {
        if (mv_ctl_lease_segment(agent ? agent : MV_CTL_DEFAULT_AGENT, size, labels, nlabels,
                                 &lease) != 0)
            return 1;
        segpath = lease.path;
    }
    mv_segment *seg;
    int rc = mv_open(segpath, &seg);
    if (rc != MV_OK) {
        MV_ERROR("gen.open_failed", "segment=%s error=%s detail=%s", mv_log_q(segpath),
                 mv_log_q(mv_strerror(rc)), mv_log_q(mv_errdetail()));
        mv_ctl_lease_release(&lease);
        return 1;
    }
    mv_workload *w;
    rc = mv_workload_create(seg, &wo, &w);
    if (rc != MV_OK) {
        MV_ERROR("gen.register_failed", "segment=%s error=%s detail=%s", mv_log_q(segpath),
                 mv_log_q(mv_strerror(rc)), mv_log_q(mv_errdetail()));
        mv_close(seg);
        mv_ctl_lease_release(&lease);
        return 1;
    }
    MV_INFO("gen.started", "segment=%s counters=%u gauges=%u histograms=%u rate_hz=%g",
            mv_log_q(segpath), wo.counters, wo.gauges, wo.histograms, wo.rate_hz);
    uint64_t steps = mv_workload_run(w, stop);
    MV_INFO("gen.stopped", "segment=%s steps=%llu", mv_log_q(segpath), (unsigned long long)steps);
    mv_workload_destroy(w);
    mv_close(seg);
    mv_ctl_lease_release(&lease);
    return 0;
}
