/* catalog_bench: what one create costs the agent's segment store when it already holds many
 * segments: creates per second and bytes written to the catalog per create.
 *
 *   catalog_bench [--dir DIR] [--segments N] [--creates M] [--labels K]
 *
 * The store is filled to N segments by writing catalog.json directly (N hard links to one
 * segment file: what the store loads at start), then opened, and M creates with K labels each
 * are timed through the public interface only (mv_segstore_open/create/release/close), so the
 * same source builds against any version of the store. Bytes written are the process's write
 * calls (/proc/self/io wchar: the catalog files; the segment files are sized with fallocate
 * and formatted through a mapping, which write counts miss) and what reached the block layer
 * (write_bytes: 0 on tmpfs). Prints figures; asserts nothing. DIR defaults to a new directory
 * under $TMPDIR (or /var/tmp, usually a disk: fsync costs what it costs there). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "mv_log.h"
#include "mv_segstore.h"

static int io_counters(uint64_t *wchar, uint64_t *write_bytes)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (!f)
        return -1;
    char line[128];
    *wchar = *write_bytes = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long v;
        if (sscanf(line, "wchar: %llu", &v) == 1)
            *wchar = v;
        else if (sscanf(line, "write_bytes: %llu", &v) == 1)
            *write_bytes = v;
    }
    fclose(f);
    return 0;
}

/* catalog.json with n entries, each with k labels, all links to dir/seg-base. */
static int prefill(const char *dir, unsigned n, unsigned k)
{
    char path[4096], base[4096];
    if (snprintf(base, sizeof base, "%s/seg-base", dir) >= (int)sizeof base)
        return -1;
    int fd = open(base, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0660);
    if (fd < 0 || posix_fallocate(fd, 0, 4096) != 0) {
        perror("seg-base");
        return -1;
    }
    close(fd);
    if (snprintf(path, sizeof path, "%s/catalog.json", dir) >= (int)sizeof path)
        return -1;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"version\":1,\"revision\":1,\"segments\":[");
    for (unsigned i = 0; i < n; i++) {
        char id[32], seg[4200];
        snprintf(id, sizeof id, "seg-%016x", 0x10000000u + i);
        if (snprintf(seg, sizeof seg, "%s/%s", dir, id) >= (int)sizeof seg) {
            fclose(f);
            return -1;
        }
        if (link(base, seg) < 0) {
            perror("link");
            fclose(f);
            return -1;
        }
        fprintf(f,
                "%s{\"id\":\"%s\",\"path\":\"%s\",\"size_bytes\":4096,\"owner_pid\":0,"
                "\"created_unix_ns\":1,\"labels\":[",
                i ? "," : "", id, seg);
        for (unsigned j = 0; j < k; j++)
            fprintf(f, "%s{\"name\":\"label_%u\",\"value\":\"value-%u-%u\"}", j ? "," : "", j, i,
                    j);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    unlink(base);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    unsigned n = 10000, m = 200, k = 4;
    static const struct option lo[] = {{"dir", required_argument, NULL, 'd'},
                                       {"segments", required_argument, NULL, 'n'},
                                       {"creates", required_argument, NULL, 'm'},
                                       {"labels", required_argument, NULL, 'k'},
                                       {NULL, 0, NULL, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'd':
            dir = optarg;
            break;
        case 'n':
            n = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'm':
            m = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'k':
            k = (unsigned)strtoul(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr,
                    "usage: catalog_bench [--dir DIR] [--segments N] [--creates M] [--labels K]\n");
            return 2;
        }
    }
    if (k > MV_SEGSTORE_LABELS_MAX || m == 0) {
        fprintf(stderr, "catalog_bench: --labels at most %d, --creates at least 1\n",
                MV_SEGSTORE_LABELS_MAX);
        return 2;
    }
    char tmpl[4096];
    if (!dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpl, sizeof tmpl, "%s/mv-catalog-bench-XXXXXX", t && t[0] ? t : "/var/tmp");
        if (!mkdtemp(tmpl)) {
            perror("mkdtemp");
            return 1;
        }
        dir = tmpl;
    } else if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    mv_log_init("bench", MV_LOG_ERROR);
    if (prefill(dir, n, k) < 0)
        return 1;
    sync(); /* the prefill's links and catalog reach the disk before anything is timed */
    mv_segstore_opts o = {.dir = dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    mv_segstore *st;
    uint64_t t0 = bench_now_ns();
    if (mv_segstore_open(&o, &st) < 0) {
        fprintf(stderr, "catalog_bench: cannot open the store in %s\n", dir);
        return 1;
    }
    double open_s = (double)(bench_now_ns() - t0) / 1e9;
    mv_segstore_label labels[MV_SEGSTORE_LABELS_MAX];
    char names[MV_SEGSTORE_LABELS_MAX][32], values[MV_SEGSTORE_LABELS_MAX][32];
    for (unsigned j = 0; j < k; j++) {
        snprintf(names[j], sizeof names[j], "label_%u", j);
        snprintf(values[j], sizeof values[j], "bench-%u", j);
        labels[j].name = names[j];
        labels[j].value = values[j];
    }
    char err[512];
    char(*ids)[MV_SEGSTORE_ID_LEN + 1] = calloc(m, sizeof *ids);
    uint64_t w0, b0, w1, b1;
    if (!ids || io_counters(&w0, &b0) < 0) {
        fprintf(stderr, "catalog_bench: no /proc/self/io\n");
        return 1;
    }
    double *lat = calloc(m, sizeof *lat);
    t0 = bench_now_ns();
    for (unsigned i = 0; i < m; i++) {
        mv_segstore_seg seg;
        uint64_t c0 = bench_now_ns();
        if (mv_segstore_create(st, 4096, 0, labels, k, &seg, err, sizeof err) < 0) {
            fprintf(stderr, "catalog_bench: create %u: %s\n", i, err);
            return 1;
        }
        lat[i] = (double)(bench_now_ns() - c0) / 1e3;
        memcpy(ids[i], seg.id, sizeof ids[i]);
        mv_segstore_seg_clear(&seg);
    }
    double secs = (double)(bench_now_ns() - t0) / 1e9;
    io_counters(&w1, &b1);
    qsort(lat, m, sizeof *lat, bench_cmp_double);
    printf("catalog_bench: dir=%s segments=%u labels=%u creates=%u\n", dir, n, k, m);
    printf("  open (load %u segments): %.3f s\n", n, open_s);
    printf("  creates per second at %u segments: %.0f  (p50 %.0f us, p99 %.0f us, max %.0f us)\n",
           n, m / secs, lat[m / 2], lat[(size_t)(m * 0.99)], lat[m - 1]);
    printf("  catalog bytes written per create: %.0f (write calls), %.0f (to the block layer)\n",
           (double)(w1 - w0) / m, (double)(b1 - b0) / m);
    for (unsigned i = 0; i < m; i++)
        mv_segstore_release(st, ids[i]);
    mv_segstore_close(st);
    free(ids);
    free(lat);
    if (dir == tmpl) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "catalog_bench: could not remove %s\n", dir);
    }
    return 0;
}
