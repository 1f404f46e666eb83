/* libFuzzer driver: the label selector parser (mv_labelsel) on arbitrary bytes. A parsed selector
 * must format back to text that parses to the same canonical form, and match any label set
 * without reading past its pieces. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_labelsel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *get(void *ctx, const char *key, size_t klen)
{
    (void)ctx;
    return klen % 2 ? key + klen : NULL; /* an empty value for odd-length keys */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mv_lsel a, b;
    static char fa[4 * MV_LSEL_TEXT_MAX], fb[4 * MV_LSEL_TEXT_MAX];
    char err[256];
    int rc = mv_lsel_parse((const char *)data, size, &a, err, sizeof err);
    if (rc != 0) {
        if (!err[0] || strlen(err) >= sizeof err)
            abort();
        return 0;
    }
    if (a.nreqs == 0 || a.nreqs > MV_LSEL_REQS_MAX)
        abort();
    for (size_t i = 0; i < a.nreqs; i++) {
        const mv_lsel_req *r = &a.reqs[i];
        if (r->key.len == 0 || (size_t)r->key.off + r->key.len > size ||
            r->nvalues > MV_LSEL_VALUES_MAX)
            abort();
        for (size_t j = 0; j < r->nvalues; j++)
            if ((size_t)r->values[j].off + r->values[j].len > size)
                abort();
    }
    (void)mv_lsel_match(&a, get, NULL);
    size_t n = mv_lsel_format(&a, fa, sizeof fa);
    if (n >= sizeof fa)
        return 0; /* canonical form longer than the limit: nothing more to compare */
    if (n <= MV_LSEL_TEXT_MAX) {
        if (mv_lsel_parse(fa, n, &b, err, sizeof err) != 0)
            abort();
        mv_lsel_format(&b, fb, sizeof fb);
        if (strcmp(fa, fb) != 0)
            abort();
    }
    return 0;
}
