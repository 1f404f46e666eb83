/* libFuzzer driver: Accept negotiation and escaping of arbitrary bytes in mv_expo. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_expo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    mv_expo_format f = mv_expo_negotiate(s);
    if (f != MV_EXPO_TEXT && f != MV_EXPO_OPENMETRICS && f != MV_EXPO_PROTOBUF)
        abort();

    /* The same bytes as HELP text and label value must render within the cap. */
    size_t cap = 64 + (size % 512);
    mv_expo *e = mv_expo_create(f, cap);
    if (e) {
        mv_expo_label l = {"v", s};
        mv_expo_family(e, "fuzz_value", MV_EXPO_GAUGE, s, s);
        mv_expo_sample(e, NULL, &l, 1, NULL, 0, NULL, 0, (double)size, MV_EXPO_NO_TS);
        mv_expo_finish(e);
        size_t len;
        const char *out = mv_expo_data(e, &len);
        if (len > cap)
            abort();
        /* Escaping leaves no bare newline inside a line: every line starts with '#' or the
         * metric name. */
        for (size_t i = 0; i + 1 < len; i++)
            if (out[i] == '\n' && out[i + 1] != '#' && out[i + 1] != 'f')
                abort();
        mv_expo_destroy(e);
    }
    free(s);
    return 0;
}
