/* libFuzzer driver: the API objects microview-scaler reads to name a workload without a
 * selector (mv_scsvc_parse_scaledobject, mv_scsvc_parse_scale). The first byte picks the
 * parser (even: ScaledObject, odd: Scale); the rest is the JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_scsvc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *json = (const char *)data + 1;
    size_t len = size - 1;
    char err[256];
    err[0] = '\0';
    if ((data[0] & 1) == 0) {
        mv_scsvc_target_ref t;
        int rc = mv_scsvc_parse_scaledobject(json, len, &t, err, sizeof err);
        if (rc == 0) {
            /* Accepted: every field filled and terminated within its array. */
            if (!t.name[0] || !t.kind[0] || !t.api_version[0] ||
                strnlen(t.name, sizeof t.name) == sizeof t.name ||
                strnlen(t.kind, sizeof t.kind) == sizeof t.kind ||
                strnlen(t.api_version, sizeof t.api_version) == sizeof t.api_version)
                abort();
            const char *r = mv_scsvc_scale_resource(&t);
            if (r && strcmp(t.api_version, "apps/v1") != 0)
                abort();
        } else if (!err[0]) {
            abort();
        }
    } else {
        char sel[MV_SCSVC_SELECTOR_MAX];
        int rc = mv_scsvc_parse_scale(json, len, sel, err, sizeof err);
        if (rc == 0 ? (!sel[0] || strnlen(sel, sizeof sel) == sizeof sel) : !err[0])
            abort();
    }
    return 0;
}
