/* mv_ctl_local: the microviewctl commands that work on a segment file directly: dump (decode
 * one) and gen (a synthetic workload; with --agent it leases its segment through
 * mv_ctl_agent.c, the layer below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "microview.h"
#include "mv_ctl.h"
#include "mv_ctl_int.h"
#include "mv_inspect.h"
#include "mv_log.h"
#include "mv_opts.h"
#include "mv_util.h"
#include "mv_workload.h"

int mv_ctl_dump(int argc, char **argv, mv_ctl_usage_fn *usage)
{
    (void)usage; /* --help is the table's */
    int json = 0;
    mv_opts_opt opts[] = {
        {.name = "json",
         .short_name = 'j',
         .kind = MV_OPTS_FLAG,
         .dest = &json,
         .help = "one JSON object instead of text"},
        {0},
    };
    const mv_opts_spec spec = {.prog = "microviewctl",
                               .synopsis = "dump [options] SEGMENT-PATH",
                               .intro = "Decodes a segment file (its catalog and values) with "
                                        "the validating reader; exit status 2 when the segment "
                                        "is refused.",
                               .opts = opts};
    int first, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first != argc - 1) {
        fprintf(stderr, "microviewctl dump: give exactly one segment path\n");
        return 2;
    }
    const char *path = argv[first];
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

int mv_ctl_gen(int argc, char **argv, mv_ctl_usage_fn *usage, const volatile int *stop)
{
    (void)usage; /* --help is the table's */
    const char *agent = NULL, *segpath = NULL;
    uint64_t size = 65536, counters = 4, gauges = 2, histograms = 1;
    mv_workload_opts wo = {.rate_hz = 100};
    mv_ctl__labels lf = {.n = 0};
    mv_opts_opt opts[] = {
        {.name = "agent",
         .short_name = 'a',
         .kind = MV_OPTS_STRING,
         .meta = "TARGET",
         .dest = &agent,
         .def = MV_CTL_DEFAULT_AGENT,
         .help = "ask this agent for the segment; it belongs to the user gen runs as, as for "
                 "create"},
        {.name = "segment",
         .short_name = 's',
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &segpath,
         .help = "write into this segment file instead (not with --agent)"},
        {.name = "size",
         .short_name = 'S',
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 0,
         .hi = 1ull << 30,
         .dest = &size,
         .help = "segment size asked of the agent"},
        {.name = "counters",
         .short_name = 'c',
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 10000,
         .dest = &counters,
         .help = "counters written"},
        {.name = "gauges",
         .short_name = 'g',
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 10000,
         .dest = &gauges,
         .help = "gauges written"},
        {.name = "histograms",
         .short_name = 'H',
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = 1000,
         .dest = &histograms,
         .help = "histograms written"},
        {.name = "rate",
         .short_name = 'r',
         .kind = MV_OPTS_NUMBER,
         .meta = "HZ",
         .dlo = 0,
         .dhi = 1e9,
         .dest = &wo.rate_hz,
         .help = "updates of every metric a second"},
        {.name = "duration",
         .short_name = 'd',
         .kind = MV_OPTS_NUMBER,
         .meta = "SECONDS",
         .dlo = 0,
         .dhi = 1e9,
         .dest = &wo.duration_s,
         .help = "how long to run (0: until Ctrl-C)"},
        {.name = "label",
         .short_name = 'l',
         .kind = MV_OPTS_STRING,
         .meta = "KEY=VALUE",
         .fn = mv_ctl__label_flag,
         .arg = &lf,
         .help = "an identity label asked of the agent (repeatable, at most 16)"},
        {0},
    };
    const mv_opts_spec spec = {
        .prog = "microviewctl",
        .synopsis = "gen [options]",
        .intro = "Runs a synthetic workload that writes metrics into a segment.",
        .outro = "gen writes nothing on stdout; on stderr one logfmt event a line (gen.started, "
                 "gen.stopped, gen.lease_failed, gen.open_failed, ...); a bad command line is "
                 "refused with one plain line and exit code 2, as for every command.",
        .opts = opts};
    int first, prc = mv_opts_parse(&spec, argc, argv, &first);
    if (prc)
        return mv_opts_status(prc);
    if (first != argc || (agent && segpath)) {
        fprintf(stderr, "microviewctl gen: use either --agent or --segment\n");
        return 2;
    }
    wo.counters = (unsigned)counters;
    wo.gauges = (unsigned)gauges;
    wo.histograms = (unsigned)histograms;
    const char *const *labels = lf.kv;
    size_t nlabels = lf.n;
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
