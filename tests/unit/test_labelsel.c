/* Unit tests for pkg/common/labelsel: the selector grammar (a table of selectors and their
 * canonical form or the error), the limits, and matching against label sets. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mv_labelsel.h"
#include "mv_test.h"

/* want: "!<error substring>" or the canonical form. */
static const struct {
    const char *sel, *want;
} cases[] = {
    {"app=x", "app=x"},
    {"app==x", "app=x"},
    {" app = x , tier in ( a , b ) , !canary ", "app=x,tier in (a,b),!canary"},
    {"app=x,tier in (a,b),!canary", "app=x,tier in (a,b),!canary"},
    {"track!=beta,release", "track!=beta,release"},
    {"env notin (dev,test)", "env notin (dev,test)"},
    {"app.kubernetes.io/name=checkout", "app.kubernetes.io/name=checkout"},
    {"app=", "app="},
    {"app=,b", "app=,b"},
    {"a-b_c.d=v-1_2.3", "a-b_c.d=v-1_2.3"},
    {"", "!the selector is empty"},
    {"   ", "!the selector is empty"},
    {"app=x,", "!requirement 2 at byte 6: a requirement must follow ','"},
    {",app=x", "!a key or '!key' must start"},
    {"app=x tier=y", "!',' must separate requirements"},
    {"app in ()", "!the value set is empty"},
    {"app in (a,)", "!a value must follow"},
    {"app in a", "!'(' must follow in/notin"},
    {"app in (a b)", "!',' or ')' must follow a value"},
    {"app in (a", "!',' or ')' must follow a value"},
    {"replicas>3", "!gt/lt) is not supported"},
    {"app=x;rm", "!unexpected character ';'"},
    {"app=\xc3\xa9", "!unexpected byte 0xc3"},
    {"-app=x", "!key '-app' must start and end with a letter or digit"},
    {"app=x-", "!value 'x-' must start and end with a letter or digit"},
    {"Example.com/app=x", "!not a lowercase DNS subdomain"},
    {"/app=x", "!empty prefix"},
    {"a/b/c=x", "!holds '/'"},
    {"app=a/b", "!value 'a/b' holds '/'"},
    {"!", "!a key must follow '!'"},
    {"!app=x", "!',' must separate requirements"},
    {"app===x", "!',' must separate requirements"},
    {"app x", "!an operator (=, ==, !=, in, notin) or ',' must follow the key"},
    {"app=(x)", "!',' must separate requirements"},
};

static void test_grammar(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mv_lsel sel;
        char err[256], got[512];
        int rc = mv_lsel_parse(cases[i].sel, strlen(cases[i].sel), &sel, err, sizeof err);
        const char *want = cases[i].want;
        int ok;
        if (want[0] == '!') {
            ok = rc == -EINVAL && strstr(err, want + 1) != NULL;
            snprintf(got, sizeof got, "rc=%d err=%s", rc, err);
        } else {
            ok = rc == 0;
            if (ok) {
                size_t n = mv_lsel_format(&sel, got, sizeof got);
                ok = n == strlen(got) && strcmp(got, want) == 0;
            } else {
                snprintf(got, sizeof got, "rc=%d err=%s", rc, err);
            }
        }
        if (!ok)
            fprintf(stderr, "selector [%s]: got %s want %s\n", cases[i].sel, got, want);
        CU_ASSERT(ok);
    }
}

static void test_limits(void)
{
    mv_lsel sel;
    char err[256], s[MV_LSEL_TEXT_MAX + 64];
    /* 63-byte names and values pass, 64 fail. */
    memset(s, 'a', 63);
    s[63] = '=';
    memset(s + 64, 'b', 63);
    CU_ASSERT_EQUAL(mv_lsel_parse(s, 127, &sel, err, sizeof err), 0);
    memset(s, 'a', 64);
    s[64] = '\0';
    CU_ASSERT_EQUAL(mv_lsel_parse(s, 64, &sel, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "longer than 63"));
    /* A NUL inside the given length is a bad byte, not the end. */
    CU_ASSERT_EQUAL(mv_lsel_parse("a=b\0,c", 6, &sel, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "byte 0x00"));
    /* Requirements: 16 pass, 17 fail. */
    size_t n = 0;
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "%sk%d", i ? "," : "", i);
    CU_ASSERT_EQUAL(mv_lsel_parse(s, n - 4, &sel, err, sizeof err), 0);
    CU_ASSERT_EQUAL(sel.nreqs, MV_LSEL_REQS_MAX);
    CU_ASSERT_EQUAL(mv_lsel_parse(s, n, &sel, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than 16 requirements"));
    /* Values of one set: 16 pass, 17 fail. */
    n = (size_t)snprintf(s, sizeof s, "k in (");
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "%sv%d", i ? "," : "", i);
    n += (size_t)snprintf(s + n, sizeof s - n, ")");
    CU_ASSERT_EQUAL(mv_lsel_parse(s, n, &sel, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than 16 values"));
    /* Text: refused past MV_LSEL_TEXT_MAX whatever it holds. */
    memset(s, ' ', sizeof s);
    s[0] = 'a';
    CU_ASSERT_EQUAL(mv_lsel_parse(s, MV_LSEL_TEXT_MAX, &sel, err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_lsel_parse(s, MV_LSEL_TEXT_MAX + 1, &sel, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "longer than 2048"));
    /* A short error buffer is cut, not overrun. */
    char tiny[8];
    CU_ASSERT_EQUAL(mv_lsel_parse("a in ()", 7, &sel, tiny, sizeof tiny), -EINVAL);
    CU_ASSERT_EQUAL(strlen(tiny), sizeof tiny - 1);
}

typedef struct kvs {
    const char *const *kv; /* key, value, ..., NULL */
} kvs;

static const char *get(void *ctx, const char *key, size_t klen)
{
    const kvs *l = ctx;
    for (size_t i = 0; l->kv[i]; i += 2)
        if (strlen(l->kv[i]) == klen && memcmp(l->kv[i], key, klen) == 0)
            return l->kv[i + 1];
    return NULL;
}

static int matches(const char *s, const char *const *kv)
{
    mv_lsel sel;
    char err[256];
    if (mv_lsel_parse(s, strlen(s), &sel, err, sizeof err) != 0) {
        fprintf(stderr, "parse %s: %s\n", s, err);
        return -1;
    }
    kvs l = {kv};
    return mv_lsel_match(&sel, get, &l);
}

static void test_match(void)
{
    static const char *const web[] = {"app", "x", "tier", "a", "track", "stable", NULL};
    static const char *const canary[] = {"app", "x", "tier", "b", "canary", "", NULL};
    static const char *const other[] = {"app", "xy", "tier", "a", NULL};
    static const char *const empty[] = {NULL};
    const char *sel = "app=x,tier in (a,b),!canary";
    CU_ASSERT_EQUAL(matches(sel, web), 1);
    CU_ASSERT_EQUAL(matches(sel, canary), 0); /* carries canary (empty value) */
    CU_ASSERT_EQUAL(matches(sel, other), 0);  /* no prefix match: "xy" is not "x" */
    CU_ASSERT_EQUAL(matches(sel, empty), 0);
    CU_ASSERT_EQUAL(matches("canary", canary), 1);
    CU_ASSERT_EQUAL(matches("canary=", canary), 1);
    CU_ASSERT_EQUAL(matches("track!=beta", web), 1);
    CU_ASSERT_EQUAL(matches("track!=beta", empty), 1); /* != holds for an absent key */
    CU_ASSERT_EQUAL(matches("track!=stable", web), 0);
    CU_ASSERT_EQUAL(matches("tier notin (b,c)", web), 1);
    CU_ASSERT_EQUAL(matches("tier notin (b,c)", canary), 0);
    CU_ASSERT_EQUAL(matches("tier notin (b,c)", empty), 1);
    CU_ASSERT_EQUAL(matches("tier in (b,c)", empty), 0);
    CU_ASSERT_EQUAL(matches("app", other), 1);
    CU_ASSERT_EQUAL(matches("!app", other), 0);
    CU_ASSERT_EQUAL(matches("app=x,app=xy", web), 0); /* ANDed */
}

int main(void)
{
    static const mv_test tests[] = {
        {"selector grammar: canonical forms and errors naming the requirement", test_grammar},
        {"selector limits: name, value, requirement, set and text bounds", test_limits},
        {"selector matching: =, !=, in, notin, exists, !exists", test_match},
    };
    return MV_TEST_RUN("labelsel", tests);
}
