#!/usr/bin/env bash
# Integration: a standalone agent (root) hands a created segment to its caller. A uid-1000
# `microviewctl create` gets a file owned 1000:1000, mode 0660, that `microviewctl gen
# --segment` running as uid 1000 writes and the collector and `microviewctl dump` read; other
# users cannot open it. Explicit owners: a uid-1000 caller naming another uid or gid is refused
# with the field named, root naming uid 1000 is obeyed, root naming nothing keeps root:root.
# The agent knows the caller from the kernel (SO_PEERCRED on its unix socket), not from the
# request. Needs root (agent as root, writers via setpriv); skips with 77 otherwise.
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

# The socket's mode is 0777 less the agent's umask: with 000 every local user may connect.
(
  umask 000
  exec "$bin/microview-agent" --standalone --dir "$tmp/segs" 2>"$tmp/agent.log"
) & pids+=("$!")
wait_for 5 test -S "$tmp/segs/agent.sock" || { cat "$tmp/agent.log"; exit 1; }
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

echo "agent_owner: $passes passed, $fails failed"
[ "$fails" = 0 ]
