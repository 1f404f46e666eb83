/* mv_inspect: decode a segment into text or JSON (json-c). */
#include "mv_inspect.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mv_inspect_load(const char *path, void **buf, size_t *len, char *errbuf, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
    void *map, *copy;

    *buf = NULL;
    if (fd < 0) {
        rc = -errno;
        snprintf(errbuf, errlen, "open %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > (off_t)MV_SEG_MAX_SIZE) {
        snprintf(errbuf, errlen, "%s: not a regular file of 1 byte..1 GiB", path);
        close(fd);
        return -EINVAL;
    }
    size_t n = (size_t)st.st_size, rounded = (n + 7) & ~(size_t)7;
    map = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        rc = -errno;
        snprintf(errbuf, errlen, "mmap %s: %s", path, strerror(errno));
        return rc;
    }
    copy = aligned_alloc(64, (rounded + 63) & ~(size_t)63);
    if (!copy) {
        munmap(map, n);
        snprintf(errbuf, errlen, "out of memory");
        return -ENOMEM;
    }
    memset(copy, 0, rounded);
    mv_seg_copy_words(copy, map, n & ~(size_t)7);
    memcpy((char *)copy + (n & ~(size_t)7), (char *)map + (n & ~(size_t)7), n & 7);
    munmap(map, n);
    *buf = copy;
    *len = n;
    return 0;
}

static const char *type_name(uint8_t t)
{
    return t == MV_SEG_COUNTER     ? "counter"
           : t == MV_SEG_COUNTER_F ? "counter_f"
           : t == MV_SEG_GAUGE     ? "gauge"
                                   : "histogram";
}

static json_object *metric_json(const void *buf, const mv_seg_metric *m)
{
    json_object *o = json_object_new_object(), *labels = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string_len(m->name, m->name_len));
    json_object_object_add(o, "type", json_object_new_string(type_name(m->type)));
    json_object_object_add(o, "help", json_object_new_string_len(m->help, m->help_len));
    json_object_object_add(o, "unit", json_object_new_string_len(m->unit, m->unit_len));
    for (uint16_t i = 0; i < m->label_count; i++)
        json_object_object_add(labels, m->labels[i].key,
                               json_object_new_string(m->labels[i].value));
    json_object_object_add(o, "labels", labels);
    if (m->shards > 1) /* values below are the sums of the shards (spec section 5.2) */
        json_object_object_add(o, "shards", json_object_new_int(m->shards));
    if (m->type == MV_SEG_COUNTER) {
        json_object_object_add(o, "value", json_object_new_uint64(mv_seg_read_counter(buf, m)));
    } else if (m->type == MV_SEG_GAUGE || m->type == MV_SEG_COUNTER_F) {
        double v =
            m->type == MV_SEG_GAUGE ? mv_seg_read_gauge(buf, m) : mv_seg_read_counter_f(buf, m);
        json_object_object_add(o, "value",
                               isfinite(v) ? json_object_new_double(v)
                                           : json_object_new_string(isnan(v) ? "NaN"
                                                                    : v > 0  ? "+Inf"
                                                                             : "-Inf"));
    } else {
        mv_seg_hist_view hv;
        json_object *bounds = json_object_new_array(), *buckets = json_object_new_array();
        for (uint16_t i = 0; i < m->bucket_count; i++)
            json_object_array_add(bounds, json_object_new_double(m->bounds[i]));
        json_object_object_add(o, "bounds", bounds);
        if (mv_seg_read_histogram(buf, m, &hv) == MV_SEG_OK) {
            json_object_object_add(o, "count", json_object_new_uint64(hv.count));
            json_object_object_add(o, "sum", json_object_new_double(hv.sum));
            for (uint32_t i = 0; i <= m->bucket_count; i++)
                json_object_array_add(buckets, json_object_new_uint64(hv.buckets[i]));
        } else {
            json_object_object_add(o, "torn", json_object_new_boolean(1));
        }
        json_object_object_add(o, "buckets", buckets);
    }
    return o;
}

void mv_inspect_put_escaped(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\' || *p == '"')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
}

static void print_text_metric(FILE *out, const void *buf, const mv_seg_metric *m)
{
    fprintf(out, "%-9s %s{", type_name(m->type), m->name);
    for (uint16_t i = 0; i < m->label_count; i++) {
        fprintf(out, "%s%s=\"", i ? "," : "", m->labels[i].key);
        mv_inspect_put_escaped(out, m->labels[i].value);
        fputc('"', out);
    }
    fputc('}', out);
    if (m->type == MV_SEG_COUNTER) {
        fprintf(out, " %" PRIu64, mv_seg_read_counter(buf, m));
    } else if (m->type == MV_SEG_COUNTER_F) {
        fprintf(out, " %.17g", mv_seg_read_counter_f(buf, m));
    } else if (m->type == MV_SEG_GAUGE) {
        fprintf(out, " %.17g", mv_seg_read_gauge(buf, m));
    } else {
        mv_seg_hist_view hv;
        if (mv_seg_read_histogram(buf, m, &hv) != MV_SEG_OK) {
            fprintf(out, " (torn copy, retry)");
        } else {
            uint64_t cum = 0;
            fprintf(out, " count=%" PRIu64 " sum=%.17g", hv.count, hv.sum);
            for (uint32_t i = 0; i <= m->bucket_count; i++) {
                cum += hv.buckets[i];
                if (i < m->bucket_count)
                    fprintf(out, " le=%g:%" PRIu64, m->bounds[i], cum);
                else
                    fprintf(out, " le=+Inf:%" PRIu64, cum);
            }
        }
    }
    if (m->unit_len)
        fprintf(out, "  unit=%s", m->unit);
    if (m->shards > 1)
        fprintf(out, "  shards=%u", m->shards);
    if (m->help_len)
        fprintf(out, "  # %s", m->help);
    fputc('\n', out);
}

mv_seg_reason mv_inspect_print(FILE *out, const char *path, const void *buf, size_t len, int json,
                               mv_seg_error *err)
{
    mv_seg_catalog *cat;
    mv_seg_reason r = mv_seg_catalog_parse(buf, len, len, &cat, err);
    if (r != MV_SEG_OK)
        return r;
    const mv_seg_header *h = buf;
    size_t n = mv_seg_catalog_count(cat);
    if (json) {
        char inst[32];
        json_object *o = json_object_new_object(), *arr = json_object_new_array();
        snprintf(inst, sizeof inst, "0x%016" PRIx64, h->instance);
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_object_add(o, "size", json_object_new_uint64(h->segment_size));
        json_object_object_add(o, "instance", json_object_new_string(inst));
        json_object_object_add(o, "generation", json_object_new_uint64(h->generation));
        json_object_object_add(o, "heartbeat_ns", json_object_new_uint64(h->heartbeat_ns));
        json_object_object_add(o, "writer_pid", json_object_new_uint64(h->writer_pid));
        json_object_object_add(o, "values_used", json_object_new_uint64(h->values_used));
        json_object_object_add(o, "values_size", json_object_new_uint64(h->values_size));
        json_object_object_add(o, "catalog_used", json_object_new_uint64(h->catalog_used));
        json_object_object_add(o, "catalog_size", json_object_new_uint64(h->catalog_size));
        for (size_t i = 0; i < n; i++)
            json_object_array_add(arr, metric_json(buf, mv_seg_catalog_metric(cat, i)));
        json_object_object_add(o, "metrics", arr);
        fprintf(out, "%s\n",
                json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
    } else {
        char when[64] = "never";
        if (h->heartbeat_ns) {
            time_t t = (time_t)(h->heartbeat_ns / 1000000000ull);
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        }
        fprintf(out,
                "segment %s\n  size %" PRIu64 " bytes, instance 0x%016" PRIx64
                ", generation %" PRIu64 ", %zu metrics\n"
                "  values %u/%u bytes, catalog %u/%u bytes, writer pid %u, heartbeat %s\n",
                path, h->segment_size, h->instance, h->generation, n, h->values_used,
                h->values_size, h->catalog_used, h->catalog_size, h->writer_pid, when);
        for (size_t i = 0; i < n; i++)
            print_text_metric(out, buf, mv_seg_catalog_metric(cat, i));
    }
    mv_seg_catalog_free(cat);
    return MV_SEG_OK;
}
