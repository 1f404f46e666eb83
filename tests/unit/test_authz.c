/* mv_authz alone: SHA-256 vectors, the review answer parsers on good and hostile input, the
 * request bodies, and the answers that need no API server (no or malformed token: 401; API
 * server unreachable: 503, not cached). The full path against a stand-in API server is
 * tests/integration/test_collector_auth.py. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "mv_authz.h"
#include "mv_log.h"
#include "mv_test.h"

static void hex(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256(void)
{
    static const struct {
        const char *in;
        const char *want;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    uint8_t d[32];
    char h[65];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        mv_authz_sha256(v[i].in, strlen(v[i].in), d);
        hex(d, h);
        CU_ASSERT_STRING_EQUAL(h, v[i].want);
    }
    char *m = malloc(1000000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    memset(m, 'a', 1000000);
    mv_authz_sha256(m, 1000000, d);
    hex(d, h);
    CU_ASSERT_STRING_EQUAL(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
}

static int tr(const char *json, mv_authz_user *u)
{
    char err[256];
    return mv_authz_parse_token_review(json, strlen(json), u, err, sizeof err);
}

static void test_token_review(void)
{
    mv_authz_user u;
    CU_ASSERT_EQUAL(tr("{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,\"user\":{"
                       "\"username\":\"system:serviceaccount:m:p\",\"uid\":\"1\",\"groups\":["
                       "\"a\",\"b\"]}}}",
                       &u),
                    0);
    CU_ASSERT_EQUAL(u.authenticated, 1);
    CU_ASSERT_STRING_EQUAL(u.username, "system:serviceaccount:m:p");
    CU_ASSERT_EQUAL(u.ngroups, 2);
    char *body = mv_authz_access_review_body(&u, "/metrics", "get");
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    CU_ASSERT_PTR_NOT_NULL(strstr(body, "\"nonResourceAttributes\":{\"path\":\"/metrics\","
                                        "\"verb\":\"get\"}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(body, "\"kind\":\"SubjectAccessReview\""));
    free(body);
    mv_authz_user_clear(&u);

    CU_ASSERT_EQUAL(tr("{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":false,"
                       "\"error\":\"expired\"}}",
                       &u),
                    0);
    CU_ASSERT_EQUAL(u.authenticated, 0);
    CU_ASSERT_STRING_EQUAL(u.error, "expired");
    mv_authz_user_clear(&u);

    static const char *const bad[] = {
        "",
        "null",
        "[]",
        "{\"kind\":\"TokenReview\"}",
        "{\"kind\":\"Status\",\"status\":{}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":1}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,\"user\":{}}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,\"user\":{\"username\":\"\"}}"
        "}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\","
        "\"groups\":[1]}}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,\"user\":{\"username\":\"a\","
        "\"groups\":\"g\"}}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,\"user\":{\"username\":"
        "\"a\\u0000b\"}}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":false}} trailing",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":false,}}",
        "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":false,\"error\":\"\xff\"}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = tr(bad[i], &u);
        if (rc != -EINVAL)
            fprintf(stderr, "accepted: %s\n", bad[i]);
        CU_ASSERT_EQUAL(rc, -EINVAL);
        CU_ASSERT_PTR_NULL(u.username);
    }
    /* Over the size limit, and more groups than allowed. */
    size_t n = MV_AUTHZ_BODY_MAX + 100;
    char *big = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memset(big, ' ', n);
    big[n] = 0;
    memcpy(big, "{\"kind\":\"TokenReview\",\"status\":{}}", 34);
    CU_ASSERT_EQUAL(tr(big, &u), -EINVAL);
    size_t off = (size_t)snprintf(big, n + 1,
                                  "{\"kind\":\"TokenReview\",\"status\":{\"authenticated\":true,"
                                  "\"user\":{\"username\":\"a\",\"groups\":[");
    for (int i = 0; i <= MV_AUTHZ_GROUPS_MAX; i++)
        off += (size_t)snprintf(big + off, n + 1 - off, "%s\"g\"", i ? "," : "");
    snprintf(big + off, n + 1 - off, "]}}}");
    CU_ASSERT_EQUAL(tr(big, &u), -EINVAL);
    free(big);
}

static void test_access_review(void)
{
    int allowed;
    char reason[MV_AUTHZ_REASON_MAX], err[256];
    const char *ok = "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":true,"
                     "\"reason\":\"RBAC\"}}";
    CU_ASSERT_EQUAL(mv_authz_parse_access_review(ok, strlen(ok), &allowed, reason, sizeof reason,
                                                 err, sizeof err),
                    0);
    CU_ASSERT_EQUAL(allowed, 1);
    CU_ASSERT_STRING_EQUAL(reason, "RBAC");
    const char *denied = "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":true,"
                         "\"denied\":true}}";
    CU_ASSERT_EQUAL(
        mv_authz_parse_access_review(denied, strlen(denied), &allowed, NULL, 0, err, sizeof err),
        0);
    CU_ASSERT_EQUAL(allowed, 0);
    const char *none = "{\"kind\":\"SubjectAccessReview\",\"status\":{}}";
    CU_ASSERT_EQUAL(
        mv_authz_parse_access_review(none, strlen(none), &allowed, NULL, 0, err, sizeof err), 0);
    CU_ASSERT_EQUAL(allowed, 0);
    static const char *const bad[] = {
        "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":\"true\"}}",
        "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":1}}",
        "{\"kind\":\"SubjectAccessReview\",\"status\":[]}",
        "{\"kind\":\"TokenReview\",\"status\":{\"allowed\":true}}",
        "{\"kind\":\"SubjectAccessReview\",\"status\":{\"allowed\":true}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        allowed = 1;
        CU_ASSERT_EQUAL(mv_authz_parse_access_review(bad[i], strlen(bad[i]), &allowed, NULL, 0, err,
                                                     sizeof err),
                        -EINVAL);
        CU_ASSERT_EQUAL(allowed, 0);
    }
}

static void test_token_body_escapes(void)
{
    char *b = mv_authz_token_review_body("a\"b\\c");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    json_object *o = json_tokener_parse(b);
    json_object *spec, *tok;
    CU_ASSERT_TRUE(o && json_object_object_get_ex(o, "spec", &spec) &&
                   json_object_object_get_ex(spec, "token", &tok) &&
                   strcmp(json_object_get_string(tok), "a\"b\\c") == 0);
    json_object_put(o);
    free(b);
}

/* No API server: headers decided locally get 401; a well-formed token gets 503, never cached. */
static void test_check_without_server(void)
{
    char *dir = mv_test_tmpdir("authz");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char tf[512];
    snprintf(tf, sizeof tf, "%s/token", dir);
    FILE *f = fopen(tf, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("own\n", f);
    fclose(f);
    mv_authz_opts o = {.api_server = "http://127.0.0.1:1", .token_file = tf, .timeout_ms = 500};
    mv_authz *a;
    CU_ASSERT_EQUAL_FATAL(mv_authz_create(&o, &a), 0);
    mv_authz_decision d;
    static const char *const hdrs[] = {NULL,        "",           "Bearer",      "Bearer ",
                                       "Basic abc", "bearer a b", "Bearer \x01x"};
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++) {
        mv_authz_check(a, hdrs[i], "/metrics", &d);
        CU_ASSERT_EQUAL(d.status, 401);
        CU_ASSERT_TRUE(d.reason[0] != 0);
    }
    char *huge = malloc(MV_AUTHZ_TOKEN_MAX + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(huge);
    memcpy(huge, "Bearer ", 7);
    memset(huge + 7, 'x', MV_AUTHZ_TOKEN_MAX + 1);
    huge[7 + MV_AUTHZ_TOKEN_MAX + 1] = 0;
    mv_authz_check(a, huge, "/metrics", &d);
    CU_ASSERT_EQUAL(d.status, 401);
    free(huge);
    for (int i = 0; i < 2; i++) {
        mv_authz_check(a, "BEARER abc.def", "/metrics", &d);
        CU_ASSERT_EQUAL(d.status, 503);
        CU_ASSERT_EQUAL(d.cached, 0);
    }
    mv_authz_stats st;
    mv_authz_get_stats(a, &st);
    CU_ASSERT_EQUAL(st.token_reviews, 2);
    CU_ASSERT_EQUAL(st.cache_hits, 0);
    CU_ASSERT_EQUAL(st.unavailable, 2);
    mv_authz_destroy(a);
    mv_test_rmrf(dir);
    free(dir);
}

static void test_modes(void)
{
    mv_authz_mode m;
    CU_ASSERT_EQUAL(mv_authz_mode_parse("none", &m), 0);
    CU_ASSERT_EQUAL(m, MV_AUTHZ_NONE);
    CU_ASSERT_EQUAL(mv_authz_mode_parse("kubernetes", &m), 0);
    CU_ASSERT_EQUAL(m, MV_AUTHZ_KUBERNETES);
    CU_ASSERT_EQUAL(mv_authz_mode_parse("Kubernetes", &m), -EINVAL);
    CU_ASSERT_EQUAL(mv_authz_mode_parse("", &m), -EINVAL);
    mv_authz_opts o = {.api_server = "ftp://x"};
    mv_authz *a;
    CU_ASSERT_EQUAL(mv_authz_create(&o, &a), -EINVAL);
}

int main(void)
{
    mv_log_init("test_authz", MV_LOG_ERROR);
    static const mv_test tests[] = {
        {"sha256: FIPS 180 vectors", test_sha256},
        {"TokenReview answers: good, rejected, hostile", test_token_review},
        {"SubjectAccessReview answers: allowed, denied, hostile", test_access_review},
        {"TokenReview body escapes the token", test_token_body_escapes},
        {"check: local 401s, unreachable API server 503 uncached", test_check_without_server},
        {"modes and API server URL", test_modes},
    };
    return MV_TEST_RUN("authz", tests);
}
