#!/usr/bin/env bash
# Integration: the agent notices its control-plane socket was deleted, serves on a new one
# (logged), keeps its segments, and a following collector reconnects and keeps serving them.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

"$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/agent.log" & pids+=("$!")
wait_for 5 test -S "$tmp/segs/agent.sock"
sock="unix:$tmp/segs/agent.sock"
"$bin/microviewctl" gen --agent "$sock" --label service=sock --rate 100 --counters 1 --gauges 0 \
  --histograms 0 >"$tmp/gen.log" 2>&1 & pids+=("$!")
port=$(free_port)
"$bin/microview-collector" --agent "$sock" --listen "127.0.0.1:$port" --tick-ms 20 \
  2>"$tmp/collector.log" & pids+=("$!")
served() { curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^gen_requests_total{.*service="sock"'; }
check "collector serves the workload" wait_for 15 served

rm -f "$tmp/segs/agent.sock"
check "the agent serves on a new socket" wait_for 5 test -S "$tmp/segs/agent.sock"
check "and says so" grep -q 'event=agent.socket_lost' "$tmp/agent.log"
check "microviewctl reaches it and the segment is still there" \
  sh -c "'$bin/microviewctl' list --agent '$sock' | grep -q 'service=sock'"
value() {
  curl -sf "http://127.0.0.1:$port/metrics" |
    sed -n 's/^gen_requests_total{.*service="sock".*} \([0-9]*\)$/\1/p' | head -n1
}
v1=$(value)
advanced() { test "$(value)" -gt "${v1:-0}"; }
check "the collector keeps serving the advancing counter" wait_for 10 advanced
reconnected() { grep -q 'event=agent.watch_ended' "$tmp/collector.log" && served; }
check "the collector's watch reconnected" wait_for 10 reconnected
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
