/* mv_rdmatoken: reads and checks the shared token file (libc only). */
#include "mv_rdmatoken.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int mv_rdmatoken_load(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    char buf[256];
    size_t n = 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(e));
        return -e;
    }
    /* A directory opens but does not read (a Secret volume given where its key file was
     * meant): that is a read error with its reason, not an empty token. */
    errno = 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    int rerr = ferror(f) ? (errno ? errno : EIO) : 0;
    int toolong = !rerr && !feof(f) && fgetc(f) != EOF;
    if (rerr) {
        fclose(f);
        snprintf(err, errlen, "cannot read token file %s: %s%s", path, strerror(rerr),
                 rerr == EISDIR ? " (give the file inside it that holds the token)" : "");
        return -rerr;
    }
    fclose(f);
    buf[n] = 0;
    char *b = buf, *e = buf + n;
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    size_t len = (size_t)(e - b);
    if (len < 1) {
        snprintf(err, errlen, "token file %s is empty (or only white space)", path);
        return -EINVAL;
    }
    if (toolong || len > MV_RDMA_TOKEN_MAX || len >= outlen) {
        snprintf(err, errlen, "token in %s is longer than %d characters", path, MV_RDMA_TOKEN_MAX);
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
