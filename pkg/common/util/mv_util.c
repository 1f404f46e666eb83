/* mv_util: the base of the module: clocks, thread names, non-blocking descriptors, checked
 * formatting, the capped buffer and exact option names. Calls nothing above it (mv_parse.c,
 * mv_util_mem.c). */
#include "mv_util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static uint64_t clock_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t mv_util_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

uint64_t mv_util_mono_ms(void)
{
    return clock_ns(CLOCK_MONOTONIC) / 1000000u;
}

uint64_t mv_util_wall_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

void mv_util_thread_name(const char *name)
{
    char n[16];
    snprintf(n, sizeof n, "%s", name); /* the kernel keeps 15 bytes and the NUL */
    (void)prctl(PR_SET_NAME, (unsigned long)n, 0, 0, 0);
}

int mv_util_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

void mv_util_err_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int mv_util_vfmt(char *buf, size_t len, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, len, fmt, ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

int mv_util_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = mv_util_vfmt(buf, len, fmt, ap);
    va_end(ap);
    return rc;
}

int mv_util_buf_append(mv_util_buf *b, const void *p, size_t n)
{
    if (b->error)
        return b->error;
    if (n > b->cap - b->len)
        return b->error = -E2BIG;
    if (b->len + n + 1 > b->alloc) {
        size_t want = b->alloc ? b->alloc : 4096;
        while (want < b->len + n + 1)
            want *= 2;
        if (want > b->cap + 1)
            want = b->cap + 1;
        char *d = realloc(b->data, want);
        if (!d)
            return b->error = -ENOMEM;
        b->data = d;
        b->alloc = want;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

void mv_util_buf_free(mv_util_buf *b)
{
    size_t cap = b->cap;
    free(b->data);
    memset(b, 0, sizeof *b);
    b->cap = cap;
}

size_t mv_util_buf_curl_write(char *p, size_t size, size_t n, void *userdata)
{
    size_t bytes = size * n;
    if (n && bytes / n != size)
        return 0;
    return mv_util_buf_append(userdata, p, bytes) == 0 ? bytes : 0;
}

int mv_util_opts_exact(const char *prog, int argc, char *const *argv, const struct option *opts)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break;
        if (strncmp(a, "--", 2) != 0)
            continue;
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        const struct option *hit = NULL, *guess = NULL;
        for (const struct option *o = opts; o->name; o++) {
            if (strlen(o->name) == n && strncmp(o->name, name, n) == 0)
                hit = o;
            else if (!guess && strncmp(o->name, name, n) == 0)
                guess = o;
        }
        if (!hit) {
            if (guess)
                fprintf(stderr, "%s: unknown option --%.*s (did you mean --%s?)\n", prog, (int)n,
                        name, guess->name);
            else
                fprintf(stderr, "%s: unknown option --%.*s (see --help)\n", prog, (int)n, name);
            return -1;
        }
        if (hit->has_arg == required_argument && !eq)
            i++; /* its value is the next word, whatever it looks like */
    }
    return 0;
}
