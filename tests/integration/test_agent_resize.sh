#!/usr/bin/env bash
# Integration: a segment file truncated or extended by its writer is noticed by the agent,
# reported, and put back to its size while the collector keeps serving it; after an agent
# restart an extended segment is kept (restored), not dropped and left as a stray file.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

start_agent() {
  "$bin/microview-agent" --standalone --dir "$tmp/segs" --reap-interval-ms 100 \
    2>>"$tmp/agent.log" & agent=$!; pids+=("$agent")
  wait_for 5 test -S "$tmp/segs/agent.sock"
}
start_agent
sock="unix:$tmp/segs/agent.sock"
"$bin/microviewctl" create --agent "$sock" --size 16384 --label service=resize >"$tmp/c.out"
path=$(sed -n 's/^path=//p' "$tmp/c.out")
id=$(sed -n 's/^id=//p' "$tmp/c.out")
size() { stat -c %s "$path"; }
check "segment created at 16384 bytes" test "$(size)" = 16384

truncate -s 100 "$path"
check "truncation inside the first page is restored" \
  wait_for 5 sh -c "test \$(stat -c %s '$path') = 16384"
check "and reported with both sizes" \
  grep -q "event=segment.size_changed id=$id .*recorded=16384 found=100" "$tmp/agent.log"

truncate -s 20480 "$path"
check "extension is restored" wait_for 5 sh -c "test \$(stat -c %s '$path') = 16384"

kill "$agent"; wait "$agent" 2>/dev/null
truncate -s 20480 "$path"
start_agent
check "after a restart the extended segment is kept" \
  wait_for 5 sh -c "'$bin/microviewctl' list --agent '$sock' | grep -q '$id'"
check "and restored to its size" wait_for 5 sh -c "test \$(stat -c %s '$path') = 16384"
check "no stray file is reported" bash -c "! grep -q 'event=segment.stray_file' '$tmp/agent.log'"

kill "$agent"; wait "$agent" 2>/dev/null
rm -f "$path"; mkdir "$path"
start_agent
check "an entry whose path is no longer a file is dropped and its path removed" \
  bash -c "grep -q 'event=catalog.entry_dropped id=$id .*removed=1' '$tmp/agent.log' && ! test -e '$path'"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
