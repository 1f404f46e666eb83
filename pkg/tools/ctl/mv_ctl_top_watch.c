/* mv_ctl_top_watch: microviewctl top --watch SEGMENT: the live view's stream (/api/v1/stream) as
 * terminal sparklines, one line per metric, each character one bucket's maximum. */
#include <curl/curl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mv_ctl.h"
#include "mv_util.h"

#define SPARK_MAX  512 /* columns */
#define SERIES_MAX 16
#define EVENT_MAX  (4u << 20) /* one event's bytes */
#define REDRAW_MS  200

typedef struct wseries {
    unsigned idx;
    char name[160];
    char type[16];
    double hi[SPARK_MAX]; /* bucket maxima, by key modulo SPARK_MAX */
    uint64_t key[SPARK_MAX];
    double last;
} wseries;

typedef struct watch {
    FILE *out;
    const volatile int *stop;
    unsigned width;
    int tty;
    uint64_t bw, maxk;
    wseries s[SERIES_MAX];
    size_t n;
    char *buf;
    size_t len, cap;
    char ended[64];
    uint64_t last_draw_ms, end_ms;
    unsigned frames;
} watch;

static wseries *series_of(watch *w, unsigned idx)
{
    for (size_t i = 0; i < w->n; i++)
        if (w->s[i].idx == idx)
            return &w->s[i];
    return NULL;
}

static json_object *jget(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static void on_event(watch *w, const char *ev, const char *data)
{
    json_object *j = json_tokener_parse(data);
    if (!j)
        return;
    if (!strcmp(ev, "hello")) {
        w->bw = (uint64_t)json_object_get_int64(jget(j, "bw"));
        json_object *ser = jget(j, "series");
        w->n = 0;
        for (size_t i = 0; ser && i < json_object_array_length(ser) && w->n < SERIES_MAX; i++) {
            json_object *x = json_object_array_get_idx(ser, i);
            wseries *s = &w->s[w->n++];
            memset(s, 0, sizeof *s);
            s->idx = (unsigned)json_object_get_int(jget(x, "i"));
            snprintf(s->name, sizeof s->name, "%s", json_object_get_string(jget(x, "name")));
            snprintf(s->type, sizeof s->type, "%s", json_object_get_string(jget(x, "type")));
            s->last = NAN;
        }
    } else if (!strcmp(ev, "data")) {
        json_object *ss = jget(j, "s");
        for (size_t i = 0; ss && i < json_object_array_length(ss); i++) {
            json_object *e = json_object_array_get_idx(ss, i);
            wseries *s = series_of(w, (unsigned)json_object_get_int(jget(e, "i")));
            json_object *b = jget(e, "b");
            for (size_t k = 0; s && b && k < json_object_array_length(b); k++) {
                json_object *x = json_object_array_get_idx(b, k);
                if (json_object_array_length(x) < 4)
                    continue;
                uint64_t key = (uint64_t)json_object_get_int64(json_object_array_get_idx(x, 0));
                json_object *hv = json_object_array_get_idx(x, 2);
                if (json_object_is_type(hv, json_type_null))
                    continue;
                double hi = json_object_get_double(hv);
                size_t slot = key % SPARK_MAX;
                if (s->key[slot] != key) {
                    s->key[slot] = key;
                    s->hi[slot] = hi;
                } else if (hi > s->hi[slot]) {
                    s->hi[slot] = hi;
                }
                s->last = hi;
                if (key > w->maxk)
                    w->maxk = key;
            }
        }
    } else if (!strcmp(ev, "end")) {
        snprintf(w->ended, sizeof w->ended, "%s", json_object_get_string(jget(j, "reason")));
    } else if (!strcmp(ev, "drop")) {
        fprintf(stderr, "microviewctl top: %lld reads of metric %d dropped (slow reader)\n",
                (long long)json_object_get_int64(jget(j, "lost")),
                json_object_get_int(jget(j, "i")));
    }
    json_object_put(j);
}

static void draw(watch *w)
{
    static const char *bars[] = {"\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                 "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88"};
    if (w->tty)
        fputs("\033[H\033[2J", w->out);
    fprintf(w->out, "%u columns of %.3f ms each (max per column)\n", w->width, (double)w->bw / 1e6);
    for (size_t i = 0; i < w->n; i++) {
        wseries *s = &w->s[i];
        double lo = INFINITY, hi = -INFINITY;
        uint64_t k0 = w->maxk >= w->width ? w->maxk - w->width + 1 : 0;
        for (uint64_t k = k0; k <= w->maxk; k++) {
            size_t slot = k % SPARK_MAX;
            if (s->key[slot] == k && k) {
                lo = s->hi[slot] < lo ? s->hi[slot] : lo;
                hi = s->hi[slot] > hi ? s->hi[slot] : hi;
            }
        }
        fprintf(w->out, "%-32.32s %-9s ", s->name, s->type);
        for (uint64_t k = k0; k <= w->maxk && w->maxk; k++) {
            size_t slot = k % SPARK_MAX;
            if (s->key[slot] != k) {
                fputc(' ', w->out);
                continue;
            }
            int lvl = hi > lo ? (int)((s->hi[slot] - lo) / (hi - lo) * 7.0 + 0.5) : 0;
            fputs(bars[lvl < 0 ? 0 : lvl > 7 ? 7 : lvl], w->out);
        }
        fprintf(w->out, " %.6g (max %.6g)\n", s->last, hi);
    }
    fflush(w->out);
    w->frames++;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    watch *w = arg;
    size_t n = size * nmemb;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 65536;
        while (cap < w->len + n + 1)
            cap *= 2;
        char *b = cap <= EVENT_MAX ? realloc(w->buf, cap) : NULL;
        if (!b)
            return 0; /* an event larger than EVENT_MAX: stop */
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    w->buf[w->len] = '\0';
    char *start = w->buf, *end;
    while ((end = strstr(start, "\n\n")) != NULL) {
        *end = '\0';
        char ev[32] = "message";
        const char *data = NULL;
        for (char *save = NULL, *line = strtok_r(start, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            if (!strncmp(line, "event: ", 7))
                snprintf(ev, sizeof ev, "%s", line + 7);
            else if (!strncmp(line, "data: ", 6))
                data = line + 6;
        }
        if (data)
            on_event(w, ev, data);
        start = end + 2;
    }
    w->len -= (size_t)(start - w->buf);
    memmove(w->buf, start, w->len + 1);
    uint64_t now = mv_util_mono_ms();
    if (w->n && now - w->last_draw_ms >= REDRAW_MS) {
        draw(w);
        w->last_draw_ms = now;
    }
    if ((w->stop && *w->stop) || (w->end_ms && now >= w->end_ms) || w->ended[0])
        return 0;
    return n;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    watch *w = arg;
    (void)a, (void)b, (void)c, (void)d;
    return (w->stop && *w->stop) || (w->end_ms && mv_util_mono_ms() >= w->end_ms);
}

int mv_ctl_top_watch(const char *base, const char *seg, const char *metrics, unsigned width,
                     unsigned window_ms, const char *token, double seconds, int tty,
                     const volatile int *stop)
{
    watch w = {.out = stdout, .stop = stop, .width = width, .tty = tty};
    if (w.width > SPARK_MAX)
        w.width = SPARK_MAX;
    if (seconds > 0)
        w.end_ms = mv_util_mono_ms() + (uint64_t)(seconds * 1000);
    CURL *c = curl_easy_init();
    if (!c) {
        fprintf(stderr, "microviewctl top: cannot create an HTTP client\n");
        return 1;
    }
    char *eseg = curl_easy_escape(c, seg, 0);
    char url[2048], ms[512] = "";
    size_t n = 0;
    /* --metrics 0,1,2 becomes m=0&m=1&m=2 (each checked by the collector). */
    for (const char *p = metrics; *p && n + 8 < sizeof ms; p++)
        n += (size_t)snprintf(ms + n, sizeof ms - n, "%s", *p == ',' ? "&m=" : (char[]){*p, '\0'});
    snprintf(url, sizeof url, "%s/api/v1/stream?seg=%s&m=%s&width=%u&window_ms=%u", base,
             eseg ? eseg : "", ms, w.width, window_ms);
    curl_free(eseg);
    struct curl_slist *hdr = NULL;
    char auth[4200];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hdr = curl_slist_append(hdr, auth);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &w);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int ret = 0;
    if (w.n)
        draw(&w); /* the last state */
    if (w.ended[0]) {
        fprintf(stderr, "microviewctl top: the collector ended the stream: %s\n", w.ended);
        ret = strcmp(w.ended, "max_lifetime") ? 1 : 0;
    } else if (rc == CURLE_HTTP_RETURNED_ERROR) {
        fprintf(stderr, "microviewctl top: %s: HTTP %ld\n", url, status);
        ret = 1;
    } else if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR && rc != CURLE_ABORTED_BY_CALLBACK) {
        fprintf(stderr, "microviewctl top: %s: %s\n", url, curl_easy_strerror(rc));
        ret = 1;
    } else if (!w.frames) {
        fprintf(stderr, "microviewctl top: no data from %s\n", url);
        ret = 1;
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    free(w.buf);
    return ret;
}
