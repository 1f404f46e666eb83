# shellcheck shell=bash
# The steps cluster_helm (helm.sh) and cluster_keda (keda.sh) share: installing the chart as a user
# would on this cluster, waiting for its DaemonSets, Debian's Prometheus scraping the collector,
# prometheus-adapter registered as custom.metrics.k8s.io. Sourced after lib.sh and certs.sh; the
# caller sets HELM, IMAGE, NS, SRC and defines fail_now.

# chart_values FILE [YAML...]: the values helm.sh and keda.sh install the chart with, then any
# extra top-level YAML lines. The cluster's API server listens on loopback and has no kube-proxy,
# so the agent (which reads pod labels from the API) uses the node's network and is told the API
# server's address, as on clusters without kube-proxy. Host paths live under the cluster
# directory.
chart_values() {
  local file=$1
  shift
  cat >"$file" <<EOF
image: {repository: ${IMAGE%:*}, tag: "${IMAGE##*:}", pullPolicy: Never}
global: {stateDir: "$D/microview-state"}
agent:
  hostNetwork: true
  apiServer: "https://127.0.0.1:$MV_API_PORT"
  podResourcesDir: "$KUBELET_ROOT/pod-resources"
  gcIntervalMs: 1000
  gcGraceMs: 2000
collector:
  windowMs: ${CHART_WINDOW_MS:-5000}
  # The test cluster's API server listens on loopback and there is no kube-proxy, so a collector
  # in the pod network cannot ask it for reviews: no authentication here (collector_auth.sh
  # covers --auth kubernetes against this API server).
  auth: {mode: none}
webhook:
  replicas: 1
  podDisruptionBudget: {enabled: false}
EOF
  local line
  for line in "$@"; do echo "$line" >>"$file"; done
}

# ds_ready NAME: the DaemonSet NAME of the release has every desired pod ready.
ds_ready() {
  local want have
  want=$(kc get ds "$1" -n "$NS" -o jsonpath='{.status.desiredNumberScheduled}')
  have=$(kc get ds "$1" -n "$NS" -o jsonpath='{.status.numberReady}')
  [ -n "$want" ] && [ "$want" -gt 0 ] && [ "$have" = "$want" ]
}

# comp_pod COMPONENT: the name of the release's first pod of COMPONENT (agent, collector, ...).
comp_pod() { kc get pods -n "$NS" -l "app.kubernetes.io/component=$1" -o jsonpath='{.items[0].metadata.name}'; }

# chart_install VALUES_FILE: helm install --wait of the chart, then the agent and collector
# DaemonSets ready (checked) and the node's allocatable microview.io/metrics 4096 (checked; POOL
# is set to it). Prints the install's timing line.
chart_install() {
  local t0 t1
  t0=$(now_ms)
  if ! "$HELM" install microview "$SRC/deploy/helm/microview" --kubeconfig "$ADMIN_KUBECONFIG" \
    -n "$NS" --create-namespace -f "$1" --wait --timeout 5m >"$LOGS/helm-install.log" 2>&1; then
    cat "$LOGS/helm-install.log"
    fail_now "helm install"
  fi
  t1=$(now_ms)
  echo "timing: helm install --wait $(secs "$t0" "$t1")s"
  # helm's --wait counts a DaemonSet as ready once desired - maxUnavailable pods are (0 of 1
  # here), so the pods' readiness is waited for on the DaemonSet status itself.
  wait_for --what "the agent DaemonSet ready" 120 ds_ready microview-agent
  check "agent DaemonSet ready" ds_ready microview-agent
  wait_for --what "the collector DaemonSet ready" 120 ds_ready microview-collector
  check "collector DaemonSet ready" ds_ready microview-collector
  wait_for --what "allocatable microview.io/metrics" 30 has_allocatable
  POOL=$(allocatable)
  check "node allocatable shows microview.io/metrics: '$POOL' (16Mi pool / 4Ki pages = 4096)" test "$POOL" = 4096
}
allocatable() { kc get node "$MV_NODE" -o jsonpath="{.status.allocatable.microview\\.io/metrics}"; }
has_allocatable() { [ -n "$(allocatable)" ]; }

# bridge_ip: the host's address on the cluster bridge, where host processes serve the pods and
# the API server's aggregated APIs.
bridge_ip() { ip -4 -o addr show dev "$MV_BRIDGE" | awk '{print $4}' | cut -d/ -f1 | head -1; }

# start_prometheus INTERVAL TARGET...: Debian's Prometheus on loopback scraping TARGETs (the
# collector pods) every INTERVAL with honor_labels; sets PROM to its URL.
start_prometheus() {
  local interval=$1 port targets
  shift
  targets=$(printf '"%s",' "$@")
  port=$(free_port)
  mkdir -p "$D/prometheus"
  cat >"$D/prometheus/prometheus.yml" <<EOF
global: {scrape_interval: $interval, evaluation_interval: $interval}
scrape_configs:
  - job_name: microview
    honor_labels: true
    static_configs: [{targets: [${targets%,}]}]
EOF
  start_proc prometheus prometheus --config.file="$D/prometheus/prometheus.yml" \
    --storage.tsdb.path="$D/prometheus/data" --web.listen-address="127.0.0.1:$port"
  PROM=http://127.0.0.1:$port
}

# prom_value PROMQL: the first sample's value (empty when none).
prom_value() {
  curl -fsS --max-time 3 "$PROM/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
prom_has() { [ -n "$(prom_value "$1")" ]; }

# register_apiservice NAME GROUP PORT: a Service without selector in namespace monitoring, its
# Endpoints at the bridge address on PORT, and the APIService v1beta1.GROUP pointing at it with
# the cluster CA (the API server routes to endpoints: --enable-aggregator-routing).
register_apiservice() {
  local name=$1 group=$2 port=$3 ns=${4:-monitoring}
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: $name, namespace: $ns}
spec:
  ports: [{name: https, port: 443, targetPort: $port}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: $name, namespace: $ns}
subsets: [{addresses: [{ip: "$GW"}], ports: [{name: https, port: $port}]}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.$group}
spec:
  group: $group
  version: v1beta1
  service: {namespace: $ns, name: $name, port: 443}
  caBundle: $(base64 -w0 <"$CERTS/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
EOF
}

# start_prometheus_adapter RULES_FILE [RELIST]: prometheus-adapter ($ADAPTER) on the bridge address with
# RULES_FILE, reading $PROM, registered as the custom.metrics.k8s.io APIService. Needs GW.
start_prometheus_adapter() {
  local aport
  aport=$(free_port)
  (umask 077 && cert_leaf ca adapter "/CN=prometheus-adapter" serverAuth \
    "DNS:prometheus-adapter.monitoring.svc,IP:$GW")
  start_proc prometheus-adapter "$ADAPTER" --secure-port="$aport" --bind-address="$GW" \
    --tls-cert-file="$CERTS/adapter.crt" --tls-private-key-file="$CERTS/adapter.key" \
    --lister-kubeconfig="$ADMIN_KUBECONFIG" --authentication-kubeconfig="$ADMIN_KUBECONFIG" \
    --authorization-kubeconfig="$ADMIN_KUBECONFIG" --prometheus-url="$PROM/" \
    --config="$1" --metrics-relist-interval="${2:-5s}" --v=1
  register_apiservice prometheus-adapter custom.metrics.k8s.io "$aport"
}

# sample_deployment NAME NAMESPACE REPLICAS: a Deployment of the sample app (images/sample-app.c)
# labelled app=NAME, running as uid 1000 with all capabilities dropped, its pods annotated with
# microview.io/metrics-memory 64Ki (the webhook turns it into microview.io/metrics: 16) and the
# identity labels app=NAME,tier=web.
sample_deployment() {
  kc apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: $2}
spec:
  replicas: $3
  selector: {matchLabels: {app: $1}}
  template:
    metadata:
      labels: {app: $1}
      annotations:
        microview.io/metrics-memory: 64Ki
        microview.io/labels: "app=$1,tier=web"
    spec:
      terminationGracePeriodSeconds: 2
      securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000}
      containers:
      - name: app
        image: mv.local/sample-app:e2e
        imagePullPolicy: Never
        args: ["8080"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 1}
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF
}
