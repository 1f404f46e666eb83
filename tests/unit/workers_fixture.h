/* workers_fixture: what the tick-worker tests share: a fleet of segment files written with
 * libmicroview (a counter and a gauge each, some with a histogram), added to a collector, and
 * checks that every segment was published with one round's exact values. */
#ifndef WORKERS_FIXTURE_H
#define WORKERS_FIXTURE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "microview.h"
#include "mv_collect.h"

#define SEG_SIZE 8192u
#define NSEG     200u

/* The directory segment files are made in, and the thread that calls mv_coll_tick (both set
 * by the test's main). */
extern char *g_dir;
extern pthread_t g_main;

typedef struct fleet {
    unsigned n;
    char (*path)[256];
    mv_segment **seg;
    mv_counter *ctr;
    mv_gauge *gauge;
    uint64_t *hist_off; /* file offset of a histogram's first word; 0 = none */
    uint32_t hist_len;  /* value bytes of each histogram */
} fleet;

/* A fleet segment's id: TAG000, TAG001, ... */
void seg_id(char *out, size_t cap, const char *tag, unsigned i);
/* `n` segments named TAG000..; every `hist_every`-th (0: none) also has a histogram. */
void fleet_open(fleet *f, const char *tag, unsigned n, unsigned hist_every);
void fleet_close(fleet *f);
/* Round `r`: every counter gains 1 (so it reads i + r), every gauge is set to i * 1000 + r.
 * Segments closed already are left alone. */
void fleet_set(fleet *f, unsigned r);
/* Adds the fleet's files as TAG000.. read through `t` (NULL: shm); their sources go to `srcs`
 * unless it is NULL. */
void fleet_add(mv_coll *c, const fleet *f, const char *tag, const mv_coll_transport *t,
               void **srcs);
/* A collector with `workers` tick workers, no quarantine, rare rechecks. */
mv_coll *new_coll(uint32_t workers, int analytics);
/* A view's metric called `name` (its catalog index to *idx unless NULL), or NULL. */
const mv_seg_metric *fleet_metric(const mv_coll_seg_view *v, const char *name, size_t *idx);
/* Index of a view's segment in the fleet `tag`, or -1. */
int fleet_index(const mv_coll_seg_view *v, const char *tag);
/* Counts the fleet's segments published with exactly round `r`'s values. */
unsigned fleet_exact(mv_coll *c, const char *tag, unsigned r);

/* Waits for `want` segments of fleet `tag` to hold round `r`'s values. */
typedef struct exact_arg {
    mv_coll *c;
    unsigned r;
    const char *tag;
    unsigned want;
} exact_arg;
/* src_close of the tests' own transports over shm sources: closes them as shm does. */
void shm_src_close(void *ctx, void *src);
/* For mv_test_wait_until: whether `want` segments hold the round's values. */
int all_exact(void *arg);

#endif
