#!/usr/bin/env bash
# rw_bench.sh: CPU of the collector's remote write for N series per 1 s interval, end to end
# (snapshot, walk, labels, queues, protobuf, snappy, HTTP to a loopback sink that discards).
# Two collectors read the same pods side by side, one with --remote-write-url and one without;
# the difference of their CPU time over the same seconds is the remote write's share of a core.
# Also prints the anonymous RSS of each, after the same scrapes.
# Usage: bench/rw_bench.sh BUILD_DIR [PODS] [GAUGES_PER_POD] [SECONDS]   (default 20 5000 20)
set -euo pipefail
build=${1:?usage: rw_bench.sh BUILD_DIR [PODS] [GAUGES_PER_POD] [SECONDS]}
pods=${2:-20}
per=${3:-5000}
secs=${4:-20}
bin=$build/bin
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-rwbench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

"$bin/microview-agent" --standalone --dir "$tmp/segs" --socket "$tmp/agent.sock" 2>"$tmp/agent.log" &
pids+=($!)
for _ in $(seq 50); do [ -S "$tmp/agent.sock" ] && break; sleep 0.1; done
for i in $(seq "$pods"); do
  "$bin/microviewctl" gen --agent "unix:$tmp/agent.sock" --label namespace=bench \
    --label "pod=pod-$i" --size 4Mi --counters 0 --histograms 0 --gauges "$per" --rate 1 \
    2>"$tmp/gen-$i.log" &
  pids+=($!)
done
sink=$(port)
python3 - "$sink" >"$tmp/sink.log" 2>&1 <<'EOF' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
pids+=($!)
common=(--agent "unix:$tmp/agent.sock" --tick-ms 1000 --max-interval-ms 1000 --no-detect
  --window-ms 10000 --derived gauge=none)
pa=$(port)
pb=$(port)
"$bin/microview-collector" "${common[@]}" --listen "127.0.0.1:$pa" 2>"$tmp/plain.log" &
plain=$!
pids+=($!)
"$bin/microview-collector" "${common[@]}" --listen "127.0.0.1:$pb" \
  --remote-write-url "http://127.0.0.1:$sink/write" --remote-write-interval-ms 1000 \
  --remote-write-external-label cluster=bench 2>"$tmp/rw.log" &
rw=$!
pids+=($!)
# Wait until every pod registered its gauges and the sender runs.
want=$((pods * per))
for _ in $(seq 600); do
  n=$(curl -s "http://127.0.0.1:$pb/metrics" | grep -c '^gen_queue_depth' || true)
  [ "$n" -ge "$want" ] && break
  sleep 1
done
# The plain collector is scraped too, so both hold the same exposition cache.
curl -s "http://127.0.0.1:$pa/metrics" >/dev/null
sleep 3
hz=$(getconf CLK_TCK)
a0=$(cpu_ticks "$plain")
b0=$(cpu_ticks "$rw")
s0=$(metric "$pb" microview_remote_write_samples_total)
y0=$(metric "$pb" microview_remote_write_bytes_total)
# Instructions of both collectors over the same seconds (load-independent, unlike CPU time on
# a shared machine), where perf can count them (not in guests without a virtual PMU).
ia=0 ib=0
if perf stat -x, -e instructions:u true 2>&1 | grep -q '^[0-9]'; then
  perf stat -x, -e instructions:u -p "$plain" -o "$tmp/ia" -- sleep "$secs" &
  pa_perf=$!
  perf stat -x, -e instructions:u -p "$rw" -o "$tmp/ib" -- sleep "$secs" &
  wait "$pa_perf" $!
  ia=$(awk -F, '$3 ~ /instructions/ {print $1}' "$tmp/ia")
  ib=$(awk -F, '$3 ~ /instructions/ {print $1}' "$tmp/ib")
else
  sleep "$secs"
fi
a1=$(cpu_ticks "$plain")
b1=$(cpu_ticks "$rw")
# Anonymous memory of each (kB), after the same scrapes and the run.
ma=$(awk '$1 == "RssAnon:" {print $2}' "/proc/$plain/status")
mb=$(awk '$1 == "RssAnon:" {print $2}' "/proc/$rw/status")
s1=$(metric "$pb" microview_remote_write_samples_total)
y1=$(metric "$pb" microview_remote_write_bytes_total)
dq=$(curl -s "http://127.0.0.1:$pb/metrics" | awk '$1 ~ /^microview_remote_write_samples_dropped_total/ {s += $2} END {print s + 0}')
awk -v a="$((a1 - a0))" -v b="$((b1 - b0))" -v hz="$hz" -v t="$secs" -v s="$((${s1%.*} - ${s0%.*}))" \
  -v y="$((${y1%.*} - ${y0%.*}))" -v series="$n" -v dq="$dq" -v ia="${ia:-0}" -v ib="${ib:-0}" -v ma="$ma" -v mb="$mb" 'BEGIN {
  ca = a / hz; cb = b / hz; d = cb - ca;
  printf "bench=rw_e2e series=%d seconds=%d samples=%d samples_per_s=%.0f collector_cpu_core=%.3f " \
         "collector_rw_cpu_core=%.3f rw_share_of_core=%.2f%% rw_samples_per_core_second=%.0f " \
         "bytes_per_sample=%.2f dropped=%d plain_rss_anon_bytes=%d rw_rss_anon_bytes=%d " \
         "rw_rss_anon_bytes_per_series=%.0f\n",
         series, t, s, s / t, ca / t, cb / t, 100 * d / t, (d > 0 ? s / d : 0), (s ? y / s : 0), dq,
         ma * 1024, mb * 1024, (series ? (mb - ma) * 1024 / series : 0)
  if (ia > 0 && ib > 0 && s > 0)
    printf "bench=rw_e2e_instructions rw_instructions_per_sample=%.0f collector_instructions_per_s=%.0f\n",
           (ib - ia) / s, ia / t }'
