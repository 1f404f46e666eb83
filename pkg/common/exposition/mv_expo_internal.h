/* mv_expo_internal: what the renderer and the number formatting of pkg/common/exposition share.
 * Not part of the module's interface: include mv_expo.h outside this directory. */
#ifndef MV_EXPO_INTERNAL_H
#define MV_EXPO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mv_expo.h"

/* ASCII decimal digit. */
static inline int expo_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* The same for a signed value (at least 21 bytes). */
size_t mv_expo__fmt_i64(int64_t v, char *out);

#endif
