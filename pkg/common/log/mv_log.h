/* mv_log: one structured (logfmt) line per event on stderr. */
#ifndef MV_LOG_H
#define MV_LOG_H

#include <stdarg.h>

typedef enum {
    MV_LOG_DEBUG = 0,
    MV_LOG_INFO = 1,
    MV_LOG_WARN = 2,
    MV_LOG_ERROR = 3,
} mv_log_level;

/* Sets the component name printed on every line (e.g. "agent") and the lowest
 * level that is printed. Safe to call again; not thread-safe against mv_log. */
void mv_log_init(const char *component, mv_log_level min_level);

/* Parses "debug", "info", "warn" or "error". Returns 0, or -1 if unknown. */
int mv_log_parse_level(const char *s, mv_log_level *out);

/* Prints one line: ts=... level=... comp=... event=<event> <fields>.
 * `fields_fmt` is printf-style and should produce space-separated key=value
 * pairs; wrap free text values in mv_log_q(). The line is written with one
 * write(2) so lines from threads and processes never interleave. */
void mv_log(mv_log_level level, const char *event, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns `s` quoted and escaped for a logfmt value ("a b" -> "\"a b\"").
 * The result lives in a small thread-local ring (8 slots of 512 bytes), so up
 * to 8 calls may appear in one mv_log() call. Long values are truncated with
 * "...". NULL prints as "(null)". */
const char *mv_log_q(const char *s);

#define MV_DEBUG(ev, ...) mv_log(MV_LOG_DEBUG, ev, __VA_ARGS__)
#define MV_INFO(ev, ...)  mv_log(MV_LOG_INFO, ev, __VA_ARGS__)
#define MV_WARN(ev, ...)  mv_log(MV_LOG_WARN, ev, __VA_ARGS__)
#define MV_ERROR(ev, ...) mv_log(MV_LOG_ERROR, ev, __VA_ARGS__)

#endif
