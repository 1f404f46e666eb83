/* pipeline_fixture: what the pipeline's unit tests share: a segment file written through
 * libmicroview and mapped read-only, its catalog, and a pipeline with a given window. */
#ifndef PIPELINE_FIXTURE_H
#define PIPELINE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "microview.h"
#include "mv_pipeline.h"

#define SEC 1000000000ull
#define MS  1000000ull

/* The directory segment files are made in (set by the test's main). */
extern char *g_dir;

typedef struct fixture {
    char path[256];
    mv_segment *seg;
    void *map;
    size_t size;
    mv_seg_catalog *cat;
} fixture;

/* A `size`-byte segment file `name` in g_dir, open for writing and mapped read-only. */
void fx_open(fixture *f, const char *name, size_t size);
/* (Re)parses the catalog after registrations. */
void fx_catalog(fixture *f);
/* A 16 KiB segment with one counter `metric`, its catalog parsed. */
void fx_one_counter(fixture *f, const char *file, const char *metric, mv_counter *c);
void fx_close(fixture *f);
/* A pipeline over `cat` with the default config but the window, the scorer (fd) and its
 * period (0: the default). */
mv_pipe_seg *new_pipe(const mv_seg_catalog *cat, uint64_t window_ns, int fd, uint64_t fd_period_ns);
/* |got - want| / |want| (|got| when want is 0). */
double rel_err(double got, double want);
/* qsort comparison of doubles. */
int dcmp(const void *a, const void *b);

#endif
