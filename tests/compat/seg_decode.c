/* Decodes a segment file with the C reader and prints it as JSON in the shape of
 * `microviewctl dump --json`; used by test_compat.sh alongside microviewctl.
 * Exit 0 on success, 2 on a rejected segment ("<prog>: <path>: rejected: <reason>: <detail>"),
 * 1 on usage or I/O errors. */
#include "mv_segment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

static void json_num(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mv_seg_decode <segment-file>\n");
        return 1;
    }
    const char *path = argv[1];
    struct stat st;
    FILE *f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &st) != 0 || st.st_size <= 0 || st.st_size > (1 << 30)) {
        fprintf(stderr, "mv_seg_decode: %s: cannot read\n", path);
        return 1;
    }
    size_t len = (size_t)st.st_size;
    uint64_t *buf = calloc(1, (len + 7) & ~(size_t)7);
    if (!buf || fread(buf, 1, len, f) != len) {
        fprintf(stderr, "mv_seg_decode: %s: cannot read\n", path);
        return 1;
    }
    fclose(f);
    mv_seg_catalog *c;
    mv_seg_error e;
    mv_seg_reason r = mv_seg_catalog_parse(buf, len, len, &c, &e);
    uint64_t hb = 0;
    if (r == MV_SEG_OK && (r = mv_seg_hot_check(c, buf, len, &hb, &e)) != MV_SEG_OK)
        mv_seg_catalog_free(c);
    for (size_t i = 0; r == MV_SEG_OK && i < mv_seg_catalog_count(c); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(c, i);
        mv_seg_hist_view hv;
        if (m->type == MV_SEG_HISTOGRAM && mv_seg_read_histogram(buf, m, &hv) != MV_SEG_OK) {
            r = MV_SEG_E_TORN;
            snprintf(e.detail, sizeof e.detail, "metric %s: histogram copy is torn", m->name);
            mv_seg_catalog_free(c);
        }
    }
    if (r != MV_SEG_OK) {
        fprintf(stderr, "mv_seg_decode: %s: rejected: %s: %s\n", path, mv_seg_reason_name(r),
                e.detail);
        free(buf);
        return 2;
    }
    const mv_seg_header *h = (const mv_seg_header *)(const void *)buf;
    printf("{\"path\":");
    json_str(path);
    printf(",\"size\":%zu,\"instance\":\"0x%016llx\",\"generation\":%llu,\"heartbeat_ns\":%llu,"
           "\"writer_pid\":%u,\"metrics\":[",
           len, (unsigned long long)h->instance, (unsigned long long)h->generation,
           (unsigned long long)hb, h->writer_pid);
    static const char *const types[] = {"", "counter", "gauge", "histogram"};
    for (size_t i = 0; i < mv_seg_catalog_count(c); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(c, i);
        printf("%s{\"name\":", i ? "," : "");
        json_str(m->name);
        printf(",\"type\":\"%s\",\"help\":", types[m->type]);
        json_str(m->help);
        printf(",\"unit\":");
        json_str(m->unit);
        printf(",\"labels\":{");
        for (uint16_t k = 0; k < m->label_count; k++) {
            printf("%s", k ? "," : "");
            json_str(m->labels[k].key);
            putchar(':');
            json_str(m->labels[k].value);
        }
        putchar('}');
        if (m->shards > 1) /* only then: decodes of unsharded segments stay as they were */
            printf(",\"shards\":%u", m->shards);
        if (m->type == MV_SEG_COUNTER) {
            printf(",\"value\":%llu", (unsigned long long)mv_seg_read_counter(buf, m));
        } else if (m->type == MV_SEG_GAUGE) {
            printf(",\"value\":");
            json_num(mv_seg_read_gauge(buf, m));
        } else {
            mv_seg_hist_view hv;
            mv_seg_read_histogram(buf, m, &hv);
            printf(",\"count\":%llu,\"sum\":", (unsigned long long)hv.count);
            json_num(hv.sum);
            printf(",\"bounds\":[");
            for (uint16_t k = 0; k < m->bucket_count; k++) {
                printf("%s", k ? "," : "");
                json_num(m->bounds[k]);
            }
            printf("],\"buckets\":[");
            for (uint32_t k = 0; k <= m->bucket_count; k++)
                printf("%s%llu", k ? "," : "", (unsigned long long)hv.buckets[k]);
            putchar(']');
        }
        putchar('}');
    }
    printf("]}\n");
    mv_seg_catalog_free(c);
    free(buf);
    return 0;
}
