#!/usr/bin/env bash
# Integration: a standalone agent under a tenant that misbehaves on purpose.
#  1. Quotas: uid 1000 on a 0666 socket hits --max-segments-per-uid (RESOURCE_EXHAUSTED naming
#     the limit, its usage and the flag) while uid 1001 keeps creating; --max-bytes-per-uid
#     likewise; the count survives a restart (it is the files' owner).
#  2. Catalog growth: a catalog.json of 3,000 entries with large labels (~18 MiB, past the old
#     16 MiB load limit) is served in full after a restart, and so are creates made after it.
#  3. Disk full: the agent's --dir on a private tmpfs (a new mount namespace): creates until the
#     disk is full, then kill -9 and a restart: every acknowledged segment is there, no failed
#     create left a file. A reserve (--min-free-bytes) refuses creates naming the reserve.
# Needs root, setpriv and unshare -m (skips with 77 otherwise).
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root: the agent runs as root and the callers as uid 1000/1001"
command -v setpriv >/dev/null || skip "setpriv (util-linux) not installed"

chmod 755 "$tmp"
mkdir -p "$tmp/bin"
cp "$bin/microviewctl" "$tmp/bin/"
chmod 755 "$tmp/bin" "$tmp/bin/microviewctl"
ctl=$tmp/bin/microviewctl
as() { # <uid> COMMAND...
  local u=$1
  shift
  setpriv --reuid "$u" --regid "$u" --clear-groups -- "$@"
}
# The new flags only where the agent has them, so that an agent without them runs the
# durability and size scenarios as far as it can (and fails them for what they check).
has_flag() { "$bin/microview-agent" --standalone --help | grep -q -- "$1"; }
agent=
start_agent() { # <dir> <log> <agent args...>
  local dir=$1 log=$2
  shift 2
  rm -f "$dir/agent.sock" # left by a kill -9: wait for the new one
  (
    umask 022
    exec "$bin/microview-agent" --standalone --dir "$dir" "$@" 2>>"$log"
  ) & agent=$!
  pids+=("$agent")
  wait_for 60 test -S "$dir/agent.sock" || {
    tail -5 "$log"
    return 1
  }
}
stop_agent() { # [signal]
  kill "-${1:-TERM}" "$agent" 2>/dev/null
  wait "$agent" 2>/dev/null
}

# ---- 1. Quotas ---------------------------------------------------------------------------
quotas() {
sock=unix:$tmp/q/agent.sock
ok1000=0
for _ in 1 2 3 4 5 6 7; do
  as 1000 "$ctl" create --agent "$sock" --size 4Ki --label service=greedy >/dev/null 2>"$tmp/q1000.err" &&
    ok1000=$((ok1000 + 1))
done
echo "uid 1000: $ok1000 of 7 creates accepted"
check "uid 1000 gets exactly 5 segments" test "$ok1000" = 5
check "  the refusal names the usage, the limit and the flag" \
  grep -q 'agent out of resources: quota exceeded: uid 1000 already owns 5 segments, the limit per uid is 5 (--max-segments-per-uid)' \
  "$tmp/q1000.err"
ok1001=0
t0=$(now_ms)
for _ in 1 2 3 4 5; do
  as 1001 "$ctl" create --agent "$sock" --size 4Ki --label service=polite >/dev/null 2>"$tmp/q1001.err" &&
    ok1001=$((ok1001 + 1))
done
echo "uid 1001: $ok1001 of 5 creates accepted while uid 1000 is at its limit ($(($(now_ms) - t0)) ms)"
check "uid 1001 keeps creating while uid 1000 is at its limit" test "$ok1001" = 5
as 1002 "$ctl" create --agent "$sock" --size 60Ki --label service=big >/dev/null 2>&1
as 1002 "$ctl" create --agent "$sock" --size 8Ki --label service=big >/dev/null 2>"$tmp/q1002.err"
check "--max-bytes-per-uid refuses the create that would pass it, naming the flag" \
  grep -q 'owns 61440 bytes of segments and asks for 8192 more, the limit per uid is 65536 bytes (--max-bytes-per-uid)' \
  "$tmp/q1002.err"
check "  logged as segment.quota_refused" grep -q 'event=segment.quota_refused uid=1002' "$tmp/q.log"
check "root is not held to the per-uid quota" \
  bash -c "for i in 1 2 3 4 5 6; do '$ctl' create --agent '$sock' >/dev/null || exit 1; done"
first=$("$ctl" list --agent "$sock" --json | python3 -c '
import json, sys
for s in json.load(sys.stdin)["segments"]:
    if "greedy" in json.dumps(s.get("labels")):
        print(s["id"]); break')
as 1000 "$ctl" release --agent "$sock" "$first" >/dev/null 2>&1
check "after a release uid 1000 may create one more" \
  as 1000 "$ctl" create --agent "$sock" --size 4Ki --label service=greedy
stop_agent
start_agent "$tmp/q" "$tmp/q.log" --socket-mode 0666 --max-segments-per-uid 5 || return 1
as 1000 "$ctl" create --agent "$sock" --size 4Ki >/dev/null 2>"$tmp/q1000b.err"
check "after a restart uid 1000 is still at its limit (its files count)" \
  grep -q 'already owns 5 segments' "$tmp/q1000b.err"
stop_agent
}
echo "== quotas"
if start_agent "$tmp/q" "$tmp/q.log" --socket-mode 0666 --max-segments-per-uid 5 \
  --max-bytes-per-uid 64Ki; then
  quotas
else
  fail "the agent takes --max-segments-per-uid and --max-bytes-per-uid"
fi

# ---- 2. Catalog growth past the old 16 MiB load limit --------------------------------------
echo "== catalog growth"
N=${MV_QUOTA_BIG_CATALOG:-3000}
start_agent "$tmp/big" "$tmp/big.log" || exit 1
"$ctl" create --agent "unix:$tmp/big/agent.sock" --size 4096 >"$tmp/big0.out" || exit 1
stop_agent
python3 - "$tmp/big" "$N" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
cat = json.load(open(os.path.join(d, "catalog.json")))
first = cat["segments"][0]
segs = []
for i in range(n):
    sid = "seg-%016x" % (0x2000000 + i)
    os.link(first["path"], os.path.join(d, sid))
    labels = [{"name": "l%02d_" % k + "n" * 120, "value": ("%d-" % i) + "v" * 240}
              for k in range(16)]
    segs.append(dict(first, id=sid, path=os.path.join(d, sid), labels=labels))
os.unlink(first["path"])
cat["segments"] = segs
cat["revision"] += 1
json.dump(cat, open(os.path.join(d, "catalog.json"), "w"), indent=2)
PY
size=$(stat -c %s "$tmp/big/catalog.json")
echo "catalog.json: $N segments, $size bytes"
check "the catalog is larger than 16 MiB ($size bytes)" test "$size" -gt $((16 << 20))
t0=$(now_ms)
start_agent "$tmp/big" "$tmp/big.log" || true
echo "agent started on it in $(($(now_ms) - t0)) ms"
check "the agent loads every entry" grep -q "event=catalog.loaded count=$N dropped=0 quarantined=0" \
  "$tmp/big.log"
bigl=()
for k in $(seq 0 15); do bigl+=(--label "l$(printf %02d "$k")_$(printf 'n%.0s' $(seq 120))=$(printf 'v%.0s' $(seq 250))"); done
for _ in 1 2 3; do "$ctl" create --agent "unix:$tmp/big/agent.sock" "${bigl[@]}" >/dev/null; done
stop_agent KILL
start_agent "$tmp/big" "$tmp/big.log" || true
check "after three more creates and kill -9, a restart serves all $((N + 3))" \
  grep -q "event=catalog.loaded count=$((N + 3)) dropped=0 quarantined=0" "$tmp/big.log"
"$ctl" list --agent "unix:$tmp/big/agent.sock" --json >"$tmp/big.list" 2>"$tmp/big.list.err"
listed=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["segments"]))' \
  "$tmp/big.list" 2>/dev/null)
echo "list: ${listed:-none} segments $(head -c 300 "$tmp/big.list.err")"
check "  and list answers with all of them" test "${listed:-0}" = $((N + 3))
stop_agent

# ---- 3. Disk full --------------------------------------------------------------------------
echo "== disk full"
if ! unshare -m true 2>/dev/null; then
  skip "unshare -m (a private mount namespace) is not allowed here"
fi
# The scenario runs in a new mount namespace, where the tmpfs exists and nowhere else.
cat >"$tmp/diskfull.sh" <<'SH'
set -uo pipefail
bin=$1 d=$2 out=$3 extra=$4
mount --make-rprivate / 2>/dev/null
mkdir -p "$d" && mount -t tmpfs -o size=1M,mode=0755 mvfull "$d" || exit 3
sock=unix:$d/segs/agent.sock
start() {
  rm -f "$d/segs/agent.sock"
  # shellcheck disable=SC2086 # $extra: zero or more flags
  "$bin/microview-agent" --standalone --dir "$d/segs" $extra 2>>"$out/agent.log" & agent=$!
  for _ in $(seq 100); do [ -S "$d/segs/agent.sock" ] && return 0; sleep 0.05; done
  return 1
}
start || exit 4
: >"$out/acked"
fails=0
for size in 64Ki 16Ki 4Ki; do
  for _ in $(seq 80); do
    if "$bin/microviewctl" create --agent "$sock" --size "$size" >"$out/c.out" 2>"$out/c.err"; then
      sed -n 's/^id=//p' "$out/c.out" >>"$out/acked"
    else
      fails=$((fails + 1))
      cp "$out/c.err" "$out/last.err"
    fi
  done
done
echo "$fails" >"$out/fails"
df -B1 "$d" | tail -1 >"$out/df"
ls "$d/segs" | grep -c '^seg-' >"$out/files_before"
kill -KILL "$agent"
wait "$agent" 2>/dev/null
start || exit 5
"$bin/microviewctl" list --agent "$sock" --json >"$out/list.json"
ls "$d/segs" | grep -c '^seg-' >"$out/files_after"
kill -TERM "$agent"
wait "$agent" 2>/dev/null
# The reserve: 1 MiB of 1 MiB kept free refuses at once.
rm -rf "$d/segs"
"$bin/microview-agent" --standalone --dir "$d/segs" --min-free-bytes 1Mi 2>>"$out/agent.log" &
agent=$!
for _ in $(seq 100); do [ -S "$d/segs/agent.sock" ] && break; sleep 0.05; done
"$bin/microviewctl" create --agent "$sock" --size 4Ki >/dev/null 2>"$out/reserve.err"
kill -TERM "$agent"
wait "$agent" 2>/dev/null
umount "$d"
exit 0
SH
mkdir -p "$tmp/full.out"
extra=
if has_flag --min-free-percent; then extra="--min-free-percent 0"; fi
unshare -m bash "$tmp/diskfull.sh" "$bin" "$tmp/full" "$tmp/full.out" "$extra"
rc=$?
check "the disk-full scenario ran (exit $rc)" test "$rc" = 0
o=$tmp/full.out
acked=$(wc -l <"$o/acked")
echo "disk full: $acked creates acknowledged, $(cat "$o/fails" 2>/dev/null) refused;" \
  "files before the restart: $(cat "$o/files_before" 2>/dev/null)," \
  "df: $(cat "$o/df" 2>/dev/null)"
echo "last refusal: $(cat "$o/last.err" 2>/dev/null)"
check "some creates were acknowledged and some refused" \
  bash -c "[ '$acked' -gt 0 ] && [ \"\$(cat '$o/fails')\" -gt 0 ]"
check "the refusals say the space ran out" grep -qiE 'no space|reserve|disk' "$o/last.err"
check "no failed create left a file: files == acknowledged creates" \
  test "$(cat "$o/files_before" 2>/dev/null)" = "$acked"
missing=0
while read -r id; do grep -q "\"$id\"" "$o/list.json" || missing=$((missing + 1)); done <"$o/acked"
echo "after kill -9 and a restart: $missing of $acked acknowledged segments missing"
check "every acknowledged segment is served after kill -9 and a restart" test "$missing" = 0
listed=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["segments"]))' \
  "$o/list.json" 2>/dev/null)
check "  and every file there is in the catalog: no strays ($(cat "$o/files_after" 2>/dev/null) files, ${listed:-?} listed)" \
  test "$(cat "$o/files_after" 2>/dev/null)" = "${listed:-x}"
check "the reserve refuses with its size and the flag" \
  grep -q 'less than the 1048576 bytes kept free (--min-free-bytes 1048576' "$o/reserve.err"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
