#!/usr/bin/env bash
# Smoke test: real RDMA READ over Soft-RoCE in qemu VMs (one VM, then two VMs joined by a socket NIC).
#
# Usage: e2e/tests/rxe_smoke.sh        Exit: 0 pass, 1 fail, 77 skipped (harness cannot run here).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm=$here/../vm

set +e
"$vm/check.sh"
rc=$?
set -e
[ "$rc" = 0 ] || exit "$rc"

fails=0
summary=()

# result LOGDIR ROLE KEY: prints KEY's value from the guest's RESULT line.
result() {
  sed -n 's/^RESULT //p' "$1/$2.log" | tr ' ' '\n' | sed -n "s/^$3=//p" | tail -n 1
}

# check_run NAME RC LOGDIR ROLE KEY UNIT: asserts the run passed and a positive number was reported.
check_run() {
  local name=$1 rc=$2 dir=$3 role=$4 key=$5 unit=$6 val
  val=$(result "$dir" "$role" "$key")
  if [ "$rc" = 0 ] && [[ "$val" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v v="$val" 'BEGIN {exit !(v > 0)}'; then
    summary+=("PASS $name $key=$val$unit")
  else
    summary+=("FAIL $name (exit $rc, $key='${val}', logs: $dir)")
    fails=$((fails + 1))
  fi
}

t0=$(date +%s)

set +e
"$vm/run.sh" --vms 1 --script "$here/guest/rxe_one.sh" --name rxe_one --timeout 150
rc=$?
set -e
dir=$(readlink -f "${E2E_CACHE:-$here/../.cache}/logs/latest")
check_run one-vm "$rc" "$dir" a read_bw_MBps MB/s
check_run one-vm "$rc" "$dir" a read_lat_us us

set +e
"$vm/run.sh" --vms 2 --script-a "$here/guest/rxe_two.sh" --script-b "$here/guest/rxe_two.sh" \
  --name rxe_two --timeout 150
rc=$?
set -e
dir=$(readlink -f "${E2E_CACHE:-$here/../.cache}/logs/latest")
check_run two-vm "$rc" "$dir" b cross_vm_read_bw_MBps MB/s

echo "rxe_smoke: $(printf '%s; ' "${summary[@]}")$(($(date +%s) - t0))s"
[ "$fails" = 0 ] || exit 1
