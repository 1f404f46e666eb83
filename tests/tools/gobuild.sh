#!/usr/bin/env bash
# Builds a small Go test tool of tests/tools/<tool> (its own module, dependencies pinned in its
# go.mod and go.sum) from the Go module proxy into a cache outside the tree, keyed by the pinned
# versions and the tool's sources, and prints the binary's path.
# Usage: tests/tools/gobuild.sh TOOL_DIR BINARY_NAME
# Env: MV_CACHE (default /var/cache/microview), GO (default /usr/local/go/bin/go, then PATH).
# Exits 77 when no Go toolchain (or none recent enough for the module) is installed.
set -euo pipefail

src=$(cd "${1:?usage: gobuild.sh TOOL_DIR BINARY_NAME}" && pwd)
name=${2:?usage: gobuild.sh TOOL_DIR BINARY_NAME}
cache=${MV_CACHE:-/var/cache/microview}
go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=$(command -v go || true); fi
fi
[ -n "$go" ] || { echo "gobuild: no Go toolchain (install golang-go or /usr/local/go)" >&2; exit 77; }

need=$(awk '$1 == "go" { print $2; exit }' "$src/go.mod")
have=$("$go" env GOVERSION | sed 's/^go//')
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
  echo "gobuild: $src needs Go $need, $go is $have" >&2
  exit 77
fi

# The key: the direct requirements (pinned versions) and a hash of the module's files.
pins=$(awk '$1 == "require" && NF == 3 { print $2 "@" $3 }' "$src/go.mod" | tr '/' '_' | tr '\n' '+')
hash=$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-12)
dir=$cache/$(basename "$src")/${pins%+}-$hash
bin=$dir/$name
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  tmp=$(mktemp "$dir/.build.XXXXXX")
  (cd "$src" &&
     GOMODCACHE=$cache/gomod GOFLAGS="-mod=readonly -modcacherw" GOTOOLCHAIN=local \
     GOPROXY=${GOPROXY:-https://proxy.golang.org} CGO_ENABLED=0 \
     nice -n 19 "$go" build -trimpath -o "$tmp" .) >&2 || { rm -f "$tmp"; exit 1; }
  mv -f "$tmp" "$bin"
fi
echo "$bin"
