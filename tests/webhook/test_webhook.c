/* test_webhook: the quantity table and the AdmissionReview fixtures of tests/data/webhook. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <json-c/json.h>

#include "mv_util.h"
#include "mv_webhook.h"

#define DATA  "tests/data/webhook"
#define CASES DATA "/cases"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* ---- quantities ----------------------------------------------------------------------------- */

static void test_quantity_table(void)
{
    size_t len;
    char *text = slurp(DATA "/quantity.txt", &len);
    CU_ASSERT_FATAL(text != NULL);
    unsigned cases = 0, bad = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *bar = strchr(line, '|');
        if (line[0] == '#' || !bar)
            continue;
        *bar = '\0';
        const char *want = line, *in = bar + 1;
        uint64_t v = 0;
        char why[128] = "";
        int rc = mv_wh_quantity_bytes(in, strlen(in), &v, NULL, why, sizeof why);
        char got[64];
        if (rc == -EINVAL)
            snprintf(got, sizeof got, "invalid");
        else if (rc == -ERANGE)
            snprintf(got, sizeof got, "range");
        else if (rc == 0)
            snprintf(got, sizeof got, "%" PRIu64, v);
        else
            snprintf(got, sizeof got, "rc=%d", rc);
        cases++;
        if (strcmp(got, want) != 0) {
            bad++;
            fprintf(stderr, "quantity \"%s\": want %s, got %s (%s)\n", in, want, got, why);
        }
        if (rc != 0 && !why[0]) {
            bad++;
            fprintf(stderr, "quantity \"%s\": refused without a reason\n", in);
        }
    }
    free(text);
    CU_ASSERT(cases > 100);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The same table through whole AdmissionReviews: each value is patched as
 * ceil(bytes / 4096) pages, or denied with a message naming the annotation and the value. */
static void test_quantity_reviews(void)
{
    size_t len;
    char *text = slurp(DATA "/quantity.txt", &len);
    CU_ASSERT_FATAL(text != NULL);
    mv_wh_config cfg;
    mv_wh_config_default(&cfg);
    cfg.max_pages_per_pod = 100000000;
    unsigned bad = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *bar = strchr(line, '|');
        if (line[0] == '#' || !bar)
            continue;
        *bar = '\0';
        const char *want = line, *in = bar + 1;
        json_object *val = json_object_new_string(in);
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                 "\"request\":{\"uid\":\"q\",\"kind\":{\"group\":\"\",\"version\":\"v1\","
                 "\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"object\":{\"metadata\":{"
                 "\"annotations\":{\"microview.io/metrics-memory\":%s}},\"spec\":{"
                 "\"containers\":[{\"name\":\"app\"}]}}}}",
                 json_object_to_json_string(val));
        json_object_put(val);
        mv_wh_result r;
        CU_ASSERT_FATAL(mv_wh_review(&cfg, body, strlen(body), &r) == 0);
        if (want[0] >= '0' && want[0] <= '9') {
            uint64_t bytes = strtoull(want, NULL, 10);
            uint64_t pages = bytes / 4096 + (bytes % 4096 != 0);
            int ok = 1;
            if (pages > cfg.max_pages_per_pod)
                ok = r.kind == MV_WH_DENIED && r.message && strstr(r.message, "over the limit");
            else
                ok = r.kind == MV_WH_PATCHED && r.pages == pages;
            if (!ok) {
                bad++;
                fprintf(stderr,
                        "review of \"%s\": want %" PRIu64 " pages, got kind %d pages %" PRIu64
                        " (%s)\n",
                        in, pages, (int)r.kind, r.pages, r.message ? r.message : "");
            }
        } else {
            char needle[256];
            snprintf(needle, sizeof needle, "microview.io/metrics-memory=\"%s\"", in);
            if (r.kind != MV_WH_DENIED || !r.message || !strstr(r.message, needle) ||
                !strstr(r.message, "64Ki")) {
                bad++;
                fprintf(stderr, "review of \"%s\": want a denial naming it, got kind %d (%s)\n", in,
                        (int)r.kind, r.message ? r.message : "");
            }
        }
        mv_wh_result_free(&r);
    }
    free(text);
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---- fixtures ------------------------------------------------------------------------------- */

typedef struct {
    char result[16];
    unsigned http;
    int code;
    char messages[8][256];
    int nmessages;
    char warnings[4][256];
    int nwarnings;
    size_t pad_to;
    mv_wh_config cfg;
} expect;

static int read_expect(const char *dir, expect *e, char *why, size_t whylen)
{
    char path[600];
    snprintf(path, sizeof path, "%.500s/expect.conf", dir);
    char *text = slurp(path, NULL);
    if (!text) {
        snprintf(why, whylen, "no %.600s", path);
        return -1;
    }
    memset(e, 0, sizeof *e);
    e->http = 200;
    e->code = -1;
    mv_wh_config_default(&e->cfg);
    int rc = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (!line[0] || line[0] == '#')
            continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            snprintf(why, whylen, "%.600s: line without '=': %.200s", path, line);
            rc = -1;
            break;
        }
        *eq = '\0';
        const char *k = line, *v = eq + 1;
        if (!strcmp(k, "result"))
            snprintf(e->result, sizeof e->result, "%s", v);
        else if (!strcmp(k, "http"))
            e->http = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(k, "code"))
            e->code = (int)strtol(v, NULL, 10);
        else if (!strcmp(k, "message") && e->nmessages < 8)
            snprintf(e->messages[e->nmessages++], sizeof e->messages[0], "%s", v);
        else if (!strcmp(k, "warning") && e->nwarnings < 4)
            snprintf(e->warnings[e->nwarnings++], sizeof e->warnings[0], "%s", v);
        else if (!strcmp(k, "pad_to"))
            e->pad_to = strtoull(v, NULL, 10);
        else if (!strcmp(k, "page_size"))
            e->cfg.page_size = strtoull(v, NULL, 10);
        else if (!strcmp(k, "max_pages_per_pod"))
            e->cfg.max_pages_per_pod = strtoull(v, NULL, 10);
        else if (!strcmp(k, "resource_name"))
            snprintf(e->cfg.resource_name, sizeof e->cfg.resource_name, "%s", v);
        else {
            snprintf(why, whylen, "%.600s: unknown key %.100s", path, k);
            rc = -1;
            break;
        }
    }
    free(text);
    if (!rc && !e->result[0]) {
        snprintf(why, whylen, "%.600s: no result=", path);
        rc = -1;
    }
    return rc;
}

static const char *kind_name(mv_wh_result_kind k)
{
    static const char *const n[] = {"allowed", "patched", "denied", "error"};
    return (unsigned)k < 4 ? n[k] : "?";
}

static int b64val(char c)
{
    const char *t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = strchr(t, c);
    return c && p ? (int)(p - t) : -1;
}

/* Standard base64 with padding, as Go's encoding/json decodes []byte. */
static char *unbase64(const char *s)
{
    size_t n = strlen(s);
    if (n % 4)
        return NULL;
    char *out = malloc(n / 4 * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; out && i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++)
            v[k] = s[i + k] == '=' && i + 4 == n && k >= 2 ? 0 : b64val(s[i + k]);
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
            free(out);
            return NULL;
        }
        uint32_t x =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (char)(x >> 16);
        if (s[i + 2] != '=')
            out[o++] = (char)(x >> 8 & 0xff);
        if (s[i + 3] != '=')
            out[o++] = (char)(x & 0xff);
    }
    if (out)
        out[o] = '\0';
    return out;
}

/* Checks one case; returns the number of problems (printed). */
static int run_case(const char *name)
{
    char dir[512], path[600], why[1024] = "";
    int bad = 0;
    snprintf(dir, sizeof dir, "%s/%.400s", CASES, name);
    expect e;
    if (read_expect(dir, &e, why, sizeof why) != 0) {
        fprintf(stderr, "case %s: %s\n", name, why);
        return 1;
    }
    snprintf(path, sizeof path, "%.500s/request.json", dir);
    size_t len;
    char *body = slurp(path, &len);
    if (!body) {
        fprintf(stderr, "case %s: no request.json\n", name);
        return 1;
    }
    if (e.pad_to > len) { /* trailing JSON whitespace up to pad_to bytes */
        char *nb = realloc(body, e.pad_to + 1);
        if (!nb) {
            free(body);
            return 1;
        }
        body = nb;
        memset(body + len, ' ', e.pad_to - len);
        len = e.pad_to;
        body[len] = '\0';
    }
    mv_wh_result r;
    int rc = mv_wh_review(&e.cfg, body, len, &r);
    free(body);
    if (rc != 0) {
        fprintf(stderr, "case %s: mv_wh_review returned %d\n", name, rc);
        return 1;
    }
#define PROBLEM(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "case %s: ", name);                                                        \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        bad++;                                                                                     \
    } while (0)
    if (strcmp(kind_name(r.kind), e.result) != 0)
        PROBLEM("result %s, want %s (message: %s)", kind_name(r.kind), e.result,
                r.message ? r.message : "-");
    if (r.http_status != e.http)
        PROBLEM("HTTP %u, want %u", r.http_status, e.http);
    for (int i = 0; i < e.nmessages; i++)
        if (!r.message || !strstr(r.message, e.messages[i]))
            PROBLEM("message lacks \"%s\": %s", e.messages[i], r.message ? r.message : "(none)");
    if (!r.body || strlen(r.body) != r.body_len)
        PROBLEM("body length %zu does not match", r.body_len);

    json_object *resp = NULL, *root = NULL;
    if (r.http_status == 200) {
        root = json_tokener_parse(r.body);
        json_object *av, *kd, *uid, *allowed, *pt, *patch, *st, *code, *warn;
        if (!root || !json_object_object_get_ex(root, "response", &resp)) {
            PROBLEM("response is not an AdmissionReview: %s", r.body);
            goto out;
        }
        if (!json_object_object_get_ex(root, "apiVersion", &av) ||
            strcmp(json_object_get_string(av), "admission.k8s.io/v1") ||
            !json_object_object_get_ex(root, "kind", &kd) ||
            strcmp(json_object_get_string(kd), "AdmissionReview"))
            PROBLEM("apiVersion/kind not echoed");
        if (!json_object_object_get_ex(resp, "uid", &uid) ||
            strcmp(json_object_get_string(uid), r.uid) || !r.uid[0])
            PROBLEM("uid not echoed");
        int want_allowed = !strcmp(e.result, "allowed") || !strcmp(e.result, "patched");
        if (!json_object_object_get_ex(resp, "allowed", &allowed) ||
            !json_object_is_type(allowed, json_type_boolean) ||
            json_object_get_boolean(allowed) != want_allowed)
            PROBLEM("allowed is not %s", want_allowed ? "true" : "false");
        int has_patch = json_object_object_get_ex(resp, "patch", &patch);
        int has_pt = json_object_object_get_ex(resp, "patchType", &pt);
        if (!strcmp(e.result, "patched")) {
            if (!has_patch || !has_pt || strcmp(json_object_get_string(pt), "JSONPatch"))
                PROBLEM("no patch or patchType JSONPatch");
            char *dec = has_patch ? unbase64(json_object_get_string(patch)) : NULL;
            if (!dec || !r.patch || strcmp(dec, r.patch))
                PROBLEM("base64 patch does not decode to the patch");
            snprintf(path, sizeof path, "%.500s/patch.json", dir);
            json_object *want = json_object_from_file(path);
            json_object *got = dec ? json_tokener_parse(dec) : NULL;
            if (!want)
                PROBLEM("no patch.json");
            else if (!got || !json_object_equal(want, got))
                PROBLEM("patch differs:\n  got  %s\n  want %s", dec ? dec : "(none)",
                        json_object_to_json_string_ext(want, JSON_C_TO_STRING_PLAIN |
                                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
            json_object_put(want);
            json_object_put(got);
            free(dec);
        } else if (has_patch || has_pt) {
            PROBLEM("unexpected patch");
        }
        if (!want_allowed) {
            if (!json_object_object_get_ex(resp, "status", &st) ||
                !json_object_object_get_ex(st, "code", &code) ||
                !json_object_object_get_ex(st, "message", &code))
                PROBLEM("denial without status.code/message");
            else if (e.code >= 0) {
                json_object_object_get_ex(st, "code", &code);
                if (json_object_get_int(code) != e.code)
                    PROBLEM("status.code %d, want %d", json_object_get_int(code), e.code);
            }
        }
        for (int i = 0; i < e.nwarnings; i++) {
            int found = 0;
            if (json_object_object_get_ex(resp, "warnings", &warn))
                for (size_t k = 0; k < json_object_array_length(warn); k++)
                    if (strstr(json_object_get_string(json_object_array_get_idx(warn, k)),
                               e.warnings[i]))
                        found = 1;
            if (!found)
                PROBLEM("no warning containing \"%s\"", e.warnings[i]);
        }
    }
out:
    json_object_put(root);
    mv_wh_result_free(&r);
    return bad;
#undef PROBLEM
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void test_fixtures(void)
{
    struct dirent **list;
    int n = scandir(CASES, &list, NULL, by_name);
    CU_ASSERT_FATAL(n > 0);
    int cases = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        if (list[i]->d_name[0] != '.') {
            cases++;
            bad += run_case(list[i]->d_name);
        }
        free(list[i]);
    }
    free(list);
    printf("\n  %d fixture cases\n", cases);
    CU_ASSERT(cases >= 30);
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---- settings ------------------------------------------------------------------------------- */

static void test_config(void)
{
    mv_wh_config c;
    char err[256];
    mv_wh_config_default(&c);
    CU_ASSERT_EQUAL(mv_wh_config_check(&c, err, sizeof err), 0);
    c.page_size = 1000;
    CU_ASSERT_EQUAL(mv_wh_config_check(&c, err, sizeof err), -EINVAL);
    CU_ASSERT(strstr(err, "multiple of 4096") != NULL);
    mv_wh_config_default(&c);
    c.max_pages_per_pod = 0;
    CU_ASSERT_EQUAL(mv_wh_config_check(&c, err, sizeof err), -EINVAL);
    mv_wh_config_default(&c);
    snprintf(c.resource_name, sizeof c.resource_name, "metrics");
    CU_ASSERT_EQUAL(mv_wh_config_check(&c, err, sizeof err), -EINVAL);
    snprintf(c.resource_name, sizeof c.resource_name, "a/b/c");
    CU_ASSERT_EQUAL(mv_wh_config_check(&c, err, sizeof err), -EINVAL);
    snprintf(c.resource_name, sizeof c.resource_name, "example.com/pages");
    CU_ASSERT_EQUAL(mv_wh_config_check(&c, err, sizeof err), 0);
}

/* The webhook reads --listen with the shared parser: an empty host is every address, port 0
 * any free port. */
static int split_listen(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    char err[MV_ERR_MAX];
    return mv_util_parse_listen(s, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, host, hostlen, port,
                                err, sizeof err);
}

static void test_split_listen(void)
{
    char host[64];
    uint16_t port = 1;
    CU_ASSERT_EQUAL(split_listen(":8443", host, sizeof host, &port), 0);
    CU_ASSERT_STRING_EQUAL(host, "");
    CU_ASSERT_EQUAL(port, 8443);
    CU_ASSERT_EQUAL(split_listen("127.0.0.1:0", host, sizeof host, &port), 0);
    CU_ASSERT_STRING_EQUAL(host, "127.0.0.1");
    CU_ASSERT_EQUAL(port, 0);
    CU_ASSERT_EQUAL(split_listen("[::1]:9443", host, sizeof host, &port), 0);
    CU_ASSERT_STRING_EQUAL(host, "::1");
    CU_ASSERT_EQUAL(port, 9443);
    const char *bad[] = {"",          "8443", ":",         ":65536", ":-1",    "::1:8443",
                         "[::1]8443", "[]:1", "host:port", ":84a3",  ":123456"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(split_listen(bad[i], host, sizeof host, &port), -EINVAL);
}

/* A body of exactly 1 MiB is read; one byte more is refused before parsing. */
static void test_body_cap(void)
{
    mv_wh_config c;
    mv_wh_config_default(&c);
    const char *review = "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                         "\"request\":{\"uid\":\"cap\",\"kind\":{\"group\":\"\",\"version\":"
                         "\"v1\",\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"object\":{}}}";
    size_t n = MV_WH_BODY_MAX + 1;
    char *body = malloc(n);
    CU_ASSERT_FATAL(body != NULL);
    memset(body, ' ', n);
    memcpy(body, review, strlen(review));
    mv_wh_result r;
    CU_ASSERT_EQUAL_FATAL(mv_wh_review(&c, body, MV_WH_BODY_MAX, &r), 0);
    CU_ASSERT_EQUAL(r.http_status, 200);
    CU_ASSERT_EQUAL(r.kind, MV_WH_ALLOWED);
    mv_wh_result_free(&r);
    CU_ASSERT_EQUAL_FATAL(mv_wh_review(&c, body, n, &r), 0);
    CU_ASSERT_EQUAL(r.http_status, 413);
    CU_ASSERT_EQUAL(r.kind, MV_WH_ERROR);
    mv_wh_result_free(&r);
    free(body);
}

/* 1 if s is valid UTF-8 (RFC 3629), for the messages below. */
static int valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80             ? 1
                   : (*p & 0xE0) == 0xC0 ? 2
                   : (*p & 0xF0) == 0xE0 ? 3
                   : (*p & 0xF8) == 0xF0 ? 4
                                         : 0;
        if (!n || (n == 2 && *p < 0xC2))
            return 0;
        for (size_t i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

/* A denial quotes the value cut at 64 bytes: never inside a character, and bytes that are not
 * UTF-8 are shown as '?', so the response stays valid UTF-8. */
static void test_quoted_utf8(void)
{
    static const char *const values[] = {
        "x\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
        "64\xff\xfeKi",
        "1\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"
        "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"
        "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"
        "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac",
    };
    mv_wh_config cfg;
    mv_wh_config_default(&cfg);
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                 "\"request\":{\"uid\":\"q\",\"kind\":{\"group\":\"\",\"version\":\"v1\","
                 "\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"object\":{\"metadata\":{"
                 "\"annotations\":{\"microview.io/metrics-memory\":\"%s\"}},\"spec\":{"
                 "\"containers\":[{\"name\":\"app\"}]}}}}",
                 values[i]);
        mv_wh_result r;
        CU_ASSERT_FATAL(mv_wh_review(&cfg, body, strlen(body), &r) == 0);
        CU_ASSERT(r.kind == MV_WH_DENIED || r.kind == MV_WH_ERROR); /* json-c may refuse bytes */
        CU_ASSERT_PTR_NOT_NULL(r.message);
        CU_ASSERT(r.message && valid_utf8(r.message));
        CU_ASSERT(r.body && valid_utf8(r.body));
        mv_wh_result_free(&r);
    }
}

int main(void)
{
    CU_initialize_registry();
    CU_pSuite s = CU_add_suite("webhook", NULL, NULL);
    CU_add_test(s, "quantity table (apimachinery grammar)", test_quantity_table);
    CU_add_test(s, "quantity table through AdmissionReviews", test_quantity_reviews);
    CU_add_test(s, "AdmissionReview fixtures", test_fixtures);
    CU_add_test(s, "configuration checks", test_config);
    CU_add_test(s, "listen addresses", test_split_listen);
    CU_add_test(s, "body cap of 1 MiB", test_body_cap);
    CU_add_test(s, "quoted values stay valid UTF-8", test_quoted_utf8);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
