#!/usr/bin/env bash
# Integration: bad command lines are refused with a reason, exit code 2, and nothing started:
# abbreviated long options, out-of-range or malformed listen addresses; token files that cannot
# be read say why.
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
check "agent: --list is not taken for --listen" \
  refused "unknown option --list (did you mean --listen?)" \
  "$bin/microview-agent" --standalone --dir "$tmp/a" --list 127.0.0.1:0
check "agent: a port above 65535 is refused" \
  refused "PORT 0..65535" "$bin/microview-agent" --standalone --dir "$tmp/a" --listen 127.0.0.1:99999
check "agent: a listen address without a port is refused" \
  refused "want HOST:PORT" "$bin/microview-agent" --standalone --dir "$tmp/a" --listen nonsense
check "microviewctl: --jso is not taken for --json" \
  refused "unknown option --jso (did you mean --json?)" "$bin/microviewctl" list --jso
check "webhook: --list is not taken for --listen" \
  refused "unknown option --list (did you mean --listen?)" "$bin/microview-webhook" --list :8443

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
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
