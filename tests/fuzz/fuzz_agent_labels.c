/* libFuzzer driver: the agent's check of CreateSegmentRequest labels on the request's protobuf
 * bytes (mv_agentsvc_check_raw_labels): any input is walked without reading past its end, and a
 * refusal always says why. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "mv_agentsvc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    int rc = mv_agentsvc_check_raw_labels(data, size, err, sizeof err);
    if (rc != 0 && (rc != -EINVAL || err[0] == '\0'))
        __builtin_trap();
    return 0;
}
