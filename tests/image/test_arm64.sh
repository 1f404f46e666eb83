#!/usr/bin/env bash
# arm64 (BlueField): cross-builds the whole project for aarch64 and runs the CUnit unit tests as
# arm64 code under qemu-aarch64-static (scripts/cross-arm64.sh). Exit 77 only when Docker cannot
# run here at all.
# Usage: test_arm64.sh BUILD_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: $0 BUILD_DIR}
. "$root/tests/image/docker-lib.sh"
tmp=$(mktemp -d)
trap 'docker_stop; rm -rf "$tmp"' EXIT
docker_ensure "$tmp/dockerd.log"
"$root/scripts/cross-arm64.sh" "$build" | tee "$tmp/out.log"
rc=${PIPESTATUS[0]}
# A run where ctest found nothing to run would pass silently: require the unit tests to be there.
n=$(sed -nE 's/.* tests passed, .* out of ([0-9]+)$/\1/p' "$tmp/out.log" | tail -n 1)
if [ "${n:-0}" -lt 10 ]; then
  echo "FAIL: expected the arm64 unit tests to run under qemu, ctest ran ${n:-0}"
  exit 1
fi
exit "$rc"
