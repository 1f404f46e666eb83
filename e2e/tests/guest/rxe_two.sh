#!/usr/bin/env bash
# Guest script, two VMs: a runs the ib_read_bw server, b reads from it across the VM link.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$REPO/e2e/tests/guest/lib.sh"

dev=$E2E_RDMA_DEV
port=18515
case "$E2E_ROLE" in
a)
  timeout 90 ib_read_bw -d "$dev" -s 65536 -n 500 -p "$port" >/tmp/bw-server.txt 2>&1 &
  server=$!
  e2e_wait_tcp "$port"
  touch "$E2E_RUN/a.ready"
  wait "$server" || { cat /tmp/bw-server.txt; e2e_log "FAIL: ib_read_bw server"; exit 1; }
  e2e_log "server done"
  ;;
b)
  e2e_wait_file "$E2E_RUN/a.ready" 90
  timeout 90 ib_read_bw -d "$dev" -s 65536 -n 500 -p "$port" "$E2E_PEER_IP" | tee /tmp/bw.txt
  bw=$(e2e_perf_field /tmp/bw.txt 65536 4) || { e2e_log "FAIL: no BW average in ib_read_bw output"; exit 1; }
  e2e_result "cross_vm_read_bw_MBps=$bw"
  ;;
*) e2e_log "unknown role $E2E_ROLE"; exit 2 ;;
esac
