/* mv_scaler_query: the collectors asked in parallel (libcurl multi), answers aggregated under
 * the missing-collector policy (mv_scaler.h). */
#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_scaler.h"
#include "mv_util.h"

typedef struct call {
    CURL *h;
    mv_util_buf body;
    char url[1024];
    int done;
    CURLcode code;
} call;

/* The answer of one collector: 0 with *value and *count, or -1 with a reason. */
static int parse_answer(call *c, double *value, size_t *count, char *why, size_t whylen)
{
    long status = 0;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
    if (c->code != CURLE_OK) {
        snprintf(why, whylen, "%s",
                 c->code == CURLE_OPERATION_TIMEDOUT ? "no answer within timeoutMs"
                                                     : curl_easy_strerror(c->code));
        return -1;
    }
    if (status != 200) {
        snprintf(why, whylen, "HTTP %ld", status);
        return -1;
    }
    json_tokener *tok = json_tokener_new_ex(8);
    json_object *o =
        tok && c->body.data ? json_tokener_parse_ex(tok, c->body.data, (int)c->body.len) : NULL;
    int ok = tok && o && json_tokener_get_error(tok) == json_tokener_success &&
             json_object_is_type(o, json_type_object);
    json_object *v = NULL, *n = NULL;
    if (ok)
        ok = json_object_object_get_ex(o, "value", &v) &&
             json_object_object_get_ex(o, "count", &n) && json_object_is_type(n, json_type_int) &&
             (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double));
    if (ok) {
        *value = json_object_get_double(v);
        int64_t k = json_object_get_int64(n);
        ok = isfinite(*value) && k >= 0;
        *count = ok ? (size_t)k : 0;
    }
    if (!ok)
        snprintf(why, whylen, "the answer is not a value document with a finite value");
    json_object_put(o);
    json_tokener_free(tok);
    return ok ? 0 : -1;
}

struct mv_scaler_conns {
    CURLM *multi; /* its connection cache outlives the queries' easy handles */
};

mv_scaler_conns *mv_scaler_conns_create(void)
{
    mv_scaler_conns *c = calloc(1, sizeof *c);
    if (c && !(c->multi = curl_multi_init())) {
        free(c);
        c = NULL;
    }
    return c;
}

void mv_scaler_conns_destroy(mv_scaler_conns *c)
{
    if (!c)
        return;
    curl_multi_cleanup(c->multi);
    free(c);
}

int mv_scaler_query(mv_scaler_conns *conns, const mv_scaler_meta *m, const char *const *bases,
                    size_t n, const char *token, mv_scaler_result *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0) {
        snprintf(out->first_missing, sizeof out->first_missing, "no collector to ask");
        return -ENOENT;
    }
    if (n > MV_SCALER_COLLECTORS_MAX)
        return -E2BIG;
    char sel[4 * MV_LSEL_TEXT_MAX];
    mv_lsel_format(&m->selector, sel, sizeof sel);
    CURLM *multi = conns ? conns->multi : curl_multi_init();
    call *calls = calloc(n, sizeof *calls);
    char *esc = NULL, auth[4200] = "";
    struct curl_slist *hdr = NULL;
    int rc = 0;
    if (!multi || !calls) {
        rc = -ENOMEM;
        goto out;
    }
    CURL *e = curl_easy_init();
    esc = e ? curl_easy_escape(e, sel, 0) : NULL;
    curl_easy_cleanup(e);
    if (!esc) {
        rc = -ENOMEM;
        goto out;
    }
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        if (!(hdr = curl_slist_append(NULL, auth))) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        call *c = &calls[i];
        c->body.cap = MV_SCALER_BODY_MAX;
        snprintf(c->url, sizeof c->url, "%s/api/v1/value?metric=%s&namespace=%s&agg=%s&selector=%s",
                 bases[i], m->metric, m->namespace_, m->agg == MV_SCALER_MAX ? "max" : "sum", esc);
        if (!(c->h = curl_easy_init())) {
            rc = -ENOMEM;
            goto out;
        }
        curl_easy_setopt(c->h, CURLOPT_URL, c->url);
        curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, (long)m->timeout_ms);
        curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, (long)m->timeout_ms);
        curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, mv_util_buf_curl_write);
        curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &c->body);
        curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
        if (hdr)
            curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hdr);
        curl_multi_add_handle(multi, c->h);
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(multi, &running) != CURLM_OK)
            break;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            call *c = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            if (c) {
                c->done = 1;
                c->code = msg->data.result;
            }
        }
        if (running)
            curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    out->asked = n;
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        call *c = &calls[i];
        double v;
        size_t cnt;
        char why[160];
        if (!c->done)
            c->code = CURLE_OPERATION_TIMEDOUT;
        if (parse_answer(c, &v, &cnt, why, sizeof why) < 0) {
            out->missing++;
            if (!out->first_missing[0])
                snprintf(out->first_missing, sizeof out->first_missing, "%.120s: %.120s", bases[i],
                         why);
            continue;
        }
        out->answered++;
        out->series += cnt;
        if (cnt == 0)
            continue; /* the empty value: no matching pod on that node */
        if (first || m->agg == MV_SCALER_SUM)
            out->value = first ? v : out->value + v;
        else if (v > out->value)
            out->value = v;
        first = 0;
    }
    if (out->answered == 0 || (out->missing && m->policy == MV_SCALER_FAIL))
        rc = -EIO;
out:
    for (size_t i = 0; calls && i < n; i++) {
        if (calls[i].h) {
            curl_multi_remove_handle(multi, calls[i].h);
            curl_easy_cleanup(calls[i].h);
        }
        mv_util_buf_free(&calls[i].body);
    }
    free(calls);
    curl_free(esc);
    curl_slist_free_all(hdr);
    if (multi && !conns)
        curl_multi_cleanup(multi);
    return rc;
}
