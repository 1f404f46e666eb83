#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds tests/install/hello.c against the
# installed header and pkg-config file (shared, then static), runs both and decodes the
# segment with microviewctl.
set -euo pipefail
build=${1:?usage: test_install.sh BUILD_DIR}
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
test -f "$tmp/prefix/include/microview.h"
# shellcheck disable=SC2046 # pkg-config output is meant to split into arguments
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/hello" "$src/hello.c" $(pkg-config --cflags --libs libmicroview)
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/hello-static" "$src/hello.c" \
  $(pkg-config --cflags libmicroview) "$tmp/prefix/lib/libmicroview.a" $(pkg-config --libs-only-other --static libmicroview) -lpthread -lm
truncate -s 8192 "$tmp/seg"
LD_LIBRARY_PATH=$tmp/prefix/lib "$tmp/hello" "$tmp/seg"
"$tmp/hello-static" "$tmp/seg"
out=$("$tmp/prefix/bin/microviewctl" dump "$tmp/seg")
echo "$out"
# Registered twice (shared, then static build): the same slot, 42 + 42.
grep -q 'hello_total{lang="c"} 84' <<<"$out"
if ldd "$tmp/hello-static" | grep -q libmicroview; then echo "static binary links libmicroview.so" >&2; exit 1; fi
echo "install: 1 passed, 0 failed"
