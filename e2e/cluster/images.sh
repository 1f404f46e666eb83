#!/usr/bin/env bash
# Builds the e2e cluster's images with `docker build` (no registry: every image starts FROM
# scratch) and imports them into the cluster containerd's k8s.io namespace.
#   images.sh pause              the pod sandbox image ($MV_PAUSE_IMAGE) from images/pause.c
#   images.sh busybox            mv.local/busybox:e2e: Debian's static /bin/busybox with its applets
#   images.sh writer BUILD_DIR   mv.local/microview-writer:e2e: BUILD_DIR/bin/microviewctl with
#                                the shared libraries it links, as /usr/bin/microviewctl
# Needs the cluster's containerd running (up.sh starts it).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ctx=$(mktemp -d /tmp/mv-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT

# docker_build REF: docker build of $ctx, its output shown only when it fails.
docker_build() {
  docker build -q -t "$1" "$ctx" >"$ctx/build.log" 2>&1 || {
    cat "$ctx/build.log" >&2
    die "docker build of $1 failed"
  }
}

# import_image REF: docker save REF | ctr import, then check containerd has it.
import_image() {
  docker save "$1" -o "$ctx/image.tar"
  ctrd images import --snapshotter overlayfs "$ctx/image.tar" >/dev/null
  ctrd images ls -q | grep -x "$1" >/dev/null || die "containerd does not list $1 after import"
  log "image $1 imported into containerd (k8s.io)"
}

# copy_with_libs BINARY DEST_ROOT: the binary at /usr/bin and every library ldd lists, at the
# same paths, so the image runs it with the host's loader.
copy_with_libs() {
  local bin=$1 root=$2 lib
  mkdir -p "$root/usr/bin"
  cp -L "$bin" "$root/usr/bin/"
  for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

case ${1:-} in
pause)
  mkdir -p "$ctx/root"
  cc -std=c11 -Wall -Wextra -Werror -Os -static -o "$ctx/root/pause" "$MV_CLUSTER_SRC/images/pause.c"
  printf 'FROM scratch\nCOPY root/ /\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
  docker_build "$MV_PAUSE_IMAGE"
  import_image "$MV_PAUSE_IMAGE"
  ;;
busybox)
  [ -x /bin/busybox ] || die "/bin/busybox missing (busybox-static, scripts/deps.sh test)"
  mkdir -p "$ctx/root/bin" "$ctx/root/tmp"
  cp /bin/busybox "$ctx/root/bin/busybox"
  for a in sh echo cat sleep ls hostname ip wget env; do ln -s busybox "$ctx/root/bin/$a"; done
  printf 'FROM scratch\nCOPY root/ /\nENV PATH=/bin\nCMD ["/bin/sh"]\n' >"$ctx/Dockerfile"
  docker_build mv.local/busybox:e2e
  import_image mv.local/busybox:e2e
  ;;
writer)
  build=${2:?usage: images.sh writer BUILD_DIR}
  [ -x "$build/bin/microviewctl" ] || die "$build/bin/microviewctl not built"
  copy_with_libs "$build/bin/microviewctl" "$ctx/root"
  mkdir -p "$ctx/root/tmp"
  printf 'FROM scratch\nCOPY root/ /\nENTRYPOINT ["/usr/bin/microviewctl"]\n' >"$ctx/Dockerfile"
  docker_build mv.local/microview-writer:e2e
  import_image mv.local/microview-writer:e2e
  ;;
*)
  echo "usage: images.sh pause | busybox | writer BUILD_DIR" >&2
  exit 2
  ;;
esac
