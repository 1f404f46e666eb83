#!/usr/bin/env bash
# Integration: the collector's analytics on live segments. A busy workload, a
# calm segment and a collector at a 1 ms tick with 1 s windows; asserts the
# derived series (rates, window summaries, change counts, read intervals),
# promtool and the OpenMetrics parser on live output, the JSON value endpoint
# for KEDA, /debug/segments and `microviewctl top --once`.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
py=/usr/bin/python3

port=$(free_port)
sock=$tmp/agent.sock
"$bin/microview-agent" --standalone --dir "$tmp/segs" --socket "$sock" 2>"$tmp/agent.log" & pids+=($!)
wait_for 5 test -S "$sock" || { cat "$tmp/agent.log"; exit 1; }
"$bin/microviewctl" gen --agent "unix:$sock" --label namespace=shop --label pod=web-1 \
  --rate 500 --counters 1 --gauges 1 --histograms 1 2>"$tmp/gen.log" & pids+=($!)
"$bin/microviewctl" create --agent "unix:$sock" --size 8192 --label namespace=shop \
  --label pod=idle-1 >"$tmp/create.out" 2>&1
"$bin/microview-collector" --agent "unix:$sock" --listen "127.0.0.1:$port" --tick-ms 1 \
  --max-interval-ms 256 --window-ms 1000 --derived counter=all --derived gauge=all \
  --derived histogram=all 2>"$tmp/collector.log" & pids+=($!)
base=http://127.0.0.1:$port
url=$base/metrics
id='namespace="shop",pod="web-1",worker="0"'

has() { curl -sf "$url" | grep -q "$1"; }
check "counter rate series appears after a window" wait_for 10 has "^gen_requests_rate{$id} "
check "at a 1 ms tick change detection steps every 10 ms by default" \
  grep -q 'event=collector.started .*tick_ms=1.000 .*detect=1 detect_ms=10 ' "$tmp/collector.log"
# The first window may have started with the workload: wait for the next one (windows change
# once per --window-ms) so that the checks below see a complete window.
window() { grep -F -e "gen_requests_rate{$id} " -e "gen_latency_seconds_window_sum{$id} " "$1"; }
curl -sf "$url" >"$tmp/m0.prom"
next_window() { curl -sf "$url" >"$tmp/m.prom" && [ "$(window "$tmp/m.prom")" != "$(window "$tmp/m0.prom")" ]; }
wait_for 10 next_window
curl -sf -H 'Accept: application/openmetrics-text; version=1.0.0' "$url" >"$tmp/m.om"
val() { grep "^$1 " "$tmp/m.prom" | awk '{print $2}'; }
within() { $py -c "import sys; v=float(sys.argv[1]); sys.exit(0 if float(sys.argv[2]) <= v <= float(sys.argv[3]) else 1)" "$@"; }
check "gen_requests_rate is near the generator's 500/s ($(val "gen_requests_rate{$id}"))" \
  within "$(val "gen_requests_rate{$id}")" 400 600
check "gen_requests_rate_short is near 500/s ($(val "gen_requests_rate_short{$id}"))" \
  within "$(val "gen_requests_rate_short{$id}")" 300 700
check "gen_requests_rate_max >= the rate" \
  $py -c "import sys; sys.exit(0 if float('$(val "gen_requests_rate_max{$id}")') >= float('$(val "gen_requests_rate{$id}")') else 1)"
check "gauge window summary with quantiles, min/max/mean/last" \
  bash -c "grep -q '^gen_queue_depth_window{$id,quantile=\"0.99\"} ' $tmp/m.prom && grep -q '^gen_queue_depth_window_last{$id} ' $tmp/m.prom && grep -q '^gen_queue_depth_window_mean{$id} ' $tmp/m.prom"
check "histogram window p50 near the generator's 5 ms ($(val "gen_latency_seconds_window{$id,quantile=\"0.5\"}"))" \
  within "$(val "gen_latency_seconds_window{$id,quantile=\"0.5\"}")" 0.0025 0.01
check "histogram window count near 500 per 1 s window ($(val "gen_latency_seconds_window_count{$id}"))" \
  within "$(val "gen_latency_seconds_window_count{$id}")" 350 650
check "microview_changes_total per metric" grep -q '^microview_changes_total{namespace="shop",pod="web-1",metric="gen_queue_depth",worker="0"} ' "$tmp/m.prom"
check "resets counter" grep -q "^gen_requests_resets_total{$id} 0" "$tmp/m.prom"
iv_idle=$(val 'microview_segment_read_interval_seconds{namespace="shop",pod="idle-1"}')
check "the calm segment backed off (interval ${iv_idle}s > 1 ms)" within "${iv_idle:-0}" 0.002 1
check "promtool accepts the live text output" promtool check metrics <"$tmp/m.prom"
check "the OpenMetrics parser accepts the live OpenMetrics output" $py -c '
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as p
fams = list(p(open(sys.argv[1]).read()))
assert any(f.name == "gen_latency_seconds_window" and f.type == "summary" for f in fams)
' "$tmp/m.om"

curl -s "$base/api/v1/value?metric=gen_requests_rate&namespace=shop&pod=web-1" >"$tmp/v.json"
check "/api/v1/value returns the per-pod rate at .value ($(cat "$tmp/v.json" | head -c 200))" $py -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert 400 <= d["value"] <= 600 and d["count"] == 1 and d["series"][0]["labels"]["pod"] == "web-1"
' "$tmp/v.json"
check "/api/v1/value filters by quantile" bash -c "curl -s '$base/api/v1/value?metric=gen_latency_seconds_window&pod=web-1&quantile=0.99' | $py -c 'import json,sys; d=json.load(sys.stdin); assert d[\"count\"]==1 and d[\"value\"]>0'"
check "/api/v1/value gives 404 for an unknown metric" \
  test "$(curl -s -o /dev/null -w '%{http_code}' "$base/api/v1/value?metric=nope")" = 404
check "/debug/segments has read interval, rate and anomaly fields" bash -c "curl -sf '$base/debug/segments' | $py -c '
import json, sys
d = json.load(sys.stdin)
s = [x for x in d[\"segments\"] if x[\"labels\"].get(\"pod\") == \"web-1\"][0]
assert \"read_interval_seconds\" in s and \"reads_per_second\" in s and \"anomaly_score\" in s and s[\"reads\"] > 0
'"
# Windows phased per segment (the default): each window ends at its segment's own offset in
# the 1 s window, not at a multiple of it, and lasts 1 s.
seg_windows() { curl -sf "$1/debug/segments" | $py -c '
import json, sys
segs = [x for x in json.load(sys.stdin)["segments"] if x.get("window_end_unix_ns")]
assert segs, "no segment with a complete window"
for x in segs:
    assert x["window_end_unix_ns"] - x["window_start_unix_ns"] == 10**9, x
    assert (x["window_end_unix_ns"] % 10**9 == 0) == (sys.argv[1] == "wall"), x
print(" ".join(str(x["window_end_unix_ns"] % 10**9) for x in segs))
' "$2"; }
check "default windows end at each segment's own offset ($(seg_windows "$base" segment 2>&1 | head -c 200))" \
  seg_windows "$base" segment
"$bin/microviewctl" top --collector "$base" --once >"$tmp/top.txt" 2>&1
check "microviewctl top --once prints the pods and their values" \
  bash -c "grep -q '^shop/web-1 ' $tmp/top.txt && grep -q 'gen_requests_total' $tmp/top.txt && grep -q ANOMALY $tmp/top.txt"

# A second collector with the default choice of derived series: few samples per metric.
port2=$(free_port)
refuses_align() {
  local out rc=0
  out=$("$bin/microview-collector" --no-agent --window-align diagonal 2>&1) || rc=$?
  [ "$rc" = 2 ] && grep -q "'diagonal' is not segment or wall" <<<"$out"
}
check "--window-align refuses an unknown mode (exit 2, says why)" refuses_align
"$bin/microview-collector" --agent "unix:$sock" --listen "127.0.0.1:$port2" --tick-ms 1 \
  --window-ms 1000 --window-align wall 2>"$tmp/collector2.log" & pids+=($!)
has2() { curl -sf "http://127.0.0.1:$port2/metrics" | grep -q "$1"; }
check "default choice: gen_queue_depth_window_max appears" wait_for 10 has2 "^gen_queue_depth_window_max{$id} "
curl -sf "http://127.0.0.1:$port2/metrics" >"$tmp/m2.prom"
check "default choice: 3 samples per gauge ($(grep -c '^gen_queue_depth' "$tmp/m2.prom"))" \
  test "$(grep -c '^gen_queue_depth' "$tmp/m2.prom")" = 3
check "default choice: counters get _rate and _rate_short, not _rate_max" \
  bash -c "grep -q '^gen_requests_rate_short{$id} ' $tmp/m2.prom && ! grep -q '^gen_requests_rate_max' $tmp/m2.prom"
check "default choice: histogram window p50 and p99 only" \
  bash -c "grep -q 'gen_latency_seconds_window{$id,quantile=\"0.99\"}' $tmp/m2.prom && ! grep -q 'gen_latency_seconds_window{$id,quantile=\"0.9\"}' $tmp/m2.prom"
# The first wall-aligned window can end within a tick of the counter's first read: its rates
# are NaN (no time elapsed) and count for nothing, so wait for a window with time in it.
json_serves_rate_max() {
  curl -s "http://127.0.0.1:$port2/api/v1/value?metric=gen_requests_rate_max&pod=web-1" |
    $py -c 'import json,sys; d=json.load(sys.stdin); assert d["count"]==1, d'
}
check "the JSON API still serves a series left out of /metrics" wait_for 5 json_serves_rate_max
check "promtool accepts the default output" promtool check metrics <"$tmp/m2.prom"
check "--window-align wall: windows end at multiples of --window-ms" \
  seg_windows "http://127.0.0.1:$port2" wall

echo "analytics: $passes passed, $fails failed"
if [ $fails -ne 0 ]; then
  cat "$tmp/top.txt"
  for f in agent collector collector2 gen; do echo "--- $f.log"; tail -n 20 "$tmp/$f.log"; done
fi
[ $fails -eq 0 ]
