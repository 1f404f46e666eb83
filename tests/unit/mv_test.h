/* mv_test: the unit tests' shared harness: one CUnit main running each case in its own process,
 * scratch directories, bounded polling instead of fixed sleeps, and the ctest skip convention. */
#ifndef MV_TEST_H
#define MV_TEST_H

#include <stddef.h>
#include <stdint.h>

#include <CUnit/Basic.h>

typedef struct mv_test {
    const char *name;
    void (*fn)(void);
} mv_test;

/* Runs `tests` as one CUnit suite named `suite`, each case in its own process: the program is
 * started again (same arguments, MV_TEST_CASE=<index> in its environment) and that process runs
 * main() up to here and then the one case, with the suite's init/clean around it. A case that
 * crashes, exits, or runs longer than $MV_TEST_TIMEOUT seconds (default 120; it is killed) fails
 * alone, named with its signal, and the cases after it still run; so does a case whose process
 * exits nonzero after it passed (a leak or sanitizer report at exit). Ends with CUnit's run
 * summary and a line counting passed, failed, crashed, timed-out and skipped cases.
 * MV_TEST_NOFORK=1 runs every case in this process instead (for a debugger); MV_TEST_CASE=<i>
 * runs case i alone in this process. Returns the process exit code: 0 when every case passed,
 * 1 otherwise, 77 when every case called mv_test_skip(), 2 when CUnit could not start. */
int mv_test_run(const char *suite, const mv_test *tests, size_t n);
#define MV_TEST_RUN(suite, tests) mv_test_run(suite, tests, sizeof(tests) / sizeof((tests)[0]))
/* The same with CUnit suite set-up and tear-down functions (0 = success). */
int mv_test_run_fixture(const char *suite, int (*init)(void), int (*clean)(void),
                        const mv_test *tests, size_t n);
#define MV_TEST_RUN_FIXTURE(suite, init, clean, tests)                                             \
    mv_test_run_fixture(suite, init, clean, tests, sizeof(tests) / sizeof((tests)[0]))

/* Makes a fresh directory /tmp/mv-<tag>-XXXXXX. Returns a path to free(), or
 * NULL. */
char *mv_test_tmpdir(const char *tag);
/* Removes a directory tree (no shell involved). Returns 0 or -1. */
int mv_test_rmrf(const char *path);
/* Creates (or truncates) the file `dir`/`name` as `size` zero bytes, the blank space a
 * segment is opened in, and writes its path to path[pathlen]. Returns 0 or -1. */
int mv_test_blank_file(const char *dir, const char *name, size_t size, char *path, size_t pathlen);

/* Calls cond(arg) every millisecond or so until it returns nonzero or
 * `timeout_ms` passed. Returns 1 when the condition came true, 0 on timeout. */
int mv_test_wait_until(int (*cond)(void *arg), void *arg, unsigned timeout_ms);
/* Milliseconds on the monotonic clock, to measure how long code under test took. */
uint64_t mv_test_mono_ms(void);
/* Sleeps `ms` milliseconds: only to let time pass for code under test that
 * measures it (rates, intervals), never as synchronisation. */
void mv_test_sleep_ms(unsigned ms);

/* Prints "SKIPPED: <reason>" and exits 77, which ctest reports as skipped. Called from a case,
 * that case counts as skipped and the others still run. */
void mv_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Reports that a part of the running case cannot run on this machine: prints
 * "SKIPPED: <suite>/<case>: <reason>", counts it in the suite's closing line, and appends the
 * same line to the file named by $MV_TEST_SKIP_LOG when it is set (scripts/test.sh adds those
 * lines to its skipped total, so a skipped part is never counted as passed). The case then
 * returns without asserting what it could not check. */
void mv_test_skip_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
