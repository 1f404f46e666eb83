#!/usr/bin/env bash
# client_golang's own examples/ programs (v1.14.0, the version pinned in
# writers/go/prometheus/go.mod, from the Go module proxy) built twice: as published, and with
# only their import paths rewritten to the MicroView drop-in. examples.py runs both against
# a standalone agent and the shm collector on loopback and compares the drop-in build's
# series, as MicroView's /metrics serves them, with the program's own promhttp output.
# Usage: test_examples.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/lib.sh"
build=${1:?usage: test_examples.sh BUILD_DIR}
for b in microview-agent microview-collector microviewctl; do
  [ -x "$build/bin/$b" ] || skip "$build/bin/$b not built"
done
go_env
bridge=$root/writers/go/prometheus
(cd "$bridge" && go mod download) || skip "cannot download the Go modules of writers/go/prometheus (Go module proxy unreachable?)"
ver=$(cd "$bridge" && go list -m -f '{{.Version}}' github.com/prometheus/client_golang) || exit 1
src=$GOMODCACHE/github.com/prometheus/client_golang@$ver/examples
[ -d "$src" ] || { echo "no examples/ in client_golang $ver ($src)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-examples.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The bridge's own requirements (client_golang and its dependencies at the pinned
# versions, with their go.sum lines) serve both builds; only the drop-in build adds the
# MicroView modules.
requires=$(sed -n '/^require/,$p' "$bridge/go.mod" | grep -v 'microview.io/' | grep -v '^replace')
examples=()
for d in "$src"/*/; do
  ex=$(basename "$d")
  examples+=("$ex")
  for kind in orig mv; do
    w=$tmp/$ex/$kind
    mkdir -p "$w"
    cp "$d"/*.go "$w/"
    chmod u+w "$w"/*.go
    {
      printf 'module example.invalid/%s\n\ngo 1.19\n\n%s\n' "$ex" "$requires"
      if [ "$kind" = mv ]; then
        printf 'require (\n\tmicroview.io/writers/go v0.0.0\n\tmicroview.io/writers/go/prometheus v0.0.0\n)\n'
        printf 'replace microview.io/writers/go => %s\n' "$root/writers/go"
        printf 'replace microview.io/writers/go/prometheus => %s\n' "$bridge"
      fi
    } >"$w/go.mod"
    cp "$bridge/go.sum" "$w/go.sum"
    if [ "$kind" = mv ]; then
      # The only change: the import paths.
      sed -i 's#"github.com/prometheus/client_golang/prometheus#"microview.io/writers/go/prometheus#' "$w"/*.go
    fi
    (cd "$w" && GOFLAGS=-mod=mod go build -o "$tmp/$ex-$kind" .) ||
      { echo "building example $ex ($kind) failed" >&2; exit 1; }
  done
  echo "== built $ex: $(diff "$d/main.go" "$tmp/$ex/mv/main.go" | grep -c '^>') line(s) changed"
done
/usr/bin/python3 "$root/tests/writers/examples.py" "$build" "$tmp" "${examples[@]}"
