#!/usr/bin/env bash
# The README's first command on a fresh Debian 12: runs `./scripts/quickstart.sh --once` as root
# in a new container of the project's own minbase image (microview-base/runtime, made by
# scripts/base-image.sh from Debian packages: minbase plus the runtime libraries, no compiler,
# no -dev package, no test package) on a copy of the source tree without build directories.
# quickstart installs its own packages from the image's Debian mirror (the host's), builds and
# shows live values; the test fails when it exits non-zero or its output lacks live values.
#
# Usage: tests/image/test_quickstart.sh [SOURCE_DIR]   (default: this tree)
# Exit 77 (ctest SKIP) only when Docker cannot run here at all.
# Environment: MV_CACHE (base image tarballs).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$(cd "${1:-$root}" && pwd) || exit 1
cd "$root" || exit 1

# shellcheck source=SCRIPTDIR/docker-lib.sh
. "$root/tests/image/docker-lib.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
docker_ensure "$tmp/dockerd.log"
name=mvquick-$$
cleanup() {
  docker rm -f "$name" >/dev/null 2>&1
  docker_stop
  rm -rf "$tmp"
}
trap cleanup EXIT

if ! scripts/base-image.sh runtime; then
  echo "FAIL: scripts/base-image.sh runtime"
  exit 1
fi
base=microview-base/runtime:bookworm-amd64
[ "$(dpkg --print-architecture)" = amd64 ] || skip "the base image is made for amd64 here"

# What the container starts with: no compiler, no cmake, no CUnit.
# shellcheck disable=SC2016
docker run --rm --network none "$base" sh -c \
  'for c in cc cmake pkg-config promtool; do command -v $c; done; ls /usr/include/CUnit 2>/dev/null' \
  >"$tmp/pre.txt" 2>&1
check "the base image holds no cc, cmake, pkg-config, promtool or CUnit" test ! -s "$tmp/pre.txt"
[ -s "$tmp/pre.txt" ] && cat "$tmp/pre.txt"

# The source tree as a newcomer has it: no build directories, no ccache, no VCS metadata.
log "quickstart --once in a fresh $base container (source: $src)"
t0=$SECONDS
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./.cache --exclude=./bench/.out \
  -cf - . |
  docker run -i --name "$name" "$base" bash -c \
    'mkdir /src && tar -x -C /src && cd /src && ./scripts/quickstart.sh --once --seconds 3' \
    >"$tmp/quickstart.log" 2>&1
rc=$?
took=$((SECONDS - t0))
echo "timing: quickstart --once in a fresh container ${took}s (exit $rc)"
if [ "$rc" -ne 0 ]; then tail -n 40 "$tmp/quickstart.log"; else tail -n 8 "$tmp/quickstart.log"; fi
check "quickstart --once exits 0 in a fresh Debian 12 container" test "$rc" -eq 0
check "quickstart showed live values of the workload" \
  grep -qE '^gen_requests_total\{.*worker="0"' "$tmp/quickstart.log"
check "quickstart said it was done" grep -q 'quickstart: --once done' "$tmp/quickstart.log"
echo "passes=$passes fails=$fails"
[ "$fails" -eq 0 ]
