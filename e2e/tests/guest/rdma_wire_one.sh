#!/usr/bin/env bash
# Guest script, one VM: agent + writers + collector --transport verbs on one rxe device; the
# values read by RDMA must equal the writer's segment (microviewctl dump --json).
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$REPO/e2e/tests/guest/lib.sh"
# shellcheck source=SCRIPTDIR/wire_lib.sh
. "$REPO/e2e/tests/guest/wire_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null; kill -CONT $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT

wire_agent || { wire_dump_logs; exit 1; }
wire_gen a 200
gen_a=$WIRE_GEN_PID
wire_gen b 50
wire_collector "$E2E_SELF_IP" || { wire_dump_logs; exit 1; }

check "collector serves instance a over RDMA" wait_for 30 wire_has a
check "collector serves instance b over RDMA" wait_for 30 wire_has b
check "agent registered both segments" \
  wait_for 10 test "$(grep -c 'event=segment.rdma_registered' "$WIRE_DIR/agent.log")" -ge 2

path_a=$(wire_seg a | cut -d' ' -f2)
wire_freeze "$gen_a"
"$B/microviewctl" dump --json "$path_a" >"$WIRE_DIR/dump-a.json"
# Until the collector's copy is the frozen state (a few 50 ms ticks); asserted below.
wait_for 10 wire_served_as "$WIRE_DIR/metrics.txt" "$WIRE_DIR/dump-a.json" a
kill -CONT "$gen_a"
check "values read by RDMA equal the segment's" \
  wire_compare "$WIRE_DIR/metrics.txt" "$WIRE_DIR/dump-a.json" a
grep '^microview_rdma_' "$WIRE_DIR/metrics.txt" | head -n 12
reads=$(awk '/^microview_rdma_reads_total/ {print $2}' "$WIRE_DIR/metrics.txt" | head -n 1)
check "per-agent RDMA read statistics exported (reads=$reads)" test "${reads:-0}" -gt 0
sbytes=$(awk '/^microview_rdma_segment_read_bytes_total/ {print $2}' "$WIRE_DIR/metrics.txt" |
  head -n 1)
check "per-segment RDMA read bytes exported (bytes=$sbytes)" test "${sbytes:-0}" -gt 0

check "collector and agent stop cleanly (no sanitizer report)" \
  wire_stop_clean "$WIRE_COLL_PID" "$WIRE_AGENT_PID"
wire_dump_logs
e2e_result "wire_one_fails=$fails rdma_reads=${reads:-0}"
[ "$fails" = 0 ]
