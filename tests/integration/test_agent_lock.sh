#!/usr/bin/env bash
# Integration: one agent per directory. A second agent on the same directory is refused with
# a clear message (it must not take over the first one's socket nor race its catalog writes);
# the first keeps serving; once it stops, the directory can be used again.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

"$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/a1.log" & a1=$!; pids+=("$a1")
wait_for 5 test -S "$tmp/segs/agent.sock"
"$bin/microviewctl" create --agent "unix:$tmp/segs/agent.sock" --size 8192 >"$tmp/create.out" 2>&1
check "first agent serves" grep -q 'seg' "$tmp/create.out"

timeout 10 "$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/a2.log"
rc=$?
check "second agent on the same directory exits with an error" test "$rc" -ne 0 -a "$rc" -ne 124
check "its log names the directory and the holder's pid" \
  grep -q "event=segstore.dir_in_use dir=\"\\?$tmp/segs\"\\? holder_pid=\"\\?$a1\"\\?" "$tmp/a2.log"
check "first agent still answers on its socket" \
  "$bin/microviewctl" list --agent "unix:$tmp/segs/agent.sock"
check "and still lists its segment" \
  test "$("$bin/microviewctl" list --agent "unix:$tmp/segs/agent.sock" | grep -c seg)" -ge 1

kill "$a1"; wait "$a1" 2>/dev/null
"$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/a3.log" & a3=$!; pids+=("$a3")
check "after the first stops, a new agent takes the directory" \
  wait_for 5 test -S "$tmp/segs/agent.sock"
check "and recovers the segment" \
  wait_for 5 sh -c "'$bin/microviewctl' list --agent 'unix:$tmp/segs/agent.sock' | grep -q seg"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
