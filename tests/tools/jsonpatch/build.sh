#!/usr/bin/env bash
# Builds jsonpatch-check (gopkg.in/evanphx/json-patch.v4 at the version pinned in go.mod, the
# JSON Patch implementation kube-apiserver applies webhook patches with) from the Go module
# proxy into a cache outside the tree, and prints the binary's path.
# Usage: tests/tools/jsonpatch/build.sh      Env: MV_CACHE (default /var/cache/microview), GO.
# Exits 77 when no Go toolchain is installed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${MV_CACHE:-/var/cache/microview}
go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=$(command -v go || true); fi
fi
[ -n "$go" ] || { echo "jsonpatch: no Go toolchain (install golang-go or /usr/local/go)" >&2; exit 77; }

version=$(awk '$1 == "require" && $2 == "gopkg.in/evanphx/json-patch.v4" { print $3 }' "$here/go.mod")
[ -n "$version" ] || { echo "jsonpatch: no json-patch.v4 pin in $here/go.mod" >&2; exit 1; }
key=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
dir=$cache/jsonpatch/$version-$key
bin=$dir/jsonpatch-check
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  tmp=$(mktemp "$dir/.build.XXXXXX")
  (cd "$here" &&
     GOMODCACHE=$cache/gomod GOFLAGS="-mod=readonly -modcacherw" GOTOOLCHAIN=local \
     GOPROXY=${GOPROXY:-https://proxy.golang.org} CGO_ENABLED=0 \
     nice -n 10 "$go" build -trimpath -o "$tmp" .) >&2 || { rm -f "$tmp"; exit 1; }
  mv -f "$tmp" "$bin"
fi
echo "$bin"
