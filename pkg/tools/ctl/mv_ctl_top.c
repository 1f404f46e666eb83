/* mv_ctl_top: `microviewctl top`: live per-pod values, read rates and anomaly scores from a
 * collector (HTTP, JSON). Calls no other file of the module. */
#include <curl/curl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "mv_ctl.h"
#include "mv_opts.h"
#include "mv_util.h"

#define MAX_BODY  (64u << 20)
#define IDENT_MAX 8192 /* 16 labels of 127-byte names and 255-byte values fit */
/* The columns after SEGMENT: " STATE READS/S INTERVAL ANOMALY CHANGES". */
#define VALUES_WIDTH 51
#define SEGMENT_MIN  20

/* Fetches URL; returns the parsed JSON or NULL (reason printed). */
static json_object *fetch(CURL *c, const char *url)
{
    mv_util_buf b = {.cap = MAX_BODY};
    long status = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mv_util_buf_curl_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    json_object *o = NULL;
    if (rc != CURLE_OK)
        fprintf(stderr, "microviewctl top: %s: %s\n", url, curl_easy_strerror(rc));
    else if (status != 200)
        fprintf(stderr, "microviewctl top: %s: HTTP %ld\n", url, status);
    else if (!(o = json_tokener_parse(b.data ? b.data : "")))
        fprintf(stderr, "microviewctl top: %s: the response is not JSON\n", url);
    mv_util_buf_free(&b);
    return o;
}

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static double num(json_object *o, const char *k)
{
    json_object *v = get(o, k);
    return v && !json_object_is_type(v, json_type_null) ? json_object_get_double(v) : NAN;
}

static void labels_str(json_object *l, char *out, size_t cap, int braces)
{
    size_t n = 0;
    out[0] = '\0';
    if (!l || json_object_object_length(l) == 0)
        return;
    if (braces)
        n += (size_t)snprintf(out + n, cap - n, "{");
    int first = 1;
    json_object_object_foreach(l, k, v)
    {
        if (n >= cap)
            break;
        n += (size_t)snprintf(out + n, cap - n, braces ? "%s%s=\"%s\"" : "%s%s=%s",
                              first ? "" : (braces ? "," : " "), k, json_object_get_string(v));
        first = 0;
    }
    if (braces && n < cap)
        snprintf(out + n, cap - n, "}");
}

/* A segment's identity, never cut: NAMESPACE/POD/CONTAINER (those present) when it has a pod
 * label, then its other labels as k=v; without a pod label all its labels; without labels its
 * id. */
static void identity(json_object *s, char *out, size_t cap)
{
    static const char *const parts[] = {"namespace", "pod", "container"};
    json_object *l = get(s, "labels");
    size_t n = 0;
    out[0] = '\0';
    int kube = get(l, "pod") != NULL;
    for (size_t i = 0; kube && i < 3; i++) {
        json_object *v = get(l, parts[i]);
        if (v && n < cap)
            n +=
                (size_t)snprintf(out + n, cap - n, "%s%s", n ? "/" : "", json_object_get_string(v));
    }
    if (l) {
        json_object_object_foreach(l, k, v)
        {
            if (kube && (!strcmp(k, "namespace") || !strcmp(k, "pod") || !strcmp(k, "container")))
                continue;
            if (n < cap)
                n += (size_t)snprintf(out + n, cap - n, "%s%s=%s", n ? " " : "", k,
                                      json_object_get_string(v));
        }
    }
    if (!out[0])
        snprintf(out, cap, "%s", json_object_get_string(get(s, "id")));
}

static void fmt_num(double v, char *out, size_t cap)
{
    if (isnan(v))
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.4g", v);
}

typedef struct row {
    json_object *seg;
    double score;
    char *ident;
} row;

static int row_cmp(const void *a, const void *b)
{
    double x = ((const row *)a)->score, y = ((const row *)b)->score;
    x = isnan(x) ? -1 : x;
    y = isnan(y) ? -1 : y;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* One frame. `cols`: the terminal's width, 0 for none (a pipe): the SEGMENT column is as wide
 * as the longest identity, and when that does not fit beside the values in `cols`, a longer
 * identity gets a line of its own with its values on the next line. */
static void print_frame(FILE *f, const char *base, json_object *root, unsigned limit, size_t cols)
{
    json_object *segs = get(root, "segments");
    size_t n = segs ? json_object_array_length(segs) : 0;
    time_t now = time(NULL);
    char ts[32], a[64], b[64], c[64], lab[512];
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime(&now));
    fprintf(f, "microview top  %s  %zu segment(s)  ticks %.0f  %s\n", base, n, num(root, "ticks"),
            ts);
    row *rows = calloc(n ? n : 1, sizeof *rows);
    char *idents = malloc(n ? n * IDENT_MAX : 1);
    if (!rows || !idents) {
        free(rows);
        free(idents);
        return;
    }
    size_t width = strlen("SEGMENT");
    for (size_t i = 0; i < n; i++) {
        rows[i].seg = json_object_array_get_idx(segs, i);
        rows[i].score = num(rows[i].seg, "anomaly_score");
        rows[i].ident = idents + i * IDENT_MAX;
        identity(rows[i].seg, rows[i].ident, IDENT_MAX);
        size_t len = strlen(rows[i].ident);
        width = len > width ? len : width;
    }
    if (cols) {
        size_t fit = cols > VALUES_WIDTH + SEGMENT_MIN ? cols - VALUES_WIDTH : SEGMENT_MIN;
        width = width < fit ? width : fit;
    }
    fprintf(f, "%-*s %-11s %9s %10s %8s %8s\n", (int)width, "SEGMENT", "STATE", "READS/S",
            "INTERVAL", "ANOMALY", "CHANGES");
    qsort(rows, n, sizeof *rows, row_cmp);
    for (size_t i = 0; i < n; i++) {
        json_object *s = rows[i].seg;
        fmt_num(rows[i].score, a, sizeof a);
        fmt_num(num(s, "read_interval_seconds") * 1e3, b, sizeof b);
        fmt_num(num(s, "reads_per_second"), c, sizeof c);
        if (strlen(rows[i].ident) > width) /* whole, on a line of its own */
            fprintf(f, "%s\n%-*s", rows[i].ident, (int)width, "");
        else
            fprintf(f, "%-*s", (int)width, rows[i].ident);
        fprintf(f, " %-11s %9s %8sms %8s %8.0f\n", json_object_get_string(get(s, "state")), c, b, a,
                num(s, "changes"));
        if (get(s, "last_error"))
            fprintf(f, "  last error: %s: %s\n", json_object_get_string(get(s, "last_error")),
                    json_object_get_string(get(s, "last_error_detail")));
        json_object *ser = get(s, "series");
        size_t m = ser ? json_object_array_length(ser) : 0;
        for (size_t j = 0; j < m && j < limit; j++) {
            json_object *x = json_object_array_get_idx(ser, j);
            char name[1024], v1[32], v2[32], v3[32];
            labels_str(get(x, "labels"), lab, sizeof lab, 1);
            snprintf(name, sizeof name, "%s%s", json_object_get_string(get(x, "name")), lab);
            const char *type = json_object_get_string(get(x, "type"));
            if (strcmp(type, "counter") == 0) {
                fmt_num(num(x, "value"), v1, sizeof v1);
                fmt_num(num(x, "rate"), v2, sizeof v2);
                fmt_num(num(x, "rate_max"), v3, sizeof v3);
                fprintf(f, "  %-50.50s value %-10s rate %s/s  max %s/s\n", name, v1, v2, v3);
            } else if (strcmp(type, "gauge") == 0) {
                fmt_num(num(x, "value"), v1, sizeof v1);
                fmt_num(num(x, "window_mean"), v2, sizeof v2);
                fmt_num(num(x, "window_p99"), v3, sizeof v3);
                fprintf(f, "  %-50.50s value %-10s mean %s  p99 %s\n", name, v1, v2, v3);
            } else {
                fmt_num(num(x, "count"), v1, sizeof v1);
                fmt_num(num(x, "window_p50"), v2, sizeof v2);
                fmt_num(num(x, "window_p99"), v3, sizeof v3);
                fprintf(f, "  %-50.50s count %-10s p50 %s  p99 %s\n", name, v1, v2, v3);
            }
        }
        if (m > limit)
            fprintf(f, "  ... %zu more\n", m - limit);
    }
    free(idents);
    free(rows);
}

/* The terminal's width when stdout is one, else $COLUMNS when set, else 0 (no limit). */
static size_t term_cols(void)
{
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *e = getenv("COLUMNS");
    uint64_t v;
    char err[MV_ERR_MAX];
    if (e && mv_util_parse_u64(e, 1, 100000, &v, err, sizeof err) == 0)
        return (size_t)v;
    return 0;
}

int mv_ctl_top(int argc, char **argv, const volatile int *stop)
{
    const char *base = "http://127.0.0.1:9469";
    int once = 0;
    double interval = 1.0;
    uint64_t limit = 8, width = 0, window_ms = 5000;
    const char *watch = NULL, *metrics = "0", *token_file = NULL;
    double seconds = 0;
    mv_opts_opt opts[] = {
        {.name = "collector",
         .short_name = 'c',
         .kind = MV_OPTS_STRING,
         .meta = "URL",
         .dest = &base,
         .help = "the collector's HTTP address"},
        {.name = "once",
         .short_name = 'o',
         .kind = MV_OPTS_FLAG,
         .dest = &once,
         .help = "print one frame and exit (exit status 1 when the collector cannot be read)"},
        {.name = "interval",
         .short_name = 'i',
         .kind = MV_OPTS_NUMBER,
         .meta = "S",
         .dlo = 0.1,
         .dhi = 3600,
         .dest = &interval,
         .help = "refresh interval in seconds"},
        {.name = "limit",
         .short_name = 'l',
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 0,
         .hi = UINT32_MAX,
         .dest = &limit,
         .help = "series rows shown per segment; the rest are counted (... N more)"},
        {.name = "watch",
         .kind = MV_OPTS_STRING,
         .meta = "SEGMENT_ID",
         .dest = &watch,
         .help = "the live view's stream of one segment (every read) as sparklines instead; "
                 "ids and metric indexes: /api/v1/live/segments"},
        {.name = "metrics",
         .kind = MV_OPTS_STRING,
         .meta = "I,J,...",
         .dest = &metrics,
         .def = "0",
         .help = "--watch: catalog indexes of the metrics to draw"},
        {.name = "width",
         .kind = MV_OPTS_U64,
         .meta = "N",
         .lo = 16,
         .hi = 512,
         .dest = &width,
         .def = "the terminal's width less 62",
         .help = "--watch: columns of each sparkline"},
        {.name = "window-ms",
         .kind = MV_OPTS_U64,
         .meta = "MS",
         .lo = 1000,
         .hi = 86400000,
         .dest = &window_ms,
         .help = "--watch: the time the width spans"},
        {.name = "token-file",
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &token_file,
         .help = "--watch: a bearer token for a collector with --auth kubernetes"},
        {.name = "seconds",
         .kind = MV_OPTS_NUMBER,
         .meta = "S",
         .dlo = 0.1,
         .dhi = 86400,
         .dest = &seconds,
         .def = "until Ctrl-C or the stream's end",
         .help = "--watch: stop after S seconds"},
        {0},
    };
    const mv_opts_spec spec = {.prog = "microviewctl top",
                               .synopsis = "[options]",
                               .intro = "Live per-pod values, read rates and anomaly scores "
                                        "from a collector's /debug/segments.",
                               .opts = opts};
    int first, prc = mv_opts_parse(&spec, argc, argv, &first);
    if (prc)
        return mv_opts_status(prc);
    (void)first; /* arguments after the flags were never read */
    if (watch) {
        if (!metrics[0] || strspn(metrics, "0123456789,") != strlen(metrics) ||
            strlen(metrics) > 200) {
            fprintf(stderr, "microviewctl top: --metrics takes catalog indexes such as 0,1,2\n");
            return 2;
        }
        char token[4096] = "";
        if (token_file) {
            FILE *tf = fopen(token_file, "r");
            if (!tf || !fgets(token, sizeof token, tf)) {
                fprintf(stderr, "microviewctl top: --token-file %s: cannot read it\n", token_file);
                if (tf)
                    fclose(tf);
                return 2;
            }
            fclose(tf);
            token[strcspn(token, "\r\n")] = '\0';
        }
        size_t cols = term_cols();
        if (!width)
            width = cols > 80 ? (cols - 62 > 512 ? 512 : cols - 62) : 60;
        curl_global_init(CURL_GLOBAL_DEFAULT);
        int wrc = mv_ctl_top_watch(base, watch, metrics, (unsigned)width, (unsigned)window_ms,
                                   token_file ? token : NULL, once ? 2.5 : seconds,
                                   isatty(STDOUT_FILENO), stop);
        curl_global_cleanup();
        return wrc;
    }
    char url[1024];
    snprintf(url, sizeof url, "%s/debug/segments?series=1", base);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *c = curl_easy_init();
    int rc = 0;
    if (!c) {
        fprintf(stderr, "microviewctl top: cannot create an HTTP client\n");
        rc = 1;
        goto cleanup_global;
    }
    while (!(stop && *stop)) {
        json_object *root = fetch(c, url);
        if (!root && once) {
            rc = 1;
            break;
        }
        if (!once)
            fputs("\033[H\033[2J", stdout);
        if (root)
            print_frame(stdout, base, root, (unsigned)limit, term_cols());
        json_object_put(root);
        fflush(stdout);
        if (once)
            break;
        struct timespec ts = {(time_t)interval,
                              (long)((interval - (double)(time_t)interval) * 1e9)};
        nanosleep(&ts, NULL);
    }
    curl_easy_cleanup(c);
cleanup_global:
    curl_global_cleanup();
    return rc;
}
