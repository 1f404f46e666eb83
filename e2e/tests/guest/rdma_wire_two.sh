#!/usr/bin/env bash
# Guest script, two VMs: a ("host") runs the agent and two writers, b ("DPU") the verbs
# collector. Checks: values match the writer's segment; releasing a segment drops it cleanly
# while the other keeps flowing; an agent killed and restarted is survived (reconnect, resync).
# The VMs take turns through flag files in $E2E_RUN.
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$REPO/e2e/tests/guest/lib.sh"
# shellcheck source=SCRIPTDIR/wire_lib.sh
. "$REPO/e2e/tests/guest/wire_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null; kill -CONT $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT
run=$E2E_RUN

case "$E2E_ROLE" in
a)
  wire_agent || { wire_dump_logs; exit 1; }
  wire_gen a 200
  gen_a=$WIRE_GEN_PID
  wire_gen b 50
  wait_for 20 test -n "$(wire_seg b)"
  wire_flag a.ready
  # 1. freeze writer a so that b can compare a stable state
  wire_await b.freeze
  path_a=$(wire_seg a | cut -d' ' -f2)
  wire_freeze "$gen_a"
  "$B/microviewctl" dump --json "$path_a" >"$run/dump-a.json"
  wire_flag a.frozen
  wire_await b.compared
  kill -CONT "$gen_a"
  # 2. release segment b (its writer goes on writing into a segment nobody serves)
  id_b=$(wire_seg b | cut -d' ' -f1)
  "$B/microviewctl" release --agent "unix:$WIRE_DIR/segs/agent.sock" "$id_b"
  e2e_log "released $id_b"
  wire_flag a.released
  # 3. kill the agent hard, then start it again on the same directory
  wire_await b.release_checked
  kill -KILL "$WIRE_AGENT_PID"
  wait "$WIRE_AGENT_PID" 2>/dev/null
  e2e_log "agent killed"
  wire_flag a.killed
  wire_await b.killed_seen
  wire_agent || { wire_dump_logs; exit 1; }
  e2e_log "agent restarted"
  wire_flag a.restarted
  wire_await b.done 120
  check "agent stops cleanly (no sanitizer report)" wire_stop_clean "$WIRE_AGENT_PID"
  wire_dump_logs
  e2e_result "wire_two_host_fails=$fails"
  [ "$fails" = 0 ]
  ;;
b)
  wire_await a.ready 120
  wire_collector "$E2E_PEER_IP" || { wire_dump_logs; exit 1; }
  check "collector on the DPU VM serves instance a" wait_for 40 wire_has a
  check "collector on the DPU VM serves instance b" wait_for 40 wire_has b
  wire_flag b.freeze
  wire_await a.frozen
  # Until the collector's copy is the frozen state (a few 50 ms ticks); asserted below.
  wait_for 10 wire_served_as "$WIRE_DIR/metrics.txt" "$run/dump-a.json" a
  wire_flag b.compared
  check "values read across VMs equal the writer's segment" \
    wire_compare "$WIRE_DIR/metrics.txt" "$run/dump-a.json" a
  wire_await a.released
  gone_b() { ! wire_has b; }
  check "released segment disappears from /metrics" wait_for 20 gone_b
  v1=$(wire_value a)
  flowing() { v2=$(wire_value a); test "${v2:-0}" -gt "${v1:-0}"; }
  check "segment a keeps flowing after the release (above $v1)" wait_for 10 flowing
  check "collector still running after the release" kill -0 "$WIRE_COLL_PID"
  v0=$(wire_value a)
  wire_flag b.release_checked
  wire_await a.killed 60
  # Until reads fail (the agent's regions died with it), so that v1 is no longer moving.
  wait_for --what "the collector to lose the agent" 20 wire_agent_down
  v1=$(wire_value a) # empty once the failing segment is quarantined
  v1=${v1:-0}
  [ "$v1" -ge "${v0:-0}" ] || v1=${v0:-0}
  wire_flag b.killed_seen
  wire_await a.restarted 90
  # The restarted agent re-registers segment a under a new rkey: the catalog watch
  # resyncs, the segment is re-added, and the counter moves again.
  advanced() { v=$(wire_value a); [ -n "$v" ] && [ "$v" -gt "$v1" ]; }
  check "values flow again after the agent restart (above $v1)" wait_for 40 advanced
  check "collector survived the agent restart" kill -0 "$WIRE_COLL_PID"
  check "collector resynced the catalog" \
    grep -q 'event=agent.synced' "$WIRE_DIR/collector.log"
  wire_metrics | grep '^microview_rdma_\(reconnects\|revoked\|reads\|agent\)' | head
  reconnected() { wire_metrics | grep -Eq '^microview_rdma_reconnects_total\{.*\} [1-9]'; }
  check "RDMA connection re-established (reconnects_total > 0)" wait_for 10 reconnected
  check "collector stops cleanly (no sanitizer report)" wire_stop_clean "$WIRE_COLL_PID"
  wire_flag b.done
  wire_dump_logs
  e2e_result "wire_two_fails=$fails"
  [ "$fails" = 0 ]
  ;;
*) e2e_log "unknown role $E2E_ROLE"; exit 2 ;;
esac
