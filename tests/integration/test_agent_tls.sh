#!/usr/bin/env bash
# Integration: the agent's TCP control plane over TLS (gRPC core's credentials) and its token
# scopes, with a test CA made here by openssl: the right CA connects, a wrong CA or plaintext
# is refused, a required client certificate is enforced; the read token lists and watches but
# cannot create or release (PERMISSION_DENIED naming the scope), the admin token can; plaintext
# TCP must be chosen explicitly.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "SKIPPED: openssl not installed"; exit 77; }

# ---- Test PKI: a CA, the agent's certificate (agent.test, 127.0.0.1), a client CA and client
# certificate, and an unrelated CA.
pki=$tmp/pki
mkdir -p "$pki"
mkca() { # <name>
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.pem" -days 2 \
    -subj "/CN=$1" >/dev/null 2>&1
}
mkcert() { # <name> <ca> <extension lines>
  openssl req -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.csr" \
    -subj "/CN=$1" >/dev/null 2>&1 &&
    printf '%s\n' "$3" >"$pki/$1.ext" &&
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$2.pem" -CAkey "$pki/$2.key" \
      -CAcreateserial -out "$pki/$1.pem" -days 2 -extfile "$pki/$1.ext" >/dev/null 2>&1
}
mkca ca && mkca other-ca && mkca client-ca &&
  mkcert agent ca "subjectAltName=DNS:agent.test,IP:127.0.0.1
extendedKeyUsage=serverAuth" &&
  mkcert collector client-ca "extendedKeyUsage=clientAuth" ||
  { echo "FAIL: openssl could not make the test certificates"; exit 1; }
echo "read-tok-81f2" >"$tmp/read.tok"
echo "admin-tok-5d0c" >"$tmp/admin.tok"

start_agent() { # <name> <args...>: sets $port
  local name=$1
  shift
  "$bin/microview-agent" --standalone --dir "$tmp/$name" --listen 127.0.0.1:0 "$@" \
    2>"$tmp/$name.log" &
  pids+=($!)
  wait_for 5 grep -q 'tcp_port=[1-9]' "$tmp/$name.log"
  port=$(sed -n 's/.*tcp_port=\([0-9]*\).*/\1/p' "$tmp/$name.log" | head -n 1)
  [ -n "$port" ] || { cat "$tmp/$name.log"; exit 1; }
}
ctl() { "$bin/microviewctl" "$@" 2>"$tmp/ctl.err"; }
tls=(--agent-ca "$pki/ca.pem" --agent-server-name agent.test)

# ---- Plaintext needs an explicit choice.
timeout 5 "$bin/microview-agent" --standalone --dir "$tmp/p" --listen 127.0.0.1:0 2>"$tmp/p.err"
rc=$?
check "--listen without TLS or --insecure-listen is refused (exit 2)" test "$rc" = 2
check "  the refusal names --tls-cert and --insecure-listen" \
  grep -q -- '--tls-cert.*--insecure-listen' "$tmp/p.err"
timeout 5 "$bin/microview-agent" --standalone --dir "$tmp/p" --listen 127.0.0.1:0 \
  --tls-cert "$pki/agent.pem" \
  2>"$tmp/p.err"
check "--tls-cert without --tls-key is refused" grep -q -- '--tls-key' "$tmp/p.err"
timeout 5 "$bin/microview-agent" --standalone --dir "$tmp/p" --listen 127.0.0.1:0 \
  --insecure-listen --token-file "$tmp/read.tok" --admin-token-file "$tmp/read.tok" 2>"$tmp/p.err"
check "the same file as read and admin token is refused" grep -q 'same token' "$tmp/p.err"

# ---- Agent A: TLS, read and admin tokens, client certificates not asked.
start_agent a --tls-cert "$pki/agent.pem" --tls-key "$pki/agent.key" \
  --token-file "$tmp/read.tok" --admin-token-file "$tmp/admin.tok"
a=127.0.0.1:$port
check "agent logs tls=on" grep -q 'event=agent.started.* tls=on' "$tmp/a.log"
check "list with the right CA and the read token" \
  ctl list --agent "$a" "${tls[@]}" --token-file "$tmp/read.tok"
check "list with the right CA, the IP in the certificate (no name override)" \
  ctl list --agent "$a" --agent-ca "$pki/ca.pem" --token-file "$tmp/read.tok"
ctl list --agent "$a" --agent-ca "$pki/other-ca.pem" --agent-server-name agent.test \
  --token-file "$tmp/read.tok"
rc=$?
check "a wrong CA is refused" test "$rc" != 0
check "  with a reason naming TLS and the agent" grep -q 'not reachable.*TLS' "$tmp/ctl.err"
ctl list --agent "$a" --token-file "$tmp/read.tok"
rc=$?
check "a plaintext client against the TLS listener is refused" test "$rc" != 0
check "  with a reason naming TLS" grep -q 'TLS' "$tmp/ctl.err"
ctl list --agent "$a" "${tls[@]}"
rc=$?
check "no token over TLS: refused (UNAUTHENTICATED)" \
  bash -c "[ $rc != 0 ] && grep -qi 'token' '$tmp/ctl.err'"

# Token scopes.
ctl create --agent "$a" "${tls[@]}" --token-file "$tmp/read.tok" --size 4096
rc=$?
check "read token: create refused" test "$rc" != 0
check "  PERMISSION_DENIED naming the admin scope" \
  grep -q 'CreateSegment needs the admin scope' "$tmp/ctl.err"
out=$(ctl create --agent "$a" "${tls[@]}" --token-file "$tmp/admin.tok" --size 4096)
id=$(sed -n 's/^id=//p' <<<"$out")
check "admin token: create OK" test -n "$id"
ctl release --agent "$a" "${tls[@]}" --token-file "$tmp/read.tok" "$id"
rc=$?
check "read token: release refused" test "$rc" != 0
check "  PERMISSION_DENIED naming the admin scope" \
  grep -q 'ReleaseSegment needs the admin scope' "$tmp/ctl.err"
check "agent logs the refusal" grep -q 'event=rpc.permission_denied.*scope=read' "$tmp/a.log"
check "read token: the segment is listed" \
  bash -c "'$bin/microviewctl' list --agent '$a' --agent-ca '$pki/ca.pem' \
    --agent-server-name agent.test --token-file '$tmp/read.tok' | grep -q '$id'"

# Watch with the read token and the status codes, from grpcio (not our client).
watch() { # <ca> <token|-> <secure 1|0>: prints OK (one event) or the status name
  /usr/bin/python3 - "$port" "$1" "$2" "$3" <<'PY'
import sys, grpc
port, ca, tok, secure = sys.argv[1:]
if secure == "1":
    creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
    ch = grpc.secure_channel("127.0.0.1:" + port, creds,
                             options=[("grpc.ssl_target_name_override", "agent.test")])
else:
    ch = grpc.insecure_channel("127.0.0.1:" + port)
f = ch.unary_stream("/microview.v1.Agent/WatchSegments",
                    request_serializer=lambda x: x, response_deserializer=lambda x: x)
md = [] if tok == "-" else [("authorization", "Bearer " + tok)]
try:
    for _ in f(b"", metadata=md, timeout=5):
        print("OK")
        break
except grpc.RpcError as e:
    print(e.code().name)
PY
}
if /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
  check "read token: WatchSegments streams" test "$(watch "$pki/ca.pem" read-tok-81f2 1)" = OK
  check "plaintext grpcio against TLS: UNAVAILABLE" \
    test "$(watch "$pki/ca.pem" read-tok-81f2 0)" = UNAVAILABLE
  check "wrong CA (grpcio): UNAVAILABLE" \
    test "$(watch "$pki/other-ca.pem" read-tok-81f2 1)" = UNAVAILABLE
else
  echo "  (grpcio not installed: the watch checks are not run)"
fi
check "admin token: release OK" \
  ctl release --agent "$a" "${tls[@]}" --token-file "$tmp/admin.tok" "$id"

# ---- Agent B: client certificates required (mutual TLS), no tokens.
start_agent b --tls-cert "$pki/agent.pem" --tls-key "$pki/agent.key" \
  --tls-client-ca "$pki/client-ca.pem" --tls-require-client-cert
b=127.0.0.1:$port
ctl list --agent "$b" "${tls[@]}"
rc=$?
check "client certificate required and missing: refused" test "$rc" != 0
check "  with a reason naming the client certificate flags" grep -q -- '--agent-cert' "$tmp/ctl.err"
ctl list --agent "$b" "${tls[@]}" --agent-cert "$pki/agent.pem" --agent-key "$pki/agent.key"
rc=$?
check "a client certificate from another CA: refused" test "$rc" != 0
check "client certificate signed by --tls-client-ca: list OK" \
  ctl list --agent "$b" "${tls[@]}" --agent-cert "$pki/collector.pem" \
  --agent-key "$pki/collector.key"

# ---- The collector follows agent B's catalog over mutual TLS.
"$bin/microviewctl" create --agent "unix:$tmp/b/agent.sock" --size 4096 --label app=tls \
  >/dev/null 2>&1
hport=$(free_port)
"$bin/microview-collector" --agent "$b" --listen "127.0.0.1:$hport" --tick-ms 20 \
  --agent-ca "$pki/ca.pem" --agent-server-name agent.test --agent-cert "$pki/collector.pem" \
  --agent-key "$pki/collector.key" 2>"$tmp/coll.log" &
pids+=($!)
check "collector with the right CA and client certificate syncs the catalog" \
  wait_for 10 grep -q 'event=agent.synced.*segments=1' "$tmp/coll.log"
: >"$tmp/coll2.log"
"$bin/microview-collector" --agent "$b" --listen "127.0.0.1:$(free_port)" --tick-ms 20 \
  --agent-ca "$pki/other-ca.pem" --agent-server-name agent.test \
  --agent-cert "$pki/collector.pem" --agent-key "$pki/collector.key" 2>"$tmp/coll2.log" &
pids+=($!)
check "collector with a wrong CA: agent.unreachable naming TLS" \
  wait_for 10 grep -q 'event=agent.unreachable.*TLS' "$tmp/coll2.log"
check "  and it never syncs" bash -c "! grep -q 'event=agent.synced' '$tmp/coll2.log'"
echo "agent_tls: $passes passed, $fails failed"
[ "$fails" = 0 ]
