#!/usr/bin/env bash
# Cross-builds MicroView for arm64 (BlueField DPUs) and runs the unit tests under qemu-user.
#
# Usage: scripts/cross-arm64.sh [BUILD_DIR] [ctest options...]
#        (defaults: build-arm64; every test whose command ctest runs under qemu-aarch64-static,
#        i.e. the unit test executables; lint and fixture checks labelled unit run host tools
#        and are left out)
#
# The build runs in microview-base/cross-arm64:bookworm (scripts/base-image.sh cross-arm64):
# Debian's crossbuild-essential-arm64 with the arm64 halves of the -dev packages installed side by
# side (multiarch), cmake/toolchain-aarch64-linux-gnu.cmake, and qemu-user-static, which ctest
# uses as the cross-compiling emulator, so each CUnit executable runs as arm64 code under
# qemu-aarch64-static. No binfmt_misc entry is needed on the host; the container has no network.
# The source is mounted at its own path so that the build tree works from the host too.
# Environment: JOBS (default nproc), MV_CACHE (see scripts/base-image.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-arm64}
shift || true
mkdir -p "$build"
build=$(cd "$build" && pwd)
jobs=${JOBS:-$(nproc)}
image=microview-base/cross-arm64:bookworm

"$root/scripts/base-image.sh" cross-arm64

mounts=(-v "$root:$root:ro" -v "$build:$build")
t0=$SECONDS
# shellcheck disable=SC2016
docker run --rm --network none "${mounts[@]}" -w "$build" --user "$(id -u):$(id -g)" \
  -e HOME=/tmp -e JOBS="$jobs" -e SRC="$root" -e BUILD="$build" \
  "$image" bash -c '
    set -euo pipefail
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE="$SRC/cmake/toolchain-aarch64-linux-gnu.cmake" \
      -DMV_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    nice -n 10 cmake --build "$BUILD" -j"$JOBS" >"$BUILD/build.log" 2>&1 || { tail -n 40 "$BUILD/build.log"; exit 1; }
    echo "cross-arm64: built in $BUILD"
    grep -rqs --include=CTestTestfile.cmake qemu-aarch64-static "$BUILD" ||
      { echo "cross-arm64: ctest would not run the tests under qemu-aarch64-static" >&2; exit 1; }
    for f in "$BUILD"/bin/microview-agent "$BUILD"/bin/microview-collector "$BUILD"/bin/microviewctl; do
      readelf -h "$f" | grep -q "Machine:.*AArch64" || { echo "cross-arm64: $f is not an arm64 ELF" >&2; exit 1; }
    done
    '
echo "cross-arm64: build ${SECONDS}s"
t1=$SECONDS
if [ $# -eq 0 ]; then
  # The tests ctest runs through the emulator: add_test([=[NAME]=] "/usr/bin/qemu-aarch64-static" ...
  names=$(grep -rhs --include=CTestTestfile.cmake -E '^add_test\(\[=\[[A-Za-z0-9_.-]+\]=\] "[^"]*qemu-aarch64-static"' "$build" |
    sed -E 's/^add_test\(\[=\[([A-Za-z0-9_.-]+)\]=\].*/\1/' | sort -u | paste -sd '|')
  [ -n "$names" ] || { echo "cross-arm64: no test runs under qemu-aarch64-static" >&2; exit 1; }
  set -- -R "^($names)\$"
fi
# The ctest run may be narrowed with the remaining arguments (default: the unit tests).
docker run --rm --network none "${mounts[@]}" -w "$build" --user "$(id -u):$(id -g)" \
  -e HOME=/tmp "$image" \
  ctest --test-dir "$build" --output-on-failure -j1 "$@"
rc=$?
echo "cross-arm64: tests under qemu-aarch64-static $((SECONDS - t1))s (total $((SECONDS - t0))s)"
exit $rc
