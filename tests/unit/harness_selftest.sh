#!/usr/bin/env bash
# The unit harness isolates cases: test_harness's first cases crash and hang, later ones fail an
# assertion, skip a part, skip, trip ASan and leak (sanitized build only) and pass. Expects exit 1, each failure named as its case's, the passing
# case run, the skipped part counted and logged, and the timeout honoured.
# Usage: harness_selftest.sh <path to test_harness>
set -uo pipefail
bin=${1:?usage: harness_selftest.sh <test_harness binary>}
work=$(mktemp -d "${TMPDIR:-/tmp}/mv-harness-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
check() { # check <description> <pattern>: the output matches the extended regex
  if grep -Eq -- "$2" "$work/out"; then
    echo "ok: $1"
  else
    echo "FAIL: $1 (no line matching: $2)"
    fail=1
  fi
}

start=$(date +%s)
# As in scripts/test.sh's sanitizer stage: a sanitizer report aborts (a crash the harness names).
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1 MV_TEST_TIMEOUT=2 \
  MV_TEST_SKIP_LOG=$work/skip.log "$bin" >"$work/out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
cat "$work/out"
echo "--- exit status $rc after ${secs}s"
if [ "$rc" = 1 ]; then echo "ok: exits 1"; else echo "FAIL: exit status $rc, want 1"; fail=1; fi
check "the segfault is the case's failure, with the signal" \
  'Test: segfaults \.\.\.FAILED'
check "the crash names its signal" 'crashed: signal [0-9]+ SIG(SEGV|ABRT)'
check "the hang is killed after MV_TEST_TIMEOUT" 'timed out after 2 s'
check "the hang is the case's failure" 'Test: hangs \.\.\.FAILED'
check "an assertion failure names file and line" 'test_harness\.c:[0-9]+  - CU_ASSERT_EQUAL'
check "the passing case ran after them, with its fixture" \
  'harness-selftest: passing case ran, fixture=42'
if grep -A1 'harness-selftest: passing case ran' "$work/out" | grep -qx passed; then
  echo "ok: the passing case passed"
else
  echo "FAIL: the passing case did not pass"; fail=1
fi
check "the skipped part is reported" \
  'SKIPPED: harness/skips a part: harness-selftest: this part needs nothing'
if grep -q 'harness-selftest: asan=1' "$work/out"; then
  # Sanitized build: the overflow read and the leak fail their cases too.
  check "an ASan report fails its case" 'Test: ASan report \.\.\.FAILED'
  check "ASan names the overflow" 'AddressSanitizer: heap-buffer-overflow'
  check "a leak at exit fails its case" \
    'Test: leaks at exit \.\.\.FAILED|the case passed, then its process exited with status'
  check "LeakSanitizer names the leak" 'LeakSanitizer: detected memory leaks'
  check "the summary counts the cases" \
    'harness: 8 case\(s\): 2 passed, 5 failed \([1-3] crashed, 1 timed out\), 1 skipped'
  check "CUnit's run summary" 'tests +8 +7 +2 +5 +1'
else
  check "the summary counts the cases" \
    'harness: 8 case\(s\): 4 passed, 3 failed \(1 crashed, 1 timed out\), 1 skipped'
  check "CUnit's run summary" 'tests +8 +7 +4 +3 +1'
fi
check "the summary counts the skipped part" 'harness: 1 part\(s\) of cases SKIPPED'
check "the summary names the failed cases" \
  'FAILED: "segfaults" \(crashed\), "hangs" \(timed out\), "assert fails"'
check "a case calling mv_test_skip is skipped alone" \
  'SKIPPED: harness-selftest: this case needs nothing and skips on purpose'
if grep -q 'SKIPPED: harness/skips a part' "$work/skip.log" 2>/dev/null; then
  echo "ok: the skipped part is appended to MV_TEST_SKIP_LOG"
else
  echo "FAIL: MV_TEST_SKIP_LOG has no line for the skipped part"; fail=1
fi
if [ "$secs" -lt 30 ]; then echo "ok: done in ${secs}s"; else echo "FAIL: took ${secs}s"; fail=1; fi
exit $fail
