#!/usr/bin/env bash
# Installs what the tests need, builds, and runs the whole suite:
#   1. clang-format check, shellcheck of every script, banned C functions
#   2. -Werror build + every ctest test (unit, integration, real Prometheus, real RDMA in VMs);
#      tests labelled `prebuilt` (chart, cluster, image, arm64) run last, after stage 4
#   3. the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   4. each libFuzzer driver for a short run on its committed corpus
# Prints a final "N passed, N failed" line and exits nonzero if anything failed.
#
# Environment: MV_TEST_SKIP_ASAN=1 / MV_TEST_SKIP_FUZZ=1 skip stages (reported as skipped),
# MV_TEST_SKIP_PREBUILD=1 builds tools only when a test needs them (scripts/prebuild.sh),
# MV_FUZZ_SECONDS (default 20) per fuzz driver, JOBS (default nproc).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
jobs=${JOBS:-$(nproc)}

passed=0 failed=0 skipped=0
stage_fail=()
# Each stage's header says when it started, counted from the start of this script (a cold
# machine's budget is spent mostly by the prebuilt tools and the tests that wait for them).
note() { printf '\n=== %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
record_ctest() { # <stage> <logfile> <rc>
  local line p f t
  if grep -q '^No tests were found' "$2" && [ "$3" -eq 0 ]; then
    echo "note: $1: no tests selected"
    return
  fi
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$2" | tail -n 1)
  if [ -n "$line" ]; then
    t=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
    # ctest counts a skipped test (SKIP_RETURN_CODE) among the passed; we do not.
    s=$(grep -cE '^[[:space:]]+[0-9]+ - .*\(Skipped\)$' "$2" || true)
    p=$((t - f - s))
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    [ "$f" -eq 0 ] && [ "$3" -eq 0 ] || stage_fail+=("$1")
    [ "$s" -gt 0 ] && echo "note: $1: $s test(s) SKIPPED (see the reasons printed above)"
  else
    failed=$((failed + 1)); stage_fail+=("$1 (no ctest summary)")
  fi
}
record() { # <stage> <rc>
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); stage_fail+=("$1"); fi
}

# Every part of a test that cannot run here (a CUnit sub-case through mv_test_skip_case, a
# Python check through mvtest.Report.skip) appends a line to this file; the summary counts them
# as skipped, so a test binary that passed with a part skipped is never a silent pass.
mkdir -p build
export MV_TEST_SKIP_LOG=$PWD/build/skipped-parts.log
: >"$MV_TEST_SKIP_LOG"

note "dependencies"
./scripts/deps.sh test || { echo "dependency install failed" >&2; exit 1; }

# The pinned Go tools, Kubernetes components and base images that later tests need build in the
# background from here on (cold machine: they overlap the C builds and unit tests).
prebuild_pid=
if [ "${MV_TEST_SKIP_PREBUILD:-0}" != 1 ]; then
  mkdir -p build
  note "prebuild (background; log build/prebuild.log)"
  PREBUILD_LOG_DIR=$PWD/build ./scripts/prebuild.sh >build/prebuild.log 2>&1 &
  prebuild_pid=$!
fi

note "format"
./scripts/check-format.sh; record format $?

note "shellcheck"
./scripts/check-shell.sh; record shellcheck $?

note "banned functions"
./scripts/check-banned.sh; record banned-functions $?

note "documentation links"
./scripts/check-links.sh; record doc-links $?

note "build (-Werror)"
cmake -S . -B build -DMV_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build build -j"$jobs"
rc=$?; record build $rc
build_ok=$rc
if [ $build_ok -eq 0 ]; then
  note "layering and names (scripts/check-layers.py)"
  python3 scripts/check-layers.py build; record layers-names $?
fi
# Tests labelled `prebuilt` need what scripts/prebuild.sh is still building on a cold machine;
# they run last (below), after everything else in both builds.
if [ $build_ok -eq 0 ]; then
  note "tests (build)"
  ctest --test-dir build --output-on-failure -j1 -LE prebuilt 2>&1 | tee build/ctest.log
  record_ctest tests "build/ctest.log" "${PIPESTATUS[0]}"
fi

asan_ok=1
asan_ctest() { # <logfile> <ctest selection args...>: the sanitized suite's environment
  local log=$1
  shift
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    MV_SANITIZED=1 ctest --test-dir build-asan --output-on-failure -j1 "$@" 2>&1 | tee "$log"
  ctest_rc=${PIPESTATUS[0]}
}
if [ "${MV_TEST_SKIP_ASAN:-0}" = 1 ]; then
  note "ASan+UBSan: SKIPPED (MV_TEST_SKIP_ASAN=1)"; skipped=$((skipped + 1))
else
  note "build (ASan+UBSan)"
  cmake -S . -B build-asan -DMV_WERROR=ON -DMV_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null &&
    cmake --build build-asan -j"$jobs"
  asan_ok=$?; record build-asan $asan_ok
  if [ $asan_ok -eq 0 ]; then
    note "tests (ASan+UBSan)"
    asan_ctest build-asan/ctest.log -LE 'no-sanitize|prebuilt'
    record_ctest tests-asan "build-asan/ctest.log" "$ctest_rc"
  fi
fi

if [ "${MV_TEST_SKIP_FUZZ:-0}" = 1 ]; then
  note "fuzz: SKIPPED (MV_TEST_SKIP_FUZZ=1)"; skipped=$((skipped + 1))
elif [ -x scripts/fuzz.sh ]; then
  note "fuzz (${MV_FUZZ_SECONDS:-20}s per driver)"
  ./scripts/fuzz.sh "${MV_FUZZ_SECONDS:-20}"; record fuzz $?
fi

# In the order the prebuild finishes what they need: the base images first (ready long before
# the Go builds), then helm and the Kubernetes components (both builds), and last cluster_helm,
# the Prometheus 3 tests and cluster_keda, which need prometheus-adapter, Prometheus 3 and KEDA,
# the last Go builds. On a cold machine each group runs while the next tool is still building.
images_only='^(image_containers|image_quickstart|arm64_unit_qemu)$'
needs_adapter='^(cluster_helm|e2e_native_histograms_prom3|e2e_remote_write2|cluster_keda)$'
prebuilt_ctest() { # <stage> <build dir> <log name> <ctest selection args...>
  local stage=$1 dir=$2 log=$2/$3
  shift 3
  if [ "$dir" = build-asan ]; then
    asan_ctest "$log" -L prebuilt -LE no-sanitize "$@"
  else
    ctest --test-dir "$dir" --output-on-failure -j1 -L prebuilt "$@" 2>&1 | tee "$log"
    ctest_rc=${PIPESTATUS[0]}
  fi
  record_ctest "$stage" "$log" "$ctest_rc"
}
if [ $build_ok -eq 0 ]; then
  note "tests needing the prebuilt base images (build)"
  prebuilt_ctest tests-prebuilt-images build ctest-prebuilt-images.log -R "$images_only"
  note "tests needing helm and the Kubernetes components (build)"
  prebuilt_ctest tests-prebuilt build ctest-prebuilt.log -E "$images_only|$needs_adapter"
fi
if [ $asan_ok -eq 0 ]; then
  note "tests needing the prebuilt tools (ASan+UBSan)"
  prebuilt_ctest tests-asan-prebuilt build-asan ctest-prebuilt.log
fi
if [ $build_ok -eq 0 ]; then
  note "tests needing prometheus-adapter, Prometheus 3 and KEDA (build)"
  prebuilt_ctest tests-prebuilt-adapter build ctest-prebuilt-adapter.log -R "$needs_adapter"
fi

if [ -n "$prebuild_pid" ]; then
  wait "$prebuild_pid"
  note "prebuild (what the background builds took; a failed one was rebuilt by its test)"
  cat build/prebuild.log
fi

note "summary"
if [ -s "$MV_TEST_SKIP_LOG" ]; then
  parts=$(wc -l <"$MV_TEST_SKIP_LOG")
  echo "parts of tests SKIPPED: $parts (each counted as skipped below)"
  sed 's/^/  /' "$MV_TEST_SKIP_LOG"
  skipped=$((skipped + parts))
fi
if [ ${#stage_fail[@]} -gt 0 ]; then
  echo "failed stages: ${stage_fail[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
