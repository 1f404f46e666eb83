/* libFuzzer driver: mv_config_parse on arbitrary YAML bytes, then mv_config_finish. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mv_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mv_config c;
    char err[256];
    mv_config_defaults(&c);
    if (mv_config_parse(&c, (const char *)data, size, err, sizeof err) == 0) {
        /* Every string field stays NUL-terminated within its buffer. */
        if (strnlen(c.state_dir, sizeof c.state_dir) == sizeof c.state_dir ||
            strnlen(c.resource_name, sizeof c.resource_name) == sizeof c.resource_name)
            __builtin_trap();
        mv_config_finish(&c, err, sizeof err);
    } else if (!err[0]) {
        __builtin_trap(); /* a refusal always says why */
    }
    return 0;
}
