/* libFuzzer driver: mv_segstore_catalog_parse on arbitrary catalog.json bytes. */
#include <stddef.h>
#include <stdint.h>

#include "mv_segstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mv_segstore_seg *v = NULL;
    size_t n = 0;
    uint64_t rev = 0;
    char err[256];
    if (mv_segstore_catalog_parse((const char *)data, size, "/run/microview", &v, &n, &rev, err,
                                  sizeof err) == 0) {
        /* Every accepted entry must be internally consistent. */
        for (size_t i = 0; i < n; i++)
            if (v[i].size < MV_SEGSTORE_MIN_SIZE || v[i].size % MV_SEGSTORE_PAGE ||
                v[i].nlabels > MV_SEGSTORE_LABELS_MAX || !v[i].path)
                __builtin_trap();
        mv_segstore_segs_free(v, n);
    }
    return 0;
}
