#!/usr/bin/env bash
# Checks tests/data/webhook/quantity.txt (which test_webhook checks the C parser against) with
# k8s.io/apimachinery's ParseQuantity and Quantity.Value() (tests/tools/quantity).
# Exits 77 when no Go toolchain recent enough is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$root/tests/lib/testlib.sh"
rc=0
bin=$("$root/tests/tools/quantity/build.sh") || rc=$?
[ "$rc" = 77 ] && skip "no Go toolchain to build tests/tools/quantity"
[ "$rc" = 0 ] || { echo "FAIL: building tests/tools/quantity" >&2; exit 1; }
exec "$bin" "$root/tests/data/webhook/quantity.txt"
