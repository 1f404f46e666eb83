#!/usr/bin/env bash
# Applies every expected patch of tests/data/webhook/cases with the JSON Patch implementation of
# kube-apiserver (tests/tools/jsonpatch) and compares the result with the case's pod.json.
# Exits 77 when no Go toolchain is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$root/tests/lib/testlib.sh"
rc=0
bin=$("$root/tests/tools/jsonpatch/build.sh") || rc=$?
[ "$rc" = 77 ] && skip "no Go toolchain to build tests/tools/jsonpatch"
[ "$rc" = 0 ] || { echo "FAIL: building tests/tools/jsonpatch" >&2; exit 1; }
exec "$bin" "$root/tests/data/webhook/cases"
