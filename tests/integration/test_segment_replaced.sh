#!/usr/bin/env bash
# Integration: one set of segment bytes gets one verdict. A segment file truncated by its own pod
# and re-extended (to its size again: the agent's size check sees nothing) between two reads has
# zeroed pages: the reads alone cannot tell, because the header may be written back. A running
# collector must then validate the whole segment again (header and catalog) and give the verdict
# a collector started afterwards gives the same bytes:
#  1. the same bytes written back: both serve the segment (ok), and the running one logged that
#     it validated it again (segment.revalidate);
#  2. only the 128-byte header written back (catalog and values zeroed): both quarantine it,
#     and the running one no longer serves the segment's counter (as zero or otherwise).
# Prints how long the running collector took to give its verdict.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

"$bin/microview-agent" --standalone --dir "$tmp/segs" --reap-interval-ms 100 \
  2>"$tmp/agent.log" &
pids+=("$!")
sock=unix:$tmp/segs/agent.sock
wait_for 5 test -S "$tmp/segs/agent.sock" || die "agent did not start: $(cat "$tmp/agent.log")"
"$bin/microviewctl" create --agent "$sock" --size 16384 --label service=replaced >"$tmp/c.out" ||
  die "microviewctl create failed"
path=$(sed -n 's/^path=//p' "$tmp/c.out")
id=$(sed -n 's/^id=//p' "$tmp/c.out")
timeout 2 "$bin/microviewctl" gen --segment "$path" --rate 500 --counters 1 --gauges 1 \
  --histograms 0 2>"$tmp/gen.log"
[ "$?" -eq 124 ] || die "gen did not run: $(cat "$tmp/gen.log")"

# collector NAME PORT: starts a collector following the agent, serving on PORT.
collector() {
  "$bin/microview-collector" --agent "$sock" --listen "127.0.0.1:$2" --tick-ms 5 \
    --quarantine-after-ms 200 --log-level debug 2>"$tmp/collector-$1.log" &
  pids+=("$!")
}
# state PORT: prints the segment's state in that collector's /debug/segments ("absent" if none).
state() {
  curl -sf "http://127.0.0.1:$1/debug/segments" 2>/dev/null | python3 -c '
import json, sys
try:
    doc = json.load(sys.stdin)
except ValueError:
    doc = {"segments": []}  # not serving yet
print(next((s["state"] for s in doc["segments"] if s["id"] == sys.argv[1]), "absent"))' "$id"
}
is_state() { [ "$(state "$1")" = "$2" ]; }
# counter PORT: the segment's counter line on /metrics, if served.
counter() {
  curl -sf "http://127.0.0.1:$1/metrics" 2>/dev/null | grep '^gen_requests_total{service="replaced"'
}
# replace KEEP: truncates the file to 0 and re-extends it to its size at once (no read in
# between is likely at a 5 ms tick), then writes back its first KEEP bytes.
replace() {
  python3 - "$path" "$1" <<'PY'
import os, sys
path, keep = sys.argv[1], int(sys.argv[2])
size = os.path.getsize(path)
with open(path, "r+b") as f:
    saved = f.read(keep)
    f.truncate(0)
    f.truncate(size)
    f.seek(0)
    f.write(saved)
PY
}

port_run=$(free_port)
collector run "$port_run"
check "the running collector serves the segment" wait_for 10 is_state "$port_run" ok
check "and its counter" wait_for 5 counter "$port_run"
echo "  before: $(counter "$port_run")"

# 1. The same bytes back: validated again, still served.
replace 16384
check "same bytes written back: the running collector validates the segment again" \
  wait_for 5 grep -q "event=segment.revalidate id=\"\\{0,1\\}$id" "$tmp/collector-run.log"
sleep 0.5 # a verdict that would change does so within the quarantine delay (200 ms)
check "same bytes written back: the running collector still serves it (ok)" is_state "$port_run" ok
port_fresh1=$(free_port)
collector fresh1 "$port_fresh1"
check "same bytes written back: a fresh collector serves it too (ok)" \
  wait_for 10 is_state "$port_fresh1" ok

# 2. The header alone back: catalog and values zeroed under the running collector.
t0=$(now_ms)
replace 128
if wait_for 10 is_state "$port_run" quarantined; then
  pass "header only written back: the running collector quarantines the segment"
  echo "  running collector's verdict after $(secs "$t0" "$(now_ms)" 2) s"
else
  fail "header only written back: the running collector says $(state "$port_run"), not quarantined"
  echo "    $(counter "$port_run")"
fi
check "and no longer serves its counter" bash -c "! curl -sf http://127.0.0.1:$port_run/metrics | grep -q '^gen_requests_total{service=\"replaced\"'"
port_fresh2=$(free_port)
collector fresh2 "$port_fresh2"
check "header only written back: a fresh collector quarantines the same bytes" \
  wait_for 10 is_state "$port_fresh2" quarantined
echo "  verdicts: running=$(state "$port_run") fresh=$(state "$port_fresh2")"
check "one set of bytes, one verdict" test "$(state "$port_run")" = "$(state "$port_fresh2")"

[ -n "${KEEP_LOGS:-}" ] && cp "$tmp"/*.log "$KEEP_LOGS"/
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
