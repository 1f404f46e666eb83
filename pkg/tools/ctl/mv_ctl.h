/* mv_ctl: microviewctl's commands, each taking its own argv (argv[0] = the program): the agent's
 * (list, create, release, and gen's segment lease: mv_ctl_agent.c), a segment file's (dump, gen:
 * mv_ctl_local.c) and a collector's (top: mv_ctl_top.c). cmd/microviewctl holds the usage text
 * and the dispatch. Each returns the process exit status: 0, 1 (failed), 2 (bad command line). */
#ifndef MV_CTL_H
#define MV_CTL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define MV_CTL_DEFAULT_AGENT "unix:/run/microview/agent.sock"

typedef struct mv_ctl_lease {
    char *id;
    char *path;
    void *client;
} mv_ctl_lease;

/* Asks the agent for a segment owned by this process. Logs the reason on
 * failure (event gen.lease_failed) and returns -1. */
int mv_ctl_lease_segment(const char *target, uint64_t size, const char *const *label_kv,
                         size_t nlabels, mv_ctl_lease *out);
/* Releases a lease (no-op on a zeroed lease); a failure is logged (gen.release_failed). */
void mv_ctl_lease_release(mv_ctl_lease *l);
/* `microviewctl list`, `create`, `release` */
int mv_ctl_list(int argc, char **argv);
int mv_ctl_create(int argc, char **argv);
int mv_ctl_release(int argc, char **argv);
/* Prints microviewctl's usage. Each command's flags are its own option table (mv_opts), which
 * gives its --help; the usage is kept in the signatures for callers of dump and gen. */
typedef void mv_ctl_usage_fn(FILE *f);
/* `microviewctl dump`, `gen` (runs until *stop, or --duration). */
int mv_ctl_dump(int argc, char **argv, mv_ctl_usage_fn *usage);
int mv_ctl_gen(int argc, char **argv, mv_ctl_usage_fn *usage, const volatile int *stop);
/* `microviewctl top`: polls a collector until *stop (or once with --once). */
int mv_ctl_top(int argc, char **argv, const volatile int *stop);
/* `microviewctl top --watch`: the live view's stream of one segment's metrics (indexes
 * "0,1,2") as sparklines, until *stop, the stream's end or `seconds` (0: none). */
int mv_ctl_top_watch(const char *base, const char *seg, const char *metrics, unsigned width,
                     unsigned window_ms, const char *token, double seconds, int tty,
                     const volatile int *stop);

#endif
