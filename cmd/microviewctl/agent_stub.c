/* Stand-in for agent commands until the agent client is linked. */
#include <stdio.h>
#include "ctl.h"
int mv_ctl_lease_segment(const char *target, uint64_t size, const char *const *label_kv,
                         size_t nlabels, mv_ctl_lease *out)
{
    (void)size;
    (void)label_kv;
    (void)nlabels;
    (void)out;
    fprintf(stderr, "microviewctl: agent client not built (%s)\n", target);
    return -1;
}
void mv_ctl_lease_release(mv_ctl_lease *l)
{
    (void)l;
}
int mv_ctl_list(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return 2;
}
