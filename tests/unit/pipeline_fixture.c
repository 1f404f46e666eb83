/* pipeline_fixture: see pipeline_fixture.h. */
#include "pipeline_fixture.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mv_test.h"

char *g_dir;

void fx_open(fixture *f, const char *name, size_t size)
{
    snprintf(f->path, sizeof f->path, "%s/%s", g_dir, name);
    int fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, (off_t)size) == 0);
    CU_ASSERT_FATAL(mv_open(f->path, &f->seg) == MV_OK);
    f->map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(f->map != MAP_FAILED);
    f->size = size;
    f->cat = NULL;
}

void fx_catalog(fixture *f)
{
    mv_seg_error err;
    if (f->cat)
        mv_seg_catalog_free(f->cat);
    CU_ASSERT_FATAL(mv_seg_catalog_parse(f->map, f->size, f->size, &f->cat, &err) == MV_SEG_OK);
}

void fx_one_counter(fixture *f, const char *file, const char *metric, mv_counter *c)
{
    fx_open(f, file, 16384);
    CU_ASSERT_FATAL(mv_counter_register(f->seg, metric, NULL, NULL, NULL, 0, c) == MV_OK);
    fx_catalog(f);
}

void fx_close(fixture *f)
{
    mv_seg_catalog_free(f->cat);
    munmap(f->map, f->size);
    mv_close(f->seg);
}

mv_pipe_seg *new_pipe(const mv_seg_catalog *cat, uint64_t window_ns, int fd, uint64_t fd_period_ns)
{
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = window_ns;
    cfg.fd = fd;
    if (fd_period_ns)
        cfg.fd_period_ns = fd_period_ns;
    mv_pipe_seg *p = NULL;
    CU_ASSERT_FATAL(mv_pipe_seg_create(&cfg, cat, NULL, &p) == 0);
    return p;
}

double rel_err(double got, double want)
{
    return want == 0 ? fabs(got) : fabs(got - want) / fabs(want);
}

int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
