#!/usr/bin/env bash
# Integration: `microviewctl top --once` shows each segment's identity whole. Two replicas whose
# namespace/pod/container identity is longer than the old 44-character SEGMENT column and
# differs only at the end of the pod name print as two distinct rows; in a narrow terminal
# ($COLUMNS) a long identity gets a line of its own and its values stay within the width.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

port=$(free_port)
sock=$tmp/agent.sock
"$bin/microview-agent" --standalone --dir "$tmp/segs" --socket "$sock" 2>"$tmp/agent.log" & pids+=($!)
wait_for 5 test -S "$sock" || { cat "$tmp/agent.log"; exit 1; }
ns=team-payments-production-eu-west
for pod in checkout-api-7f9c8d6b5-x2x9z checkout-api-7f9c8d6b5-x2x9q; do
  "$bin/microviewctl" gen --agent "unix:$sock" --label namespace=$ns --label pod=$pod \
    --label container=server --label app=checkout --rate 50 2>>"$tmp/gen.log" & pids+=($!)
done
"$bin/microview-collector" --agent "unix:$sock" --listen "127.0.0.1:$port" --tick-ms 10 \
  2>"$tmp/collector.log" & pids+=($!)
base=http://127.0.0.1:$port
two_ok() { curl -sf "$base/debug/segments" | grep -o '"state": *"ok"' | wc -l | grep -qx 2; }
check "the collector reads both replicas" wait_for 10 two_ok

a=$ns/checkout-api-7f9c8d6b5-x2x9z/server
b=$ns/checkout-api-7f9c8d6b5-x2x9q/server
env -u COLUMNS "$bin/microviewctl" top --collector "$base" --once >"$tmp/top.txt" 2>&1
check "top prints the first replica's identity whole (${#a} characters)" \
  grep -qE "^$a app=checkout +ok " "$tmp/top.txt"
check "top prints the second replica's identity whole" grep -qE "^$b app=checkout +ok " "$tmp/top.txt"
check "the SEGMENT column is as wide as the longest identity" \
  grep -qE '^SEGMENT {60,}STATE' "$tmp/top.txt"

COLUMNS=80 "$bin/microviewctl" top --collector "$base" --once >"$tmp/top80.txt" 2>&1
check "COLUMNS=80: the identity stays whole on a line of its own" grep -qx "$a app=checkout" "$tmp/top80.txt"
check "COLUMNS=80: its values follow on the next line within 80 columns" \
  awk -v id="$a app=checkout" 'prev == id { ok = length($0) <= 80 && $0 ~ /^ +ok / } { prev = $0 } END { exit !ok }' \
  "$tmp/top80.txt"
check "COLUMNS=80: the header fits" awk 'NR == 2 { exit !(length($0) <= 80) }' "$tmp/top80.txt"
if [ "$fails" -ne 0 ]; then cat "$tmp/top.txt" "$tmp/top80.txt"; fi
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
