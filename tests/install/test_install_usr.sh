#!/usr/bin/env bash
# libmicroview installed for a /usr prefix, as a distribution package lays it out (multiarch
# libdir such as lib/x86_64-linux-gnu): configures a separate build with
# CMAKE_INSTALL_PREFIX=/usr, installs the libmicroview component under a DESTDIR, and checks
# that pkg-config's libdir and includedir point at the installed files and that a program
# builds and runs against them.
set -euo pipefail
src=${1:?usage: test_install_usr.sh SOURCE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S "$src" -B "$tmp/build" -DCMAKE_INSTALL_PREFIX=/usr -DMV_BUILD_TESTS=OFF >/dev/null
cmake --build "$tmp/build" --target microview microview_static -j2 >/dev/null
DESTDIR=$tmp/root cmake --install "$tmp/build" --component libmicroview >/dev/null
pc=$(find "$tmp/root" -name libmicroview.pc)
[ -n "$pc" ] || { echo "FAIL: no libmicroview.pc installed"; exit 1; }
export PKG_CONFIG_PATH=${pc%/*}
libdir=$(realpath -m "$(pkg-config --variable=libdir libmicroview)")
includedir=$(realpath -m "$(pkg-config --variable=includedir libmicroview)")
echo "pc=$pc libdir=$libdir includedir=$includedir"
[ -f "$libdir/libmicroview.so" ] || { echo "FAIL: libdir $libdir has no libmicroview.so"; exit 1; }
[ -f "$libdir/libmicroview.a" ] || { echo "FAIL: libdir $libdir has no libmicroview.a"; exit 1; }
[ -f "$includedir/microview.h" ] || { echo "FAIL: includedir $includedir has no microview.h"; exit 1; }
case $libdir in
  "$tmp/root/usr/lib"*) ;;
  *) echo "FAIL: libdir $libdir is outside the installed /usr"; exit 1 ;;
esac
# shellcheck disable=SC2046 # pkg-config output is meant to split into arguments
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/hello" "$here/hello.c" $(pkg-config --cflags --libs libmicroview)
truncate -s 8192 "$tmp/seg"
LD_LIBRARY_PATH=$libdir "$tmp/hello" "$tmp/seg"
echo "PASS: /usr install with libdir ${libdir#"$tmp/root"}"
