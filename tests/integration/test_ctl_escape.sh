#!/usr/bin/env bash
# Integration: microviewctl prints hostile label values safely: `list --json` is valid JSON
# with the exact values, `list` keeps one line per segment, `dump` escapes values. The agent
# refuses control bytes in segment labels, so `list` sees quotes and backslashes at most; a
# metric label inside a segment is the writer's and may hold anything, which `dump` escapes.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

"$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/agent.log" & pids+=($!)
wait_for 5 test -S "$tmp/segs/agent.sock"
agent="unix:$tmp/segs/agent.sock"
val=$'q"uo\\te\nnext line\tend'
"$bin/microviewctl" create --agent "$agent" --size 8192 --label "svc=$val" >"$tmp/refused.out" 2>&1
check "a segment label with a newline and a tab is refused, naming the byte" \
  grep -q 'control byte' "$tmp/refused.out"
lval='q"uo\te back\slash'
"$bin/microviewctl" create --agent "$agent" --size 8192 --label "svc=$lval" >"$tmp/create.out" 2>&1
check "segment with quotes and backslashes in a label value created" grep -q '^id=' "$tmp/create.out"
"$bin/microviewctl" list --agent "$agent" --json >"$tmp/list.json"
check "list --json is valid JSON with the exact value" /usr/bin/python3 - "$tmp/list.json" "$lval" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
vals = [s["labels"].get("svc") for s in doc["segments"]]
sys.exit(0 if vals == [sys.argv[2]] else 1)
PY
"$bin/microviewctl" list --agent "$agent" >"$tmp/list.txt"
check "list keeps one line per segment (header, one row, footer)" test "$(wc -l <"$tmp/list.txt")" -eq 3
check "list escapes quote and backslash" \
  grep -qF 'svc=q\"uo\\te back\\slash' "$tmp/list.txt"
path=$(sed -n 's/^path=//p' "$tmp/create.out")
/usr/bin/python3 - "$path" "$val" "$(dirname "$0")/../compat" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import pywriter  # the spec-only writer: a metric label carrying the hostile value
seg = pywriter.Segment(sys.argv[1])
seg.format_if_zero()
seg.register(pywriter.COUNTER, "x_total", "", "", [("k", sys.argv[2])])
seg.m.flush()
PY
"$bin/microviewctl" dump "$path" >"$tmp/dump.txt" 2>&1
check "dump escapes label values (one line per metric)" \
  grep -qF 'x_total{k="q\"uo\\te\nnext line\x09end"}' "$tmp/dump.txt"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
