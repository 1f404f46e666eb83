#!/usr/bin/env bash
# Makes the local base images the Dockerfile's FROM lines name, from Debian packages only.
#
# Usage: scripts/base-image.sh [--arch amd64|arm64] [build|runtime|cross-arm64|all]...
#                                                        (default: build runtime)
#
#   microview-base/build:bookworm-ARCH    minbase + compilers and the -dev packages of
#                                          `scripts/deps.sh --list build`
#   microview-base/runtime:bookworm-ARCH  minbase + the shared libraries of
#                                          `scripts/deps.sh --list runtime`, nothing else
#   microview-base/cross-arm64:bookworm   build image + crossbuild-essential-arm64, the arm64
#                                          -dev packages (multiarch) and qemu-user-static
#
# No registry is needed: build and runtime are `debootstrap --variant=minbase` trees imported
# with `docker import`; cross-arm64 is a `docker build` on top of the build image (apt-get from
# the mirror). Each image carries a label io.microview.base.key, a hash of suite, arch, mirror
# and package list. An image whose tag exists with the same key is kept as is; otherwise the
# tarball cached under ${MV_CACHE:-/var/cache/microview}/base-images/ with that key is imported;
# only when neither exists is the tree bootstrapped again (a few minutes; needs root and the
# mirror).
#
# arm64 (--arch arm64) makes the runtime image only, with `debootstrap --foreign` and a second
# stage under qemu-user-static (needs a binfmt_misc entry for aarch64; see docs/image.md).
#
# Environment: MV_CACHE, MV_DEBIAN_MIRROR (default: the host's apt source for the suite, else
# http://deb.debian.org/debian), MV_SUITE (default bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

arch=amd64
kinds=()
while [ $# -gt 0 ]; do
  case $1 in
    --arch) arch=${2:?--arch needs amd64 or arm64}; shift 2 ;;
    --arch=*) arch=${1#--arch=}; shift ;;
    build | runtime | cross-arm64) kinds+=("$1"); shift ;;
    all) kinds+=(build runtime cross-arm64); shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "base-image: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(build runtime)
case $arch in amd64 | arm64) ;; *) echo "base-image: --arch must be amd64 or arm64, got '$arch'" >&2; exit 2 ;; esac

suite=${MV_SUITE:-bookworm}
cache=${MV_CACHE:-/var/cache/microview}/base-images
# Bump a kind's number when the way its tree is made changes, so cached tarballs are not reused.
declare -A format=([build]=1 [runtime]=2 [cross-arm64]=1)

log() { printf 'base-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The mirror this host's apt uses for $suite (deb822 .sources or one-line lists).
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '
      /^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
      END { if (uri != "" && ok) print uri }' "$f" | head -n 1
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }'
}
mirror=${MV_DEBIAN_MIRROR:-$(host_mirror | grep -m1 -v security || true)}
mirror=${mirror:-http://deb.debian.org/debian}

pkg_list() { "$root/scripts/deps.sh" --list "$1" | sort -u | tr '\n' ' ' | sed 's/ $//'; }

key_of() { # <kind> <packages>
  printf 'format=%s suite=%s arch=%s mirror=%s kind=%s pkgs=%s\n' \
    "${format[${1%% *}]}" "$suite" "$arch" "$mirror" "$1" "$2" | sha256sum | cut -c1-16
}
image_key() { docker image inspect -f '{{ index .Config.Labels "io.microview.base.key" }}' "$1" 2>/dev/null || true; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker daemon does not answer (docker info)"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one bootstrap at a time (parallel test runs share the cache)

# Writes the tree's apt sources and trims what an image does not need.
finish_tree() { # <dir> <kind>
  local d=$1 kind=$2
  rm -f "$d/etc/apt/sources.list"
  cat >"$d/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Keep copyright files; drop manuals, info pages, translations and apt/debootstrap leftovers.
  rm -rf "$d"/usr/share/man/* "$d"/usr/share/info/* "$d"/usr/share/locale/* \
    "$d"/var/cache/apt/archives/*.deb "$d"/var/lib/apt/lists/* "$d"/var/log/bootstrap.log \
    "$d"/debootstrap
  printf '#!/bin/sh\nexit 101\n' >"$d/usr/sbin/policy-rc.d" # no services start in images
  chmod 755 "$d/usr/sbin/policy-rc.d"
  : >"$d/etc/hostname"
  : >"$d/etc/resolv.conf"
  # The unprivileged account the image's collector and webhook run as (no shell, no home).
  if [ "$kind" = runtime ]; then
    echo 'nonroot:x:65532:65532:MicroView (unprivileged):/nonexistent:/usr/sbin/nologin' >>"$d/etc/passwd"
    echo 'nonroot:x:65532:' >>"$d/etc/group"
    echo 'nonroot:*:19000:0:99999:7:::' >>"$d/etc/shadow"
  fi
}

# Bootstraps <kind> for $arch with <packages> into the cached tarball <tar>.
bootstrap() { # <kind> <packages> <tar>
  local kind=$1 pkgs=$2 tar=$3 dir
  command -v debootstrap >/dev/null || die "debootstrap is missing (scripts/deps.sh test installs it)"
  [ "$(id -u)" -eq 0 ] || die "debootstrap needs root"
  dir=$(mktemp -d "$cache/tree.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$dir'" EXIT
  local t0=$SECONDS
  local include
  include=$(tr ' ' ',' <<<"$pkgs")
  if [ "$arch" = amd64 ] || [ "$(dpkg --print-architecture)" = "$arch" ]; then
    log "debootstrap $suite/$arch $kind from $mirror (+$(wc -w <<<"$pkgs") packages)"
    debootstrap --variant=minbase --arch="$arch" --include="$include" "$suite" "$dir" "$mirror" \
      >"$dir.log" 2>&1 || { tail -n 30 "$dir.log" >&2; die "debootstrap failed (log above)"; }
  else
    foreign_bootstrap "$include" "$dir"
  fi
  rm -f "$dir.log"
  finish_tree "$dir" "$kind"
  tar --numeric-owner -C "$dir" -cf "$tar.tmp" .
  rm -f "$cache/$suite-$arch-$kind"-*.tar # tarballs of older keys
  mv "$tar.tmp" "$tar"
  rm -rf "$dir"
  trap - EXIT
  log "$kind/$arch tree cached as $tar ($((SECONDS - t0)) s, $(du -m "$tar" | cut -f1) MiB)"
}

# A foreign tree: unpack with --foreign, then run the second stage under qemu-user-static.
foreign_bootstrap() { # <include> <dir>
  local include=$1 dir=$2 q=/usr/bin/qemu-aarch64-static
  [ -x $q ] || die "arm64 needs qemu-user-static on this host (apt-get install qemu-user-static)"
  [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] ||
    die "arm64 needs a binfmt_misc entry for aarch64 (see docs/image.md, 'arm64'): the second stage runs arm64 programs"
  log "debootstrap --foreign $suite/$arch from $mirror, second stage under qemu"
  debootstrap --foreign --variant=minbase --arch="$arch" --include="$include" "$suite" "$dir" \
    "$mirror" >"$dir.log" 2>&1 || { tail -n 30 "$dir.log" >&2; die "debootstrap --foreign failed"; }
  cp $q "$dir/usr/bin/"
  chroot "$dir" /debootstrap/debootstrap --second-stage >>"$dir.log" 2>&1 ||
    { tail -n 30 "$dir.log" >&2; die "second stage under qemu failed"; }
  rm -f "$dir/usr/bin/qemu-aarch64-static"
}

# Makes sure <tag> exists with <key>: keep it, import the cached tarball, or bootstrap.
ensure_imported() { # <kind> <tag> <packages>
  local kind=$1 tag=$2 pkgs=$3 key tar
  key=$(key_of "$kind" "$pkgs")
  if [ "$(image_key "$tag")" = "$key" ]; then
    log "$tag is current (key $key)"
    return
  fi
  tar=$cache/$suite-$arch-$kind-$key.tar
  [ -s "$tar" ] || bootstrap "$kind" "$pkgs" "$tar"
  log "importing $tar as $tag"
  docker import --change "LABEL io.microview.base.key=$key" \
    --change "LABEL org.opencontainers.image.base.name=debian:$suite-minbase" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' "$tar" "$tag" >/dev/null
}

# The cross image is a docker build; its `docker save` output is cached by key the same way.
ensure_cross() {
  local tag=microview-base/cross-arm64:$suite from=microview-base/build:$suite-amd64 pkgs key tar
  [ "$arch" = amd64 ] || die "cross-arm64 runs on an amd64 build host (--arch amd64)"
  ensure_imported build "$from" "$(pkg_list build)"
  pkgs=$(pkg_list cross-arm64)
  key=$(key_of "cross-arm64 from=$(image_key "$from")" "$pkgs")
  if [ "$(image_key "$tag")" = "$key" ]; then
    log "$tag is current (key $key)"
    return
  fi
  tar=$cache/$suite-amd64-cross-arm64-$key.docker.tar
  if [ -s "$tar" ]; then
    log "loading $tar"
    docker load -i "$tar" >/dev/null
    [ "$(image_key "$tag")" = "$key" ] && return
  fi
  local t0=$SECONDS
  log "building $tag (apt-get from $mirror inside the build)"
  # shellcheck disable=SC2086
  docker build -q -t "$tag" --label "io.microview.base.key=$key" - >/dev/null <<EOF
FROM $from
RUN dpkg --add-architecture arm64 \\
 && apt-get -o Acquire::Retries=3 update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -qq \\
      --no-install-recommends $pkgs >/dev/null \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
EOF
  rm -f "$cache/$suite-amd64-cross-arm64"-*.docker.tar # older keys
  docker save -o "$tar.tmp" "$tag" && mv "$tar.tmp" "$tar"
  log "$tag built and cached as $tar ($((SECONDS - t0)) s)"
}

one() { # <kind>
  case $1 in
    build)
      [ "$arch" = amd64 ] || die "the build image is amd64 only: arm64 binaries are cross-built (cross-arm64)"
      ensure_imported build "microview-base/build:$suite-$arch" "$(pkg_list build)" ;;
    runtime) ensure_imported runtime "microview-base/runtime:$suite-$arch" "$(pkg_list runtime)" ;;
    cross-arm64) ensure_cross ;;
  esac
}
# build and runtime are independent and mostly wait on the mirror: make them side by side.
# cross-arm64 starts from the build image, so it comes after.
pids=()
for kind in "${kinds[@]}"; do
  [ "$kind" = cross-arm64 ] && continue
  one "$kind" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
[ $rc -eq 0 ] || die "a base image failed (messages above)"
for kind in "${kinds[@]}"; do
  [ "$kind" = cross-arm64 ] && one cross-arm64
done
exit 0
