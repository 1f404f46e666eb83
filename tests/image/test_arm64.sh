#!/usr/bin/env bash
# arm64 (BlueField): cross-builds the whole project for aarch64 and runs the CUnit unit tests as
# arm64 code under qemu-aarch64-static (scripts/cross-arm64.sh); then builds the arm64 image
# (arm64 runtime base from scripts/base-image.sh --arch arm64, the Dockerfile with ARCH=arm64) and
# checks it: architecture arm64 in its config, arm64 ELF files, every NEEDED library present in
# the image, and each program's --help run under qemu-aarch64-static against the image's own
# libraries (qemu -L). Exit 77 only when Docker cannot run here at all.
# Usage: test_arm64.sh BUILD_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: $0 BUILD_DIR}
# shellcheck source=SCRIPTDIR/docker-lib.sh
. "$root/tests/image/docker-lib.sh"
tmp=$(mktemp -d)
trap 'docker_stop; rm -rf "$tmp"' EXIT
docker_ensure "$tmp/dockerd.log"
"$root/scripts/cross-arm64.sh" "$build" | tee "$tmp/out.log"
rc=${PIPESTATUS[0]}
# A run where ctest found nothing to run would pass silently: require the arm64 tests to be there.
n=$(sed -nE 's/.* tests passed, .* out of ([0-9]+)$/\1/p' "$tmp/out.log" | tail -n 1)
if [ "${n:-0}" -lt 10 ]; then
  echo "FAIL: expected the arm64 tests to run under qemu, ctest ran ${n:-0}"
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"

# ---- the arm64 image ---------------------------------------------------------------------------
# Its base image is the slow part on a cold machine (the second stage of debootstrap under qemu);
# MV_TEST_SKIP_ARM64_IMAGE=1 leaves the image out and says so.
if [ "${MV_TEST_SKIP_ARM64_IMAGE:-0}" = 1 ]; then
  echo "NOTE: arm64 image NOT built or checked (MV_TEST_SKIP_ARM64_IMAGE=1); binaries and unit tests were"
  exit 0
fi
version=$(sed -nE 's/^project\(microview VERSION ([0-9.]+).*/\1/p' "$root/CMakeLists.txt")
image=microview/microview:$version-arm64
t0=$SECONDS
"$root/scripts/base-image.sh" --arch arm64 runtime || { echo "FAIL: arm64 runtime base image"; exit 1; }
t_base=$((SECONDS - t0))
t0=$SECONDS
if ! docker build -q -t "$image" --build-arg ARCH=arm64 \
  --build-arg BUILD_BASE=microview-base/cross-arm64:bookworm --build-arg VERSION="$version" \
  --build-arg REVISION="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)" \
  "$root" >"$tmp/build.log" 2>&1; then
  tail -n 40 "$tmp/build.log"
  echo "FAIL: docker build of the arm64 image"
  exit 1
fi
t_build=$((SECONDS - t0))
echo "timing: arm64 runtime base ${t_base}s, arm64 docker build ${t_build}s"
check "image config says arm64" test "$(docker image inspect -f '{{.Architecture}}' "$image")" = arm64
check "default user is 65532:65532" test "$(docker image inspect -f '{{.Config.User}}' "$image")" = 65532:65532
cid=$(docker create --platform linux/arm64 "$image")
mkdir "$tmp/rootfs"
docker export "$cid" | tar -C "$tmp/rootfs" -x --exclude='dev/*'
docker rm "$cid" >/dev/null
# shellcheck disable=SC2016
docker run --rm --network none -v "$tmp/rootfs:/img:ro" microview-base/cross-arm64:bookworm bash -c '
  n=0
  for f in /img/usr/bin/microview* /img/usr/lib/aarch64-linux-gnu/libmicroview.so.0; do
    n=$((n + 1))
    readelf -h "$f" | grep -q "Machine:.*AArch64" || echo "FAIL: ${f#/img} is not arm64"
    for lib in $(readelf -d "$f" | sed -n "s/.*(NEEDED).*\[\(.*\)\]/\1/p"); do
      [ -e "/img/usr/lib/aarch64-linux-gnu/$lib" ] || [ -e "/img/lib/aarch64-linux-gnu/$lib" ] ||
        echo "FAIL: ${f#/img} needs $lib, not in the image"
    done
    case $f in
      */bin/*) qemu-aarch64-static -L /img "$f" --help >/dev/null 2>&1 ||
                 echo "FAIL: ${f#/img} --help under qemu-aarch64-static -L (the image root)" ;;
    esac
  done
  echo "checked $n files"
' >"$tmp/arm64-image.txt" 2>&1
cat "$tmp/arm64-image.txt"
check "arm64 ELF files, NEEDED libraries present, --help runs under qemu against the image" \
  bash -c "! grep -q FAIL '$tmp/arm64-image.txt' && grep -qE 'checked ([4-9]|[1-9][0-9]) files' '$tmp/arm64-image.txt'"
check "arm64 image has no -dev package" \
  bash -c "! ls '$tmp/rootfs/var/lib/dpkg/info/' | grep -qE -- '-dev(:arm64)?\.list\$'"
echo "arm64 image: $passes passed, $fails failed"
[ $fails -eq 0 ]
