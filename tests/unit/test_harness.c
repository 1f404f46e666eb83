/* test_harness: the harness's own check (run by harness_selftest.sh, never alone by ctest). Its
 * cases crash, hang, fail an assertion, skip a part, skip, trip AddressSanitizer and leak (both
 * only in a sanitized build) and pass, in that order: one process per case must report each failure
 * as that case's and still run the cases after it. */
#include "mv_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifndef ASAN
#define ASAN 0
#endif

static int g_fixture; /* set by the suite's init, in the case's own process */

static int suite_init(void)
{
    g_fixture = 42;
    return 0;
}

static int suite_clean(void)
{
    g_fixture = 0;
    return 0;
}

static void test_segfault(void)
{
    printf("harness-selftest: segfault case starts\n");
    raise(SIGSEGV);
    CU_FAIL("still running after SIGSEGV");
}

static void test_hang(void)
{
    printf("harness-selftest: hang case starts\n");
    for (;;)
        pause();
}

static void test_assert_fails(void)
{
    CU_ASSERT_EQUAL(1 + 1, 3);
}

static void test_skip_part(void)
{
    CU_ASSERT_EQUAL(g_fixture, 42);
    mv_test_skip_case("harness-selftest: this part needs nothing and is skipped on purpose");
}

static void test_skip_whole(void)
{
    mv_test_skip("harness-selftest: this case needs nothing and skips on purpose");
}

/* Under AddressSanitizer: a heap overflow read, which ASan reports and ends the process with. */
static void test_asan_report(void)
{
    printf("harness-selftest: asan=%d\n", ASAN);
#if ASAN
    char *volatile p = malloc(16);
    volatile char c = p[16];
    (void)c;
    free(p);
#endif
}

static void *volatile g_leak;

/* Under AddressSanitizer: a block nothing points to when the process exits (LeakSanitizer). */
static void test_leak_at_exit(void)
{
#if ASAN
    g_leak = malloc(4096);
    g_leak = NULL;
#endif
    CU_PASS("the leak is found at exit, after the case passed");
}

static void test_passes(void)
{
    CU_ASSERT_EQUAL(g_fixture, 42);
    printf("harness-selftest: passing case ran, fixture=%d\n", g_fixture);
}

int main(void)
{
    static const mv_test tests[] = {
        {"segfaults", test_segfault},         {"hangs", test_hang},
        {"assert fails", test_assert_fails},  {"skips a part", test_skip_part},
        {"skips itself", test_skip_whole},    {"ASan report", test_asan_report},
        {"leaks at exit", test_leak_at_exit}, {"passes", test_passes},
    };
    return MV_TEST_RUN_FIXTURE("harness", suite_init, suite_clean, tests);
}
