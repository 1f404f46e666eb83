#!/usr/bin/env bash
# microview-webhook over TLS on 127.0.0.1 with curl: a test CA and serving certificates made
# with openssl, laid out like a Kubernetes Secret volume (tls.crt -> ..data/tls.crt, ..data ->
# a timestamped directory). Checks /healthz, /mutate (patch, 415, 413, 405, 404), /metrics, a
# rotation to a pair from another CA (served without a restart), a bad pair that keeps the old
# one, logfmt logs, clean exit on SIGTERM, and the flag errors.
# Usage: tests/webhook/test_tls.sh BUILD_DIR      Exits 77 when openssl or curl is missing.
set -euo pipefail

build=${1:?usage: test_tls.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$build/bin/microview-webhook
# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$root/tests/lib/testlib.sh"
for tool in openssl curl; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[ -x "$bin" ] || { echo "FAIL: $bin not built" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mv-webhook-tls.XXXXXX")
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
# abort MSG: this script stops at its first failure: prints "FAIL: MSG" and the webhook's log
# on stderr and exits 1. (testlib's fail records a failure and goes on; pass records a success.)
abort() {
  echo "FAIL: $*" >&2
  [ -f "$work/log" ] && { echo "--- webhook log" >&2; tail -n 30 "$work/log" >&2; }
  exit 1
}

# ---- a CA and a serving certificate for 127.0.0.1 ----------------------------------------------
make_ca() { # NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$1" -keyout "$work/$1.key" -out "$work/$1.crt" 2>/dev/null
}
make_pair() { # CA DIR
  mkdir -p "$2"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=microview-webhook" \
    -keyout "$2/tls.key" -out "$work/csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$work/ext"
  openssl x509 -req -in "$work/csr" -CA "$work/$1.crt" -CAkey "$work/$1.key" -CAcreateserial \
    -days 1 -extfile "$work/ext" -out "$2/tls.crt" 2>/dev/null
}
make_ca ca1
make_ca ca2
secret=$work/secret
make_pair ca1 "$secret/..2026_01_01_v1"
ln -s ..2026_01_01_v1 "$secret/..data"
ln -s ..data/tls.crt "$secret/tls.crt"
ln -s ..data/tls.key "$secret/tls.key"
swap() { # the atomic symlink swap the kubelet does for Secret volumes
  ln -s "$1" "$secret/..data_tmp"
  mv -T "$secret/..data_tmp" "$secret/..data"
}

# ---- flags: clear errors, exit 2 -----------------------------------------------------------------
flag_error() { # EXPECTED-SUBSTRING ARGS...
  local want=$1 out rc=0
  shift
  out=$("$bin" "$@" 2>&1) || rc=$?
  [ "$rc" = 2 ] || abort "microview-webhook $*: exit $rc, want 2 ($out)"
  grep -qF -- "$want" <<<"$out" || abort "microview-webhook $*: no \"$want\" in: $out"
}
certs=(--tls-cert-file "$secret/tls.crt" --tls-key-file "$secret/tls.key")
flag_error "--page-size 1000" "${certs[@]}" --page-size 1000
flag_error "--page-size 4k" "${certs[@]}" --page-size 4k
flag_error "--max-pages-per-pod 0" "${certs[@]}" --max-pages-per-pod 0
flag_error "--max-pages-per-pod -5" "${certs[@]}" --max-pages-per-pod -5
flag_error "--listen 8443" "${certs[@]}" --listen 8443
flag_error "--resource-name metrics" "${certs[@]}" --resource-name metrics
flag_error "--log-level loud" "${certs[@]}" --log-level loud
flag_error "--tls-cert-file" --tls-key-file "$secret/tls.key"
flag_error "unknown option --pages" "${certs[@]}" --pages 4
flag_error "--config $work/none.yaml" "${certs[@]}" --config "$work/none.yaml"
printf 'page_size: 3000\n' >"$work/bad.yaml"
flag_error "page_size 3000" "${certs[@]}" --config "$work/bad.yaml"
"$bin" --help | grep -q -- --max-pages-per-pod || abort "--help does not list the flags"
pass "flag errors exit 2 and name the flag"

# A key that does not match the certificate is refused at start.
mkdir -p "$work/mismatch" && cp "$secret/tls.crt" "$work/mismatch/" && cp "$work/ca2.key" "$work/mismatch/tls.key"
rc=0
"$bin" --listen 127.0.0.1:0 --tls-cert-file "$work/mismatch/tls.crt" \
  --tls-key-file "$work/mismatch/tls.key" >"$work/mismatch.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q 'event=tls.load_failed' "$work/mismatch.log" ||
  abort "a mismatched key pair was not refused at start (exit $rc)"
pass "mismatched key pair refused at start"

# ---- start ---------------------------------------------------------------------------------------
printf 'page_size: 8Ki\npool_size: 1Mi\n' >"$work/agent.yaml"
"$bin" --listen 127.0.0.1:0 "${certs[@]}" --config "$work/agent.yaml" --log-level debug \
  >"$work/log" 2>&1 &
pid=$!
port=
listening() { # sets port once the webhook logged it; aborts when the webhook exited
  port=$(sed -n 's/.*event=webhook.listening .* port=\([0-9]*\) .*/\1/p' "$work/log" | head -n1)
  [ -n "$port" ] && return 0
  kill -0 "$pid" 2>/dev/null || abort "the webhook exited at start"
  return 1
}
wait_for 10 listening || true
[ -n "$port" ] || abort "the webhook did not log webhook.listening within 10 s"
grep -q 'page_size=8192 max_pages_per_pod=128' "$work/log" ||
  abort "--config did not give page_size 8Ki and pool_size/page_size pages per pod"
pass "listening on 127.0.0.1:$port with the agent's page_size and pool_size"
url=https://127.0.0.1:$port

[ "$(curl -sS --cacert "$work/ca1.crt" "$url/healthz")" = ok ] || abort "/healthz over TLS"
if curl -sS -o /dev/null --cacert "$work/ca2.crt" "$url/healthz" 2>/dev/null; then
  abort "a client trusting only ca2 accepted the ca1 certificate"
fi
pass "/healthz over TLS, verified against the test CA"

case_dir=$root/tests/data/webhook/cases/patch-64Ki
resp=$(curl -sS --cacert "$work/ca1.crt" -H 'Content-Type: application/json' \
  --data-binary @"$case_dir/request.json" "$url/mutate")
python3 - "$resp" <<'EOF' || abort "/mutate response: $resp"
import base64, json, sys
r = json.loads(sys.argv[1])
assert r["apiVersion"] == "admission.k8s.io/v1" and r["kind"] == "AdmissionReview", r
resp = r["response"]
assert resp["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002", resp
assert resp["allowed"] is True and resp["patchType"] == "JSONPatch", resp
patch = json.loads(base64.b64decode(resp["patch"]))
# 64Ki in pages of 8Ki (from --config)
assert patch == [{"op": "add", "path": "/spec/containers/0/resources",
                  "value": {"requests": {"microview.io/metrics": "8"},
                            "limits": {"microview.io/metrics": "8"}}}], patch
EOF
pass "POST /mutate patches 64Ki as 8 pages of 8 KiB"

resp=$(curl -sS --cacert "$work/ca1.crt" -H 'Content-Type: application/json; charset=utf-8' \
  --data-binary @"$root/tests/data/webhook/cases/denied-bad-unit-KB/request.json" "$url/mutate")
grep -qF '"allowed":false' <<<"$resp" && grep -qF 'microview.io/metrics-memory=\"64KB\"' <<<"$resp" ||
  abort "denial over HTTP: $resp"
pass "POST /mutate denies 64KB with a message naming the value"

code() { curl -sS -o /dev/null -w '%{http_code}' --cacert "$work/ca1.crt" "$@"; }
[ "$(code -H 'Content-Type: text/plain' --data-binary @"$case_dir/request.json" "$url/mutate")" = 415 ] ||
  abort "text/plain body was not refused with 415"
[ "$(code --data-binary @"$case_dir/request.json" -H 'Content-Type:' "$url/mutate")" = 415 ] ||
  abort "a body without Content-Type was not refused with 415"
head -c 1048577 /dev/zero | tr '\0' ' ' >"$work/big"
[ "$(code -H 'Content-Type: application/json' --data-binary @"$work/big" "$url/mutate")" = 413 ] ||
  abort "a 1 MiB + 1 body was not refused with 413"
[ "$(code -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' \
  --data-binary @"$work/big" "$url/mutate")" = 413 ] || abort "a chunked 1 MiB + 1 body was not refused with 413"
[ "$(code -H 'Content-Type: application/json' --data-binary 'nope' "$url/mutate")" = 400 ] ||
  abort "a non-JSON body was not refused with 400"
[ "$(code "$url/mutate")" = 405 ] || abort "GET /mutate was not refused with 405"
curl -sS -D - -o /dev/null --cacert "$work/ca1.crt" "$url/mutate" | grep -qi '^Allow: POST' ||
  abort "405 without Allow: POST"
curl -sS -D - -o /dev/null --cacert "$work/ca1.crt" -X POST "$url/healthz" |
  grep -qi '^Allow: GET, HEAD' || abort "POST /healthz: 405 without Allow: GET, HEAD"
[ "$(code "$url/nope")" = 404 ] || abort "an unknown path was not refused with 404"
pass "415 (content type), 413 (size, also chunked), 400, 405 and 404"

metric() { # NAME-WITH-LABELS
  curl -sS --cacert "$1" "$url/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
[ "$(metric "$work/ca1.crt" 'microview_webhook_admission_reviews_total{result="patched"}')" = 1 ] &&
  [ "$(metric "$work/ca1.crt" 'microview_webhook_admission_reviews_total{result="denied"}')" = 1 ] &&
  [ "$(metric "$work/ca1.crt" 'microview_webhook_admission_reviews_total{result="error"}')" = 1 ] ||
  abort "/metrics counters: $(curl -sS --cacert "$work/ca1.crt" "$url/metrics")"
if command -v promtool >/dev/null; then
  curl -sS --cacert "$work/ca1.crt" "$url/metrics" | promtool check metrics >"$work/promtool" 2>&1 ||
    abort "promtool check metrics: $(cat "$work/promtool")"
fi
pass "/metrics counts patched, denied and error reviews"
om=$(curl -sS -D "$work/om.hdr" --cacert "$work/ca1.crt" \
  -H 'Accept: application/openmetrics-text; version=1.0.0' "$url/metrics")
grep -qi '^content-type: application/openmetrics-text' "$work/om.hdr" &&
  [ "$(tail -n1 <<<"$om")" = "# EOF" ] &&
  grep -qF 'microview_webhook_admission_reviews_total{result="patched"} 1' <<<"$om" ||
  abort "/metrics as OpenMetrics: $(cat "$work/om.hdr") $om"
pass "/metrics negotiates OpenMetrics (the collector's exposition writer)"

# ---- rotation: a new pair from another CA, swapped in like a Secret update -----------------------
make_pair ca2 "$secret/..2026_01_02_v2"
swap ..2026_01_02_v2
serves_for() { curl -sS -o /dev/null --cacert "$1" "$url/healthz" 2>/dev/null; } # CA_FILE
wait_for 10 serves_for "$work/ca2.crt" || abort "the rotated certificate (ca2) was not served within 10 s"
kill -0 "$pid" || abort "the webhook is not running after the rotation"
if curl -sS -o /dev/null --cacert "$work/ca1.crt" "$url/healthz" 2>/dev/null; then
  abort "the old certificate (ca1) is still served after the rotation"
fi
[ "$(metric "$work/ca2.crt" 'microview_webhook_tls_reloads_total{result="ok"}')" = 1 ] ||
  abort "tls_reloads_total{result=\"ok\"} is not 1"
grep -q 'event=tls.reloaded' "$work/log" || abort "no tls.reloaded log line"
pass "rotated key pair served without a restart (same pid $pid)"

# ---- a bad pair (key of another certificate) keeps the current one -------------------------------
mkdir -p "$secret/..2026_01_03_v3"
make_pair ca1 "$work/other"
cp "$work/other/tls.crt" "$secret/..2026_01_03_v3/tls.crt"
cp "$secret/..2026_01_02_v2/tls.key" "$secret/..2026_01_03_v3/tls.key"
swap ..2026_01_03_v3
reload_failed() { [ "$(metric "$work/ca2.crt" 'microview_webhook_tls_reloads_total{result="error"}')" = 1 ]; }
wait_for 10 reload_failed || abort "the bad pair was not counted as a failed reload within 10 s"
curl -sS -o /dev/null --cacert "$work/ca2.crt" "$url/healthz" || abort "the previous pair is no longer served"
grep -q 'event=tls.reload_failed' "$work/log" || abort "no tls_reload_failed log line"
pass "a mismatched new pair is refused and the previous pair stays in use"

# ---- back to a good pair --------------------------------------------------------------------------
make_pair ca1 "$secret/..2026_01_04_v4"
swap ..2026_01_04_v4
wait_for 10 serves_for "$work/ca1.crt" || abort "a good pair after a bad one was not served within 10 s"
pass "a good pair after the bad one is picked up"

# ---- logs and exit ---------------------------------------------------------------------------------
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || abort "exit status $rc after SIGTERM"
bad=$(grep -cv '^ts=[^ ]* level=[a-z]* comp=webhook event=[a-z_]*' "$work/log" || true)
[ "$bad" = 0 ] || abort "$bad log lines are not logfmt: $(grep -v '^ts=' "$work/log" | head -3)"
grep -q 'event=admission result=patched' "$work/log" || abort "no admission log line"
pass "clean exit on SIGTERM; every log line is logfmt ($(wc -l <"$work/log") lines)"
echo "PASS: $passes checks"
