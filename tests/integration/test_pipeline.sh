#!/usr/bin/env bash
# Integration: standalone agent + microviewctl gen + shm collector over real
# gRPC (unix socket) and real HTTP on loopback. Asserts that /metrics carries
# the generator's values with their identity labels, that promtool accepts it,
# and that a hostile segment next to good ones is quarantined while the good
# ones keep being served.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

port=$(free_port)
sock=$tmp/agent.sock
"$bin/microview-agent" --standalone --dir "$tmp/segs" --socket "$sock" --reap-interval-ms 200 \
  2>"$tmp/agent.log" & pids+=($!)
wait_for 5 test -S "$sock" || { cat "$tmp/agent.log"; exit 1; }

"$bin/microviewctl" gen --agent "unix:$sock" --label service=checkout --label instance=a \
  --rate 500 --counters 2 --gauges 1 --histograms 1 2>"$tmp/gen-a.log" & pids+=($!)
"$bin/microviewctl" gen --agent "unix:$sock" --label service=search --label instance=b \
  --rate 100 --counters 1 --gauges 1 --histograms 0 2>"$tmp/gen-b.log" & pids+=($!)
"$bin/microview-collector" --agent "unix:$sock" --listen "127.0.0.1:$port" --tick-ms 5 \
  --quarantine-after-ms 200 2>"$tmp/collector.log" & pids+=($!)
url=http://127.0.0.1:$port/metrics

# (No `curl | grep -q` under pipefail: grep exiting early makes curl fail with SIGPIPE.)
scrape() { curl -sf "$url" >"$tmp/scrape.txt" 2>/dev/null; }
has_series() { scrape && grep -q "$1" "$tmp/scrape.txt"; }
check "collector serves the generator's counter with identity labels" \
  wait_for 10 has_series 'gen_requests_total{instance="a",service="checkout",worker="0"} '
check "second workload is served too" \
  wait_for 10 has_series 'gen_queue_depth{instance="b",service="search",worker="0"} '

headers=$(curl -sf -D - -o "$tmp/body.txt" "$url")
check "Content-Type is text/plain; version=0.0.4" grep -qi '^content-type: text/plain; version=0.0.4' <<<"$headers"
check "HELP and TYPE lines present" grep -q '^# TYPE gen_requests_total counter' "$tmp/body.txt"
check "histogram buckets with +Inf" grep -q 'gen_latency_seconds_bucket{instance="a",service="checkout",worker="0",le="+Inf"}' "$tmp/body.txt"
check "promtool check metrics accepts the output" promtool check metrics <"$tmp/body.txt"

counter_a() { scrape && grep '^gen_requests_total{instance="a",service="checkout",worker="0"}' "$tmp/scrape.txt" | awk '{print $2}'; }
t1=$(date +%s.%N); v1=$(counter_a)
sleep 2 # pacing, not synchronisation: 2 s of the workload make the measured rate meaningful
t2=$(date +%s.%N); v2=$(counter_a)
rate=$(awk -v a="$v1" -v b="$v2" -v s="$t1" -v e="$t2" 'BEGIN { printf "%.0f", (b - a) / (e - s) }')
check "counter advances at the generator's rate of 500/s (measured $rate/s)" \
  test "$rate" -ge 300 -a "$rate" -le 600

# A hostile segment: obtain one from the agent, then scribble over its header
# the way a broken or malicious pod could.
out=$("$bin/microviewctl" create --agent "unix:$sock" --size 8192 --label service=evil 2>&1)
hpath=$(sed -n 's/^path=//p' <<<"$out")
check "microviewctl create returned a segment path" test -n "$hpath" -a -f "$hpath"
printf 'NOTASEGMENT-garbage' | dd of="$hpath" conv=notrunc status=none
quarantined() { scrape && grep -q '^microview_segment_errors_total{reason="bad_magic"} 1$' "$tmp/scrape.txt"; }
check "hostile segment is quarantined and counted with reason bad_magic" wait_for 10 quarantined
check "collector log names the quarantined segment and reason" \
  wait_for 5 grep -q 'event=segment.quarantined.*reason=bad_magic' "$tmp/collector.log"
check "good segments are still served after the quarantine" has_series 'gen_requests_total{instance="a",service="checkout",worker="0"} '
check "no series from the hostile segment" bash -c "curl -sf '$url' >'$tmp/s2.txt' && ! grep -q 'service=\"evil\"' '$tmp/s2.txt'"
check "/debug/segments lists the quarantined segment" \
  bash -c "curl -sf http://127.0.0.1:$port/debug/segments >'$tmp/dbg.json' && grep -q '\"state\":\"quarantined\"' '$tmp/dbg.json'"

echo "pipeline: $passes passed, $fails failed"
if [ $fails -ne 0 ]; then
  for f in agent collector gen-a gen-b; do echo "--- $f.log"; tail -n 20 "$tmp/$f.log"; done
fi
[ $fails -eq 0 ]
