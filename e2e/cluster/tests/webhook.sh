#!/usr/bin/env bash
# The admission webhook against the real API server: microview-webhook (host process, TLS with a
# certificate of the cluster CA) registered by URL in a MutatingWebhookConfiguration; a pod with
# microview.io/metrics-memory gets the resource request and limit; a bad value is refused with
# the webhook's message as kubectl prints it; with the webhook down and failurePolicy Ignore the
# pod is still created, without the resource.
# Usage: webhook.sh BUILD_DIR [LOG_DIR]. Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
cluster_exclusive "$@"
. "$MV_CLUSTER_SRC/certs.sh"
build=${1:?usage: webhook.sh BUILD_DIR [LOG_DIR]}
build=$(cd "$build" && pwd)
keep=${2:-$MV_CACHE/e2e-cluster-logs/webhook}
need_host_tools
private_kubelet_dir "$0" "$@"
[ -x "$build/bin/microview-webhook" ] || skip "$build/bin/microview-webhook not built"
rm -rf "$keep"
cleanup() {
  stop_proc microview-webhook
  MV_KEEP_LOGS="$keep" "$MV_CLUSTER_SRC/down.sh"
}
trap cleanup EXIT
RES=microview.io/metrics

"$MV_CLUSTER_SRC/up.sh" >/dev/null || {
  echo "FAIL: cluster did not come up (logs: $keep)"
  exit 1
}
(umask 077 && cert_leaf ca webhook "/CN=microview-webhook" serverAuth "IP:127.0.0.1")
WPORT=$(free_port)
start_proc microview-webhook "$build/bin/microview-webhook" --listen "127.0.0.1:$WPORT" \
  --tls-cert-file "$CERTS/webhook.crt" --tls-key-file "$CERTS/webhook.key"
wait_for --what "webhook serving" 20 curl -fsS --max-time 1 --cacert "$CERTS/ca.crt" "https://127.0.0.1:$WPORT/healthz"

# webhook_config POLICY: pods CREATE in namespaces labelled microview-e2e=on, by URL over TLS.
webhook_config() {
  kc apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: microview-e2e}
webhooks:
- name: pods.microview.io
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: $1
  timeoutSeconds: 5
  namespaceSelector: {matchLabels: {microview-e2e: "on"}}
  rules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  clientConfig:
    url: https://127.0.0.1:$WPORT/mutate
    caBundle: $(base64 -w0 <"$CERTS/ca.crt")
EOF
}
pod() { # NAME MEMORY
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: team-w
  annotations: {microview.io/metrics-memory: "$2"}
spec:
  containers:
  - {name: app, image: mv.local/pause:e2e, imagePullPolicy: Never}
EOF
}
kc create namespace team-w >/dev/null
kc label namespace team-w microview-e2e=on >/dev/null
webhook_config Fail
limit() { kc get pod "$1" -n team-w -o jsonpath="{.spec.containers[0].resources.limits.microview\\.io/metrics}"; }
request() { kc get pod "$1" -n team-w -o jsonpath="{.spec.containers[0].resources.requests.microview\\.io/metrics}"; }

# The configuration takes a moment to reach the API server's admission chain.
applied() {
  kc delete pod probe -n team-w --ignore-not-found --wait=false >/dev/null 2>&1
  pod probe 4Ki | kc create -f - >/dev/null 2>&1 && [ "$(limit probe)" = 1 ]
}
wait_for --what "webhook in the admission chain" 30 applied
pod web-0 64Ki | kc create -f - >/dev/null
check "annotated pod created with $RES limit 16 (64Ki / 4Ki pages): '$(limit web-0)'" test "$(limit web-0)" = 16
check "and the equal request: '$(request web-0)'" test "$(request web-0)" = 16
called() { grep -c 'event=' "$LOGS/microview-webhook.log" | awk '{exit !($1 > 0)}'; }
check "the webhook logged the API server's calls" called

out=$(pod bad lots | kc apply -f - 2>&1)
echo "kubectl apply said: $out"
refused() { ! kc get pod bad -n team-w >/dev/null 2>&1; }
check "a pod with metrics-memory 'lots' is refused" refused
named() { grep -F 'admission webhook "pods.microview.io" denied the request' <<<"$out" >/dev/null &&
  grep -F 'lots' <<<"$out" >/dev/null; }
check "kubectl prints the webhook's message naming the value" named

logfmt() { grep -v '^ts=[^ ]* level=[a-z]* comp=[a-z-]* event=' "$LOGS/microview-webhook.log" | grep . >/dev/null && return 1; return 0; }
check "every webhook log line is one logfmt event" logfmt

stop_proc microview-webhook
webhook_config Ignore
down_ok() { pod down-0 64Ki | kc create -f - >/dev/null 2>&1; }
wait_for --what "pod created with the webhook down" 30 down_ok
check "webhook down, failurePolicy Ignore: the pod is still created" kc get pod down-0 -n team-w
check "and carries no $RES request" test -z "$(limit down-0)"
ignored() { grep -E 'Failed calling webhook, failing open pods.microview.io' "$LOGS/kube-apiserver.log" >/dev/null; }
check "the API server logged that it failed open on the webhook" ignored

echo "webhook: failed=$fails"
[ "$fails" -eq 0 ] || {
  dump_logs 30
  exit 1
}
