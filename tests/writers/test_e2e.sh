#!/usr/bin/env bash
# Builds the Go service (tests/writers/goservice) and writers/python, then runs e2e.py.
# Usage: test_e2e.sh BUILD_DIR INCLUDE_DIR LIBMICROVIEW_A
set -uo pipefail
. "$(dirname "$0")/lib.sh"
build=${1:?usage: test_e2e.sh BUILD_DIR INCLUDE_DIR LIBRARY}
[ -z "${MV_SANITIZED:-}" ] || skip "an ASan-built libmicroview cannot be loaded into python3"
[ "$(id -u)" -eq 0 ] || skip "needs root for unshare --mount and bind mounts"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-writers-e2e.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go_env
(cd "$root/tests/writers/goservice" && go mod download) || skip "cannot download the Go service's modules (Go module proxy unreachable?)"
(cd "$root/tests/writers/goservice" && go build -o "$tmp/goservice" .) ||
  { echo "building the Go service failed" >&2; exit 1; }
build_py "$tmp" "$2" "$3"
/usr/bin/python3 "$root/tests/writers/e2e.py" "$build" "$tmp/goservice" "$tmp/site"
