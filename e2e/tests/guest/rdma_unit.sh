#!/usr/bin/env bash
# Guest script, one VM: runs the test_rdma CUnit binary against rxe0 (target and collector on one device).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$REPO/e2e/tests/guest/lib.sh"

bin=$BUILD/tests/test_rdma
[ -x "$bin" ] || { e2e_log "FAIL: $bin not built (cmake --build build)"; exit 1; }
ibv_devices
e2e_log "memlock: $(ulimit -l)"
cd "$REPO"
set +e
MV_RDMA_TEST_IP=$E2E_SELF_IP timeout 240 "$bin"
rc=$?
set -e
e2e_result "test_rdma_rc=$rc"
# rxe0 exists here, so a skip (77) means the test could not find it: that is a failure.
[ "$rc" = 77 ] && { e2e_log "FAIL: test_rdma skipped inside the VM"; exit 1; }
exit "$rc"
