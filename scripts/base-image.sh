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
# stage under qemu-aarch64-static (the host's, or the cross image's). Without a host-wide
# binfmt_misc entry for aarch64, a private one is registered in a user namespace (Linux >= 6.7).
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

pkg_list() { # <deps.sh list>; an empty or failed list stops the script (it would bootstrap nothing)
  local l
  l=$("$root/scripts/deps.sh" --list "$1" | sort -u | tr '\n' ' ' | sed 's/ $//') && [ -n "$l" ] ||
    die "scripts/deps.sh --list $1 failed or is empty"
  echo "$l"
}

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

# Removes cached tarballs of other keys unused for a week (branches with other package lists
# share the cache, so recent ones stay). Every use of a tarball refreshes its time.
prune() { # <glob>
  find "$cache" -maxdepth 1 -name "$1" -mtime +7 -print -delete | sed 's/^/base-image: pruned /' >&2
}

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
  trap "rm -rf '$dir' '$dir.log'" EXIT # the log's tail is printed on failure
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
  prune "$suite-$arch-$kind-*.tar"
  mv "$tar.tmp" "$tar"
  rm -rf "$dir"
  trap - EXIT
  log "$kind/$arch tree cached as $tar ($((SECONDS - t0)) s, $(du -m "$tar" | cut -f1) MiB)"
}

# qemu-aarch64-static: the host's, else the one in the cross image (copied into the cache).
qemu_aarch64() {
  if [ -x /usr/bin/qemu-aarch64-static ]; then echo /usr/bin/qemu-aarch64-static; return; fi
  local q=$cache/qemu-aarch64-static
  if [ ! -x "$q" ]; then
    ( arch=amd64; ensure_cross ) >&2
    docker run --rm --network none microview-base/cross-arm64:"$suite" cat /usr/bin/qemu-aarch64-static >"$q.tmp" &&
      chmod 755 "$q.tmp" && mv "$q.tmp" "$q" || die "cannot copy qemu-aarch64-static out of the cross image"
  fi
  echo "$q"
}

# Runs the second stage of a --foreign tree under qemu. With no host-wide binfmt_misc entry for
# aarch64, it registers one in a private binfmt_misc instance of a new user namespace (Linux
# >= 6.7), which nobody else sees; uids and gids 0-65535 are mapped to themselves, so the tree
# gets the same owners as with a plain chroot.
second_stage() { # <dir> <qemu>
  local dir=$1 q=$2
  if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    cp "$q" "$dir/usr/bin/qemu-aarch64-static"
    chroot "$dir" /debootstrap/debootstrap --second-stage
    local rc=$?
    rm -f "$dir/usr/bin/qemu-aarch64-static"
    return $rc
  fi
  local sync pid child
  sync=$(mktemp -d)
  # shellcheck disable=SC2016
  unshare --user --mount --pid --net --fork bash -c '
    set -e
    read -r hostpid _ </proc/self/stat
    echo "$hostpid" >"$3/pid.tmp" && mv "$3/pid.tmp" "$3/pid"
    for i in $(seq 100); do [ -e "$3/mapped" ] && break; sleep 0.05; done
    [ -e "$3/mapped" ] || { echo "uid map not written" >&2; exit 1; }
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
      { echo "no binfmt_misc in a user namespace (needs Linux >= 6.7)" >&2; exit 1; }
    m="\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
    k="\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
    echo ":qemu-aarch64:M::$m:$k:$2:F" >/proc/sys/fs/binfmt_misc/register
    container=lxc chroot "$1" /debootstrap/debootstrap --second-stage
  ' second-stage "$dir" "$q" "$sync" &
  child=$!
  for _ in $(seq 100); do [ -s "$sync/pid" ] && break; sleep 0.05; done
  pid=$(cat "$sync/pid" 2>/dev/null || true)
  if [ -z "$pid" ] || ! echo '0 0 65536' >"/proc/$pid/uid_map" || ! echo '0 0 65536' >"/proc/$pid/gid_map"; then
    kill "$child" 2>/dev/null
    wait "$child" 2>/dev/null
    rm -rf "$sync"
    log "could not map the user namespace of the second stage"
    return 1
  fi
  touch "$sync/mapped"
  wait "$child"
  local rc=$?
  rm -rf "$sync"
  return $rc
}

# A foreign tree: unpack with --foreign, then run the second stage under qemu-user-static.
foreign_bootstrap() { # <include> <dir>
  local include=$1 dir=$2 q
  [ "$arch" = arm64 ] || die "foreign trees are made for arm64 only"
  q=$(qemu_aarch64)
  log "debootstrap --foreign $suite/$arch from $mirror, second stage under $q"
  debootstrap --foreign --variant=minbase --arch="$arch" --include="$include" "$suite" "$dir" \
    "$mirror" >"$dir.log" 2>&1 || { tail -n 30 "$dir.log" >&2; die "debootstrap --foreign failed"; }
  second_stage "$dir" "$q" >>"$dir.log" 2>&1 ||
    { tail -n 30 "$dir.log" >&2; die "second stage under qemu failed (log above)"; }
}

# Makes sure <tag> exists with <key>: keep it, import the cached tarball, or bootstrap.
ensure_imported() { # <kind> <tag> <packages>
  local kind=$1 tag=$2 pkgs=$3 key tar
  key=$(key_of "$kind" "$pkgs")
  if [ "$(image_key "$tag")" = "$key" ]; then
    log "$tag is current (key $key)"
    set_architecture "$tag"
    return
  fi
  tar=$cache/$suite-$arch-$kind-$key.tar
  if [ -s "$tar" ]; then touch "$tar"; else bootstrap "$kind" "$pkgs" "$tar"; fi
  log "importing $tar as $tag"
  docker import --platform "linux/$arch" --change "LABEL io.microview.base.key=$key" \
    --change "LABEL org.opencontainers.image.base.name=debian:$suite-minbase" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' "$tar" "$tag" >/dev/null
  set_architecture "$tag"
}

# `docker import --platform` is ignored by a daemon without multi-platform support: the image
# would say amd64, and a node's container runtime picks images by that field. Rewrites the
# field in the image's config (docker save, edit, docker load). Images built FROM it inherit it.
set_architecture() { # <tag>
  local tag=$1 have d
  have=$(docker image inspect -f '{{.Architecture}}' "$tag")
  [ "$have" = "$arch" ] && return 0
  d=$(mktemp -d "$cache/arch.XXXXXX")
  docker save -o "$d/image.tar" "$tag"
  python3 - "$d/image.tar" "$arch" <<'PY' || { rm -rf "$d"; die "cannot set the architecture of $tag"; }
import hashlib, io, json, sys, tarfile
path, arch = sys.argv[1], sys.argv[2]
with tarfile.open(path) as t:
    members = {m.name: (m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()}
manifest = json.loads(members["manifest.json"][1])
old = manifest[0]["Config"]
config = json.loads(members[old][1])
config["architecture"] = arch
if arch == "arm64":
    config["variant"] = "v8"
data = json.dumps(config, separators=(",", ":")).encode()
new = hashlib.sha256(data).hexdigest() + ".json"
manifest[0]["Config"] = new
members.pop(old)
members["manifest.json"] = (members["manifest.json"][0], json.dumps(manifest).encode())
members[new] = (tarfile.TarInfo(new), data)
with tarfile.open(path + ".new", "w") as out:
    for name, (info, body) in members.items():
        info.name = name
        if body is not None:
            info.size = len(body)
            out.addfile(info, io.BytesIO(body))
        else:
            out.addfile(info)
PY
  docker load -q -i "$d/image.tar.new" >/dev/null
  rm -rf "$d"
  [ "$(docker image inspect -f '{{.Architecture}}' "$tag")" = "$arch" ] ||
    die "$tag still does not say $arch"
}

# The cross image is a docker build; its `docker save` output is cached by key the same way.
ensure_cross() {
  local tag=microview-base/cross-arm64:$suite from=microview-base/build:$suite-amd64 pkgs key tar
  [ "$arch" = amd64 ] || die "cross-arm64 runs on an amd64 build host (--arch amd64)"
  pkgs=$(pkg_list build)
  ensure_imported build "$from" "$pkgs"
  pkgs=$(pkg_list cross-arm64)
  key=$(key_of "cross-arm64 from=$(image_key "$from")" "$pkgs")
  if [ "$(image_key "$tag")" = "$key" ]; then
    log "$tag is current (key $key)"
    return
  fi
  tar=$cache/$suite-amd64-cross-arm64-$key.docker.tar
  if [ -s "$tar" ]; then
    touch "$tar"
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
  prune "$suite-amd64-cross-arm64-*.docker.tar"
  docker save -o "$tar.tmp" "$tag" && mv "$tar.tmp" "$tar"
  log "$tag built and cached as $tar ($((SECONDS - t0)) s)"
}

one() { # <kind>
  case $1 in
    build)
      [ "$arch" = amd64 ] || die "the build image is amd64 only: arm64 binaries are cross-built (cross-arm64)"
      pkgs=$(pkg_list build)
      ensure_imported build "microview-base/build:$suite-$arch" "$pkgs" ;;
    runtime)
      pkgs=$(pkg_list runtime)
      ensure_imported runtime "microview-base/runtime:$suite-$arch" "$pkgs" ;;
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
