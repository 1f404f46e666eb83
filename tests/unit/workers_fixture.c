/* workers_fixture: the fleet of segment files the tick-worker tests read (see
 * workers_fixture.h). */
#include "workers_fixture.h"

#include <CUnit/Basic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *g_dir;
pthread_t g_main;

void seg_id(char *out, size_t cap, const char *tag, unsigned i)
{
    snprintf(out, cap, "%s%03u", tag, i);
}

void fleet_open(fleet *f, const char *tag, unsigned n, unsigned hist_every)
{
    memset(f, 0, sizeof *f);
    f->n = n;
    f->path = calloc(n, sizeof *f->path);
    f->seg = calloc(n, sizeof *f->seg);
    f->ctr = calloc(n, sizeof *f->ctr);
    f->gauge = calloc(n, sizeof *f->gauge);
    f->hist_off = calloc(n, sizeof *f->hist_off);
    CU_ASSERT_FATAL(f->path && f->seg && f->ctr && f->gauge && f->hist_off);
    for (unsigned i = 0; i < n; i++) {
        snprintf(f->path[i], sizeof f->path[i], "%s/%s%03u.seg", g_dir, tag, i);
        int fd = open(f->path[i], O_RDWR | O_CREAT | O_TRUNC, 0600);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_FATAL(ftruncate(fd, SEG_SIZE) == 0);
        close(fd);
        CU_ASSERT_FATAL(mv_open(f->path[i], &f->seg[i]) == MV_OK);
        CU_ASSERT_FATAL(
            mv_counter_register(f->seg[i], "c_total", NULL, NULL, NULL, 0, &f->ctr[i]) == MV_OK);
        CU_ASSERT_FATAL(mv_gauge_register(f->seg[i], "g", NULL, NULL, NULL, 0, &f->gauge[i]) ==
                        MV_OK);
        mv_counter_add(f->ctr[i], i);
        mv_gauge_set(f->gauge[i], (double)i * 1000);
        if (hist_every && i % hist_every == 0) {
            double bounds[] = {1, 10};
            mv_histogram *h;
            CU_ASSERT_FATAL(
                mv_histogram_register(f->seg[i], "h", NULL, NULL, NULL, 0, bounds, 2, &h) == MV_OK);
            mv_histogram_observe(h, 5);
        }
    }
}

void fleet_close(fleet *f)
{
    for (unsigned i = 0; i < f->n; i++)
        mv_close(f->seg[i]); /* NULL: closed already */
    free(f->path);
    free(f->seg);
    free(f->ctr);
    free(f->gauge);
    free(f->hist_off);
}

void fleet_set(fleet *f, unsigned r)
{
    for (unsigned i = 0; i < f->n; i++) {
        if (!f->seg[i])
            continue;
        mv_counter_inc(f->ctr[i]);
        mv_gauge_set(f->gauge[i], (double)i * 1000 + r);
    }
}

void fleet_add(mv_coll *c, const fleet *f, const char *tag, const mv_coll_transport *t, void **srcs)
{
    for (unsigned i = 0; i < f->n; i++) {
        char id[32], err[256];
        void *src;
        uint64_t size;
        seg_id(id, sizeof id, tag, i);
        mv_seg_label l = {"service", id};
        CU_ASSERT_FATAL(mv_coll_shm_open(f->path[i], 0, &src, &size, err, sizeof err) == 0);
        CU_ASSERT_FATAL(mv_coll_add(c, id, size, &l, 1, t ? t : mv_coll_shm_transport(), src) == 0);
        if (srcs)
            srcs[i] = src;
    }
}

mv_coll *new_coll(uint32_t workers, int analytics)
{
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_workers = workers;
    o.analytics = analytics;
    o.quarantine_after_ms = 0;
    o.recheck_ms = 60000;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    return c;
}

const mv_seg_metric *fleet_metric(const mv_coll_seg_view *v, const char *name, size_t *idx)
{
    for (size_t k = 0; v->cat && k < mv_seg_catalog_count(v->cat); k++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, k);
        if (strcmp(m->name, name) == 0) {
            if (idx)
                *idx = k;
            return m;
        }
    }
    return NULL;
}

int fleet_index(const mv_coll_seg_view *v, const char *tag)
{
    size_t tl = strlen(tag);
    if (strncmp(v->id, tag, tl) != 0)
        return -1;
    return atoi(v->id + tl);
}

unsigned fleet_exact(mv_coll *c, const char *tag, unsigned r)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    unsigned ok = 0;
    for (size_t k = 0; k < mv_coll_snap_count(s); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, k);
        int i = fleet_index(v, tag);
        const mv_seg_metric *mc = fleet_metric(v, "c_total", NULL),
                            *mg = fleet_metric(v, "g", NULL);
        if (i < 0 || v->state != MV_COLL_OK || !v->hot || !mc || !mg)
            continue;
        ok += mv_seg_read_counter(v->hot, mc) == (uint64_t)i + r &&
              mv_seg_read_gauge(v->hot, mg) == (double)i * 1000 + r;
    }
    mv_coll_snap_free(s);
    return ok;
}

int all_exact(void *arg)
{
    exact_arg *a = arg;
    return fleet_exact(a->c, a->tag, a->r) == a->want;
}

void shm_src_close(void *ctx, void *src)
{
    const mv_coll_transport *shm = mv_coll_shm_transport();
    (void)ctx;
    shm->src_close(shm->ctx, src);
}
