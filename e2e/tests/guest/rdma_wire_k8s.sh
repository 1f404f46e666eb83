#!/usr/bin/env bash
# Guest script, two VMs, agent in Kubernetes mode: a ("host") runs the stand-in kubelet and
# API server, the agent as a device plugin with require_rdma, and two pods' writers
# (k8s_host.py); b ("DPU") runs the verbs collector. Checks on b: series carry the pods'
# namespace/pod/container labels, values read by RDMA equal the writer's segment, a pod's
# removal (GC) drops its series while the other keeps flowing, an agent kill + restart is
# survived. a's own checks (Unhealthy devices without RDMA, Healthy once rxe0 appears, no rkey
# churn at PreStartContainer, GC revocation) are in k8s_host.py.
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$REPO/e2e/tests/guest/lib.sh"
# shellcheck source=SCRIPTDIR/wire_lib.sh
. "$REPO/e2e/tests/guest/wire_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT
run=$E2E_RUN

case "$E2E_ROLE" in
a)
  # Generated kubelet API modules come from the host's build dir (read-only here).
  export MV_PROTO_CACHE=$BUILD/protogen
  /usr/bin/python3 "$REPO/e2e/tests/guest/k8s_host.py" "$(wire_token)" "$WIRE_CTL_PORT" \
    "$WIRE_RDMA_PORT"
  ;;
b)
  wire_await a.ready 240
  wire_collector "$E2E_PEER_IP" || { wire_dump_logs; exit 1; }
  # pod_has POD: the collector serves gen_requests_total for that pod, with its identity.
  pod_has() {
    wire_metrics | grep '^gen_requests_total{' | grep "pod=\"$1\"" | grep 'namespace="team-a"' |
      grep -q 'container="app"'
  }
  pod_value() {
    wire_metrics | grep '^gen_requests_total{' | grep "pod=\"$1\"" | grep 'worker="0"' |
      awk '{print $2}' | head -n 1
  }
  check "DPU collector serves pod web-0 with namespace/pod/container" wait_for 40 pod_has web-0
  check "DPU collector serves pod web-1 with namespace/pod/container" wait_for 40 pod_has web-1
  check "annotation labels travel with the series (app=checkout)" \
    bash -c "curl -sf http://127.0.0.1:$WIRE_HTTP_PORT/metrics | grep '^gen_requests_total{' |
      grep 'pod=\"web-0\"' | grep -q 'app=\"checkout\"'"
  wire_flag b.freeze
  wire_await a.frozen
  # Until the collector's copy is the frozen state (a few 50 ms ticks); asserted below.
  wait_for 10 wire_served_as "$WIRE_DIR/metrics.txt" "$run/dump-a.json" pod=web-0
  wire_flag b.compared
  check "values read across VMs equal web-0's segment" \
    wire_compare "$WIRE_DIR/metrics.txt" "$run/dump-a.json" pod=web-0
  wire_await a.released
  gone_web1() { ! pod_has web-1; }
  check "removed pod's series disappear from /metrics" wait_for 20 gone_web1
  v1=$(pod_value web-0)
  flowing() { v2=$(pod_value web-0); test "${v2:-0}" -gt "${v1:-0}"; }
  check "web-0 keeps flowing after web-1's removal (above $v1)" wait_for 10 flowing
  v0=$(pod_value web-0)
  wire_flag b.release_checked
  wire_await a.killed 60
  # Until reads fail (the agent's regions died with it), so that v1 is no longer moving.
  wait_for --what "the collector to lose the agent" 20 wire_agent_down
  v1=$(pod_value web-0)
  v1=${v1:-0}
  [ "$v1" -ge "${v0:-0}" ] || v1=${v0:-0}
  wire_flag b.killed_seen
  wire_await a.restarted 120
  advanced() { v=$(pod_value web-0); [ -n "$v" ] && [ "$v" -gt "$v1" ]; }
  check "web-0 flows again after the agent restart (above $v1)" wait_for 40 advanced
  check "collector survived the agent restart" kill -0 "$WIRE_COLL_PID"
  check "collector stops cleanly (no sanitizer report)" wire_stop_clean "$WIRE_COLL_PID"
  wire_flag b.done
  wire_dump_logs
  e2e_result "wire_k8s_fails=$fails"
  [ "$fails" = 0 ]
  ;;
*) e2e_log "unknown role $E2E_ROLE"; exit 2 ;;
esac
