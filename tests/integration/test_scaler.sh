#!/usr/bin/env bash
# Integration: the microview-scaler binary. Bad flags exit 2 naming the flag; --help exits 0;
# started on loopback (API server from --api-server, nothing needed at start) it logs
# scaler.started with its ports, serves /healthz and /metrics (its own families), and stops on
# SIGTERM with status 0. With --tls-*, gRPC over TLS reaches it, and with --tls-client-ca-file
# only with a client certificate: microviewctl serves as a gRPC client there (its call is another
# service's method, so a reached scaler answers UNIMPLEMENTED, "does not implement it").
# The scaler's own calls are the unit test's (test_scaler_service, a real gRPC client).
set -uo pipefail
. "$(dirname "$0")/lib.sh"

s=$bin/microview-scaler
[ -x "$s" ] || die "no $s: build first"

bad() { # <flag> <args...>: exit status 2 and the flag named on stderr
  local flag=$1 rc
  shift
  "$s" "$@" >/dev/null 2>"$tmp/bad.err"
  rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q -- "$flag" "$tmp/bad.err"; then
    echo "rc=$rc"
    cat "$tmp/bad.err"
    return 1
  fi
}
check "--workers 0 is refused, naming the flag" bad --workers --workers 0
check "--max-pending x is refused" bad --max-pending --max-pending x
check "--listen without a port is refused" bad --listen --listen 127.0.0.1
check "--stream-interval-ms 5 is below its range" bad --stream-interval-ms --stream-interval-ms 5
check "an unknown flag is refused" bad --bogus --bogus
check "--tls-cert-file without its key is refused" bad --tls-key-file \
  --tls-cert-file /nonexistent --api-server http://127.0.0.1:1
check "--tls-client-ca-file without TLS is refused" bad --tls-client-ca-file \
  --tls-client-ca-file /nonexistent --api-server http://127.0.0.1:1
check "--api-server ftp:// is refused" bad --api-server --api-server ftp://x
check "outside a pod without --api-server it says so" env -u KUBERNETES_SERVICE_HOST \
  bash -c "\"$s\" 2>\"$tmp/nopod.err\"; [ \$? -eq 2 ] && grep -q -- '--api-server' \"$tmp/nopod.err\""
check "--help exits 0 and lists --max-pending" bash -c "\"$s\" --help | grep -q -- --max-pending"

gport=$(free_port)
mport=$(free_port)
"$s" --listen "127.0.0.1:$gport" --metrics-listen "127.0.0.1:$mport" \
  --api-server http://127.0.0.1:1 --api-token-file /nonexistent --collector-namespace microview \
  2>"$tmp/scaler.log" &
spid=$!
pids+=("$spid")
check "it logs scaler.started with its ports" wait_for --what scaler.started 10 \
  grep -q "event=scaler.started grpc_port=$gport metrics_port=$mport" "$tmp/scaler.log"
check "/healthz answers ok" \
  wait_for --what /healthz 5 bash -c "curl -sf http://127.0.0.1:$mport/healthz | grep -qx ok"
curl -sf "http://127.0.0.1:$mport/metrics" >"$tmp/metrics.txt"
check "/metrics has its families" \
  grep -q '^microview_scaler_rejected_calls_total{limit="max_pending"} 0$' "$tmp/metrics.txt"
check "/metrics has the streams gauge" grep -q '^microview_scaler_streams_open 0$' "$tmp/metrics.txt"
check "the gRPC port listens" bash -c "exec 3<>/dev/tcp/127.0.0.1/$gport"
kill -TERM "$spid"
wait "$spid"
rc=$?
check "SIGTERM: exit status 0" test "$rc" -eq 0
check "SIGTERM: scaler.stopping logged" grep -q 'event=scaler.stopping' "$tmp/scaler.log"
check "no error logged" bash -c "! grep -q 'level=error' \"$tmp/scaler.log\""

# ---- TLS on the gRPC port (openssl makes a test CA, a server and a client certificate) ----
if ! command -v openssl >/dev/null; then
  echo "SKIPPED: TLS on the gRPC port (openssl not installed)"
  if [ -n "${MV_TEST_SKIP_LOG:-}" ]; then
    echo "test_scaler.sh: SKIPPED: TLS on the gRPC port (openssl not installed)" \
      >>"$MV_TEST_SKIP_LOG"
  fi
else
  pki=$tmp/pki
  mkdir -p "$pki"
  mk() { # <name> <ca or -> <extensions>
    if [ "$2" = - ]; then
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.pem" \
        -days 2 -subj "/CN=$1" >/dev/null 2>&1
    else
      openssl req -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.csr" \
        -subj "/CN=$1" >/dev/null 2>&1 &&
        printf '%s\n' "$3" >"$pki/$1.ext" &&
        openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$2.pem" -CAkey "$pki/$2.key" \
          -CAcreateserial -out "$pki/$1.pem" -days 2 -extfile "$pki/$1.ext" >/dev/null 2>&1
    fi
  }
  mk ca - && mk scaler ca "subjectAltName=DNS:scaler.test,IP:127.0.0.1
extendedKeyUsage=serverAuth" && mk client ca "extendedKeyUsage=clientAuth" ||
    die "openssl could not make the test certificates"
  reach() { # <port> <microviewctl TLS args...>: a gRPC call over TLS gets an answer
    local port=$1
    shift
    "$bin/microviewctl" list --agent "127.0.0.1:$port" --agent-ca "$pki/ca.pem" "$@" \
      2>"$tmp/ctl.err"
    grep -q 'does not implement it' "$tmp/ctl.err" || { cat "$tmp/ctl.err"; return 1; }
  }
  unreached() { # <port> [args...]: the call fails before any answer
    local port=$1
    shift
    "$bin/microviewctl" list --agent "127.0.0.1:$port" "$@" 2>"$tmp/ctl.err"
    grep -q 'not reachable' "$tmp/ctl.err" || { cat "$tmp/ctl.err"; return 1; }
  }
  tport=$(free_port)
  "$s" --listen "127.0.0.1:$tport" --metrics-listen "127.0.0.1:0" --api-server http://127.0.0.1:1 \
    --tls-cert-file "$pki/scaler.pem" --tls-key-file "$pki/scaler.key" 2>"$tmp/tls.log" &
  pids+=($!)
  wait_for --what "TLS scaler.started" 10 grep -q 'event=scaler.started.*tls=1' "$tmp/tls.log"
  check "TLS: a client trusting the CA is answered over TLS" reach "$tport"
  check "TLS: a plaintext client gets no answer" unreached "$tport"
  cport=$(free_port)
  "$s" --listen "127.0.0.1:$cport" --metrics-listen "127.0.0.1:0" --api-server http://127.0.0.1:1 \
    --tls-cert-file "$pki/scaler.pem" --tls-key-file "$pki/scaler.key" \
    --tls-client-ca-file "$pki/ca.pem" 2>"$tmp/mtls.log" &
  pids+=($!)
  wait_for --what "mTLS scaler.started" 10 grep -q 'event=scaler.started.*tls=1' "$tmp/mtls.log"
  check "mTLS: a client certificate signed by the client CA is answered" \
    reach "$cport" --agent-cert "$pki/client.pem" --agent-key "$pki/client.key"
  check "mTLS: a client without a certificate gets no answer" \
    unreached "$cport" --agent-ca "$pki/ca.pem"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
