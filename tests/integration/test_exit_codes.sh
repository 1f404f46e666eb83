#!/usr/bin/env bash
# Integration: every binary's exit status says whether it started and stopped cleanly. A start
# that fails (a port taken, an agent address the transport cannot use, a state directory that
# cannot exist, a certificate that cannot be read, a configuration that cannot be loaded) exits
# non-zero, so that Kubernetes shows a crash (CrashLoopBackOff) rather than Completed; a SIGTERM
# after a complete start exits 0. Prints each binary's status.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

# status EXPECT DESC CMD...: runs CMD (10 s at most) and checks its exit status: "nonzero" or a
# number.
status() {
  local want=$1 desc=$2
  shift 2
  timeout 10 "$@" >"$tmp/out" 2>&1
  local rc=$?
  echo "  $desc: exit status $rc"
  if [ "$rc" -eq 124 ]; then
    fail "$desc: still running after 10 s"
  elif { [ "$want" = nonzero ] && [ "$rc" -ne 0 ]; } || [ "$rc" = "$want" ]; then
    pass "$desc"
  else
    fail "$desc: exit status $rc, want $want"
    sed 's/^/    /' "$tmp/out" | tail -5
  fi
}

# stops_clean DESC READY_CMD CMD...: starts CMD, waits (10 s) until READY_CMD succeeds, sends
# SIGTERM and wants exit status 0.
stops_clean() {
  local desc=$1 ready=$2
  shift 2
  "$@" >"$tmp/run.log" 2>&1 &
  local p=$!
  pids+=("$p")
  if ! wait_for 10 sh -c "$ready" >/dev/null 2>&1; then
    fail "$desc: not ready within 10 s"
    sed 's/^/    /' "$tmp/run.log" | tail -5
    kill "$p" 2>/dev/null
    return
  fi
  kill -TERM "$p"
  wait "$p"
  local rc=$?
  echo "  $desc: exit status $rc after SIGTERM"
  if [ "$rc" -eq 0 ]; then pass "$desc"; else
    fail "$desc: exit status $rc after SIGTERM, want 0"
    sed 's/^/    /' "$tmp/run.log" | tail -5
  fi
}

# A port someone else holds.
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True)
time.sleep(120)' >"$tmp/busy.port" &
pids+=("$!")
wait_for 5 test -s "$tmp/busy.port" || die "no helper listener"
busy=$(cat "$tmp/busy.port")
echo token-for-the-test >"$tmp/token"

# ---- microview-collector ------------------------------------------------------------------
status nonzero "collector: --transport verbs with an --agent that is not IP:PORT" \
  "$bin/microview-collector" --transport verbs --agent badagent --rdma-token-file "$tmp/token" \
  --listen 127.0.0.1:0
status nonzero "collector: --listen on a port already taken" \
  "$bin/microview-collector" --listen "127.0.0.1:$busy" --agent "unix:$tmp/none.sock"
status 2 "collector: an unknown flag" "$bin/microview-collector" --no-such-flag
port=$(free_port)
stops_clean "collector: SIGTERM after a complete start" \
  "grep -q event=collector.started '$tmp/run.log'" \
  "$bin/microview-collector" --listen "127.0.0.1:$port" --agent "unix:$tmp/none.sock"

# ---- microview-agent ------------------------------------------------------------------------
mkdir -p "$tmp/file"
: >"$tmp/file/x"
status nonzero "agent: a state directory that cannot be made" \
  "$bin/microview-agent" --standalone --dir "$tmp/file/x/segs"
# Plaintext chosen, so that the taken port is what stops the start (not the missing TLS).
status nonzero "agent: --listen on a port already taken" \
  "$bin/microview-agent" --standalone --dir "$tmp/a1" --listen "127.0.0.1:$busy" --insecure-listen
status nonzero "agent (Kubernetes mode): a configuration file that cannot be read" \
  "$bin/microview-agent" --config "$tmp/none.yaml"
stops_clean "agent: SIGTERM after a complete start" "test -S '$tmp/a2/agent.sock'" \
  "$bin/microview-agent" --standalone --dir "$tmp/a2"

# ---- microview-webhook ----------------------------------------------------------------------
status nonzero "webhook: a certificate file that cannot be read" \
  "$bin/microview-webhook" --listen "127.0.0.1:0" --tls-cert-file "$tmp/none.crt" \
  --tls-key-file "$tmp/none.key"
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
    -keyout "$tmp/tls.key" -out "$tmp/tls.crt" >/dev/null 2>&1 || die "openssl req failed"
  status nonzero "webhook: --listen on a port already taken" \
    "$bin/microview-webhook" --listen "127.0.0.1:$busy" --tls-cert-file "$tmp/tls.crt" \
    --tls-key-file "$tmp/tls.key"
  port=$(free_port)
  stops_clean "webhook: SIGTERM after a complete start" \
    "grep -q event=webhook.listening '$tmp/run.log'" \
    "$bin/microview-webhook" --listen "127.0.0.1:$port" --tls-cert-file "$tmp/tls.crt" \
    --tls-key-file "$tmp/tls.key"
else
  echo "NOTE: openssl missing: the webhook's busy-port and SIGTERM cases were not run"
fi

# ---- microviewctl ---------------------------------------------------------------------------
status nonzero "microviewctl list: an agent that is not there" \
  "$bin/microviewctl" list --agent "unix:$tmp/none.sock"
status nonzero "microviewctl top --once: a collector that is not there" \
  "$bin/microviewctl" top --once --collector "http://127.0.0.1:$(free_port)"
status 2 "microviewctl: an unknown command" "$bin/microviewctl" no-such-command

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
