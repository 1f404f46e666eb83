/* Writes the seed corpus for fuzz_segment: a few small valid and broken segments.
 * Usage: mv_make_seeds <dir>   (the committed seeds live in tests/fuzz/corpus/segment/) */
#include "microview.h"
#include "mv_segment.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEED_SIZE 1024

static uint64_t g_buf[SEED_SIZE / 8];

static int save(const char *dir, const char *name, const void *p, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, len, f) != len) {
        fprintf(stderr, "mv_make_seeds: cannot write %s\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f);
}

/* Builds a segment in a temp file with libmicroview; `full` adds every metric kind. */
static int build(int full)
{
    char path[] = "/tmp/mv-seeds-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, SEED_SIZE) != 0)
        return -1;
    mv_segment *s;
    int rc = mv_open(path, &s);
    if (rc == MV_OK && full == 1) {
        mv_counter c;
        mv_gauge g;
        mv_histogram *h;
        mv_label l[] = {{"code", "200"}, {"path", "/caf\xc3\xa9"}};
        double b[] = {0.1, 1};
        rc |= mv_counter_register(s, "req_total", "Requests.", NULL, l, 1, &c);
        rc |= mv_gauge_register(s, "temp", NULL, "celsius", NULL, 0, &g);
        rc |= mv_histogram_register(s, "lat_seconds", "Latency.", "seconds", l, 2, b, 2, &h);
        mv_counter_add(c, 5);
        mv_gauge_set(g, -1.5);
        mv_histogram_observe(h, 0.5);
    }
    if (rc == MV_OK && full > 1) { /* a fractional counter, a deleted and re-created series */
        mv_counter_f f;
        mv_counter c;
        mv_label l[] = {{"code", "200"}};
        rc |= mv_counter_register(s, "req_total", NULL, NULL, l, 1, &c);
        rc |= mv_counter_f_register(s, "busy_seconds_total", NULL, NULL, NULL, 0, &f);
        rc |= mv_counter_f_add(f, 0.25);
        rc |= mv_delete(s, "req_total", l, 1) == 1 ? MV_OK : MV_ERR_INVALID;
        rc |= mv_counter_register(s, "req_total", NULL, NULL, l, 1, &c);
        mv_counter_inc(c);
    }
    mv_close(s);
    ssize_t n = pread(fd, g_buf, SEED_SIZE, 0);
    close(fd);
    unlink(path);
    return rc == MV_OK && n == SEED_SIZE ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mv_make_seeds <dir>\n");
        return 2;
    }
    const char *dir = argv[1];
    unsigned char *b = (unsigned char *)g_buf;
    mv_seg_header *h = (mv_seg_header *)(void *)g_buf;
    int rc = 0;

    memset(g_buf, 0, sizeof g_buf);
    rc |= save(dir, "zero", b, 256);
    if (build(0) != 0)
        return 1;
    rc |= save(dir, "empty", b, SEED_SIZE);
    if (build(1) != 0)
        return 1;
    uint32_t hot = h->values_offset + h->values_used, cat_end = h->catalog_offset + h->catalog_used;
    rc |= save(dir, "valid", b, SEED_SIZE);
    /* The same metrics with packed value slots (MICROVIEW_PLACEMENT=packed, and how writers
     * placed them before line placement): the reader accepts both. */
    memset(g_buf, 0, sizeof g_buf);
    if (setenv(MICROVIEW_ENV_PLACEMENT, "packed", 1) != 0 || build(1) != 0)
        return 1;
    unsetenv(MICROVIEW_ENV_PLACEMENT);
    rc |= save(dir, "valid_packed", b, SEED_SIZE);
    /* Every metric sharded (spec section 5.2): two shards each, summed by the reader. */
    memset(g_buf, 0, sizeof g_buf);
    if (setenv(MICROVIEW_ENV_SHARDS, "2", 1) != 0 || build(1) != 0)
        return 1;
    unsetenv(MICROVIEW_ENV_SHARDS);
    rc |= save(dir, "valid_sharded", b, SEED_SIZE);
    /* Types 4 and 5 (spec sections 5.3 and 6.6). */
    memset(g_buf, 0, sizeof g_buf);
    if (build(2) != 0)
        return 1;
    rc |= save(dir, "valid_counter_f_deleted", b, SEED_SIZE);
    if (build(1) != 0)
        return 1;
    rc |= save(dir, "valid_catalog_only", b, cat_end);
    rc |= save(dir, "truncated", b, cat_end - 20);
    rc |= save(dir, "hot_only", b, hot);

    b[h->catalog_offset + 30] ^= 0x20; /* inside the first record's name */
    rc |= save(dir, "bad_checksum", b, SEED_SIZE);
    b[h->catalog_offset + 30] ^= 0x20;

    h->generation++;
    rc |= save(dir, "busy", b, SEED_SIZE);
    h->generation--;

    b[h->values_offset + h->values_used - 8] ^= 1; /* last word: the histogram checksum */
    rc |= save(dir, "torn_histogram", b, SEED_SIZE);
    b[h->values_offset + h->values_used - 8] ^= 1;

    h->metric_count = 0xffff;
    rc |= save(dir, "bad_count", b, SEED_SIZE);
    return rc ? 1 : 0;
}
