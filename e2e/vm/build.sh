#!/usr/bin/env bash
# Builds the e2e VM kit (kernel, modules, initramfs) from Debian packages into a cache dir.
#
# Usage: e2e/vm/build.sh [-q]
#   E2E_CACHE  cache directory (default: e2e/.cache next to this script)
#   E2E_KVER   kernel ABI to use (default: what linux-image-amd64 depends on)
# Idempotent: reruns only the steps whose outputs are missing or stale.
# Writes $E2E_CACHE/kit.env (KVER, VMLINUX, INITRD) for run.sh.
# Exit codes: 0 ok, 77 cannot build here (no packages reachable and no cache), 1 error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
e2e_dir=$(dirname "$here")
cache=${E2E_CACHE:-$e2e_dir/.cache}
quiet=0
[ "${1:-}" = -q ] && quiet=1
export PATH=$PATH:/usr/sbin:/sbin
export LC_ALL=C

# Kernel modules the guest needs; their dependencies are added from modules.dep.
modules=(rdma_rxe ib_uverbs ib_core rdma_ucm rdma_cm ib_cm iw_cm crc32_generic crc32-pclmul
  virtio_pci virtio_net 9p 9pnet_virtio veth dummy)

say() { [ "$quiet" = 1 ] || echo "e2e-build: $*" >&2; }
die() { echo "e2e-build: error: $*" >&2; exit 1; }
skip() { echo "e2e-build: cannot build: $*" >&2; exit 77; }

for tool in apt-get apt-cache dpkg depmod modprobe xz cpio gzip; do
  command -v "$tool" >/dev/null || skip "missing host tool '$tool' (see scripts/deps.sh)"
done

mkdir -p "$cache/debs"
t_start=$(date +%s)

# 1. Resolve the generic kernel ABI (e.g. 6.1.0-56-amd64); fall back to the cached kit offline.
kver=${E2E_KVER:-}
if [ -z "$kver" ]; then
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ {print $2; exit}') || true
  kver=${kpkg#linux-image-}
fi
if [ -z "$kver" ]; then
  if [ -f "$cache/kit.env" ]; then
    say "apt-cache cannot resolve linux-image-amd64; reusing cached kit"
    exit 0
  fi
  skip "apt-cache cannot resolve linux-image-amd64 and no cached kit in $cache"
fi
kdir=$cache/kernel/$kver
root=$kdir/root

# fetch PKG: downloads PKG's .deb into the cache once; prints its path.
fetch() {
  local pkg=$1 deb
  deb=$(find "$cache/debs" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)
  if [ -z "$deb" ]; then
    say "downloading $pkg"
    (cd "$cache/debs" && apt-get download -q "$pkg" >/dev/null 2>"$cache/debs/.apt.err") ||
      skip "apt-get download $pkg failed: $(tail -n 2 "$cache/debs/.apt.err")"
    deb=$(find "$cache/debs" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)
    [ -n "$deb" ] || die "apt-get download $pkg produced no .deb"
  fi
  echo "$deb"
}

vmlinux=$kdir/vmlinux
initrd=$kdir/initramfs.cpio.gz
bb_deb=$(fetch busybox-static)
stamp=$( (cat "$here/init.sh" "$bb_deb" && printf '%s\n' "$kver" "${modules[@]}") | sha256sum | cut -c1-16)
need_vmlinux=0 need_initrd=0
[ -s "$vmlinux" ] || need_vmlinux=1
[ -s "$initrd" ] && [ "$(cat "$kdir/initramfs.stamp" 2>/dev/null)" = "$stamp" ] || need_initrd=1

# 2. Kernel package, unpacked (only while something is built from it), with modules.dep.
if [ "$need_vmlinux$need_initrd" != 00 ]; then
  deb=$(fetch "linux-image-$kver")
  rm -rf "$root" && mkdir -p "$root"
  say "unpacking $(basename "$deb")"
  dpkg -x "$deb" "$root"
  depmod -b "$root" "$kver"
fi

# 3. Uncompressed vmlinux (boots faster than the bzImage): find the xz stream inside vmlinuz.
if [ "$need_vmlinux" = 1 ]; then
  vmlinuz=$root/boot/vmlinuz-$kver
  [ -f "$vmlinuz" ] || die "no $vmlinuz in the kernel package"
  found=0
  while read -r off; do
    # xz stops after the first stream; read through a process substitution so tail's SIGPIPE
    # does not trip pipefail.
    if xz -dc --single-stream < <(tail -c +$((off + 1)) "$vmlinuz") >"$vmlinux.tmp" 2>/dev/null &&
      [ "$(head -c 4 "$vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
      found=1
      break
    fi
  done < <(grep -aobP '\xfd7zXZ\x00' "$vmlinuz" | cut -d: -f1)
  [ "$found" = 1 ] || { rm -f "$vmlinux.tmp"; die "no xz-compressed ELF kernel found in $vmlinuz"; }
  mv "$vmlinux.tmp" "$vmlinux"
  say "extracted vmlinux ($(du -h "$vmlinux" | cut -f1))"
fi

# 4. Initramfs: static busybox, the module closure (in load order), and init.
if [ "$need_initrd" = 1 ]; then
  stage=$kdir/initramfs.d
  rm -rf "$stage" && mkdir -p "$stage"/{bin,dev,proc,sys,tmp,sysroot,etc/e2e,lib/modules/"$kver"}
  bbx=$kdir/busybox.d
  rm -rf "$bbx" && dpkg -x "$bb_deb" "$bbx"
  cp "$bbx/bin/busybox" "$stage/bin/busybox"
  rm -rf "$bbx"
  : >"$stage/etc/e2e/modules"
  for m in "${modules[@]}"; do
    modprobe -S "$kver" -d "$root" --show-depends "$m" ||
      die "module $m not found in linux-image-$kver"
  done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
    rel=${ko#"$root/lib/modules/$kver/"}
    install -D -m 0644 "$ko" "$stage/lib/modules/$kver/$rel"
    echo "/lib/modules/$kver/$rel" >>"$stage/etc/e2e/modules"
  done
  install -m 0755 "$here/init.sh" "$stage/init"
  (cd "$stage" && find . -print0 | sort -z |
    cpio --null -o -H newc --owner=0:0 --quiet | gzip -1) >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  echo "$stamp" >"$kdir/initramfs.stamp"
  rm -rf "$stage"
  say "initramfs $(du -h "$initrd" | cut -f1)"
fi

rm -rf "$root"
# Drop kits and kernel packages of other kernel versions.
for d in "$cache"/kernel/*; do
  [ "$d" = "$kdir" ] || [ ! -d "$d" ] || rm -rf "$d"
done
find "$cache/debs" -maxdepth 1 -name 'linux-image-*.deb' ! -name "linux-image-${kver}_*" -delete

cat >"$cache/kit.env.tmp" <<KIT
KVER=$kver
VMLINUX=$vmlinux
INITRD=$initrd
KIT
mv "$cache/kit.env.tmp" "$cache/kit.env"
say "kit ready: kernel $kver, downloads $(du -sh "$cache/debs" | cut -f1), $(($(date +%s) - t_start)) s"
