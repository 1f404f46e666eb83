/* mv_kubec: bearer credential, one request and strict JSON parsing for API server clients. */
#include "mv_kubec.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "mv_log.h"

#define EVENT_MAX 64

struct mv_kubec_cred {
    char *token_file, *ca_file, *effect;
    char ev_loaded[EVENT_MAX], ev_unreadable[EVENT_MAX];
    int reread_s, retry_s, forced_min_s, refuse_empty;
    pthread_mutex_t mu; /* guards token and token_read_ns */
    char *token;
    uint64_t token_read_ns; /* 0 = never */
};

/* ---- Credential ------------------------------------------------------------------------ */

static void unreadable(mv_kubec_cred *c, const char *why)
{
    if (c->effect)
        MV_WARN(c->ev_unreadable, "path=%s err=%s effect=%s", mv_log_q(c->token_file),
                mv_log_q(why), mv_log_q(c->effect));
    else
        MV_WARN(c->ev_unreadable, "path=%s err=%s", mv_log_q(c->token_file), mv_log_q(why));
}

/* Reads the token file into c->token; on failure the token read before stays. Caller holds
 * c->mu. */
static void token_read(mv_kubec_cred *c)
{
    c->token_read_ns = mv_util_mono_ns();
    FILE *f = fopen(c->token_file, "re");
    char *buf = f ? malloc(MV_KUBEC_TOKEN_MAX + 1) : NULL;
    size_t n = buf ? fread(buf, 1, MV_KUBEC_TOKEN_MAX + 1, f) : 0;
    int e = errno;
    if (f)
        fclose(f);
    const char *why = !f                       ? strerror(e)
                      : !buf                   ? "out of memory"
                      : n > MV_KUBEC_TOKEN_MAX ? "larger than 64 KiB"
                                               : NULL;
    while (!why && n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    if (!why) {
        buf[n] = 0;
        if (c->refuse_empty && (!n || strpbrk(buf, "\r\n") || strlen(buf) != n))
            why = "empty, or has line breaks or NUL bytes";
        else if (strpbrk(buf, "\r\n"))
            why = "token has line breaks";
    }
    if (why) {
        unreadable(c, why);
        if (buf)
            explicit_bzero(buf, n);
        free(buf);
        return;
    }
    if (!c->token || strcmp(c->token, buf)) {
        MV_INFO(c->ev_loaded, "path=%s bytes=%zu", mv_log_q(c->token_file), n);
        if (c->token)
            explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        c->token = buf;
    } else {
        explicit_bzero(buf, n);
        free(buf);
    }
}

/* Re-reads the token when due (see mv_kubec_cred_opts). Caller holds c->mu. */
static void token_reload(mv_kubec_cred *c, int force)
{
    int every_s = force ? c->forced_min_s : c->token ? c->reread_s : c->retry_s;
    if (c->token_read_ns &&
        mv_util_mono_ns() - c->token_read_ns < (uint64_t)every_s * 1000000000ull)
        return;
    token_read(c);
}

void mv_kubec_cred_load(mv_kubec_cred *c)
{
    if (!c->token_file)
        return;
    pthread_mutex_lock(&c->mu);
    token_read(c);
    pthread_mutex_unlock(&c->mu);
}

/* A malloc'd "Authorization: Bearer ..." header line, or NULL (no token file, no token). */
static char *auth_header(mv_kubec_cred *c, int force)
{
    if (!c->token_file)
        return NULL;
    pthread_mutex_lock(&c->mu);
    token_reload(c, force);
    char *h = NULL;
    if (c->token) {
        size_t n = strlen(c->token) + 32;
        if ((h = malloc(n)))
            snprintf(h, n, "Authorization: Bearer %s", c->token);
    }
    pthread_mutex_unlock(&c->mu);
    return h;
}

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int mv_kubec_cred_create(const mv_kubec_cred_opts *o, mv_kubec_cred **out)
{
    *out = NULL;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, curl_init_once);
    mv_kubec_cred *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    const char *area = o->log_area ? o->log_area : "kubec";
    mv_util_fmt(c->ev_loaded, sizeof c->ev_loaded, "%s.token_loaded", area);
    mv_util_fmt(c->ev_unreadable, sizeof c->ev_unreadable, "%s.token_unreadable", area);
    c->token_file = o->token_file ? strdup(o->token_file) : NULL;
    c->ca_file = o->ca_file ? strdup(o->ca_file) : NULL;
    c->effect = o->effect ? strdup(o->effect) : NULL;
    c->reread_s = o->reread_s > 0 ? o->reread_s : 60;
    c->retry_s = o->retry_s > 0 ? o->retry_s : c->reread_s;
    c->forced_min_s = o->forced_min_s > 0 ? o->forced_min_s : 0;
    c->refuse_empty = o->refuse_empty;
    if ((o->token_file && !c->token_file) || (o->ca_file && !c->ca_file) ||
        (o->effect && !c->effect)) {
        mv_kubec_cred_destroy(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

void mv_kubec_cred_destroy(mv_kubec_cred *c)
{
    if (!c)
        return;
    if (c->token)
        explicit_bzero(c->token, strlen(c->token));
    free(c->token);
    free(c->token_file);
    free(c->ca_file);
    free(c->effect);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- Request ------------------------------------------------------------------------------ */

int mv_kubec_request(mv_kubec_cred *c, const char *url, const char *what, const char *body,
                     int timeout_ms, mv_util_buf *b, long *status, char *err, size_t errlen)
{
    const char *method = body ? "POST" : "GET";
    int rc = -EIO;
    for (int attempt = 0; attempt < 2; attempt++) {
        *status = 0;
        mv_util_buf_free(b);
        CURL *h = curl_easy_init();
        if (!h) {
            mv_util_err_set(err, errlen, "curl_easy_init failed");
            return -ENOMEM;
        }
        struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/json");
        if (body)
            hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        char *auth = auth_header(c, attempt > 0);
        if (auth)
            hdrs = curl_slist_append(hdrs, auth);
        char ebuf[CURL_ERROR_SIZE] = "";
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        if (body)
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mv_util_buf_curl_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        if (c->ca_file)
            curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
        CURLcode cr = curl_easy_perform(h);
        if (cr == CURLE_OK) {
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
            rc = 0;
        } else {
            mv_util_err_set(err, errlen, "%s %s: %s", method, what,
                            b->error == -E2BIG ? "answer too large"
                                               : (ebuf[0] ? ebuf : curl_easy_strerror(cr)));
            rc = -EIO;
        }
        if (auth) {
            explicit_bzero(auth, strlen(auth));
            free(auth);
        }
        curl_slist_free_all(hdrs);
        curl_easy_cleanup(h);
        /* A 401 may mean our token rotated: re-read it and try once more. */
        if (rc == 0 && *status == 401 && attempt == 0 && c->token_file)
            continue;
        break;
    }
    return rc;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

int mv_kubec_json_parse(const char *json, size_t len, size_t max, int depth, json_object **root)
{
    *root = NULL;
    if (len > max || len > INT_MAX)
        return -E2BIG;
    json_tokener *tok = json_tokener_new_ex(depth);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *r = json_tokener_parse_ex(tok, json, (int)len);
    int ok = r && json_tokener_get_error(tok) == json_tokener_success;
    /* Strict json-c stops at trailing bytes already; white space aside, they are refused
     * here too whatever the json-c version. */
    if (ok) {
        for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
            if (json[i] != ' ' && json[i] != '\n' && json[i] != '\r' && json[i] != '\t')
                ok = 0;
    }
    json_tokener_free(tok);
    if (!ok) {
        json_object_put(r);
        return -EINVAL;
    }
    *root = r;
    return 0;
}
