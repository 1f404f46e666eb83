/* libFuzzer driver: the agent's catalog loader on arbitrary bytes: mv_segstore_catalog_parse
 * (catalog.json, strict) on the whole input, then mv_segstore_catalog_load_mem (what the agent
 * does at start) with the input split at its first NUL byte into catalog.json text and
 * catalog.journal bytes. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mv_segstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(mv_segstore_seg *v, size_t n)
{
    /* Every accepted entry must be internally consistent. */
    for (size_t i = 0; i < n; i++)
        if (v[i].size < MV_SEGSTORE_MIN_SIZE || v[i].size % MV_SEGSTORE_PAGE ||
            v[i].nlabels > MV_SEGSTORE_LABELS_MAX || !v[i].path)
            __builtin_trap();
    /* No id twice. */
    for (size_t i = 0; i < n && n < 256; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(v[i].id, v[j].id) == 0)
                __builtin_trap();
    mv_segstore_segs_free(v, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mv_segstore_seg *v = NULL;
    size_t n = 0, q = 0;
    uint64_t rev = 0;
    char err[256];
    if (mv_segstore_catalog_parse((const char *)data, size, "/run/microview", &v, &n, &rev, err,
                                  sizeof err) == 0)
        check(v, n);
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    const uint8_t *jr = nul ? nul + 1 : data + size;
    size_t jlen = nul ? size - slen - 1 : 0;
    if (mv_segstore_catalog_load_mem(slen ? (const char *)data : NULL, slen, jr, jlen,
                                     "/run/microview", &v, &n, &rev, &q) == 0)
        check(v, n);
    return 0;
}
