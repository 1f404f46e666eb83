#!/usr/bin/env bash
# Builds the Go mix helper and writers/python, then runs mixed.py: Go and libmicroview
# processes formatting and registering into one segment at once, read back by the C reader.
# Usage: test_mixed.sh BUILD_DIR INCLUDE_DIR LIBMICROVIEW_A
set -uo pipefail
. "$(dirname "$0")/lib.sh"
build=${1:?usage: test_mixed.sh BUILD_DIR INCLUDE_DIR LIBRARY}
[ -z "${MV_SANITIZED:-}" ] || skip "an ASan-built libmicroview cannot be loaded into python3"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-writers-mixed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go_env
(cd "$root/tests/writers/goservice" && go mod download) || skip "cannot download the Go modules (Go module proxy unreachable?)"
(cd "$root/tests/writers/goservice" && go build -o "$tmp/mix" ./mix) ||
  { echo "building the Go mix helper failed" >&2; exit 1; }
build_py "$tmp" "$2" "$3"
/usr/bin/python3 "$root/tests/writers/mixed.py" "$build/bin/mv_seg_decode" "$tmp/mix" "$tmp/site"
