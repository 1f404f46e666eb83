/* mv_rdma_token: reads and checks the shared token file (libc only). */
#include "mv_rdma.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int mv_rdma_token_load(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    char buf[256];
    size_t n = 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(e));
        return -e;
    }
    n = fread(buf, 1, sizeof buf - 1, f);
    int toolong = !feof(f) && fgetc(f) != EOF;
    fclose(f);
    buf[n] = 0;
    char *b = buf, *e = buf + n;
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    size_t len = (size_t)(e - b);
    if (toolong || len < 1 || len > MV_RDMA_TOKEN_MAX || len >= outlen) {
        snprintf(err, errlen, "token in %s must be 1 to %d characters", path, MV_RDMA_TOKEN_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++)
        if (b[i] < 0x21 || b[i] > 0x7e) {
            snprintf(err, errlen, "token in %s must be printable ASCII without spaces", path);
            return -EINVAL;
        }
    memcpy(out, b, len);
    out[len] = 0;
    return 0;
}
