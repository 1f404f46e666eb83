/* mv_util: small helpers every module shares: clocks, file descriptors, bounded strings,
 * a capped growable buffer, and the size of setup error messages. libc only.
 *
 * Error messages of setup calls: a function that can fail for a reason the
 * operator must act on takes `char *err, size_t errlen`; callers pass a buffer
 * of MV_ERR_MAX bytes. The function writes one sentence (no trailing period,
 * no newline) and returns a negative errno value.
 */
#ifndef MV_UTIL_H
#define MV_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the buffer callers give to functions that report an error text. */
#define MV_ERR_MAX 1024

/* Writes an error sentence into `err` (truncated to errlen; NULL or 0 is a
 * no-op), for functions following the convention above. */
void mv_err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- Clocks ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC: for intervals, deadlines and timeouts (never jumps). */
uint64_t mv_mono_ns(void);
uint64_t mv_mono_ms(void);
/* CLOCK_REALTIME: wall-clock time since the epoch, for timestamps that leave the process. */
uint64_t mv_wall_ns(void);

/* ---- File descriptors -------------------------------------------------------- */

/* Sets O_NONBLOCK on `fd`. Returns 0 or -errno. */
int mv_set_nonblock(int fd);

/* ---- Bounded strings --------------------------------------------------------- */

/* snprintf that reports truncation: formats into `buf` (always NUL-terminated
 * when len > 0) and returns 0, or -ENAMETOOLONG when the result did not fit
 * (the buffer then holds a truncated prefix), or -EINVAL on an encoding error. */
int mv_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int mv_vfmt(char *buf, size_t len, const char *fmt, va_list ap);

/* ---- Capped buffer ----------------------------------------------------------- */

/* A growable byte buffer with a hard cap, for bodies received over HTTP. The
 * data is always NUL-terminated (data[len] == 0) once anything was appended.
 * Zero-initialise and set `cap`; free with mv_buf_free. */
typedef struct mv_buf {
    char *data;
    size_t len;
    size_t alloc;
    size_t cap;
    int error; /* 0, or why an append failed: -E2BIG (beyond cap) or -ENOMEM */
} mv_buf;

/* Appends `n` bytes. Returns 0, or -E2BIG (cap reached) / -ENOMEM: nothing is
 * appended, `error` is set and every later append fails too. */
int mv_buf_append(mv_buf *b, const void *p, size_t n);
/* Frees the data and zeroes the buffer, keeping `cap`. */
void mv_buf_free(mv_buf *b);
/* A libcurl CURLOPT_WRITEFUNCTION that appends to the mv_buf given as
 * CURLOPT_WRITEDATA; it returns 0 (which aborts the transfer) on overflow. */
size_t mv_buf_curl_write(char *p, size_t size, size_t n, void *userdata);

#ifdef __cplusplus
}
#endif
#endif
