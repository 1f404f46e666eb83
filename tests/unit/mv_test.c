/* mv_test: the unit tests' shared harness (see mv_test.h). */
#include "mv_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned skipped_cases;

int mv_test_run(const char *suite, const mv_test *tests, size_t n)
{
    return mv_test_run_fixture(suite, NULL, NULL, tests, n);
}

int mv_test_run_fixture(const char *suite, int (*init)(void), int (*clean)(void),
                        const mv_test *tests, size_t n)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite(suite, init, clean);
    if (!s) {
        CU_cleanup_registry();
        return 2;
    }
    for (size_t i = 0; i < n; i++)
        if (!CU_add_test(s, tests[i].name, tests[i].fn)) {
            CU_cleanup_registry();
            return 2;
        }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    if (skipped_cases)
        printf("%s: %u part(s) of cases SKIPPED (see the SKIPPED lines above)\n", suite,
               skipped_cases);
    return failed ? 1 : 0;
}

char *mv_test_tmpdir(const char *tag)
{
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/mv-%s-XXXXXX", tag);
    return mkdtemp(tmpl) ? strdup(tmpl) : NULL;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int mv_test_rmrf(const char *path)
{
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int mv_test_blank_file(const char *dir, const char *name, size_t size, char *path, size_t pathlen)
{
    int len = snprintf(path, pathlen, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= pathlen)
        return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    int rc = ftruncate(fd, (off_t)size);
    close(fd);
    return rc == 0 ? 0 : -1;
}

uint64_t mv_test_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void mv_test_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int mv_test_wait_until(int (*cond)(void *arg), void *arg, unsigned timeout_ms)
{
    uint64_t deadline = mv_test_mono_ms() + timeout_ms;
    for (;;) {
        if (cond(arg))
            return 1;
        if (mv_test_mono_ms() >= deadline)
            return 0;
        mv_test_sleep_ms(1);
    }
}

void mv_test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIPPED: ", stdout);
    vprintf(fmt, ap);
    fputs("\n", stdout);
    va_end(ap);
    fflush(stdout);
    exit(77);
}

void mv_test_skip_case(const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    CU_pSuite suite = CU_get_current_suite();
    CU_pTest test = CU_get_current_test();
    char line[768];
    snprintf(line, sizeof line, "SKIPPED: %s/%s: %s", suite && suite->pName ? suite->pName : "?",
             test && test->pName ? test->pName : "?", reason);
    printf("\n  %s\n", line);
    fflush(stdout);
    skipped_cases++;
    const char *log = getenv("MV_TEST_SKIP_LOG");
    if (log && *log) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "%s\n", line);
            fclose(f);
        } else {
            fprintf(stderr, "mv_test: cannot append to MV_TEST_SKIP_LOG=%s: %s\n", log,
                    strerror(errno));
        }
    }
}
