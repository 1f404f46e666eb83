/* microviewctl: operator CLI — list segments, dump one, run a synthetic workload. The usage
 * text and the dispatch to the commands of pkg/tools/ctl (mv_ctl.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mv_ctl.h"
#include "mv_log.h"

static volatile int g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: microviewctl <command> [options]\n"
            "\n"
            "commands:\n"
            "  list  [--agent TARGET] [--json]     segments in the agent's catalog\n"
            "  dump  [--json] <segment-path>       decode a segment (catalog and values)\n"
            "  create [--agent T] [--size SIZE] [--label K=V]   a segment kept until released\n"
            "         [--owner-pid PID]            ... or until process PID is gone\n"
            "         [--owner-uid UID] [--owner-gid GID]\n"
            "                                      who the segment file belongs to (mode 0660);\n"
            "                                      default: the user and group microviewctl runs\n"
            "                                      as (root keeps root:root). Only a root caller\n"
            "                                      may name another user or group: else the\n"
            "                                      agent refuses (PERMISSION_DENIED, naming\n"
            "                                      owner_uid or owner_gid)\n"
            "  release [--agent T] <id>            release a segment (the agent unlinks it)\n"
            "  top   [--collector URL] [--once]    live per-pod values, read rates and anomaly\n"
            "        [--interval S] [--limit N]    scores from a collector (default\n"
            "                                      http://127.0.0.1:9469, refresh 1 s)\n"
            "  gen   [options]                     run a synthetic workload that writes metrics\n"
            "        --agent TARGET | --segment PATH   where the segment comes from\n"
            "        --size SIZE (64Ki)  --counters N (4)  --gauges N (2)  --histograms N (1)\n"
            "        --rate HZ (100)  --duration SECONDS (0 = until Ctrl-C)\n"
            "        --label KEY=VALUE (repeatable; identity labels asked of the agent)\n"
            "        with --agent the segment belongs to the user gen runs as, as for create\n"
            "        writes nothing on stdout; on stderr one logfmt event a line (gen.started,\n"
            "        gen.stopped, gen.lease_failed, gen.open_failed, ...); a bad command line is\n"
            "        refused with one plain line and exit code 2, as for every command\n"
            "\n"
            "TARGET is a gRPC target, default " MV_CTL_DEFAULT_AGENT "; an agent's TCP\n"
            "control plane (host:port) also needs --token-file F (list, create, release), and\n"
            "its callers may not name an owner: the agent knows who calls only on its unix\n"
            "socket, which a non-root user can use when the socket file is writable for it.\n"
            "SIZE is bytes, or a whole number with Ki, Mi or Gi (64Ki = 65536).\n");
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    mv_log_init("microviewctl", MV_LOG_INFO);
    const char *lvl = getenv("MICROVIEW_LOG_LEVEL");
    mv_log_level l;
    if (lvl && mv_log_parse_level(lvl, &l) == 0)
        mv_log_init("microviewctl", l);

    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argv[1] = argv[0];
    argc--;
    argv++;
    if (strcmp(cmd, "dump") == 0)
        return mv_ctl_dump(argc, argv, usage);
    if (strcmp(cmd, "gen") == 0)
        return mv_ctl_gen(argc, argv, usage, &g_stop);
    if (strcmp(cmd, "list") == 0)
        return mv_ctl_list(argc, argv);
    if (strcmp(cmd, "create") == 0)
        return mv_ctl_create(argc, argv);
    if (strcmp(cmd, "release") == 0)
        return mv_ctl_release(argc, argv);
    if (strcmp(cmd, "top") == 0)
        return mv_ctl_top(argc, argv, &g_stop);
    fprintf(stderr, "microviewctl: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
