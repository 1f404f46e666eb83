/* microviewctl's agent-facing commands (list, segment leases for gen). */
#ifndef MV_CTL_H
#define MV_CTL_H

#include <stddef.h>
#include <stdint.h>

#define MV_CTL_DEFAULT_AGENT "unix:/run/microview/agent.sock"
#define MV_CTL_MAX_LABELS    16

/* --label KEY=VALUE of create and gen: pairs of strings, argv's own cut at '='. */
typedef struct {
    const char *kv[2 * MV_CTL_MAX_LABELS];
    size_t n;
} mv_ctl_labels;
/* An mv_opts callback: takes one --label into an mv_ctl_labels (`arg`). */
int mv_ctl_label_flag(void *arg, const char *value, char *err, size_t errlen);

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
/* `microviewctl top`: polls a collector until *stop (or once with --once). */
int mv_ctl_top(int argc, char **argv, const volatile int *stop);

#endif
