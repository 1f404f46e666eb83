#!/usr/bin/env bash
# Runs the test_rdma unit test on Soft-RoCE (rxe0) inside a qemu VM.
#
# Usage: e2e/tests/rdma_unit_in_vm.sh [--build DIR]   (default: $BUILD or <repo>/build)
# The build dir must already hold tests/test_rdma. Exit: the test's code (0 pass, 1 fail),
# 77 when the VM harness cannot run here, or a harness error (124 timeout, 125 boot failure).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${BUILD:-$repo/build}
if [ "${1:-}" = --build ]; then
  build=$2
  shift 2
fi
[ -x "$build/tests/test_rdma" ] || {
  echo "rdma_unit_in_vm: $build/tests/test_rdma not built; run cmake --build first" >&2
  exit 1
}

set +e
"$here/../vm/run.sh" --vms 1 --script "$here/guest/rdma_unit.sh" --name rdma_unit \
  --build "$build" --timeout 300
rc=$?
set -e
dir=$(readlink -f "${E2E_CACHE:-$here/../.cache}/logs/latest")
if [ -f "$dir/a.log" ]; then
  # The CUnit summary as the guest printed it.
  sed -n '/Run Summary/,/Elapsed/p' "$dir/a.log"
fi
echo "rdma_unit_in_vm: exit $rc (logs: $dir)"
exit "$rc"
