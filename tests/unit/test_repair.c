/* Registration recovery (format spec section 8): an appender that died inside step 9 is
 * repaired from the records; a lock whose holder's pid was reused is taken over; the
 * collector shows a segment whose catalog stays busy. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_export.h"
#include "mv_segment.h"
#include "mv_test.h"

static char *g_dir;

/* A pid that no process has any more. */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    CU_ASSERT_FATAL(p >= 0);
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

/* Plays an appender of `name` (a counter) that stops after `stores` of step 9's three
 * stores, holding the lock as `holder`, as if it died there. */
static void die_in_step9(const char *path, const char *name, int stores, pid_t holder)
{
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    off_t size = lseek(fd, 0, SEEK_END);
    char *base = malloc((size_t)size);
    CU_ASSERT_FATAL(pread(fd, base, (size_t)size, 0) == size);
    mv_seg_header *h = (mv_seg_header *)(void *)base;
    mv_seg_metric_desc d = {0};
    d.type = MV_SEG_COUNTER;
    d.name = name;
    uint32_t voff = h->values_used, coff = h->catalog_used;
    h->lock = (uint32_t)holder;
    h->generation++; /* step 6 */
    memset(base + h->values_offset + voff, 0, 8);
    mv_seg_record_encode(base + h->catalog_offset + coff, &d, voff); /* step 8 */
    if (stores >= 1)
        h->values_used = voff + mv_seg_value_size(&d);
    if (stores >= 2)
        h->catalog_used = coff + mv_seg_record_size(&d);
    if (stores >= 3)
        h->metric_count++;
    CU_ASSERT_FATAL(pwrite(fd, base, (size_t)size, 0) == size);
    close(fd);
    free(base);
}

static size_t metric_count(const char *path, mv_seg_reason *r, uint64_t *first_value)
{
    int fd = open(path, O_RDONLY);
    off_t size = lseek(fd, 0, SEEK_END);
    char *buf = malloc((size_t)size);
    CU_ASSERT_FATAL(pread(fd, buf, (size_t)size, 0) == size);
    close(fd);
    mv_seg_catalog *cat = NULL;
    mv_seg_error e;
    *r = mv_seg_catalog_parse(buf, (size_t)size, (uint64_t)size, &cat, &e);
    size_t n = cat ? mv_seg_catalog_count(cat) : 0;
    if (cat && first_value)
        *first_value = mv_seg_read_counter(buf, mv_seg_catalog_metric(cat, 0));
    mv_seg_catalog_free(cat);
    free(buf);
    return n;
}

static void test_died_inside_step9(void)
{
    for (int stores = 0; stores <= 3; stores++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.seg", stores);
        char path[256];
        CU_ASSERT_FATAL(mv_test_blank_file(g_dir, name, 16384, path, sizeof path) == 0);
        mv_segment *a;
        mv_counter c1, c2;
        CU_ASSERT_FATAL(mv_open(path, &a) == MV_OK);
        CU_ASSERT_FATAL(mv_counter_register(a, "first_total", NULL, NULL, NULL, 0, &c1) == MV_OK);
        mv_counter_add(c1, 42);
        mv_close(a);
        die_in_step9(path, "dead_total", stores, dead_pid());

        /* A new process opens and registers: the lock is taken over and the counts are
         * recomputed from the records (the dead appender's complete record counts). */
        mv_segment *b;
        uint64_t t0 = mv_test_mono_ms();
        CU_ASSERT_FATAL(mv_open(path, &b) == MV_OK);
        int rc = mv_counter_register(b, "after_total", NULL, NULL, NULL, 0, &c2);
        if (rc != MV_OK)
            printf("\n  stores=%d: %s: %s\n", stores, mv_strerror(rc), mv_errdetail());
        CU_ASSERT_EQUAL(rc, MV_OK);
        CU_ASSERT(mv_test_mono_ms() - t0 < 3000);
        mv_counter_add(c2, 1);
        mv_seg_reason r;
        uint64_t v = 0;
        size_t n = metric_count(path, &r, &v);
        CU_ASSERT_EQUAL(r, MV_SEG_OK);
        CU_ASSERT_EQUAL(n, 3); /* first_total, dead_total, after_total */
        CU_ASSERT_EQUAL(v, 42);
        mv_close(b);
    }
}

/* The lock's pid now belongs to a live process that does not map the segment. */
static void test_reused_pid_lock(void)
{
    char path[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "reuse.seg", 16384, path, sizeof path) == 0);
    mv_segment *a;
    mv_counter c;
    CU_ASSERT_FATAL(mv_open(path, &a) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(a, "x_total", NULL, NULL, NULL, 0, &c) == MV_OK);
    pid_t other = fork();
    CU_ASSERT_FATAL(other >= 0);
    if (other == 0) {
        execl("/bin/sleep", "sleep", "20", (char *)NULL);
        _exit(127);
    }
    /* Wait until the child runs sleep (its maps no longer hold our segment). */
    char exe[64], link[256];
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)other);
    uint64_t t0 = mv_test_mono_ms();
    for (;;) {
        ssize_t n = readlink(exe, link, sizeof link - 1);
        if (n > 0) {
            link[n] = 0;
            if (strstr(link, "sleep"))
                break;
        }
        CU_ASSERT_FATAL(mv_test_mono_ms() - t0 < 5000);
        mv_test_sleep_ms(1);
    }
    mv_seg_header *h = NULL;
    int fd = open(path, O_RDWR);
    mv_seg_header hdr;
    CU_ASSERT_FATAL(pread(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
    hdr.lock = (uint32_t)other;
    CU_ASSERT_FATAL(pwrite(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
    close(fd);
    (void)h;
    mv_counter c2;
    t0 = mv_test_mono_ms();
    int rc = mv_counter_register(a, "y_total", NULL, NULL, NULL, 0, &c2);
    uint64_t took = mv_test_mono_ms() - t0;
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
    CU_ASSERT_EQUAL(rc, MV_OK);
    CU_ASSERT(took < 1000); /* not the 2 s give-up */
    mv_close(a);
}

/* A catalog left busy is visible on /metrics while its values are frozen. */
static void test_busy_is_visible(void)
{
    char path[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "busy.seg", 16384, path, sizeof path) == 0);
    mv_segment *a;
    mv_counter c;
    CU_ASSERT_FATAL(mv_open(path, &a) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(a, "x_total", NULL, NULL, NULL, 0, &c) == MV_OK);
    mv_coll_opts o;
    mv_coll *coll;
    mv_coll_opts_default(&o);
    CU_ASSERT_FATAL(mv_coll_create(&o, &coll) == 0);
    void *src;
    uint64_t size;
    char err[256];
    mv_seg_label l = {"service", "busy"};
    CU_ASSERT_FATAL(mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(coll, "busy", size, &l, 1, mv_coll_shm_transport(), src) == 0);
    mv_coll_tick(coll);
    int fd = open(path, O_RDWR);
    mv_seg_header hdr;
    CU_ASSERT_FATAL(pread(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
    hdr.generation++;
    CU_ASSERT_FATAL(pwrite(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
    mv_coll_tick(coll);
    mv_coll_snap *s = mv_coll_snapshot(coll);
    CU_ASSERT(mv_coll_snap_seg(s, 0)->busy_since_ns > 0);
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 1 << 20);
    CU_ASSERT(mv_export_render(e, s, NULL) == 0);
    size_t len;
    const char *body = mv_expo_data(e, &len);
    const char *line = strstr(body, "microview_segment_busy_seconds{service=\"busy\"} ");
    CU_ASSERT_FATAL(line != NULL);
    CU_ASSERT(
        strncmp(line + strlen("microview_segment_busy_seconds{service=\"busy\"} "), "0\n", 2) != 0);
    mv_expo_destroy(e);
    mv_coll_snap_free(s);
    hdr.generation++;
    CU_ASSERT_FATAL(pwrite(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
    close(fd);
    mv_coll_tick(coll);
    s = mv_coll_snapshot(coll);
    CU_ASSERT_EQUAL(mv_coll_snap_seg(s, 0)->busy_since_ns, 0);
    mv_coll_snap_free(s);
    mv_coll_destroy(coll);
    mv_close(a);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-repair");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"appender died inside step 9", test_died_inside_step9},
        {"lock of a reused pid", test_reused_pid_lock},
        {"busy catalog is visible", test_busy_is_visible},
    };
    int rc = MV_TEST_RUN("repair", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return rc;
}
