#!/usr/bin/env bash
# Guest script, one VM: rxe0 is listed and ib_read_bw / ib_read_lat run over it (server and
# client on the same device).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$REPO/e2e/tests/guest/lib.sh"

dev=$E2E_RDMA_DEV
ibv_devices | tee /tmp/devices.txt
grep -qw "$dev" /tmp/devices.txt || { e2e_log "FAIL: ibv_devices does not list $dev"; exit 1; }

e2e_perf_local /tmp/bw.txt ib_read_bw -d "$dev" -s 65536 -n 500 || { e2e_log "FAIL: ib_read_bw"; exit 1; }
bw=$(e2e_perf_field /tmp/bw.txt 65536 4) || { e2e_log "FAIL: no BW average in ib_read_bw output"; exit 1; }
e2e_perf_local /tmp/lat.txt ib_read_lat -d "$dev" -s 64 -n 1000 || { e2e_log "FAIL: ib_read_lat"; exit 1; }
lat=$(e2e_perf_field /tmp/lat.txt 64 6) || { e2e_log "FAIL: no t_avg in ib_read_lat output"; exit 1; }

e2e_result "read_bw_MBps=$bw read_lat_us=$lat"
