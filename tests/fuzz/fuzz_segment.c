/* libFuzzer driver: the segment reader, and the fold of sharded records, must survive any
 * bytes without crashing or leaking. */
#include "mv_segment.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fold into an exact-size buffer, then the folded histograms read as one value each. */
static void fold(const mv_seg_catalog *c, const void *buf)
{
    uint32_t hot = mv_seg_catalog_hot_size(c), size = mv_seg_catalog_fold_size(c);
    uint64_t *f = malloc(size);
    if (!f)
        return;
    memcpy(f, buf, hot);
    mv_seg_fold(c, f);
    for (size_t i = 0; i < mv_seg_catalog_count(c); i++) {
        mv_seg_metric m = *mv_seg_catalog_metric(c, i);
        if (m.shards < 2 || m.type != MV_SEG_HISTOGRAM)
            continue;
        mv_seg_hist_view hv;
        m.value_offset = m.fold_offset;
        m.shards = 1;
        volatile uint64_t sink = 0;
        if (mv_seg_read_histogram(f, &m, &hv) == MV_SEG_OK)
            sink += hv.count + hv.buckets[m.bucket_count];
        (void)sink;
    }
    free(f);
}

static void read_all(const void *buf, size_t len, uint64_t expected)
{
    mv_seg_catalog *c;
    mv_seg_error e;
    if (mv_seg_catalog_parse(buf, len, expected, &c, &e) != MV_SEG_OK)
        return;
    uint64_t hb;
    if (mv_seg_hot_check(c, buf, len, &hb, &e) == MV_SEG_OK) {
        for (size_t i = 0; i < mv_seg_catalog_count(c); i++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(c, i);
            mv_seg_hist_view hv;
            volatile uint64_t sink = 0;
            if (m->type == MV_SEG_COUNTER)
                sink += mv_seg_read_counter(buf, m);
            else if (m->type == MV_SEG_GAUGE)
                sink += (uint64_t)(mv_seg_read_gauge(buf, m) != 0);
            else if (mv_seg_read_histogram(buf, m, &hv) == MV_SEG_OK)
                sink += hv.count + hv.buckets[m->bucket_count];
            /* Touch every string and label the catalog hands out. */
            sink += strlen(m->name) + strlen(m->help) + strlen(m->unit);
            for (uint16_t k = 0; k < m->label_count; k++)
                sink += strlen(m->labels[k].key) + strlen(m->labels[k].value);
            (void)sink;
        }
        fold(c, buf);
    }
    mv_seg_catalog_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The reader needs an 8-aligned copy, as a collector's buffer is; an exact-size heap copy
     * lets ASan catch any read past the end. */
    uint64_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    read_all(buf, size, 0);
    read_all(buf, size, size);
    free(buf);
    return 0;
}
