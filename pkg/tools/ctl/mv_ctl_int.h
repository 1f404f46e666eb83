/* mv_ctl internals shared by the module's files: the --label flag of create (mv_ctl_agent.c)
 * and gen (mv_ctl_local.c, above it). */
#ifndef MV_CTL_INT_H
#define MV_CTL_INT_H

#include <stddef.h>

#define MV_CTL_MAX_LABELS 16

/* --label KEY=VALUE: pairs of strings, argv's own cut at '='. */
typedef struct {
    const char *kv[2 * MV_CTL_MAX_LABELS];
    size_t n;
} mv_ctl__labels;

/* An mv_opts callback: takes one --label into an mv_ctl__labels (`arg`); refuses a value
 * without KEY= or past 16 with "microviewctl: --label takes KEY=VALUE (at most 16)". */
int mv_ctl__label_flag(void *arg, const char *value, char *err, size_t errlen);

#endif
