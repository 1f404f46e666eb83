#!/usr/bin/env bash
# Builds the e2e cluster's images with `docker build` (no registry: every image starts FROM
# scratch) and imports them into the cluster containerd's k8s.io namespace.
#   images.sh pause              the pod sandbox image ($MV_PAUSE_IMAGE) from images/pause.c
#   images.sh busybox            mv.local/busybox:e2e: Debian's static /bin/busybox with its applets
#   images.sh writer BUILD_DIR   mv.local/microview-writer:e2e: BUILD_DIR/bin/microviewctl with
#                                the shared libraries it links, as /usr/bin/microviewctl
#   images.sh sample-app BUILD_DIR mv.local/sample-app:e2e: images/sample-app.c (an HTTP service
#                                instrumented with libmicroview) linked against BUILD_DIR's
#                                libmicroview, with its shared libraries
#   images.sh microview          the product image microview/microview:<version> from the
#                                repository's Dockerfile (scripts/base-image.sh makes its local
#                                base images; docker's layer cache makes a rebuild quick)
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
  # A reference without a registry host is stored under docker.io/ (as the kubelet resolves it).
  local full=$1
  case ${1%%/*} in *.* | *:* | localhost) ;; *) full=docker.io/$1 ;; esac
  ctrd images ls -q | grep -Fx -e "$1" -e "$full" >/dev/null || die "containerd does not list $full after import"
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
sample-app)
  build=${2:?usage: images.sh sample-app BUILD_DIR}
  [ -f "$build/lib/libmicroview.so" ] || die "$build/lib/libmicroview.so not built"
  read -ra mhd <<<"$(pkg-config --cflags --libs libmicrohttpd)"
  cc -std=c11 -Wall -Wextra -Werror -O2 -o "$ctx/sample-app" "$MV_CLUSTER_SRC/images/sample-app.c" \
    -I "$MV_CLUSTER_SRC/../../pkg/format/microview" -L "$build/lib" -lmicroview \
    "-Wl,-rpath,$build/lib" "${mhd[@]}"
  copy_with_libs "$ctx/sample-app" "$ctx/root"
  mkdir -p "$ctx/root/tmp"
  printf 'FROM scratch\nCOPY root/ /\nUSER 1000:1000\nENTRYPOINT ["/usr/bin/sample-app"]\n' >"$ctx/Dockerfile"
  docker_build mv.local/sample-app:e2e
  import_image mv.local/sample-app:e2e
  ;;
microview)
  src=$(cd "$MV_CLUSTER_SRC/../.." && pwd)
  version=$(sed -nE 's/^project\(microview VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
  ref=microview/microview:$version
  "$src/scripts/base-image.sh" build runtime >&2 || die "scripts/base-image.sh build runtime failed"
  docker build -q -t "$ref" --build-arg VERSION="$version" \
    --build-arg REVISION="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)" \
    "$src" >"$ctx/build.log" 2>&1 || {
    tail -n 40 "$ctx/build.log" >&2
    die "docker build of $ref failed"
  }
  import_image "$ref"
  echo "$ref"
  ;;
*)
  echo "usage: images.sh pause | busybox | writer BUILD_DIR | sample-app BUILD_DIR | microview" >&2
  exit 2
  ;;
esac
