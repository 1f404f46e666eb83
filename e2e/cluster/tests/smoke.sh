#!/usr/bin/env bash
# Smoke test of the e2e cluster: up.sh, a pod of Debian's static busybox scheduled by the real
# scheduler, started by the real kubelet through containerd + runc with a CNI bridge address,
# its logs and an exec through the API server, then down.sh. Exit 0 pass, 1 fail, 77 skipped.
# Usage: smoke.sh [LOG_DIR]   (component logs are copied to LOG_DIR on exit)
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
cluster_exclusive "$@"
need_host_tools
private_kubelet_dir "$0" "$@"
keep=${1:-$MV_CACHE/e2e-cluster-logs/smoke}
rm -rf "$keep"
trap 'MV_KEEP_LOGS="$keep" "$MV_CLUSTER_SRC/down.sh"' EXIT

t0=$(now_ms)
if ! "$MV_CLUSTER_SRC/up.sh" >/dev/null; then
  echo "FAIL: cluster did not come up (logs: $keep)"
  exit 1
fi
t_up=$(now_ms)
"$MV_CLUSTER_SRC/images.sh" busybox || { echo "FAIL: busybox image"; exit 1; }

kc apply -f - <<'EOF' >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: smoke, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: mv.local/busybox:e2e
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo smoke-says-hello from $(hostname); ip -4 addr show eth0; exec sleep 3600"]
EOF
running() { [ "$(kc get pod smoke -o jsonpath='{.status.phase}')" = Running ]; }
wait_for --what "pod smoke Running" 120 running
check "pod Running on the real kubelet" running
t_run=$(now_ms)
node=$(kc get pod smoke -o jsonpath='{.spec.nodeName}')
check "scheduled by kube-scheduler onto $MV_NODE" test "$node" = "$MV_NODE"
ip=$(kc get pod smoke -o jsonpath='{.status.podIP}')
in_subnet() { case $ip in "${MV_POD_SUBNET%.*/*}".*) return 0 ;; esac; return 1; }
check "pod IP $ip from the CNI bridge subnet $MV_POD_SUBNET" in_subnet
has_log() { kc logs smoke -c main 2>/dev/null | grep "smoke-says-hello from smoke" >/dev/null; }
wait_for --what "pod log line" 30 has_log
check "kubectl logs shows the container's output" has_log
out=$(kc exec smoke -c main -- /bin/echo exec-ok 2>&1)
check "kubectl exec through the API server and the kubelet: '$out'" test "$out" = exec-ok
eth0_ip() { kc logs smoke -c main | grep "inet $ip/" >/dev/null; }
wait_for --what "the address in the pod log" 15 eth0_ip
check "the container's eth0 has the pod IP" eth0_ip
kc delete pod smoke --wait=true --timeout=60s >/dev/null
gone() { ! kc get pod smoke >/dev/null 2>&1; }
check "pod deleted" gone

echo "smoke: up=$(secs "$t0" "$t_up")s pod_running=$(secs "$t_up" "$t_run")s total=$(secs "$t0" "$(now_ms)")s failed=$fails"
[ "$fails" -eq 0 ] || {
  dump_logs 30
  exit 1
}
