#!/usr/bin/env bash
# Checks that the e2e VM harness can run here, building its kit if needed.
#
# Prints "SKIPPED: <reason>" and exits 77 when it cannot (unsupported arch, no qemu, no cached
# kit and no way to download one), so callers skip loudly. Exits 0 when ready, 1 when the kit
# build itself is broken (that is a bug, not a skip).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# shellcheck source=SCRIPTDIR/../../tests/lib/testlib.sh
. "$here/../../tests/lib/testlib.sh"

arch=$(uname -m)
[ "$arch" = x86_64 ] || skip "e2e VMs need an x86_64 host (this is $arch)"
command -v qemu-system-x86_64 >/dev/null ||
  skip "qemu-system-x86_64 not installed (scripts/deps.sh installs qemu-system-x86)"

set +e
err=$("$here/build.sh" -q 2>&1)
rc=$?
set -e
case "$rc" in
0) exit 0 ;;
77) skip "${err#e2e-build: cannot build: }" ;;
*)
  echo "e2e-check: building the VM kit failed:" >&2
  echo "$err" >&2
  exit 1
  ;;
esac
