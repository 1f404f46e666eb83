#!/usr/bin/env bash
# The collector's --auth kubernetes against the real kube-apiserver of e2e/cluster, with the
# chart's own RBAC (templates/collector-rbac.yaml rendered by helm and applied):
#   - the collector runs on the host with a token of its ServiceAccount (kubectl create token),
#     which the chart lets create TokenReviews and SubjectAccessReviews;
#   - a token of a ServiceAccount bound to the reader ClusterRole (the chart's default reader,
#     monitoring/prometheus-k8s) gets 200 on /metrics, /debug/segments and /api/v1/value;
#   - a token of an unbound ServiceAccount gets 403, no token or a forged one 401;
#   - binding the unbound account to the reader role lets it in once its 10 s denial expires;
#   - with the collector's own review rights removed, a new token gets 503 (fail closed);
#   - latency of a request with a cached decision and with a new token (two real reviews).
# Usage: collector_auth.sh BUILD_DIR [LOG_DIR]. Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
cluster_exclusive "$@"
build=${1:?usage: collector_auth.sh BUILD_DIR [LOG_DIR]}
build=$(cd "$build" && pwd)
keep=${2:-$MV_CACHE/e2e-cluster-logs/collector-auth}
need_host_tools
private_kubelet_dir "$0" "$@"
[ -x "$build/bin/microview-collector" ] || skip "$build/bin/microview-collector not built"
SRC=$(cd "$MV_CLUSTER_SRC/../.." && pwd)
rm -rf "$keep"
cleanup() {
  stop_proc microview-collector
  MV_KEEP_LOGS="$keep" "$MV_CLUSTER_SRC/down.sh"
}
trap cleanup EXIT

HELM=$("$SRC/scripts/go-tools.sh" helm) || die "building helm (scripts/go-tools.sh helm)"
t0=$(now_ms)
"$MV_CLUSTER_SRC/up.sh" >/dev/null || die "cluster did not come up (logs: $keep)"
echo "timing: cluster up $(secs "$t0" "$(now_ms)")s"

# The chart's collector RBAC with its defaults, applied as helm would.
NS=microview
"$HELM" template microview "$SRC/deploy/helm/microview" -n "$NS" \
  --show-only templates/collector-rbac.yaml >"$D/collector-rbac.yaml" ||
  die "helm template of templates/collector-rbac.yaml"
for ns in "$NS" monitoring tenant-a; do kc create namespace "$ns" >/dev/null; done
kc create serviceaccount microview-collector -n "$NS" >/dev/null
kc create serviceaccount prometheus-k8s -n monitoring >/dev/null
kc create serviceaccount nosy -n tenant-a >/dev/null
kc apply -f "$D/collector-rbac.yaml" >/dev/null || die "kubectl apply of the chart's collector RBAC"
check "the chart's reader role: get on /metrics, /api/v1/value, the live view's stream, /debug/*" \
  test "$(kc get clusterrole microview-metrics-reader -o jsonpath='{.rules[0].nonResourceURLs}')" \
  = '["/metrics","/api/v1/value","/api/v1/stream","/api/v1/live/*","/debug/*"]'

token() { kc create token "$2" -n "$1" --duration 1h; }
(umask 077 && token "$NS" microview-collector >"$D/collector.token") || die "collector token"
READER=$(token monitoring prometheus-k8s) || die "reader token"
NOSY=$(token tenant-a nosy) || die "tenant token"

CPORT=$(free_port)
start_proc microview-collector "$build/bin/microview-collector" --no-agent \
  --listen "127.0.0.1:$CPORT" --auth kubernetes \
  --kube-api-server "https://127.0.0.1:$MV_API_PORT" --kube-ca-file "$CERTS/ca.crt" \
  --kube-token-file "$D/collector.token"
URL=http://127.0.0.1:$CPORT
healthy() { curl -fsS --max-time 2 "$URL/healthz" >/dev/null; }
wait_for --what "collector /healthz" 20 healthy || die "the collector did not start"
check "collector.started names auth=kubernetes" grep -q 'event=collector.started.*auth=kubernetes' \
  "$LOGS/microview-collector.log"

# code PATH [TOKEN]: the HTTP status of GET PATH with that bearer token (none when empty).
code() {
  if [ -n "${2:-}" ]; then
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $2" "$URL$1"
  else
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$URL$1"
  fi
}
is() { test "$(code "$2" "${3:-}")" = "$1"; }
check "no token: /metrics 401" is 401 /metrics
check "forged token: /metrics 401" is 401 /metrics "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"
check "reader's token: /metrics 200" is 200 /metrics "$READER"
check "reader's token: /debug/segments 200" is 200 /debug/segments "$READER"
check "reader's token: /api/v1/value served (404: no such series)" \
  is 404 '/api/v1/value?metric=nothing' "$READER"
check "unbound ServiceAccount: /metrics 403" is 403 /metrics "$NOSY"
check "unbound ServiceAccount: /debug/segments 403" is 403 /debug/segments "$NOSY"
check "the collector's own token is no reader: 403" is 403 /metrics "$(cat "$D/collector.token")"
check "/healthz open without a token" is 200 /healthz
body=$(curl -s --max-time 10 -H "Authorization: Bearer $NOSY" "$URL/metrics")
names_path() { [[ $body == *"not allowed to get /metrics"* ]]; }
check "403 body names the path ($body)" names_path
check "the collector logged the refused identity" grep -q \
  'event=authz.forbidden path=/metrics user=system:serviceaccount:tenant-a:nosy' \
  "$LOGS/microview-collector.log"

# Latency: a cached decision, and a new token each time (TokenReview + SubjectAccessReview).
lat() { # TOKEN -> seconds of one request
  curl -s -o /dev/null -w '%{time_total}' --max-time 10 -H "Authorization: Bearer $1" "$URL/debug/segments"
}
cached=() uncached=()
for _ in $(seq 20); do cached+=("$(lat "$READER")"); done
for _ in $(seq 10); do uncached+=("$(lat "$(token monitoring prometheus-k8s)")"); done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)] * 1000}'; }
echo "latency (median, ms): cached decision $(median "${cached[@]}"), new token (2 reviews on the real API server) $(median "${uncached[@]}")"

# RBAC changes are seen once a cached denial expires (10 s).
kc create clusterrolebinding nosy-reads --clusterrole=microview-metrics-reader \
  --serviceaccount=tenant-a:nosy >/dev/null
wait_for --what "the new binding honoured" 25 is 200 /metrics "$NOSY"
check "bound afterwards: 200 once the denial expired" is 200 /metrics "$NOSY"

# The collector without its review rights: nothing is served on a new token (fail closed).
kc delete clusterrolebinding microview-collector >/dev/null
NEW=$(token monitoring prometheus-k8s)
unavailable() { is 503 /metrics "$NEW"; }
wait_for --what "503 without review rights" 15 unavailable
check "collector's review rights removed: a new token gets 503" unavailable
check "the collector logged the refused review" grep -q 'event=authz.review_failed' \
  "$LOGS/microview-collector.log"
stats=$(curl -s --max-time 10 -H "Authorization: Bearer $READER" "$URL/metrics" |
  grep '^microview_http_auth_cache_total' | tr '\n' ' ')
echo "cache: $stats"

echo "collector_auth: passed=$passes failed=$fails"
[ "$fails" -eq 0 ] || {
  dump_logs 30
  exit 1
}
