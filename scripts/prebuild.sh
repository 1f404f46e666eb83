#!/usr/bin/env bash
# prebuild.sh: builds the pinned tools and images that later tests need, so that on a cold
# machine their builds (mostly Go module downloads and compiles) overlap the C builds and unit
# tests instead of running one after another inside ctest. ./scripts/test.sh starts it in the
# background; it can also be run alone.
#
# Every builder it calls serialises on a lock (scripts/go-tools.sh, e2e/cluster/build.sh,
# scripts/base-image.sh) or writes its output atomically (tests/tools/gobuild.sh), so a test
# that needs a tool before it is ready waits for the build in progress instead of racing it.
# A failure here fails nothing by itself: the test that needs the tool builds it again and
# reports the error. Prints one line per step: `prebuild: STEP ok|FAILED SECONDSs`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rc=0
step() { # NAME COMMAND...
  local name=$1 t0=$SECONDS
  shift
  if "$@" >/dev/null 2>"${PREBUILD_LOG_DIR:-/tmp}/prebuild-$name.log"; then
    echo "prebuild: $name ok $((SECONDS - t0))s"
  else
    echo "prebuild: $name FAILED $((SECONDS - t0))s (log: ${PREBUILD_LOG_DIR:-/tmp}/prebuild-$name.log)"
    rc=1
  fi
}
have_go() { [ -x /usr/local/go/bin/go ] || command -v go >/dev/null; }
docker_ok() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }

# Two lanes side by side: the Go builds (compiles: CPU) and the base images (mostly downloads
# and package unpacking), each in the order the tests need them; scripts/test.sh runs the tests
# that need only the images first. The image lane is niced like the Go compiles, so both yield
# to the test suite.
go_lane() {
  have_go || return 0
  step helm scripts/go-tools.sh helm
  step k8scheck scripts/go-tools.sh k8scheck
  step jsonpatch tests/tools/jsonpatch/build.sh
  step quantity tests/tools/quantity/build.sh
  PATH=/usr/local/go/bin:$PATH step kubernetes e2e/cluster/build.sh
  step prometheus-adapter scripts/go-tools.sh prometheus-adapter
  step prometheus3 scripts/go-tools.sh prometheus3
  # Last: the largest module graph, needed only by cluster_keda, which scripts/test.sh runs last.
  step keda scripts/go-tools.sh keda
  return "$rc"
}
image_lane() {
  docker_ok && [ "$(id -u)" -eq 0 ] || return 0
  step base-images nice -n 10 scripts/base-image.sh build runtime cross-arm64
  [ "${MV_TEST_SKIP_ARM64_IMAGE:-0}" = 1 ] ||
    step base-image-arm64 nice -n 10 scripts/base-image.sh --arch arm64 runtime
  return "$rc"
}
image_lane &
images=$!
go_lane || rc=1
wait "$images" || rc=1
exit "$rc"
