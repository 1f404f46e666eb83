#!/usr/bin/env bash
# Integration: a standalone agent (root) started with `--socket-mode 0666` (under the usual
# umask 022: no umask trick) lets every local user reach its socket, and hands a created segment
# to its caller. A uid-1000 `microviewctl create` gets a file owned 1000:1000, mode 0660, that
# `microviewctl gen --segment` running as uid 1000 writes and the collector and `microviewctl
# dump` read; other users cannot open it. Explicit owners: a uid-1000 caller naming another uid
# or gid is refused with the field named, root naming uid 1000 is obeyed, root naming nothing
# keeps root:root. Release: uid 1001 cannot release uid 1000's segment (PERMISSION_DENIED
# naming the segment and the rule, logged segment.release_refused), uid 1000 and root can, also
# after an agent restart. `--socket-group` gives a group the socket (mode and group survive the
# socket's deletion and recreation). The agent knows the caller from the kernel (SO_PEERCRED on
# its unix socket), not from the request. Needs root (agent as root, writers via setpriv);
# skips with 77 otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root: the agent runs as root and the writers as uid 1000 (setpriv)"
command -v setpriv >/dev/null || skip "setpriv (util-linux) not installed"

# The writers run as other users: they need to reach the segment directory and the binary
# (a copy, wherever the build directory sits).
chmod 755 "$tmp"
mkdir -p "$tmp/bin"
cp "$bin/microviewctl" "$tmp/bin/"
chmod 755 "$tmp/bin" "$tmp/bin/microviewctl"
ctl=$tmp/bin/microviewctl
as() { # <uid> COMMAND...: runs COMMAND as uid:gid <uid>, no supplementary groups
  local u=$1
  shift
  setpriv --reuid "$u" --regid "$u" --clear-groups -- "$@"
}

# The usual umask: the socket's mode comes from --socket-mode alone.
start_agent() { # <log> <agent args...>: starts a standalone agent on $tmp/segs
  local log=$1
  shift
  (
    umask 022
    exec "$bin/microview-agent" --standalone --dir "$tmp/segs" "$@" 2>"$log"
  ) & agent=$!
  pids+=("$agent")
  wait_for 5 test -S "$tmp/segs/agent.sock" || { cat "$log"; return 1; }
}
start_agent "$tmp/agent.log" --socket-mode 0666 || exit 1
check "--socket-mode 0666: the socket is 0666 under umask 022 (got $(stat -c %a "$tmp/segs/agent.sock"))" \
  test "$(stat -c %a "$tmp/segs/agent.sock")" = 666
check "  and agent.started logs the mode" \
  grep -q 'event=agent.started .*socket_mode=0666 socket_mode_from=flag' "$tmp/agent.log"
sock="unix:$tmp/segs/agent.sock"
port=$(free_port)
"$bin/microview-collector" --agent "$sock" --listen "127.0.0.1:$port" --tick-ms 20 \
  2>"$tmp/collector.log" & pids+=("$!")

owner_of() { stat -c '%u:%g %a' "$1"; }
path_of() { sed -n 's/^path=//p' "$1"; }
nsegs() { "$ctl" list --agent "$sock" --json | grep -o '"id":' | wc -l; }

# --- A uid-1000 caller, no owner named ---------------------------------------------------
as 1000 "$ctl" create --agent "$sock" --label service=u1000 >"$tmp/c1.out" 2>"$tmp/c1.err"
check "uid 1000: microviewctl create succeeds" test -s "$tmp/c1.out"
p1=$(path_of "$tmp/c1.out")
check "uid 1000: the segment is owned 1000:1000 mode 0660 (got $(owner_of "$p1" 2>&1))" \
  test "$(owner_of "$p1")" = "1000:1000 660"
check "the agent logs the hand-over with the caller from the socket" \
  grep -q "event=segment.handed_over .*uid=1000 uid_from=caller gid=1000 gid_from=caller caller_uid=1000" \
  "$tmp/agent.log"

# The writer: bounded, 50 steps a second for 2 s.
as 1000 "$ctl" gen --segment "$p1" --duration 2 --rate 50 --counters 1 --gauges 0 \
  --histograms 0 2>"$tmp/gen1.log" & gen=$!
pids+=("$gen")
served() {
  curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/scrape.txt" 2>/dev/null &&
    grep -q '^gen_requests_total{service="u1000",worker="0"} [1-9]' "$tmp/scrape.txt"
}
check "the collector serves the uid-1000 writer's counter while it runs" wait_for 10 served
wait "$gen"
grc=$?
check "uid 1000: gen --segment opened, wrote and closed the segment (exit $grc)" \
  test "$grc" = 0 -a -n "$(grep 'event=gen.stopped' "$tmp/gen1.log")"
steps=$(sed -n 's/.*event=gen.stopped.* steps=\([0-9]*\).*/\1/p' "$tmp/gen1.log")
"$bin/microviewctl" dump "$p1" >"$tmp/dump.txt" 2>&1
check "microviewctl dump reads the writer's final count ($steps)" \
  grep -q "^counter *gen_requests_total{worker=\"0\"} ${steps:-x} " "$tmp/dump.txt"
final() {
  curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/scrape.txt" 2>/dev/null &&
    grep -q "^gen_requests_total{service=\"u1000\",worker=\"0\"} ${steps:-x}\$" "$tmp/scrape.txt"
}
check "the collector serves the writer's final count ($steps)" wait_for 10 final
as 4242 "$ctl" gen --segment "$p1" --duration 1 --counters 1 --gauges 0 --histograms 0 \
  >/dev/null 2>"$tmp/gen4242.log"
check "another user (4242) cannot open it" grep -q 'event=gen.open_failed' "$tmp/gen4242.log"

# gen leasing its own segment from the agent (create + open in one process).
as 1000 "$ctl" gen --agent "$sock" --duration 1 --rate 20 --counters 1 --gauges 0 \
  --histograms 0 2>"$tmp/gen2.log"
check "uid 1000: gen --agent opens the segment it leased" grep -q 'event=gen.stopped' "$tmp/gen2.log"

# --- Explicit owners -----------------------------------------------------------------------
n0=$(nsegs)
as 1000 "$ctl" create --agent "$sock" --owner-uid 2000 >"$tmp/c2.out" 2>"$tmp/c2.err"
rc=$?
check "uid 1000 naming uid 2000: refused (exit $rc)" test "$rc" = 1
check "  with a clear error naming owner_uid" \
  grep -q 'refused by the agent.*owner_uid 2000: a caller running as uid 1000' "$tmp/c2.err"
as 1000 "$ctl" create --agent "$sock" --owner-gid 0 >"$tmp/c3.out" 2>"$tmp/c3.err"
rc=$?
check "uid 1000 naming gid 0: refused (exit $rc) naming owner_gid" \
  test "$rc" = 1 -a -n "$(grep 'owner_gid 0' "$tmp/c3.err")"
check "  the refusals created nothing" test "$(nsegs)" = "$n0"
check "  and are logged" grep -q 'event=segment.create_refused field=owner_uid requested=2000' \
  "$tmp/agent.log"
as 1000 "$ctl" create --agent "$sock" --owner-uid 1000 --owner-gid 1000 >"$tmp/c4.out" 2>&1
check "uid 1000 naming its own uid and gid: accepted" \
  test "$(owner_of "$(path_of "$tmp/c4.out")")" = "1000:1000 660"

"$ctl" create --agent "$sock" --owner-uid 1000 >"$tmp/c5.out" 2>&1
check "root naming uid 1000: owned 1000:0 mode 0660" \
  test "$(owner_of "$(path_of "$tmp/c5.out")")" = "1000:0 660"
"$ctl" create --agent "$sock" --owner-uid 1000 --owner-gid 1000 >"$tmp/c6.out" 2>&1
p6=$(path_of "$tmp/c6.out")
check "root naming uid and gid 1000: owned 1000:1000 mode 0660" \
  test "$(owner_of "$p6")" = "1000:1000 660"
as 1000 "$ctl" gen --segment "$p6" --duration 1 --rate 20 --counters 1 --gauges 0 \
  --histograms 0 2>"$tmp/gen6.log"
check "  and uid 1000 writes it" grep -q 'event=gen.stopped' "$tmp/gen6.log"
"$ctl" create --agent "$sock" >"$tmp/c7.out" 2>&1
check "root naming nothing: root:root mode 0660, as before" \
  test "$(owner_of "$(path_of "$tmp/c7.out")")" = "0:0 660"
"$ctl" create --agent "$sock" --owner-uid 4294967295 >/dev/null 2>"$tmp/c8.err"
check "--owner-uid out of range is refused by microviewctl itself" grep -q -- '--owner-uid' "$tmp/c8.err"

# --- Who may release a segment ------------------------------------------------------------
id_of() { sed -n 's/^id=//p' "$1"; }
listed() { "$ctl" list --agent "$sock" | grep -q "$1"; }
id1=$(id_of "$tmp/c1.out")
as 1001 "$ctl" release --agent "$sock" "$id1" >/dev/null 2>"$tmp/r1.err"
rc=$?
check "uid 1001 releasing uid 1000's segment: refused (exit $rc)" test "$rc" = 1
check "  the error names the segment and the rule ($(cat "$tmp/r1.err"))" \
  grep -q "segment $id1 belongs to uid 1000 .*a caller running as uid 1001 may release only the segments whose file it owns; only root may release another user's" \
  "$tmp/r1.err"
check "  the refusal is logged" \
  grep -q "event=segment.release_refused id=$id1 owner_uid=1000 caller_uid=1001" "$tmp/agent.log"
check "  the segment is still listed and its file still there" \
  test -f "$p1" -a -n "$(listed "$id1" && echo y)"
id4=$(id_of "$tmp/c4.out")
p4=$(path_of "$tmp/c4.out")
as 1000 "$ctl" release --agent "$sock" "$id4" 2>"$tmp/r4.err"
rc=$?
check "uid 1000 releases its own segment (exit $rc)" test "$rc" = 0 -a ! -e "$p4"
id7=$(id_of "$tmp/c7.out")
as 1000 "$ctl" release --agent "$sock" "$id7" >/dev/null 2>"$tmp/r7.err"
check "uid 1000 cannot release root's segment" grep -q "belongs to uid 0" "$tmp/r7.err"
"$ctl" release --agent "$sock" "$id1"
rc=$?
check "root releases uid 1000's segment (exit $rc)" test "$rc" = 0 -a ! -e "$p1"

# The rule follows the file's owner, which outlives the agent: after a restart uid 1001 is still
# refused uid 1000's segment, and uid 1000 may release it.
id6=$(id_of "$tmp/c6.out")
kill "$agent"
wait "$agent"
start_agent "$tmp/agent2.log" --socket-mode 0666 || exit 1
as 1001 "$ctl" release --agent "$sock" "$id6" >/dev/null 2>"$tmp/r6a.err"
check "after a restart: uid 1001 is still refused uid 1000's segment" \
  grep -q "segment $id6 belongs to uid 1000" "$tmp/r6a.err"
as 1000 "$ctl" release --agent "$sock" "$id6" 2>"$tmp/r6b.err"
rc=$?
check "after a restart: uid 1000 releases it (exit $rc)" test "$rc" = 0 -a ! -e "$p6"
kill "$agent"
wait "$agent"

# --- --socket-group: the socket belongs to a group; members reach it, others do not ----------
grp=users # gid 100 on Debian
getent group "$grp" >/dev/null || grp=100
gid=$(getent group "$grp" | cut -d: -f3)
gid=${gid:-100}
start_agent "$tmp/agent3.log" --socket-mode 0660 --socket-group "$grp" || exit 1
sockfile=$tmp/segs/agent.sock
check "--socket-group $grp --socket-mode 0660: the socket is 0:$gid 660 (got $(stat -c '%u:%g %a' "$sockfile"))" \
  test "$(stat -c '%u:%g %a' "$sockfile")" = "0:$gid 660"
check "  and agent.started logs them" \
  grep -q "event=agent.started .*socket_mode=0660 socket_mode_from=flag socket_gid=$gid socket_group=$grp" \
  "$tmp/agent3.log"
member() { setpriv --reuid 1000 --regid 1000 --groups "$gid" -- "$@"; }
member "$ctl" create --agent "$sock" --label service=grp >"$tmp/g1.out" 2>&1
check "a member of the group (uid 1000) reaches the socket and creates its own segment" \
  test "$(owner_of "$(path_of "$tmp/g1.out")")" = "1000:1000 660"
as 1001 "$ctl" list --agent "$sock" >/dev/null 2>"$tmp/g2.err"
check "uid 1001, not in the group, cannot connect" grep -q "not reachable" "$tmp/g2.err"
rm -f "$sockfile"
recreated() { grep -q 'event=agent.socket_recreated' "$tmp/agent3.log" && test -S "$sockfile"; }
check "the agent recreates a deleted socket" wait_for 5 recreated
check "  with the same group and mode (got $(stat -c '%u:%g %a' "$sockfile"))" \
  test "$(stat -c '%u:%g %a' "$sockfile")" = "0:$gid 660"
check "  logged" grep -q "event=agent.socket_recreated .*mode=0660 uid=0 gid=$gid" "$tmp/agent3.log"
check "  and the group member still reaches it" \
  sh -c "setpriv --reuid 1000 --regid 1000 --groups $gid -- '$ctl' list --agent '$sock' | grep -q service=grp"

echo "agent_owner: $passes passed, $fails failed"
[ "$fails" = 0 ]
