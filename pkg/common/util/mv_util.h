/* mv_util: small helpers every module shares: clocks, file descriptors, the parsers of flag
 * and configuration values, bounded strings, a capped growable buffer, and the size of setup
 * error messages. libc only.
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
void mv_util_err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- Clocks ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC: for intervals, deadlines and timeouts (never jumps). */
uint64_t mv_util_mono_ns(void);
uint64_t mv_util_mono_ms(void);
/* CLOCK_REALTIME: wall-clock time since the epoch, for timestamps that leave the process. */
uint64_t mv_util_wall_ns(void);

/* ---- Threads ----------------------------------------------------------------- */

/* Names the calling thread (at most 15 bytes are kept), so that `top -H`, `ps -L`, perf and
 * /proc/PID/task/TID/comm say which of a process's threads is which. */
void mv_util_thread_name(const char *name);

/* ---- Memory ------------------------------------------------------------------ */

/* Keeps up to `bytes` of freed heap in the process instead of handing it back to the kernel
 * at each free (glibc: the trim threshold; the mmap threshold fixed at its largest too, so that
 * glibc no longer moves either and blocks of up to 32 MiB come from the heap). For a daemon
 * that allocates and frees the same large working set again and again - the collector's
 * snapshot per scrape - whose pages would otherwise be faulted in and zeroed every time.
 * Returns 0, -EINVAL when the C library refuses a value, or -ENOSYS where it has no such
 * setting. */
int mv_util_malloc_keep(size_t bytes);

/* Whether malloc puts this process's heap on transparent huge pages. glibc does when the
 * tunable glibc.malloc.hugetlb is 1 (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, read as the process
 * starts; 2: reserved huge pages) and the kernel's THP mode is "madvise" or "always"; a heap of
 * many small records walked every millisecond (the collector's analytics) then needs a few
 * hundred TLB entries instead of tens of thousands. Writes the kernel's mode into `thp`
 * ("always", "madvise", "never"; "unknown" when /sys/kernel/mm/transparent_hugepage/enabled
 * cannot be read or parsed) and returns the tunable's value: 0 when unset, -1 when it is not a
 * whole number. */
int mv_util_malloc_huge_pages(char *thp, size_t thplen);

/* ---- File descriptors -------------------------------------------------------- */

/* Sets O_NONBLOCK on `fd`. Returns 0 or -errno. */
int mv_util_set_nonblock(int fd);

/* ---- Command-line options ---------------------------------------------------- */

struct option;
/* getopt_long takes any unambiguous prefix of a long option (--tick for --tick-ms), which
 * hides typos and silently changes meaning as options are added. Call this before
 * getopt_long: it checks that every --name in argv (up to a lone "--") is spelled out in
 * full, printing "PROG: unknown option --x (did you mean --y?)" otherwise. Returns 0 or -1. */
int mv_util_opts_exact(const char *prog, int argc, char *const *argv, const struct option *opts);

/* ---- Parsing operator input -------------------------------------------------- */

/* One set of parsers for what operators write, in flags and configuration files alike, so a
 * value means the same wherever it is given. Each takes the whole text: no spaces, no sign, no
 * hexadecimal. Each stores its result only on success and returns 0, or -EINVAL (malformed) /
 * -ERANGE (outside [min, max]) with one sentence in `err` that quotes the text and states the
 * accepted form; callers prefix the flag or key name. */

/* A whole number in [min, max]: "15000". */
int mv_util_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *err,
                      size_t errlen);
/* A size in bytes in [min, max]: "65536", or a whole number with a binary suffix: "64Ki"
 * (x 1024), "16Mi" (x 2^20), "1Gi" (x 2^30). Decimal suffixes (k, M, G) are refused rather
 * than guessed. */
int mv_util_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *err,
                       size_t errlen);

/* A decimal number in [min, max]: "0.01", "2.5e-3", "30". No sign, no hexadecimal, no inf or
 * nan. */
int mv_util_parse_number(const char *text, double min, double max, double *out, char *err,
                         size_t errlen);

#define MV_LISTEN_ANY_HOST      1u /* an empty HOST (":8443") is taken: every address */
#define MV_LISTEN_PORT_ZERO     2u /* PORT 0 is taken: any free port */
#define MV_LISTEN_PORT_OPTIONAL 4u /* "HOST" alone is taken; *port then keeps its value */
/* A listen address HOST:PORT, an IPv6 address in brackets ("[::1]:7470"), PORT 1..65535
 * (0 too with MV_LISTEN_PORT_ZERO). HOST is not resolved here: it must be non-empty (unless
 * MV_LISTEN_ANY_HOST), without spaces, control characters or brackets, and shorter than
 * hostlen; an unbracketed HOST holds no colon. Writes HOST without brackets into `host`. */
int mv_util_parse_listen(const char *text, unsigned flags, char *host, size_t hostlen,
                         uint16_t *port, char *err, size_t errlen);

/* A file mode of permission bits only, in octal: one to four digits 0-7 ("0660", "660"),
 * 0000 to 0777. Symbolic modes ("rw", "u+rw"), decimal digits 8 and 9, and the setuid,
 * setgid and sticky bits (above 0777) are refused. */
int mv_util_parse_mode(const char *text, uint32_t *out, char *err, size_t errlen);
/* A group: a numeric gid (decimal digits: 0 to 4294967294, with or without a group entry,
 * as chown(1) takes it) or the name of a group on this host (getgrnam_r). */
int mv_util_parse_group(const char *text, uint32_t *out, char *err, size_t errlen);

/* The value of `name` in a GLIBC_TUNABLES string ("glibc.malloc.hugetlb=1:glibc.malloc.
 * arena_max=2"; the last setting of a name wins, as in glibc). Returns 1 and copies the value
 * into `val`, 0 when the name is absent, or -ERANGE when the value does not fit in vallen
 * (then `val` is empty). */
int mv_util_parse_tunable(const char *tunables, const char *name, char *val, size_t vallen);
/* The selected word of a kernel setting file that lists its choices with the current one in
 * brackets ("always [madvise] never"). Returns 0 and copies it into `word`, or -EINVAL (no
 * bracketed word of letters, digits, '_' or '+') / -ERANGE (it does not fit). */
int mv_util_parse_bracketed(const char *text, char *word, size_t wordlen);

/* For command lines: parse `text`, the value of `flag`, or print "PROG: FLAG: <why>" on
 * stderr and return -1. */
int mv_util_flag_u64(const char *prog, const char *flag, const char *text, uint64_t min,
                     uint64_t max, uint64_t *out);
int mv_util_flag_size(const char *prog, const char *flag, const char *text, uint64_t min,
                      uint64_t max, uint64_t *out);
int mv_util_flag_number(const char *prog, const char *flag, const char *text, double min,
                        double max, double *out);
int mv_util_flag_mode(const char *prog, const char *flag, const char *text, uint32_t *out);
int mv_util_flag_group(const char *prog, const char *flag, const char *text, uint32_t *out);

/* ---- Bounded strings --------------------------------------------------------- */

/* snprintf that reports truncation: formats into `buf` (always NUL-terminated
 * when len > 0) and returns 0, or -ENAMETOOLONG when the result did not fit
 * (the buffer then holds a truncated prefix), or -EINVAL on an encoding error. */
int mv_util_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int mv_util_vfmt(char *buf, size_t len, const char *fmt, va_list ap);

/* ---- Capped buffer ----------------------------------------------------------- */

/* A growable byte buffer with a hard cap, for bodies received over HTTP. The
 * data is always NUL-terminated (data[len] == 0) once anything was appended.
 * Zero-initialise and set `cap`; free with mv_util_buf_free. */
typedef struct mv_util_buf {
    char *data;
    size_t len;
    size_t alloc;
    size_t cap;
    int error; /* 0, or why an append failed: -E2BIG (beyond cap) or -ENOMEM */
} mv_util_buf;

/* Appends `n` bytes. Returns 0, or -E2BIG (cap reached) / -ENOMEM: nothing is
 * appended, `error` is set and every later append fails too. */
int mv_util_buf_append(mv_util_buf *b, const void *p, size_t n);
/* Frees the data and zeroes the buffer, keeping `cap`. */
void mv_util_buf_free(mv_util_buf *b);
/* A libcurl CURLOPT_WRITEFUNCTION that appends to the mv_util_buf given as
 * CURLOPT_WRITEDATA; it returns 0 (which aborts the transfer) on overflow. */
size_t mv_util_buf_curl_write(char *p, size_t size, size_t n, void *userdata);

/* ---- UTF-8 ------------------------------------------------------------------- */

/* Client bytes echoed into a response (JSON, text, logs) go through these first, so that
 * every body is valid UTF-8 (RFC 3629: no overlong forms, surrogates or code points above
 * U+10FFFF). */

/* The length (1..4) of the valid character at s[0..len), or 0 when s starts with an invalid
 * or truncated sequence (or len is 0). */
size_t mv_util_utf8_char_len(const char *s, size_t len);
/* 1 if s[0..len) is valid UTF-8, else 0. */
int mv_util_utf8_valid(const char *s, size_t len);
/* The longest prefix length <= max of s[0..len) that does not end inside a valid multi-byte
 * character (an invalid byte counts as one unit). */
size_t mv_util_utf8_cut(const char *s, size_t len, size_t max);
/* Copies s[0..len) into out (NUL-terminated, outlen > 0), replacing each invalid byte by
 * U+FFFD and stopping before a character that would not fit. Returns the bytes written. */
size_t mv_util_utf8_sanitize(const char *in, size_t len, char *out, size_t outlen);
/* mv_util_utf8_sanitize into a new malloc'd string (free it), or NULL when out of memory. */
char *mv_util_utf8_dup(const char *in, size_t len);

#ifdef __cplusplus
}
#endif
#endif
