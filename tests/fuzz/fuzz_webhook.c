/* fuzz_webhook: AdmissionReview bodies through mv_wh_review, and annotation values through the
 * quantity parser. mv_webhook's review and quantity code is compiled into the driver. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_webhook.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mv_wh_config cfg;
    mv_wh_config_default(&cfg);
    /* The first byte picks a page size and a per-pod limit, so the limit paths run too. */
    if (size > 0 && data[0] == 'Q') {
        uint64_t bytes;
        int rounded;
        char why[128];
        int rc = mv_wh_quantity_bytes((const char *)data + 1, size - 1, &bytes, &rounded, why,
                                      sizeof why);
        if (rc == 0 && (bytes == 0 || bytes > INT64_MAX))
            abort();
        return 0;
    }
    if (size > 0) {
        cfg.page_size = 4096u << (data[0] & 3);
        cfg.max_pages_per_pod = 1u + (data[0] >> 2) * 97u;
    }
    mv_wh_result r;
    if (mv_wh_review(&cfg, (const char *)data, size, &r) != 0)
        return 0;
    if (!r.body || strlen(r.body) != r.body_len)
        abort();
    if ((r.kind == MV_WH_PATCHED) != (r.patch != NULL))
        abort();
    if (r.kind == MV_WH_DENIED && (!r.message || r.http_status != 200))
        abort();
    mv_wh_result_free(&r);
    return 0;
}
