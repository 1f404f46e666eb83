/* microviewctl: operator CLI — list segments, dump one, run a synthetic workload. The usage
 * text and the dispatch to the commands of pkg/tools/ctl (mv_ctl.h). */
#include <errno.h>
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
            "usage: microviewctl <command> [options]    (microviewctl COMMAND --help: its flags)\n"
            "\n"
            "commands:\n"
            "  list      segments in the agent's catalog\n"
            "  dump      decode a segment file (catalog and values)\n"
            "  create    a segment kept until released, or until a process is gone\n"
            "  release   release a segment (the agent unlinks it)\n"
            "  top       live per-pod values, read rates and anomaly scores from a collector;\n"
            "            with --watch, one segment's every read as sparklines\n"
            "  gen       run a synthetic workload that writes metrics\n"
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
