#!/usr/bin/env bash
# End-to-end RDMA data path in Soft-RoCE VMs: agent + writers + collector --transport verbs.
#
# Usage: e2e/tests/rdma_wire.sh one|two|k8s [--build DIR]
#   one: one VM, everything on one rxe device.
#   two: two VMs joined by a socket network: agent + writers on a ("host"), collector on b
#        ("DPU"); value match, release, agent kill + restart.
#   k8s: two VMs, the agent in Kubernetes mode (device plugin, stand-in kubelet and API server)
#        with require_rdma on a; device health follows RDMA, pods' segments read on b, GC
#        revocation, agent kill + restart.
# Exit: 0 pass, 1 fail, 77 skipped (the VM harness cannot run here), 124/125 harness errors.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
mode=${1:-}
shift || true
build=${BUILD:-$repo/build}
if [ "${1:-}" = --build ]; then
  build=$2
  shift 2
fi
for b in microview-agent microview-collector microviewctl; do
  [ -x "$build/bin/$b" ] || {
    echo "rdma_wire: $build/bin/$b not built; run cmake --build first" >&2
    exit 1
  }
done

set +e
"$here/../vm/check.sh"
rc=$?
set -e
[ "$rc" = 0 ] || exit "$rc"

t0=$(date +%s)
name=rdma_wire_$mode
set +e
case "$mode" in
one)
  "$here/../vm/run.sh" --vms 1 --script "$here/guest/rdma_wire_one.sh" --name "$name" \
    --build "$build" --timeout 150
  ;;
two)
  "$here/../vm/run.sh" --vms 2 --script-a "$here/guest/rdma_wire_two.sh" \
    --script-b "$here/guest/rdma_wire_two.sh" --name "$name" --build "$build" --timeout 200
  ;;
k8s)
  # The guest sees the host's root read-only: generate the kubelet API modules here first.
  MV_PROTO_CACHE=$build/protogen /usr/bin/python3 -c \
    "import sys; sys.path.insert(0, '$repo/e2e/standins'); import protogen; protogen.load()" ||
    exit 1
  "$here/../vm/run.sh" --vms 2 --script-a "$here/guest/rdma_wire_k8s.sh" \
    --script-b "$here/guest/rdma_wire_k8s.sh" --name "$name" --build "$build" --timeout 300
  ;;
*)
  echo "usage: rdma_wire.sh one|two|k8s [--build DIR]" >&2
  exit 2
  ;;
esac
rc=$?
set -e
# This run's log dir (not 'latest': other e2e tests may run at the same time).
dir=$(ls -td "${E2E_CACHE:-$here/../.cache}/logs/$name"-* 2>/dev/null | head -n 1)
for role in a b; do
  [ -f "$dir/$role.log" ] || continue
  grep -E '(PASS|FAIL):? |^RESULT |passed, [0-9]+ failed' "$dir/$role.log" | sed "s/^/$role: /" || true
done
echo "rdma_wire $mode: exit $rc in $(($(date +%s) - t0))s (logs: $dir)"
exit "$rc"
