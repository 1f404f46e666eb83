#!/usr/bin/env bash
# Integration: bad command lines are refused with a reason, exit code 2, and nothing started:
# abbreviated long options, out-of-range or malformed numbers, sizes and listen addresses; the
# same value means the same in every binary and mode (one set of parsers, mv_util.h); token files
# that cannot be read say why; `microviewctl gen` writes only logfmt events on stderr.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

refused() { # <expected message part> <binary> <args...>
  local want=$1; shift
  local out rc
  out=$(timeout 10 "$@" 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -qF -- "$want" <<<"$out" || { echo "  rc=$rc out=$out"; return 1; }
}
check "collector: --tick is not taken for --tick-ms" \
  refused "unknown option --tick (did you mean --tick-ms?)" "$bin/microview-collector" --tick 5
check "collector: --sketch-alpha out of range is refused with the range" \
  refused "--sketch-alpha: '0.7' is out of range: want a decimal number from 0.0001 to 0.5" "$bin/microview-collector" --sketch-alpha 0.7
check "collector: --sketch-alpha takes no hexadecimal float" \
  refused "--sketch-alpha: '0x1p-7' is not a decimal number" "$bin/microview-collector" --sketch-alpha 0x1p-7
check "microviewctl gen: --rate refuses a unit" \
  refused "--rate: '10hz' is not a decimal number" "$bin/microviewctl" gen --rate 10hz
check "microviewctl top: --interval below 0.1 is refused" \
  refused "--interval: '0.01' is out of range: want a decimal number from 0.1 to 3600" "$bin/microviewctl" top --interval 0.01
check "collector: --tick-workers out of range is refused" \
  refused "--tick-workers: '65' is out of range: want a whole number from 1 to 64" "$bin/microview-collector" --tick-workers 65
check "collector: --detect-ms over a minute is refused" \
  refused "--detect-ms: '60001' is out of range: want a whole number from 0 to 60000" "$bin/microview-collector" --detect-ms 60001
check "agent: --list is not taken for --listen" \
  refused "unknown option --list (did you mean --listen?)" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --list 127.0.0.1:0
check "agent: a port above 65535 is refused" \
  refused "PORT 0..65535" "$bin/microview-agent" --standalone --dir "$tmp/a" --listen 127.0.0.1:99999
check "agent: a listen address without a port is refused" \
  refused "want HOST:PORT" "$bin/microview-agent" --standalone --dir "$tmp/a" --listen nonsense
check "microviewctl: --jso is not taken for --json" \
  refused "unknown option --jso (did you mean --json?)" "$bin/microviewctl" list --jso
check "microviewctl create: --owner-pid takes a process id" \
  refused "--owner-pid: '0' is out of range: want a whole number from 1 to 2147483647" "$bin/microviewctl" create --owner-pid 0
check "webhook: --list is not taken for --listen" \
  refused "unknown option --list (did you mean --listen?)" "$bin/microview-webhook" --list :8443

# Refused after the flag under test was read: proof that its value was taken.
refused_later() { # <expected message part> <flag that must not be blamed> <binary> <args...>
  local want=$1 flag=$2; shift 2
  local out rc
  out=$(timeout 10 "$@" 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -qF -- "$want" <<<"$out" && ! grep -qF -- "$flag:" <<<"$out" ||
    { echo "  rc=$rc out=$out"; return 1; }
}
check "agent: --max-segment-size takes 64Mi" \
  refused_later "--require-rdma needs --rdma-listen" "--max-segment-size" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --max-segment-size 64Mi --require-rdma
check "collector: --max-body-bytes takes 64Mi" \
  refused_later "transport 'nope' is not available" "--max-body-bytes" \
  "$bin/microview-collector" --max-body-bytes 64Mi --transport nope
check "collector: --listen takes [::1]:PORT" \
  refused_later "transport 'nope' is not available" "--listen" \
  "$bin/microview-collector" --listen "[::1]:0" --transport nope
check "agent: a decimal size suffix is refused, naming the binary ones" \
  refused "--max-segment-size: '4k' is not a size: want bytes, or a whole number with Ki, Mi or Gi" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --max-segment-size 4k
check "agent (Kubernetes mode): the same size is refused with the same words" \
  refused "'4k' is not a size: want bytes, or a whole number with Ki, Mi or Gi" \
  "$bin/microview-agent" --pool-size 4k
check "webhook: the same size is refused with the same words" \
  refused "'4k' is not a size: want bytes, or a whole number with Ki, Mi or Gi" \
  "$bin/microview-webhook" --tls-cert-file x --tls-key-file y --page-size 4k
check "microviewctl gen: --size above 1Gi is refused with the range" \
  refused "--size: '2Gi' is out of range: want a size from 0 to 1Gi" "$bin/microviewctl" gen --size 2Gi
check "collector: a number with a unit is refused with the range" \
  refused "--tick-ms: '10ms' is not a whole number: want a whole number from 1 to 60000" \
  "$bin/microview-collector" --tick-ms 10ms
check "collector: a signed number is refused" \
  refused "--quarantine-after-ms: '-0' is not a whole number" \
  "$bin/microview-collector" --quarantine-after-ms -0
check "collector: --rdma-port 0 is refused with the range" \
  refused "--rdma-port: '0' is out of range: want a whole number from 1 to 65535" \
  "$bin/microview-collector" --rdma-port 0
check "microviewctl top: --limit that is not a number is refused" \
  refused "--limit: 'x' is not a whole number" "$bin/microviewctl" top --limit x
check "collector: a port above 65535 is refused" \
  refused "PORT 0..65535" "$bin/microview-collector" --listen "127.0.0.1:99999"
check "collector: an unbracketed IPv6 address is refused, not split at its last colon" \
  refused "an IPv6 address goes in brackets" "$bin/microview-collector" --listen "::1:9469"
check "agent (Kubernetes mode): listen reads like --listen" \
  refused "listen: '127.0.0.1:99999': the port is above 65535" \
  "$bin/microview-agent" --listen 127.0.0.1:99999
check "agent: --socket-mode 999 is refused: not octal" \
  refused "--socket-mode: '999' is not an octal mode: want permission bits as octal digits 0-7, 0000 to 0777, e.g. 0660" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --socket-mode 999
check "agent: --socket-mode rw is refused: symbolic modes are not taken" \
  refused "--socket-mode: 'rw' is not an octal mode" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --socket-mode rw
check "agent: --socket-mode 4755 is refused: permission bits only" \
  refused "--socket-mode: '4755' is out of range: want permission bits as octal digits 0-7, 0000 to 0777" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --socket-mode 4755
check "agent: --socket-group naming no group is refused" \
  refused "--socket-group: 'no-such-group-mv' is not a group on this host: want a group name (getent group) or a numeric gid" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --socket-group no-such-group-mv
check "agent: --socket-group out of range is refused" \
  refused "--socket-group: '4294967295' is out of range" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --socket-group 4294967295
check "agent (Kubernetes mode): --socket-mode is a standalone flag" \
  refused "--socket-mode is a --standalone flag: the Kubernetes mode's socket is for root only" \
  "$bin/microview-agent" --socket-mode 0666
check "agent: --socket-mode takes 0660 and --socket-group a numeric gid" \
  refused_later "--require-rdma needs --rdma-listen" "--socket-mode" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --socket-mode 0660 --socket-group 4242 --require-rdma
echo flags-test-token >"$tmp/token"
check "agent: --rdma-listen port 0 is refused" \
  refused "--rdma-listen: '10.0.0.5:0': port 0 is not taken here; want HOST[:PORT] with PORT 1..65535" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --rdma-listen 10.0.0.5:0 --token-file "$tmp/token"
check "webhook: a port alone is refused, showing :PORT" \
  refused "a port alone is written with a colon, :PORT" \
  "$bin/microview-webhook" --tls-cert-file x --tls-key-file y --listen 8443

# Token files: a path that cannot be read says so and why, never that the token is too long.
cant_read() { # <why> <binary> <args...>
  local why=$1; shift
  local out rc
  out=$(timeout 10 "$@" 2>&1); rc=$?
  [ "$rc" -ne 0 ] && grep -qF -- "cannot read token file" <<<"$out" && grep -qF -- "$why" <<<"$out" &&
    ! grep -q "characters" <<<"$out" || { echo "  rc=$rc out=$out"; return 1; }
}
for path in /nonexistent "$tmp"; do
  why="No such file or directory"
  [ "$path" = "$tmp" ] && why="Is a directory"
  check "agent --token-file $path: $why" \
    cant_read "$why" "$bin/microview-agent" --standalone --dir "$tmp/a" --token-file "$path"
  check "collector --rdma-token-file $path: $why" \
    cant_read "$why" "$bin/microview-collector" --transport verbs --agent 127.0.0.1:1 \
    --rdma-token-file "$path"
  check "microviewctl list --token-file $path: $why" \
    cant_read "$why" "$bin/microviewctl" list --agent 127.0.0.1:1 --token-file "$path"
done
check "nothing was created by the refused agents" test ! -e "$tmp/a/agent.sock"

# Sizes with units reach the agent: --max-segment-size 1Mi, and segments of 1Mi but not 2Mi.
"$bin/microview-agent" --standalone --dir "$tmp/s" --max-segment-size 1Mi 2>"$tmp/agent.log" &
pids+=($!)
check "agent started with --max-segment-size 1Mi" wait_for 10 test -S "$tmp/s/agent.sock"
check "microviewctl create --size 1Mi gets 1048576 bytes" \
  grep -qx "size=1048576" <(timeout 10 "$bin/microviewctl" create --agent "unix:$tmp/s/agent.sock" --size 1Mi)
check "microviewctl create --size 2Mi is refused by the agent" \
  bash -c '! timeout 10 "$0" create --agent "unix:$1" --size 2Mi 2>/dev/null' \
  "$bin/microviewctl" "$tmp/s/agent.sock"

# microviewctl gen: every line on stderr is one logfmt event, failures included; stdout is empty.
all_logfmt() { # <file>
  [ -s "$1" ] && ! grep -qv '^ts=[^ ]* level=[a-z]* comp=microviewctl event=[a-z._]*\( \|$\)' "$1" ||
    { echo "  $(cat "$1")"; return 1; }
}
gen_logs() { # <name> <gen args...>: runs gen, stderr to $tmp/<name>.err; stdout must be empty
  local name=$1; shift
  local out
  out=$(timeout 10 "$bin/microviewctl" gen "$@" 2>"$tmp/$name.err")
  [ -z "$out" ] || { echo "  stdout: $out"; return 1; }
}
gen_logs ok --agent "unix:$tmp/s/agent.sock" --size 64Ki --duration 0.2 --label service=flags
check "gen: a run logs only logfmt events" all_logfmt "$tmp/ok.err"
check "gen: a run logs gen.started and gen.stopped" \
  bash -c 'grep -q "event=gen.started" "$0" && grep -q "event=gen.stopped" "$0"' "$tmp/ok.err"
gen_logs lease --agent "unix:$tmp/none/agent.sock" --duration 0.2
check "gen: an unreachable agent is one logfmt event" all_logfmt "$tmp/lease.err"
check "gen: ... named gen.lease_failed" grep -q "event=gen.lease_failed" "$tmp/lease.err"
gen_logs open --segment "$tmp/none/segment" --duration 0.2
check "gen: a segment that cannot be opened is one logfmt event" all_logfmt "$tmp/open.err"
check "gen: ... named gen.open_failed" grep -q "event=gen.open_failed" "$tmp/open.err"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
