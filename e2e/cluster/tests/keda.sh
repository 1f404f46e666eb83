#!/usr/bin/env bash
# Real KEDA on the real Kubernetes components of e2e/cluster, and the autoscaling paths side by
# side at the intervals users run (HPA sync 15 s, Prometheus scrapes 15 s):
#   1. the chart installed as helm.sh installs it, with keda.enabled (the headless Service
#      <release>-collector-keda over the collector pods).
#   2. KEDA (scripts/go-tools.sh keda: operator and metrics API server from the Go module, CRDs
#      and RBAC of the same module version) as host processes with their ServiceAccount's token:
#      the operator serves its gRPC metrics service on loopback (mTLS, certificates from the
#      cluster CA, no cert rotation, no leader election), the metrics API server is the
#      APIService v1beta1.external.metrics.k8s.io (Service with Endpoints at the bridge address).
#   3. four identical Deployments of the sample app, one per path, the same load step at the
#      same moment (sidebyside.py), each path scaling its Deployment from 1 to 3 and back:
#      (a) prometheus-adapter + HPA, (b) KEDA prometheus trigger, (c) KEDA metrics-api trigger on
#      every collector through the headless Service (aggregateFromKubeServiceEndpoints, sum),
#      (d) KEDA external trigger with BUILD_DIR's microview-scaler (a skipped part when it is
#      not built). One line per path: load -> desired replicas with its parts, scale-down.
#   3b. the same step again with a 1 s HPA sync and 1 s scrapes, for reference.
#   4. two collectors: a second collector (host process, --no-agent --segment) standing for a
#      second node, serving one more sample-app instance of Deployment (c), added to the
#      headless Service as an EndpointSlice: KEDA's metrics-api value equals the sum of both
#      collectors' /api/v1/value answers.
# Usage: keda.sh BUILD_DIR [LOG_DIR]. Exit 0 pass, 1 fail, 77 skipped. Prints `timing:` lines.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
cluster_exclusive "$@"
. "$MV_CLUSTER_SRC/certs.sh"
# shellcheck source=e2e/cluster/tests/chart-lib.sh
. "$MV_CLUSTER_SRC/tests/chart-lib.sh"
build=${1:?usage: keda.sh BUILD_DIR [LOG_DIR]}
build=$(cd "$build" && pwd)
keep=${2:-$MV_CACHE/e2e-cluster-logs/keda}
need_host_tools
private_kubelet_dir "$0" "$@"
command -v prometheus >/dev/null || skip "Debian's prometheus is not installed (scripts/deps.sh test)"
[ -f "$build/lib/libmicroview.so" ] || skip "$build/lib/libmicroview.so not built"
[ -x "$build/bin/microview-collector" ] || skip "$build/bin/microview-collector not built"
SRC=$(cd "$MV_CLUSTER_SRC/../.." && pwd)
# The intervals users run: the controller-manager's default HPA sync period (up.sh reads it) and
# Prometheus' usual 15 s scrapes; the collector's default export window.
export MV_HPA_SYNC=15s
SCRAPE=15s
CHART_WINDOW_MS=15000
rm -rf "$keep"
cleanup() {
  local p
  for p in microview-scaler keda-adapter keda-operator collector-node2 sample-node2 prometheus-adapter prometheus; do
    stop_proc "$p"
  done
  MV_KEEP_LOGS="$keep" "$MV_CLUSTER_SRC/down.sh"
}
trap cleanup EXIT
NS=microview # the release's namespace
APP=shop     # the Deployments' namespace
fail_now() {
  echo "FAIL: $*"
  kc get pods -A -o wide 2>&1 | sed 's/^/  /'
  kc get hpa -A 2>&1 | sed 's/^/  /'
  kc get scaledobjects -A 2>&1 | sed 's/^/  /'
  dump_logs 30
  exit 1
}
# skip_part DESC WHY: a part of this test that cannot run here, counted as skipped by
# scripts/test.sh (tests/README.md, "Skipping").
skip_part() {
  echo "SKIPPED: $1: $2"
  [ -n "${MV_TEST_SKIP_LOG:-}" ] && echo "cluster_keda: $1: $2" >>"$MV_TEST_SKIP_LOG"
  return 0
}

# ---- tools and images ---------------------------------------------------------------------------
t0=$(now_ms)
HELM=$("$SRC/scripts/go-tools.sh" helm) || fail_now "building helm (scripts/go-tools.sh helm)"
ADAPTER=$("$SRC/scripts/go-tools.sh" prometheus-adapter) ||
  fail_now "building prometheus-adapter (scripts/go-tools.sh prometheus-adapter)"
KEDA=$("$SRC/scripts/go-tools.sh" keda) || fail_now "building KEDA (scripts/go-tools.sh keda)"
t_tools=$(now_ms)
"$MV_CLUSTER_SRC/up.sh" >/dev/null || fail_now "cluster did not come up (logs: $keep)"
t_up=$(now_ms)
IMAGE=$("$MV_CLUSTER_SRC/images.sh" microview) || fail_now "the MicroView image"
"$MV_CLUSTER_SRC/images.sh" sample-app "$build" || fail_now "the sample-app image"
t_images=$(now_ms)
echo "timing: tools $(secs "$t0" "$t_tools")s, cluster up $(secs "$t_tools" "$t_up")s (HPA sync $MV_HPA_SYNC), images $(secs "$t_up" "$t_images")s"

# ---- 1. the chart with keda.enabled -------------------------------------------------------------
chart_values "$D/values.yaml" "keda: {enabled: true}"
chart_install "$D/values.yaml"
check "keda.enabled: the headless Service microview-collector-keda" \
  test "$(kc get svc microview-collector-keda -n "$NS" -o jsonpath='{.spec.clusterIP}')" = None
COLLECTOR_IP=$(kc get pod "$(comp_pod collector)" -n "$NS" -o jsonpath='{.status.podIP}')

# Four identical Deployments, one per path.
PATHS=(a b c d)
kc create namespace "$APP" >/dev/null
for p in "${PATHS[@]}"; do sample_deployment "sample-$p" "$APP" 1; done
ready1() { [ "$(kc get deploy "sample-$1" -n "$APP" -o jsonpath='{.status.readyReplicas}')" = 1 ]; }
for p in "${PATHS[@]}"; do
  wait_for --what "sample-$p ready" 120 ready1 "$p" || fail_now "Deployment sample-$p never became ready"
done
# The bridge exists once pods are on it (the CNI plugin creates it).
GW=$(bridge_ip)
[ -n "$GW" ] || fail_now "no IPv4 address on $MV_BRIDGE"

# ---- Prometheus (15 s scrapes) and prometheus-adapter --------------------------------------------
start_prometheus "$SCRAPE" "$COLLECTOR_IP:9469"
# The adapter rules users get from deploy/autoscaling, plus the rule for <base>_rate_short that
# docs/autoscaling.md section 3 gives: every path reads the same series (the last second's rate),
# so the figures compare the paths, not the series.
kc create namespace monitoring >/dev/null
kc apply -f "$SRC/deploy/autoscaling/prometheus-adapter-rules.yaml" >/dev/null
kc get configmap microview-adapter-config -n monitoring -o jsonpath='{.data.config\.yaml}' >"$D/adapter-rules.yaml"
cat >>"$D/adapter-rules.yaml" <<'EOF'
- seriesQuery: '{__name__=~"^.+_rate_short$",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name:
    matches: "^(.+)_rate_short$"
    as: "${1}_per_second_1s"
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
EOF
# Relisting no faster than the scrapes, as prometheus-adapter asks of its users.
start_prometheus_adapter "$D/adapter-rules.yaml" "$SCRAPE"

# ---- 2. KEDA --------------------------------------------------------------------------------------
t0=$(now_ms)
kc create -f "$KEDA/crds/" >/dev/null || fail_now "KEDA's CRDs"
kc create namespace keda >/dev/null
kc apply -f "$KEDA/rbac/" >/dev/null || fail_now "KEDA's ServiceAccount and RBAC"
crds_ok() { kc get crd scaledobjects.keda.sh -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' | grep -q True; }
wait_for --what "the ScaledObject CRD established" 30 crds_ok || fail_now "KEDA's CRDs not established"
# Operator and metrics API server run as KEDA's own ServiceAccount keda-operator (both do in
# KEDA's manifests): a token in a kubeconfig.
KD=$D/keda
mkdir -p "$KD/certs" "$KD/ca"
token=$(kc create token keda-operator -n keda --duration 2h) || fail_now "a token of keda/keda-operator"
cat >"$KD/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: mv-e2e, cluster: {certificate-authority: $CERTS/ca.crt, server: "https://127.0.0.1:$MV_API_PORT"}}]
users: [{name: keda-operator, user: {token: "$token"}}]
contexts: [{name: keda, context: {cluster: mv-e2e, user: keda-operator}}]
current-context: keda
EOF
chmod 600 "$KD/kubeconfig"
# The gRPC metrics service between them is mutual TLS over one directory (ca.crt, tls.crt,
# tls.key), as KEDA's own manifests share /certs; the same certificate serves the APIService.
(umask 077 && cert_leaf ca keda "/CN=keda-operator" serverAuth,clientAuth \
  "DNS:keda-operator.keda.svc,DNS:keda-metrics-apiserver.keda.svc,IP:127.0.0.1,IP:$GW")
cp "$CERTS/ca.crt" "$KD/certs/ca.crt"
cp "$CERTS/keda.crt" "$KD/certs/tls.crt"
cp "$CERTS/keda.key" "$KD/certs/tls.key"
GRPC_PORT=$(free_port)
keda_env=(env WATCH_NAMESPACE= POD_NAMESPACE=keda KEDA_CLUSTER_OBJECT_NAMESPACE=keda KUBECONFIG="$KD/kubeconfig")
start_proc keda-operator "${keda_env[@]}" "$KEDA/operator" --leader-elect=false \
  --enable-cert-rotation=false --cert-dir="$KD/certs" --ca-dir="$KD/ca" \
  --metrics-service-bind-address="127.0.0.1:$GRPC_PORT" \
  --metrics-bind-address="127.0.0.1:$(free_port)" --health-probe-bind-address="127.0.0.1:$(free_port)" \
  --zap-log-level=info --zap-encoder=console
KPORT=$(free_port)
start_proc keda-adapter "${keda_env[@]}" "$KEDA/adapter" --secure-port="$KPORT" --bind-address="$GW" \
  --tls-cert-file="$KD/certs/tls.crt" --tls-private-key-file="$KD/certs/tls.key" --cert-dir="$KD/certs" \
  --client-ca-file="$CERTS/ca.crt" --lister-kubeconfig="$KD/kubeconfig" \
  --authentication-kubeconfig="$KD/kubeconfig" --authorization-kubeconfig="$KD/kubeconfig" \
  --metrics-service-address="127.0.0.1:$GRPC_PORT" --port="$(free_port)" --zap-log-level=info
register_apiservice keda-metrics-apiserver external.metrics.k8s.io "$KPORT" keda
external_ok() { kc get --raw /apis/external.metrics.k8s.io/v1beta1 >/dev/null 2>&1; }
wait_for --what "external.metrics.k8s.io served by KEDA" 120 external_ok ||
  fail_now "KEDA's metrics API server never served external.metrics.k8s.io"
check "KEDA's metrics API server serves v1beta1.external.metrics.k8s.io through the API server" external_ok
echo "timing: KEDA up (CRDs, operator, metrics API server) $(secs "$t0" "$(now_ms)")s"

# ---- the second collector (a second node's stand-in) -------------------------------------------
# One more instance of Deployment (c)'s app, as if on a second node: the sample app on the host
# with a segment file of its own, read by a second collector (--no-agent --segment, identity
# labels of a pod of sample-c) on the bridge address and the collector port, which an
# EndpointSlice adds to the headless Service. KEDA's metrics-api trigger asks both collectors.
N2=$D/node2
mkdir -p "$N2"
read -ra mhd <<<"$(pkg-config --cflags --libs libmicrohttpd)"
cc -std=c11 -O2 -o "$N2/sample-app" "$MV_CLUSTER_SRC/images/sample-app.c" \
  -I "$SRC/pkg/format/microview" -L "$build/lib" -lmicroview "-Wl,-rpath,$build/lib" "${mhd[@]}" ||
  fail_now "building the sample app for the host"
truncate -s 64K "$N2/segment"
N2PORT=$(free_port)
start_proc sample-node2 env MICROVIEW_SEGMENT="$N2/segment" "$N2/sample-app" "$N2PORT"
n2_up() { curl -fsS --max-time 2 "http://127.0.0.1:$N2PORT/healthz" >/dev/null; }
wait_for --what "the host's sample app" 20 n2_up || fail_now "the host's sample app did not start"
N2_REQUESTS=37
for _ in $(seq "$N2_REQUESTS"); do curl -fsS --max-time 2 "http://127.0.0.1:$N2PORT/" >/dev/null; done
start_proc collector-node2 "$build/bin/microview-collector" --no-agent --listen "$GW:9469" --auth none \
  --segment "$N2/segment,namespace=$APP,pod=sample-c-node2,container=app,app=sample-c,tier=web"
VALUE_Q="namespace=$APP&agg=sum&selector=app%3Dsample-c"
n2_value() { # METRIC: the second collector's answer for Deployment c
  curl -fsS --max-time 3 "http://$GW:9469/api/v1/value?metric=$1&$VALUE_Q" |
    python3 -c 'import json,sys; print("%.10g" % json.load(sys.stdin)["value"])'
}
n2_counted() { [ "$(n2_value app_requests_total 2>/dev/null)" = "$N2_REQUESTS" ]; }
wait_for --what "the second collector serving sample-c-node2" 30 n2_counted ||
  fail_now "the second collector never answered $N2_REQUESTS for app=sample-c"
kc apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: microview-collector-keda-node2
  namespace: $NS
  labels:
    kubernetes.io/service-name: microview-collector-keda
    endpointslice.kubernetes.io/managed-by: cluster-keda.e2e.microview.io
addressType: IPv4
ports: [{name: metrics, port: 9469, protocol: TCP}]
endpoints: [{addresses: ["$GW"], conditions: {ready: true}}]
EOF

# ---- 3. the four paths --------------------------------------------------------------------------
RATE=20  # requests/s per Deployment during the step
TARGET=5 # per pod: 20 / 5 -> 4, capped at maxReplicas 3
MAXR=3
METRIC=app_requests_rate_short
BEHAVIOR='{scaleUp: {stabilizationWindowSeconds: 0}, scaleDown: {stabilizationWindowSeconds: 10, policies: [{type: Percent, value: 100, periodSeconds: 15}]}}'
kc apply -f - >/dev/null <<EOF
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: sample-a, namespace: $APP}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: sample-a}
  minReplicas: 1
  maxReplicas: $MAXR
  metrics:
  - type: Pods
    pods:
      metric: {name: app_requests_per_second_1s}
      target: {type: AverageValue, averageValue: "$TARGET"}
  behavior: $BEHAVIOR
EOF
# scaled_object NAME TRIGGER_YAML: a ScaledObject for Deployment NAME (1..MAXR, the HPA behavior
# above) with one trigger.
scaled_object() {
  kc apply -f - >/dev/null <<EOF
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: $1, namespace: $APP}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: $1}
  pollingInterval: 15
  minReplicaCount: 1
  maxReplicaCount: $MAXR
  advanced: {horizontalPodAutoscalerConfig: {behavior: $BEHAVIOR}}
  triggers:
$2
EOF
}
scaled_object sample-b "  - type: prometheus
    metricType: AverageValue
    metadata:
      serverAddress: $PROM
      query: 'sum($METRIC{namespace=\"$APP\",pod=~\"sample-b-.*\"})'
      threshold: \"$TARGET\"" || fail_now "ScaledObject sample-b"
# KEDA v2.21.0 builds each endpoint's URL from the url's scheme, the endpoint's address and port
# and the url's *path* only (pkg/scalers/metrics_api_scaler.go, getEndpointsUrlsFromServiceURL):
# the query is dropped, and every collector answers 400 (no metric=). Written with the '?'
# percent-encoded, the query is part of the path KEDA keeps and decodes once, so each endpoint
# gets ?metric=...&selector=app%3Dsample-c (the selector's '=' encoded twice).
scaled_object sample-c "  - type: metrics-api
    metricType: AverageValue
    metadata:
      url: \"http://microview-collector-keda.$NS.svc:9469/api/v1/value%3Fmetric=$METRIC&namespace=$APP&agg=sum&selector=app%253Dsample-c\"
      aggregateFromKubeServiceEndpoints: \"true\"
      aggregationType: sum
      valueLocation: value
      targetValue: \"$TARGET\"" || fail_now "ScaledObject sample-c"
SCALER=
for f in "$build/bin/microview-scaler" "$build/microview-scaler"; do
  [ -x "$f" ] && SCALER=$f && break
done
if [ -n "$SCALER" ]; then
  PATHS_RUN=(a b c d)
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: microview-scaler, namespace: keda}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: microview-scaler-e2e}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
- {apiGroups: [keda.sh], resources: [scaledobjects], verbs: [get, list, watch]}
- {apiGroups: [apps], resources: [deployments, statefulsets, replicasets, deployments/scale, statefulsets/scale], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: microview-scaler-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: microview-scaler-e2e}
subjects: [{kind: ServiceAccount, name: microview-scaler, namespace: keda}]
EOF
  (umask 077 && kc create token microview-scaler -n keda --duration 2h >"$KD/scaler.token") ||
    fail_now "a token of keda/microview-scaler"
  SPORT=$(free_port)
  start_proc microview-scaler "$SCALER" --listen "127.0.0.1:$SPORT" --metrics-listen "127.0.0.1:$(free_port)" \
    --api-server "https://127.0.0.1:$MV_API_PORT" --api-token-file "$KD/scaler.token" \
    --api-ca-file "$CERTS/ca.crt" --collector-namespace "$NS" \
    --collector-selector app.kubernetes.io/component=collector --collector-port 9469
  scaled_object sample-d "  - type: external
    metricType: AverageValue
    metadata:
      scalerAddress: \"127.0.0.1:$SPORT\"
      metric: $METRIC
      namespace: $APP
      selector: app=sample-d
      aggregation: sum
      targetValue: \"$TARGET\"" || fail_now "ScaledObject sample-d"
else
  PATHS_RUN=(a b c)
  kc delete deploy sample-d -n "$APP" --wait=false >/dev/null
  skip_part "path (d) KEDA external trigger with microview-scaler" "$build/bin/microview-scaler is not built"
fi
hpa_of() { case $1 in a) echo sample-a ;; *) echo "keda-hpa-sample-$1" ;; esac; }
label_of() {
  case $1 in
  a) echo "prometheus-adapter + HPA" ;;
  b) echo "KEDA prometheus trigger" ;;
  c) echo "KEDA metrics-api on the collectors" ;;
  d) echo "KEDA external trigger, microview-scaler" ;;
  esac
}
hpa_exists() { kc get hpa "$(hpa_of "$1")" -n "$APP" >/dev/null 2>&1; }
ran=()
for p in "${PATHS_RUN[@]}"; do
  if wait_for --what "HPA $(hpa_of "$p")" 60 hpa_exists "$p"; then
    ran+=("$p")
  else
    # Measured without it: the other paths still run.
    why=$(grep -F "\"name\": \"sample-$p\"" "$LOGS/keda-operator.log" | grep -o '"error": "[^"]*"' |
      grep -m1 'rpc error')
    fail "($p) $(label_of "$p"): no HPA $(hpa_of "$p"); KEDA's operator: ${why:-see its log}"
  fi
done
[ ${#ran[@]} -gt 0 ] || fail_now "no path has an HPA"
PATHS_RUN=("${ran[@]}")
{
  echo "["
  sep=""
  for p in "${PATHS_RUN[@]}"; do
    printf '%s{"name": "%s", "label": "%s", "deployment": "sample-%s", "hpa": "%s", "source_url": "http://%s:9469/api/v1/value?metric=%s&namespace=%s&agg=sum&selector=app%%3Dsample-%s"}\n' \
      "$sep" "$p" "$(label_of "$p")" "$p" "$(hpa_of "$p")" "$COLLECTOR_IP" "$METRIC" "$APP" "$p"
    sep=","
  done
  echo "]"
} >"$D/paths.json"
t0=$(now_ms)
python3 "$MV_CLUSTER_SRC/tests/sidebyside.py" --api "https://127.0.0.1:$MV_API_PORT" \
  --ca "$CERTS/ca.crt" --cert "$CERTS/admin.crt" --key "$CERTS/admin.key" --namespace "$APP" \
  --paths "$D/paths.json" --rate "$RATE" --target "$TARGET" --max "$MAXR" --out "$D/sidebyside.json" \
  2>"$LOGS/sidebyside.log" | tee "$LOGS/sidebyside.out" || fail_now "the side-by-side run did not complete (see $LOGS/sidebyside.log)"
echo "timing: side-by-side step (warm-up, scale-up, scale-down) $(secs "$t0" "$(now_ms)")s"
cp "$D/sidebyside.json" "$LOGS/" 2>/dev/null
event_in() { # FILE PATH PHASE KEY: the recorded second, or nothing
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["paths"][sys.argv[2]][sys.argv[3]]; v=r.get(sys.argv[4]); print("" if v is None else v)' \
    "$1" "$2" "$3" "$4" 2>/dev/null
}
event() { event_in "$D/sidebyside.json" "$@"; }
for p in "${PATHS_RUN[@]}"; do
  l=$(label_of "$p")
  check "($p) $l: desired replicas rose under the load step ($(event "$p" up desired_up)s)" test -n "$(event "$p" up desired_up)"
  check "($p) $l: $MAXR replicas ready under load ($(event "$p" up ready_up)s)" test -n "$(event "$p" up ready_up)"
  check "($p) $l: desired back to 1 after the load stopped ($(event "$p" down desired_down)s)" test -n "$(event "$p" down desired_down)"
  check "($p) $l: back to 1 replica ($(event "$p" down ready_down)s)" test -n "$(event "$p" down ready_down)"
done

# ---- 3b. the 1 s reference: HPA sync 1 s, Prometheus scraping every 1 s ----------------------
# The same step again with the shortest intervals, for reference: the controller-manager
# restarted with a 1 s HPA sync (its own command line, that flag changed), Prometheus reloaded
# (SIGHUP) with 1 s scrapes on the same address, so every path keeps its configuration.
restart_kcm_sync() { # PERIOD
  local pid i args=()
  pid=$(cat "$PIDS/kube-controller-manager.pid")
  mapfile -d '' args <"/proc/$pid/cmdline"
  for i in "${!args[@]}"; do
    case ${args[$i]} in --horizontal-pod-autoscaler-sync-period=*)
      args[i]=--horizontal-pod-autoscaler-sync-period=$1 ;;
    esac
  done
  stop_proc kube-controller-manager
  start_proc kube-controller-manager "${args[@]}"
}
kcm_sync_is() { tr '\0' ' ' <"/proc/$(cat "$PIDS/kube-controller-manager.pid")/cmdline" | grep -q -- "--horizontal-pod-autoscaler-sync-period=$1 "; }
kcm_up() { curl -fsk --max-time 2 "https://127.0.0.1:$MV_KCM_PORT/healthz" >/dev/null; }
sed -i "s/scrape_interval: $SCRAPE, evaluation_interval: $SCRAPE/scrape_interval: 1s, evaluation_interval: 1s/" \
  "$D/prometheus/prometheus.yml"
kill -HUP "$(cat "$PIDS/prometheus.pid")"
restart_kcm_sync 1s
wait_for --what "kube-controller-manager back with a 1 s HPA sync" 60 kcm_up ||
  fail_now "kube-controller-manager did not come back"
check "1 s reference: the controller-manager syncs HPAs every 1 s" kcm_sync_is 1s
prom_1s() { grep -q "scrape_interval: 1s" "$D/prometheus/prometheus.yml" && grep -q "Completed loading of configuration file" "$LOGS/prometheus.log"; }
check "1 s reference: Prometheus reloaded with 1 s scrapes" prom_1s
t0=$(now_ms)
python3 "$MV_CLUSTER_SRC/tests/sidebyside.py" --api "https://127.0.0.1:$MV_API_PORT" \
  --ca "$CERTS/ca.crt" --cert "$CERTS/admin.crt" --key "$CERTS/admin.key" --namespace "$APP" \
  --paths "$D/paths.json" --rate "$RATE" --target "$TARGET" --max "$MAXR" --out "$D/sidebyside-1s.json" \
  2>"$LOGS/sidebyside-1s.log" | sed 's/^/1 s reference: /' | tee "$LOGS/sidebyside-1s.out" ||
  fail_now "the 1 s reference run did not complete (see $LOGS/sidebyside-1s.log)"
echo "timing: 1 s reference step $(secs "$t0" "$(now_ms)")s"
cp "$D/sidebyside-1s.json" "$LOGS/" 2>/dev/null
event1s() { event_in "$D/sidebyside-1s.json" "$@"; }
for p in "${PATHS_RUN[@]}"; do
  l=$(label_of "$p")
  check "1 s reference ($p) $l: desired replicas rose ($(event1s "$p" up desired_up)s)" test -n "$(event1s "$p" up desired_up)"
  check "1 s reference ($p) $l: desired back to 1 ($(event1s "$p" down desired_down)s)" test -n "$(event1s "$p" down desired_down)"
done

# ---- 4. two collectors: KEDA's aggregate is the sum over both ----------------------------------
# A ScaledObject on a Deployment that never scales (1..1, a pause container) whose trigger asks
# both collectors for Deployment (c)'s request counter: with the load stopped the counters stand
# still, so KEDA's value (through the external metrics API, as the HPA reads it) must equal the
# sum of the two collectors' answers read around it.
kc apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: sum-check, namespace: $APP}
spec:
  replicas: 1
  selector: {matchLabels: {app: sum-check}}
  template:
    metadata: {labels: {app: sum-check}}
    spec:
      containers: [{name: pause, image: $MV_PAUSE_IMAGE, imagePullPolicy: Never}]
EOF
kc apply -f - >/dev/null <<EOF
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: sum-check, namespace: $APP}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: sum-check}
  minReplicaCount: 1
  maxReplicaCount: 1
  triggers:
  - type: metrics-api
    metadata:
      url: "http://microview-collector-keda.$NS.svc:9469/api/v1/value%3Fmetric=app_requests_total&${VALUE_Q//%3D/%253D}"
      aggregateFromKubeServiceEndpoints: "true"
      aggregationType: sum
      valueLocation: value
      targetValue: "1000000000"
EOF
wait_for --what "HPA keda-hpa-sum-check" 60 kc get hpa keda-hpa-sum-check -n "$APP" >/dev/null 2>&1
ext_path() {
  local m
  m=$(kc get hpa keda-hpa-sum-check -n "$APP" -o jsonpath='{.spec.metrics[0].external.metric.name}')
  echo "/apis/external.metrics.k8s.io/v1beta1/namespaces/$APP/$m?labelSelector=scaledobject.keda.sh%2Fname%3Dsum-check"
}
keda_value() {
  kc get --raw "$(ext_path)" 2>/dev/null | python3 -c '
import json, sys
units = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}
v = json.load(sys.stdin)["items"][0]["value"]
s = v.lstrip("0123456789.-e+")
print("%.10g" % (float(v[: len(v) - len(s)]) * units[s]))'
}
n1_value() {
  curl -fsS --max-time 3 "http://$COLLECTOR_IP:9469/api/v1/value?metric=$1&$VALUE_Q" |
    python3 -c 'import json,sys; print("%.10g" % json.load(sys.stdin)["value"])'
}
sum_line=
sum_equal() {
  local a1 a2 k b1 b2
  a1=$(n1_value app_requests_total) a2=$(n2_value app_requests_total) k=$(keda_value)
  b1=$(n1_value app_requests_total) b2=$(n2_value app_requests_total)
  sum_line="collector 1 (node, pods of sample-c): $a1, collector 2 (second node's stand-in): $a2, KEDA metrics-api sum: $k"
  [ -n "$k" ] && [ -n "$a1" ] && [ "$a1" = "$b1" ] && [ "$a2" = "$b2" ] &&
    awk -v a="$a1" -v b="$a2" -v k="$k" 'BEGIN{exit !(a > 0 && b > 0 && a + b == k)}'
}
wait_for --what "KEDA's value equal to the sum of both collectors" 60 sum_equal
echo "$sum_line"
check "two collectors: KEDA's metrics-api value is the sum of both collectors' /api/v1/value" sum_equal
check "the second collector's share is the host instance's $N2_REQUESTS requests" n2_counted

echo "keda: failed=$fails"
[ "$fails" -eq 0 ] || {
  dump_logs 30
  exit 1
}
