#!/usr/bin/env bash
# Integration: the agent's TCP control plane with --token-file refuses calls without the right
# "authorization: Bearer <token>" metadata and accepts the right one; the unix socket stays open.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

echo "  tok-3b9e1  " >"$tmp/token"
"$bin/microview-agent" --standalone --dir "$tmp/segs" --listen 127.0.0.1:0 --insecure-listen \
  --token-file "$tmp/token" 2>"$tmp/agent.log" & pids+=($!)
wait_for 5 grep -q 'tcp_port=[1-9]' "$tmp/agent.log"
port=$(sed -n 's/.*tcp_port=\([0-9]*\).*/\1/p' "$tmp/agent.log" | head -n 1)
[ -n "$port" ] || { cat "$tmp/agent.log"; exit 1; }

call() { # <metadata token or "-"> : prints the gRPC status code name of ListSegments
  /usr/bin/python3 - "$port" "$1" <<'PY'
import sys, grpc
port, tok = sys.argv[1], sys.argv[2]
ch = grpc.insecure_channel("127.0.0.1:" + port)
f = ch.unary_unary("/microview.v1.Agent/ListSegments",
                   request_serializer=lambda x: x, response_deserializer=lambda x: x)
md = [] if tok == "-" else [("authorization", tok)]
try:
    f(b"", metadata=md, timeout=5)
    print("OK")
except grpc.RpcError as e:
    print(e.code().name)
PY
}
check "no token: UNAUTHENTICATED" test "$(call -)" = UNAUTHENTICATED
check "wrong token: UNAUTHENTICATED" test "$(call 'Bearer tok-3b9e2')" = UNAUTHENTICATED
check "token without the Bearer scheme: UNAUTHENTICATED" test "$(call 'tok-3b9e1')" = UNAUTHENTICATED
check "right token (file whitespace trimmed): OK" test "$(call 'Bearer tok-3b9e1')" = OK
check "agent logs refused calls with the peer" grep -q 'event=rpc.unauthenticated.*peer=' "$tmp/agent.log"
check "unix socket callers need no token" "$bin/microviewctl" list --agent "unix:$tmp/segs/agent.sock"
check "microviewctl list over TCP with --token-file" \
  "$bin/microviewctl" list --agent "127.0.0.1:$port" --token-file "$tmp/token"
"$bin/microviewctl" list --agent "127.0.0.1:$port" >/dev/null 2>"$tmp/ctl.err"
check "microviewctl list over TCP without the token is refused with a reason" \
  grep -qi 'unauthenticated\|token' "$tmp/ctl.err"
check "--rdma-listen without --token-file is refused" \
  bash -c "! '$bin/microview-agent' --standalone --dir '$tmp/x' --rdma-listen 127.0.0.1 2>/dev/null"
echo "agent_token: $passes passed, $fails failed"
[ "$fails" = 0 ]
