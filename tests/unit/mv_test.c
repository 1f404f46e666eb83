/* mv_test: the unit tests' shared harness (see mv_test.h). */
#include "mv_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned skipped_cases;

/* What a case's process tells the harness through the pipe named by MV_TEST_RESULT_FD. */
typedef struct case_result {
    uint32_t magic;
    uint32_t ran;
    uint32_t asserts;
    uint32_t asserts_failed;
    uint32_t failed;
    uint32_t skipped_parts;
} case_result;
#define RESULT_MAGIC 0x6d767431u /* "mvt1" */

/* The old way: every case in this process, CUnit's verbose output (MV_TEST_NOFORK=1). */
static int run_in_process(const char *suite, int (*init)(void), int (*clean)(void),
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
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
                      CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    if (skipped_cases)
        printf("%s: %u part(s) of cases SKIPPED (see the SKIPPED lines above)\n", suite,
               skipped_cases);
    return failed ? 1 : 0;
}

/* In a case's process: runs case `idx` alone (with the suite's fixture around it), prints the
 * verdict in CUnit's verbose format and sends the counts to the harness. */
static int run_one_case(const char *suite, int (*init)(void), int (*clean)(void),
                        const mv_test *tests, size_t n, size_t idx, int result_fd)
{
    /* A crash must not lose what the case printed before it. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    case_result r = {.magic = RESULT_MAGIC};
    if (idx >= n || CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite(suite, init, clean);
    if (!s || !CU_add_test(s, tests[idx].name, tests[idx].fn)) {
        CU_cleanup_registry();
        return 2;
    }
    if (result_fd < 0) /* run by hand (MV_TEST_CASE=i): no harness printed the case's name */
        printf("Suite: %s\n  Test: %s ...", suite, tests[idx].name);
    CU_run_all_tests();
    CU_pRunSummary sum = CU_get_run_summary();
    r.ran = sum->nTestsRun;
    r.asserts = sum->nAsserts;
    r.asserts_failed = sum->nAssertsFailed;
    r.failed = sum->nTestsFailed || sum->nSuitesFailed || sum->nFailureRecords ? 1 : 0;
    r.skipped_parts = skipped_cases;
    if (!r.failed) {
        puts(skipped_cases ? "passed (part SKIPPED)" : "passed");
    } else {
        puts("FAILED");
        unsigned k = 0;
        for (CU_pFailureRecord f = CU_get_failure_list(); f; f = f->pNext)
            printf("    %u. %s:%u  - %s\n", ++k, f->strFileName ? f->strFileName : "",
                   f->uiLineNumber, f->strCondition ? f->strCondition : "");
    }
    fflush(stdout);
    CU_cleanup_registry();
    if (result_fd >= 0) {
        ssize_t w;
        do
            w = write(result_fd, &r, sizeof r);
        while (w < 0 && errno == EINTR);
        close(result_fd);
    }
    return r.failed ? 1 : 0;
}

static unsigned env_unsigned(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end || x == 0 || x > 86400) {
        fprintf(stderr, "mv_test: %s=%s is not a number of seconds in 1..86400; using %u\n", name,
                v, dflt);
        return dflt;
    }
    return (unsigned)x;
}

/* This program's arguments (argv[0], argv[1], ...) from /proc/self/cmdline, as a NULL-terminated
 * array to free() with its strings in one block; NULL when they cannot be read. */
static char **own_args(size_t *count)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            close(fd);
            return NULL;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    close(fd);
    size_t nargs = 0;
    for (size_t i = 0; i < len; i++)
        nargs += buf[i] == 0;
    /* One block: the pointers, then the strings. */
    char **argv = malloc((nargs + 1) * sizeof *argv + len + 1);
    if (!argv) {
        free(buf);
        return NULL;
    }
    char *strs = (char *)(argv + nargs + 1);
    memcpy(strs, buf, len);
    strs[len] = 0;
    free(buf);
    size_t k = 0;
    for (size_t i = 0; i < len && k < nargs; k++) {
        argv[k] = strs + i;
        i += strlen(strs + i) + 1;
    }
    argv[k] = NULL;
    *count = k;
    return argv;
}

extern char **environ;

typedef struct case_outcome {
    int failed, skipped, crashed, timed_out;
} case_outcome;

/* Starts this program again to run case `idx` alone and waits for it at most `timeout_s`
 * seconds. Prints the verdict when the case's process could not (crash, timeout). */
static case_outcome spawn_case(const mv_test *t, size_t idx, char **args, size_t nargs,
                               unsigned timeout_s, case_result *r)
{
    case_outcome o = {0};
    memset(r, 0, sizeof *r);
    printf("  Test: %s ...", t->name);
    fflush(stdout);
    fflush(stderr);

    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    int p[2];
    if (sl <= 0 || pipe(p) < 0) {
        printf("FAILED\n    cannot start the case's process: %s\n", strerror(errno));
        o.failed = 1;
        return o;
    }
    self[sl] = 0;
    fcntl(p[0], F_SETFD, FD_CLOEXEC);

    /* The environment plus MV_TEST_CASE and MV_TEST_RESULT_FD, built before fork(): the
     * process may have threads, so the child only calls exec. */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char **env = calloc(nenv + 3, sizeof *env);
    const char *emu = getenv("MV_TEST_EMULATOR");
    int has_emu = emu && *emu;
    char **argv = calloc(nargs + 3, sizeof *argv);
    char case_var[64], fd_var[64];
    if (!env || !argv) {
        free(env);
        free(argv);
        close(p[0]);
        close(p[1]);
        printf("FAILED\n    out of memory\n");
        o.failed = 1;
        return o;
    }
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "MV_TEST_CASE=", 13) &&
            strncmp(environ[i], "MV_TEST_RESULT_FD=", 18))
            env[k++] = environ[i];
    snprintf(case_var, sizeof case_var, "MV_TEST_CASE=%zu", idx);
    snprintf(fd_var, sizeof fd_var, "MV_TEST_RESULT_FD=%d", p[1]);
    env[k++] = case_var;
    env[k++] = fd_var;
    env[k] = NULL;
    size_t a = 0;
    if (has_emu)
        argv[a++] = (char *)emu;
    argv[a++] = self;
    for (size_t i = 1; i < nargs; i++)
        argv[a++] = args[i];
    argv[a] = NULL;

    uint64_t start = mv_test_mono_ms();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        /* The case dies with the harness (killed by ctest's timeout, say) instead of running on
         * unwatched. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(126);
        if (has_emu)
            execvpe(argv[0], argv, env);
        else
            execve(argv[0], argv, env);
        _exit(127);
    }
    free(env);
    free(argv);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        printf("FAILED\n    fork: %s\n", strerror(errno));
        o.failed = 1;
        return o;
    }

    int status = 0;
    uint64_t deadline = start + (uint64_t)timeout_s * 1000u;
    unsigned nap = 1;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            status = -1;
            break;
        }
        if (mv_test_mono_ms() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            o.timed_out = 1;
            break;
        }
        mv_test_sleep_ms(nap);
        if (nap < 20)
            nap *= 2;
    }
    ssize_t got;
    do
        got = read(p[0], r, sizeof *r);
    while (got < 0 && errno == EINTR);
    close(p[0]);
    int reported = got == (ssize_t)sizeof *r && r->magic == RESULT_MAGIC;
    if (!reported)
        memset(r, 0, sizeof *r);

    if (o.timed_out) {
        printf("\n  Test: %s ...FAILED\n    timed out after %u s (MV_TEST_TIMEOUT), killed\n",
               t->name, timeout_s);
        o.failed = 1;
    } else if (status != -1 && WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        printf("\n  Test: %s ...FAILED\n    crashed: signal %d SIG%s (%s)%s\n", t->name, sig,
               sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", strsignal(sig),
               reported ? " after the case, at exit" : "");
        o.failed = o.crashed = 1;
    } else if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 77 && !reported) {
        /* mv_test_skip() inside the case: the case could not run on this machine. */
        o.skipped = 1;
    } else if (!reported) {
        printf("\n  Test: %s ...FAILED\n    the case's process exited with status %d before "
               "reporting (exit() in the case, or a sanitizer report: see above)\n",
               t->name, status == -1 ? -1 : WEXITSTATUS(status));
        o.failed = 1;
    } else if (WEXITSTATUS(status) != 0 && !r->failed) {
        /* The case passed but its process failed afterwards: a leak report at exit (LSan exits
         * 23), a sanitizer error in the program's tear-down, or a failing tear-down. */
        printf("  Test: %s ...FAILED\n    the case passed, then its process exited with status "
               "%d (sanitizer or leak report at exit? see above)\n",
               t->name, WEXITSTATUS(status));
        o.failed = 1;
    } else {
        o.failed = r->failed ? 1 : 0;
    }
    fflush(stdout);
    return o;
}

int mv_test_run_fixture(const char *suite, int (*init)(void), int (*clean)(void),
                        const mv_test *tests, size_t n)
{
    const char *nofork = getenv("MV_TEST_NOFORK");
    if (nofork && *nofork && strcmp(nofork, "0") != 0)
        return run_in_process(suite, init, clean, tests, n);
    const char *one = getenv("MV_TEST_CASE");
    if (one && *one) {
        const char *fdv = getenv("MV_TEST_RESULT_FD");
        int fd = fdv && *fdv ? (int)strtol(fdv, NULL, 10) : -1;
        return run_one_case(suite, init, clean, tests, n, strtoul(one, NULL, 10), fd);
    }

    unsigned timeout_s = env_unsigned("MV_TEST_TIMEOUT", 120);
    size_t nargs = 0;
    char **args = own_args(&nargs);
    if (!args || nargs == 0) {
        fprintf(stderr, "mv_test: cannot read /proc/self/cmdline; running in one process\n");
        free(args);
        return run_in_process(suite, init, clean, tests, n);
    }
    printf("\n     CUnit - one process per case (MV_TEST_NOFORK=1: all in this one)\n\n"
           "Suite: %s\n",
           suite);
    uint64_t t0 = mv_test_mono_ms();
    unsigned failed = 0, crashed = 0, timed_out = 0, skipped = 0, ran = 0, passed = 0;
    unsigned long asserts = 0, asserts_failed = 0;
    unsigned parts = 0;
    char failed_names[1024] = "";
    size_t fl = 0;
    for (size_t i = 0; i < n; i++) {
        case_result r;
        case_outcome o = spawn_case(&tests[i], i, args, nargs, timeout_s, &r);
        asserts += r.asserts;
        asserts_failed += r.asserts_failed;
        parts += r.skipped_parts;
        if (o.skipped) {
            skipped++;
            continue;
        }
        ran++;
        if (!o.failed) {
            passed++;
            continue;
        }
        failed++;
        crashed += (unsigned)o.crashed;
        timed_out += (unsigned)o.timed_out;
        if (fl < sizeof failed_names) {
            int w = snprintf(failed_names + fl, sizeof failed_names - fl, "%s\"%s\"%s",
                             fl ? ", " : "", tests[i].name,
                             o.timed_out ? " (timed out)"
                             : o.crashed ? " (crashed)"
                                         : "");
            if (w > 0)
                fl += (size_t)w;
        }
    }
    free(args);
    uint64_t ms = mv_test_mono_ms() - t0;
    printf("\nRun Summary:    Type  Total    Ran Passed Failed Inactive\n"
           "              suites      1      1    n/a      0        0\n"
           "               tests %6zu %6u %6u %6u %8u\n"
           "             asserts %6lu %6lu %6lu %6lu      n/a\n\n"
           "Elapsed time = %8.3f seconds\n",
           n, ran, passed, failed, skipped, asserts, asserts, asserts - asserts_failed,
           asserts_failed, (double)ms / 1000.0);
    printf("%s: %zu case(s): %u passed, %u failed (%u crashed, %u timed out), %u skipped\n", suite,
           n, passed, failed, crashed, timed_out, skipped);
    if (failed)
        printf("%s: FAILED: %s%s\n", suite, failed_names, fl >= sizeof failed_names ? "..." : "");
    if (parts)
        printf("%s: %u part(s) of cases SKIPPED (see the SKIPPED lines above)\n", suite, parts);
    fflush(stdout);
    if (failed)
        return 1;
    return n > 0 && skipped == n ? 77 : 0;
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

int mv_test_run(const char *suite, const mv_test *tests, size_t n)
{
    return mv_test_run_fixture(suite, NULL, NULL, tests, n);
}
