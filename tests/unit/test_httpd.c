/* Unit tests for mv_httpd: routing, methods, HEAD, gzip negotiation and concurrency, driven
 * by libcurl against a server on 127.0.0.1 with an ephemeral port. */
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_test.h"

static mv_httpd *srv;
static char base[64];
static char big_body[64 * 1024];
static size_t big_len;

/* ---- Handlers ----------------------------------------------------------------------- */

static int h_metrics(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    mv_httpd_set_content_type(resp, "text/plain; version=0.0.4; charset=utf-8");
    return mv_httpd_copy_body(resp, "up 1\n", 5);
}

static int h_big(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    char *b = malloc(big_len);
    if (!b)
        return -ENOMEM;
    memcpy(b, big_body, big_len);
    mv_httpd_set_body(resp, b, big_len);
    return mv_httpd_add_header(resp, "X-Test", "big");
}

static int h_echo(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    char buf[512];
    const char *q = mv_httpd_query(req, "x");
    const char *flag = mv_httpd_query(req, "flag");
    const char *acc = mv_httpd_header(req, "accept");
    snprintf(buf, sizeof buf, "method=%s path=%s x=%s flag=%s accept=%s", mv_httpd_method(req),
             mv_httpd_path(req), q ? q : "(none)", flag ? (*flag ? flag : "(empty)") : "(none)",
             acc ? acc : "(none)");
    mv_httpd_set_status(resp, 201);
    return mv_httpd_copy_body(resp, buf, strlen(buf));
}

static int h_fail(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    mv_httpd_copy_body(resp, "partial", 7); /* must be freed by the module */
    return -EIO;
}

/* /slow: waits (bounded) until another handler is in flight, to prove concurrency. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int inflight, max_inflight;

static int h_slow(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&mu);
    inflight++;
    if (inflight > max_inflight)
        max_inflight = inflight;
    pthread_cond_broadcast(&cv);
    while (max_inflight < 2)
        if (pthread_cond_timedwait(&cv, &mu, &until) != 0)
            break;
    inflight--;
    pthread_mutex_unlock(&mu);
    return mv_httpd_copy_body(resp, "slow\n", 5);
}

/* ---- Client helper ------------------------------------------------------------------ */

typedef struct {
    long status;
    char *body;
    size_t len;
    char headers[4096];
    size_t hlen;
} reply;

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    reply *r = ud;
    char *nb = realloc(r->body, r->len + sz * n + 1);
    if (!nb)
        return 0;
    r->body = nb;
    memcpy(r->body + r->len, p, sz * n);
    r->len += sz * n;
    r->body[r->len] = '\0';
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    reply *r = ud;
    size_t k = sz * n;
    if (r->hlen + k < sizeof r->headers) {
        memcpy(r->headers + r->hlen, p, k);
        r->hlen += k;
        r->headers[r->hlen] = '\0';
    }
    return k;
}

/* Value of header `name` in the reply (case-insensitive), copied into out; NULL if absent. */
static const char *hdr(const reply *r, const char *name, char *out, size_t outsz)
{
    const char *p = r->headers;
    size_t nl = strlen(name);
    while (p && *p) {
        if (!strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t i = 0;
            while (v[i] && v[i] != '\r' && v[i] != '\n' && i < outsz - 1) {
                out[i] = v[i];
                i++;
            }
            out[i] = '\0';
            return out;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NULL;
}

/* method NULL = GET; auto_enc: value for CURLOPT_ACCEPT_ENCODING (curl decodes) or NULL. */
static int fetch(const char *method, const char *path, const char *header, const char *auto_enc,
                 reply *r)
{
    char url[256];
    memset(r, 0, sizeof *r);
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *hl = header ? curl_slist_append(NULL, header) : NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    if (hl)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (auto_enc)
        curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, auto_enc);
    if (method && !strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (method && !strcmp(method, "POST"))
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "a=1");
    else if (method)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    if (!r->body)
        r->body = calloc(1, 1);
    return rc == CURLE_OK ? 0 : -1;
}

/* ---- Tests -------------------------------------------------------------------------- */

static void test_get_ok(void)
{
    reply r;
    char v[256];
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/metrics", NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(r.body, "up 1\n");
    CU_ASSERT_PTR_NOT_NULL(hdr(&r, "Content-Type", v, sizeof v));
    CU_ASSERT_STRING_EQUAL(v, "text/plain; version=0.0.4; charset=utf-8");
    CU_ASSERT_PTR_NULL(hdr(&r, "Vary", v, sizeof v)); /* small body: no negotiation */
    free(r.body);
}

static void test_request_accessors(void)
{
    reply r;
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/echo?x=a%20b&flag", "Accept: text/plain", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 201);
    CU_ASSERT_STRING_EQUAL(r.body, "method=GET path=/echo x=a b flag=(empty) accept=text/plain");
    free(r.body);
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/echo", NULL, NULL, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.body, "method=GET path=/echo x=(none) flag=(none) accept=*/*");
    free(r.body);
}

static void test_head(void)
{
    reply r;
    char v[64];
    CU_ASSERT_EQUAL_FATAL(fetch("HEAD", "/big", NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(r.len, 0);
    CU_ASSERT_PTR_NOT_NULL(hdr(&r, "Content-Length", v, sizeof v));
    CU_ASSERT_EQUAL(strtoul(v, NULL, 10), big_len);
    CU_ASSERT_PTR_NOT_NULL(hdr(&r, "X-Test", v, sizeof v));
    free(r.body);
}

static void test_not_found(void)
{
    reply r;
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/nope", NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 404);
    CU_ASSERT_STRING_EQUAL(r.body, "not found\n");
    free(r.body);
    /* Exact match only: a prefix or a trailing slash is not the route. */
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/metrics/", NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 404);
    free(r.body);
}

static void test_method_not_allowed(void)
{
    const char *methods[] = {"POST", "PUT", "DELETE", "OPTIONS"};
    for (size_t i = 0; i < 4; i++) {
        reply r;
        char v[64];
        CU_ASSERT_EQUAL_FATAL(fetch(methods[i], "/metrics", NULL, NULL, &r), 0);
        CU_ASSERT_EQUAL(r.status, 405);
        CU_ASSERT_PTR_NOT_NULL(hdr(&r, "Allow", v, sizeof v));
        CU_ASSERT_STRING_EQUAL(v, "GET, HEAD");
        free(r.body);
    }
}

static void test_handler_error(void)
{
    reply r;
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/fail", NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 500);
    CU_ASSERT_STRING_EQUAL(r.body, "internal error\n");
    free(r.body);
}

static int gunzip(const char *in, size_t len, char **out, size_t *outlen)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 15 + 16) != Z_OK)
        return -1;
    size_t cap = 256 * 1024;
    char *buf = malloc(cap);
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = (Bytef *)buf;
    zs.avail_out = (uInt)cap;
    int rc = inflate(&zs, Z_FINISH);
    *out = buf;
    *outlen = zs.total_out;
    inflateEnd(&zs);
    return rc == Z_STREAM_END ? 0 : -1;
}

static void test_gzip(void)
{
    reply plain, z, autoz;
    char v[64];
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/big", NULL, NULL, &plain), 0);
    CU_ASSERT_EQUAL(plain.len, big_len);
    CU_ASSERT(memcmp(plain.body, big_body, big_len) == 0);
    CU_ASSERT_PTR_NULL(hdr(&plain, "Content-Encoding", v, sizeof v));
    CU_ASSERT_PTR_NOT_NULL(hdr(&plain, "Vary", v, sizeof v));

    /* Raw: decode ourselves. */
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/big", "Accept-Encoding: deflate, gzip;q=0.8", NULL, &z), 0);
    CU_ASSERT_EQUAL(z.status, 200);
    CU_ASSERT_PTR_NOT_NULL(hdr(&z, "Content-Encoding", v, sizeof v));
    CU_ASSERT_STRING_EQUAL(v, "gzip");
    CU_ASSERT_PTR_NOT_NULL(hdr(&z, "Vary", v, sizeof v));
    CU_ASSERT_STRING_EQUAL(v, "Accept-Encoding");
    CU_ASSERT(z.len < big_len);
    char *dec = NULL;
    size_t dlen = 0;
    CU_ASSERT_EQUAL(gunzip(z.body, z.len, &dec, &dlen), 0);
    CU_ASSERT_EQUAL(dlen, plain.len);
    CU_ASSERT(dlen == plain.len && memcmp(dec, plain.body, dlen) == 0);
    free(dec);

    /* libcurl's own decoding agrees. */
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/big", NULL, "gzip", &autoz), 0);
    CU_ASSERT_EQUAL(autoz.len, plain.len);
    CU_ASSERT(autoz.len == plain.len && memcmp(autoz.body, plain.body, plain.len) == 0);
    free(plain.body);
    free(z.body);
    free(autoz.body);
}

static void test_no_gzip(void)
{
    const char *headers[] = {"Accept-Encoding: gzip;q=0", "Accept-Encoding: identity",
                             "Accept-Encoding: gzip;q=0, *;q=1", "Accept-Encoding: br"};
    for (size_t i = 0; i < 4; i++) {
        reply r;
        char v[64];
        CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/big", headers[i], NULL, &r), 0);
        CU_ASSERT_EQUAL(r.status, 200);
        CU_ASSERT_PTR_NULL(hdr(&r, "Content-Encoding", v, sizeof v));
        CU_ASSERT_EQUAL(r.len, big_len);
        CU_ASSERT(r.len == big_len && memcmp(r.body, big_body, big_len) == 0);
        free(r.body);
    }
    /* Small bodies are never compressed. */
    reply r;
    char v[64];
    CU_ASSERT_EQUAL_FATAL(fetch(NULL, "/metrics", "Accept-Encoding: gzip", NULL, &r), 0);
    CU_ASSERT_PTR_NULL(hdr(&r, "Content-Encoding", v, sizeof v));
    CU_ASSERT_STRING_EQUAL(r.body, "up 1\n");
    free(r.body);
}

static void test_accepts_gzip(void)
{
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip(NULL), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip(""), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip"), 1);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("GZIP"), 1);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("x-gzip"), 1);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip, deflate, br"), 1);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip;q=0"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip ; q=0.000"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip;q=0.001"), 1);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("*"), 1);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("*;q=0"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip;q=0, *"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("identity"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzipx, xgzip"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip("gzip;q=bogus"), 0);
    CU_ASSERT_EQUAL(mv_httpd_accepts_gzip(";;;,,,q=1"), 0);
}

typedef struct {
    int ok;
} worker_result;

static void *worker(void *arg)
{
    worker_result *res = arg;
    for (int i = 0; i < 10; i++) {
        reply r;
        const char *path = (i % 2) ? "/slow" : "/big";
        if (fetch(NULL, path, "Accept-Encoding: gzip", "gzip", &r) == 0 && r.status == 200 &&
            ((i % 2) ? !strcmp(r.body, "slow\n")
                     : (r.len == big_len && !memcmp(r.body, big_body, big_len))))
            res->ok++;
        free(r.body);
    }
    return NULL;
}

static void test_concurrent(void)
{
    pthread_t t[4];
    worker_result res[4];
    memset(res, 0, sizeof res);
    max_inflight = 0;
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, worker, &res[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(res[i].ok, 10);
    }
    CU_ASSERT(max_inflight >= 2); /* two handlers ran at the same time */
}

static void test_header_cap(void)
{
    /* Headers beyond max_request_bytes are refused, not buffered. */
    static char big[40000];
    memcpy(big, "X-Big: ", 7);
    memset(big + 7, 'a', sizeof big - 8);
    reply r;
    int rc = fetch(NULL, "/metrics", big, NULL, &r);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(r.status, 431); /* Request Header Fields Too Large */
    free(r.body);
}

static void test_config_errors(void)
{
    mv_httpd_config cfg;
    mv_httpd *h = NULL;
    mv_httpd_config_default(&cfg);
    cfg.addr = "localhost";
    CU_ASSERT_EQUAL(mv_httpd_create(&cfg, &h), -EINVAL);
    CU_ASSERT_PTR_NULL(h);
    cfg.addr = "127.0.0.1";
    cfg.threads = 0;
    CU_ASSERT_EQUAL(mv_httpd_create(&cfg, &h), -EINVAL);
    /* Same port twice: the second start fails cleanly. */
    mv_httpd_config_default(&cfg);
    cfg.port = mv_httpd_port(srv);
    CU_ASSERT_EQUAL_FATAL(mv_httpd_create(&cfg, &h), 0);
    CU_ASSERT_EQUAL(mv_httpd_route(h, "/x", h_metrics, NULL), 0);
    CU_ASSERT_EQUAL(mv_httpd_route(h, "/x", h_metrics, NULL), -EEXIST);
    CU_ASSERT_EQUAL(mv_httpd_route(h, "nope", h_metrics, NULL), -EINVAL);
    CU_ASSERT(mv_httpd_start(h) < 0);
    CU_ASSERT_EQUAL(mv_httpd_port(h), 0);
    mv_httpd_destroy(h);
}

static void test_ipv6_any(void)
{
    /* "::" must serve IPv4 clients too; skipped where the host has no IPv6. */
    int s = socket(AF_INET6, SOCK_STREAM, 0);
    if (s < 0) {
        mv_test_skip_case("\"::\" serving IPv4 clients (no IPv6 socket: %s)", strerror(errno));
        return;
    }
    close(s);
    mv_httpd_config cfg;
    mv_httpd *h = NULL;
    mv_httpd_config_default(&cfg);
    cfg.addr = "::";
    CU_ASSERT_EQUAL_FATAL(mv_httpd_create(&cfg, &h), 0);
    CU_ASSERT_EQUAL(mv_httpd_route(h, "/metrics", h_metrics, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(mv_httpd_start(h), 0);
    CU_ASSERT(mv_httpd_port(h) != 0);
    char saved[64];
    snprintf(saved, sizeof saved, "%s", base);
    snprintf(base, sizeof base, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(h));
    reply r;
    CU_ASSERT_EQUAL(fetch(NULL, "/metrics", NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    free(r.body);
    snprintf(base, sizeof base, "%s", saved);
    mv_httpd_destroy(h);
}

int main(void)
{
    mv_log_init("test_httpd", MV_LOG_ERROR);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* A compressible, realistic body. */
    for (big_len = 0; big_len + 80 < sizeof big_body;)
        big_len += (size_t)snprintf(big_body + big_len, sizeof big_body - big_len,
                                    "http_requests_total{code=\"200\",pod=\"web-%zu\"} %zu\n",
                                    big_len % 97, big_len);

    mv_httpd_config cfg;
    mv_httpd_config_default(&cfg);
    cfg.threads = 4;
    if (mv_httpd_create(&cfg, &srv) != 0 || mv_httpd_route(srv, "/metrics", h_metrics, NULL) ||
        mv_httpd_route(srv, "/big", h_big, NULL) || mv_httpd_route(srv, "/echo", h_echo, NULL) ||
        mv_httpd_route(srv, "/fail", h_fail, NULL) || mv_httpd_route(srv, "/slow", h_slow, NULL) ||
        mv_httpd_start(srv) != 0) {
        fprintf(stderr, "cannot start the test server\n");
        return 1;
    }
    snprintf(base, sizeof base, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(srv));

    static const mv_test tests[] = {
        {"GET 200 with body and Content-Type", test_get_ok},
        {"request accessors", test_request_accessors},
        {"HEAD", test_head},
        {"404", test_not_found},
        {"405", test_method_not_allowed},
        {"handler error 500", test_handler_error},
        {"gzip negotiated", test_gzip},
        {"no gzip", test_no_gzip},
        {"Accept-Encoding parsing", test_accepts_gzip},
        {"concurrent requests", test_concurrent},
        {"request header cap", test_header_cap},
        {"config errors", test_config_errors},
        {"IPv6 any address", test_ipv6_any},
    };
    int fails = MV_TEST_RUN("httpd", tests);
    mv_httpd_destroy(srv);
    curl_global_cleanup();
    return fails;
}
