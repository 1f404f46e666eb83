/* mv_util_mem: the C library's memory tuning a daemon asks for (keeping freed heap, huge pages
 * for the heap). Sits above mv_parse.c: it reads the kernel's and glibc's settings with its
 * parsers. */
#include "mv_util.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mv_util_malloc_keep(size_t bytes)
{
#if defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD) && defined(__GLIBC__)
    int trim = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
    /* 32 MiB: glibc's largest mmap threshold on 64-bit systems (HEAP_MAX_SIZE / 2). */
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, trim) != 1)
        return -EINVAL;
    return 0;
#else
    (void)bytes;
    return -ENOSYS;
#endif
}

int mv_util_malloc_huge_pages(char *thp, size_t thplen)
{
    char text[256], word[32];
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    snprintf(thp, thplen, "%s",
             mv_util_parse_bracketed(text, word, sizeof word) == 0 ? word : "unknown");
    char val[8];
    if (mv_util_parse_tunable(getenv("GLIBC_TUNABLES"), "glibc.malloc.hugetlb", val, sizeof val) ==
        0)
        return 0;
    uint64_t v;
    return mv_util_parse_u64(val, 0, 2, &v, NULL, 0) == 0 ? (int)v : -1;
}
