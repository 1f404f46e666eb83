#!/usr/bin/env bash
# Runs the deterministic unit test executables under valgrind's memcheck: a read of an
# uninitialised value (which neither the -Werror build nor ASan+UBSan reports) fails the test.
# Only tests without timing assertions are listed: under memcheck code runs ~30x slower.
# Usage: memcheck_unit.sh BUILD_DIR
# Exit 77 (SKIPPED) when valgrind is not installed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$root" || exit 1 # the suites read their fixtures from the source tree, as under ctest
tests=(test_segment test_microview test_shards test_utf8 test_util test_labelsel test_opts
  test_hostile test_repair test_export test_rw test_pipeline test_pipeline_equiv test_fd)
if ! command -v valgrind >/dev/null; then
  echo "SKIPPED: valgrind is not installed (Debian package valgrind, scripts/deps.sh test)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for t in "${tests[@]}"; do
  bin=$build/tests/$t
  if [ ! -x "$bin" ]; then
    echo "FAIL: $t: no executable $bin"
    fail=$((fail + 1))
    continue
  fi
  # One process for all cases (MV_TEST_NOFORK): memcheck follows forks, but one report is
  # easier to read. Leaks are not counted: the suites free what the product frees.
  if MV_TEST_NOFORK=1 valgrind -q --error-exitcode=99 --track-origins=yes --leak-check=no \
    "$bin" >"$tmp/$t.log" 2>&1; then
    echo "PASS: $t"
    pass=$((pass + 1))
  else
    rc=$?
    echo "FAIL: $t (exit $rc: 99 = memcheck errors, otherwise the suite's own failure)"
    grep -E "==[0-9]+== (Conditional|Use of|Invalid|Syscall param| +(at|by) )" "$tmp/$t.log" |
      head -n 20
    grep -E "^ +[0-9]+\. .* - " "$tmp/$t.log" | head -n 10
    fail=$((fail + 1))
  fi
done
echo "memcheck_unit: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
