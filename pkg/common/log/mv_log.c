/* mv_log: logfmt lines on stderr, one write(2) per event. */
#include "mv_log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *g_component = "microview";
static mv_log_level g_min = MV_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void mv_log_init(const char *component, mv_log_level min_level)
{
    if (component)
        g_component = component;
    g_min = min_level;
}

int mv_log_parse_level(const char *s, mv_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (s && strcmp(s, level_names[i]) == 0) {
            *out = (mv_log_level)i;
            return 0;
        }
    }
    if (s && strcmp(s, "warning") == 0) {
        *out = MV_LOG_WARN;
        return 0;
    }
    return -1;
}

static int needs_quotes(const char *s)
{
    if (*s == '\0')
        return 1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f)
            return 1;
    }
    return 0;
}

const char *mv_log_q(const char *s)
{
    static _Thread_local char ring[8][512];
    static _Thread_local unsigned slot;
    char *out = ring[slot++ % 8];
    size_t cap = sizeof ring[0], n = 0;

    if (!s)
        s = "(null)";
    if (!needs_quotes(s)) {
        size_t len = strlen(s);
        if (len < cap)
            return s;
    }
    out[n++] = '"';
    for (; *s && n < cap - 8; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else if (c < ' ' || c == 0x7f) {
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    if (*s) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n++] = '"';
    out[n] = '\0';
    return out;
}

static void log_v(mv_log_level level, const char *event, const char *fields_fmt, va_list ap)
{
    char line[4096];
    struct timespec ts;
    struct tm tm;
    size_t n;

    if (level < g_min || level > MV_LOG_ERROR)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ level=%s comp=%s event=%s",
                          ts.tv_nsec / 1000000, level_names[level], g_component, event);
    if (fields_fmt && *fields_fmt && n < sizeof line - 2) {
        line[n++] = ' ';
        int w = vsnprintf(line + n, sizeof line - n, fields_fmt, ap);
        if (w > 0)
            n += (size_t)w;
    }
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t r = write(STDERR_FILENO, line, n);
    (void)r;
}

void mv_log(mv_log_level level, const char *event, const char *fields_fmt, ...)
{
    va_list ap;
    va_start(ap, fields_fmt);
    log_v(level, event, fields_fmt, ap);
    va_end(ap);
}
