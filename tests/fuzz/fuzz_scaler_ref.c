/* libFuzzer driver: KEDA's ScaledObjectRef bytes to the scaler's trigger metadata
 * (mv_scaler_meta_from_ref: protobuf-c unpack, then the strict metadata parse). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_scaler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mv_scaler_meta m;
    char err[256];
    int rc = mv_scaler_meta_from_ref(data, size, &m, err, sizeof err);
    if (rc == 0) {
        if (!m.metric[0] || !m.namespace_[0] || m.has_selector != (m.selector.nreqs > 0) ||
            !(m.target > 0))
            abort();
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
