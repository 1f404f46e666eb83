/* mv_utf8: validation (RFC 3629 rejects), cutting on a character boundary and repair with
 * U+FFFD, as used before a client's bytes are echoed into a response. */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "mv_test.h"
#include "mv_util.h"

#define V(s) mv_util_utf8_valid(s, sizeof(s) - 1)

static void test_valid(void)
{
    CU_ASSERT(V(""));
    CU_ASSERT(V("plain ascii"));
    CU_ASSERT(V("caf\xC3\xA9"));       /* é */
    CU_ASSERT(V("\xE2\x82\xAC"));      /* € */
    CU_ASSERT(V("\xF0\x9F\x98\x80"));  /* U+1F600 */
    CU_ASSERT(V("\xF4\x8F\xBF\xBF"));  /* U+10FFFF */
    CU_ASSERT(V("\xED\x9F\xBF"));      /* U+D7FF, last before the surrogates */
    CU_ASSERT(!V("\x80"));             /* lone continuation */
    CU_ASSERT(!V("\xC3"));             /* truncated */
    CU_ASSERT(!V("\xC0\xAF"));         /* overlong '/' */
    CU_ASSERT(!V("\xE0\x80\xAF"));     /* overlong */
    CU_ASSERT(!V("\xF0\x80\x80\xAF")); /* overlong */
    CU_ASSERT(!V("\xED\xA0\x80"));     /* surrogate U+D800 */
    CU_ASSERT(!V("\xF4\x90\x80\x80")); /* above U+10FFFF */
    CU_ASSERT(!V("\xF5\x80\x80\x80")); /* never a lead byte */
    CU_ASSERT(!V("\xFF"));
    CU_ASSERT(!V("\xE2\x82"));     /* € cut */
    CU_ASSERT(!V("\xE2\x28\xA1")); /* bad continuation */
}

static void test_cut(void)
{
    const char *s = "ab\xE2\x82\xAC"
                    "c"; /* a b € c: 6 bytes */
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 10), 6);
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 6), 6);
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 5), 5);
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 4), 2); /* not inside the € */
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 3), 2);
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 2), 2);
    CU_ASSERT_EQUAL(mv_util_utf8_cut(s, 6, 0), 0);
    /* Invalid bytes are single units and may be cut after. */
    CU_ASSERT_EQUAL(mv_util_utf8_cut("\xFF\xFF\xFF", 3, 2), 2);
    /* A 64-byte cut of 30 two-byte characters + 'x' lands on a boundary. */
    char buf[80];
    for (int i = 0; i < 33; i++)
        memcpy(buf + 2 * i, "\xC3\xA9", 2);
    size_t n = mv_util_utf8_cut(buf, 66, 65);
    CU_ASSERT_EQUAL(n, 64);
    CU_ASSERT(mv_util_utf8_valid(buf, n));
}

static void test_sanitize(void)
{
    char out[64];
    CU_ASSERT_EQUAL(mv_util_utf8_sanitize("ok", 2, out, sizeof out), 2);
    CU_ASSERT_STRING_EQUAL(out, "ok");
    size_t n = mv_util_utf8_sanitize("a\xFF"
                                     "b\xC3",
                                     4, out, sizeof out);
    CU_ASSERT_EQUAL(n, 8);
    CU_ASSERT_STRING_EQUAL(out, "a\xEF\xBF\xBD"
                                "b\xEF\xBF\xBD");
    CU_ASSERT(mv_util_utf8_valid(out, n));
    /* A surrogate is three invalid bytes: three replacements. */
    n = mv_util_utf8_sanitize("\xED\xA0\x80", 3, out, sizeof out);
    CU_ASSERT_EQUAL(n, 9);
    /* Output too small: stops before a character that does not fit, stays valid. */
    n = mv_util_utf8_sanitize("ab\xE2\x82\xAC", 5, out, 5);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_STRING_EQUAL(out, "ab");
    n = mv_util_utf8_sanitize("abc", 3, out, 1);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_STRING_EQUAL(out, "");
    char *d = mv_util_utf8_dup("x\x80y", 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_STRING_EQUAL(d, "x\xEF\xBF\xBDy");
    free(d);
}

int main(void)
{
    static const mv_test tests[] = {
        {"valid and invalid sequences", test_valid},
        {"cut on a character boundary", test_cut},
        {"sanitize replaces invalid bytes with U+FFFD", test_sanitize},
    };
    return MV_TEST_RUN("utf8", tests);
}
