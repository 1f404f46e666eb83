#!/usr/bin/env bash
# Integration: a collector (two tick workers) follows an agent with 10,000 segments. The Watch
# stream's initial list (one message per segment) fits the stream's bounds, and every segment
# reaches the collector's table; nothing overflows, nothing is reported unreachable.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
N=${MV_MANY_SEGMENTS:-10000}

# One real segment from the agent, then N copies registered in its catalog (faster than N
# create calls; the agent loads them at start exactly as after a restart).
"$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/agent0.log" & a0=$!
wait_for 5 test -S "$tmp/segs/agent.sock"
"$bin/microviewctl" create --agent "unix:$tmp/segs/agent.sock" --size 8192 --label service=many \
  >"$tmp/c.out"
kill "$a0"; wait "$a0" 2>/dev/null
/usr/bin/python3 - "$tmp/segs" "$N" <<'PY'
import json, os, shutil, sys
d, n = sys.argv[1], int(sys.argv[2])
cat = json.load(open(os.path.join(d, "catalog.json")))
first = cat["segments"][0]
segs = []
for i in range(n):
    sid = "seg-%016x" % (0x1000000 + i)
    path = os.path.join(d, sid)
    shutil.copyfile(first["path"], path)
    e = dict(first, id=sid, path=path, labels=[{"name": "service", "value": "many"},
                                                {"name": "replica", "value": str(i)}])
    segs.append(e)
os.unlink(first["path"])
cat["segments"] = segs
cat["revision"] += 1
json.dump(cat, open(os.path.join(d, "catalog.json"), "w"))
PY
"$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/agent.log" & pids+=("$!")
wait_for 30 test -S "$tmp/segs/agent.sock"
port=$(free_port)
"$bin/microview-collector" --agent "unix:$tmp/segs/agent.sock" --listen "127.0.0.1:$port" \
  --tick-ms 100 --tick-workers 2 --no-analytics 2>"$tmp/collector.log" & pids+=("$!")
ok_count() {
  curl -sf "http://127.0.0.1:$port/metrics" |
    sed -n 's/^microview_segments{state="ok"} \([0-9]*\)$/\1/p'
}
all_ok() { test "$(ok_count)" = "$N"; }
t0=$SECONDS
check "the collector reads all $N segments" wait_for 90 all_ok
echo "all segments read after $((SECONDS - t0)) s"
echo "segments ok: $(ok_count)"
check "the collector shares its ticks between 2 workers" \
  grep -q 'event=collector.started .*tick_workers=2 ' "$tmp/collector.log"
check "no stream overflow in the agent" bash -c "! grep -q 'rpc.stream_overflow' '$tmp/agent.log'"
check "no lost watch in the collector" \
  bash -c "! grep -qE 'agent.unreachable|agent.watch_ended' '$tmp/collector.log'"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
