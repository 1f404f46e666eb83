#!/usr/bin/env bash
# The device-plugin path against the real kubelet: microview-agent (Kubernetes mode, a host
# process) registers with the e2e cluster's kubelet; a pod asking for microview.io/metrics gets
# its segment through the kubelet's Allocate and PreStartContainer; the container writes through
# libmicroview (microviewctl gen) and the collector (host process, shm) serves the series with
# the pod's identity; kubelet restart -> re-registration (timed); pod deleted -> segment
# collected and the pages usable again.
# Usage: device_plugin.sh BUILD_DIR [LOG_DIR]. Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
cluster_exclusive "$@"
build=${1:?usage: device_plugin.sh BUILD_DIR [LOG_DIR]}
build=$(cd "$build" && pwd)
keep=${2:-$MV_CACHE/e2e-cluster-logs/device_plugin}
need_host_tools
private_kubelet_dir "$0" "$@"
for b in microview-agent microview-collector microviewctl; do
  [ -x "$build/bin/$b" ] || skip "$build/bin/$b not built"
done
rm -rf "$keep"
watch_pid=
cleanup() {
  [ -n "$watch_pid" ] && kill -- "-$watch_pid" 2>/dev/null
  stop_proc microview-collector
  stop_proc microview-agent
  MV_KEEP_LOGS="$keep" "$MV_CLUSTER_SRC/down.sh"
}
trap cleanup EXIT
RES=microview.io/metrics
POOL=4096 # pages: the agent's default 16Mi pool of 4Ki pages

t0=$(now_ms)
"$MV_CLUSTER_SRC/up.sh" >/dev/null || {
  echo "FAIL: cluster did not come up (logs: $keep)"
  exit 1
}
t_up=$(now_ms)
"$MV_CLUSTER_SRC/images.sh" writer "$build" || {
  echo "FAIL: writer image"
  exit 1
}

# --- the agent: a service account token for pod reads, paths of the real kubelet
kc create namespace team-a >/dev/null
kc create serviceaccount microview-agent -n kube-system >/dev/null
kc create clusterrole microview-agent --verb=get,list,watch --resource=pods >/dev/null
kc create clusterrolebinding microview-agent --clusterrole=microview-agent \
  --serviceaccount=kube-system:microview-agent >/dev/null
kc create token microview-agent -n kube-system --duration=2h >"$D/agent.token"
STATE=$D/microview
AGENT_LOG=$LOGS/microview-agent.log
cat >"$D/agent.yaml" <<EOF
device_plugin_dir: "$MV_DEVICE_PLUGIN_DIR"
endpoint: "$MV_AGENT_ENDPOINT"
pod_resources_socket: "$POD_RESOURCES_SOCK"
api_server: "https://127.0.0.1:$MV_API_PORT"
token_file: "$D/agent.token"
ca_file: "$CERTS/ca.crt"
node_name: "$MV_NODE"
state_dir: "$STATE"
gc_interval_ms: "500"
gc_grace_ms: "5000"
identity_retry_ms: "500"
EOF
# The kubelet's device-plugin dir is a fixed host path: another plugin serving there (an agent
# started with its defaults by something else on this host) would register the same resource
# with this kubelet and take our Allocate calls.
foreign() {
  find "$MV_DEVICE_PLUGIN_DIR" -maxdepth 1 -type s ! -name kubelet.sock ! -name "$MV_AGENT_ENDPOINT" 2>/dev/null
}
if [ -n "$(foreign)" ]; then
  echo "FAIL: another device plugin serves in $MV_DEVICE_PLUGIN_DIR (a path the kubelet fixes): $(foreign | tr '\n' ' ')"
  exit 1
fi
start_proc microview-agent "$build/bin/microview-agent" --config "$D/agent.yaml"
events() { grep -c "event=$1" "$AGENT_LOG" 2>/dev/null || true; }
has_event() { grep "event=$1" "$AGENT_LOG" 2>/dev/null | grep -- "${2:-}" >/dev/null; }
wait_for --what "dp.registered" 20 has_event dp.registered
check "agent registered with the real kubelet (dp.registered)" has_event dp.registered
allocatable() { kc get node "$MV_NODE" -o jsonpath="{.status.allocatable.microview\.io/metrics}"; }
alloc_is() { [ "$(allocatable)" = "$1" ]; }
wait_for --what "allocatable $RES=$POOL" 30 alloc_is "$POOL"
check "node allocatable shows $RES: $(allocatable) (want $POOL)" alloc_is "$POOL"

# --- the collector on the host, reading segments through shm
CPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_proc microview-collector "$build/bin/microview-collector" --agent "unix:$STATE/agent.sock" \
  --listen "127.0.0.1:$CPORT" --tick-ms 100
metrics() { curl -fsS --max-time 2 "http://127.0.0.1:$CPORT/metrics"; }

# writer_pod NAME PAGES: a pod whose container runs microviewctl gen on its segment.
writer_pod() {
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: team-a
  labels: {app: checkout}
  annotations: {microview.io/labels: "app=checkout,tier=web"}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: mv.local/microview-writer:e2e
    imagePullPolicy: Never
    args: ["gen", "--segment", "\$(MICROVIEW_SEGMENT)", "--rate", "50",
           "--counters", "1", "--gauges", "1", "--histograms", "0"]
    resources:
      requests: {$RES: "$2"}
      limits: {$RES: "$2"}
EOF
}
phase() { kc get pod "$1" -n team-a -o jsonpath='{.status.phase}' 2>/dev/null; }
is_running() { [ "$(phase "$1")" = Running ]; }
pod_uid() { kc get pod "$1" -n team-a -o jsonpath='{.metadata.uid}'; }

writer_pod writer 16
wait_for --what "pod writer Running" 90 is_running writer
check "pod requesting $RES: 16 is Running" is_running writer
t_running=$(now_ms)
check "kubelet called Allocate: dp.allocated pages=16" has_event dp.allocated "pages=16 "
wait_for --what "prestart.mapped for writer" 15 has_event prestart.mapped 'pod=writer'
mapped() { grep 'event=prestart.mapped' "$AGENT_LOG" | grep 'namespace=team-a' | grep 'pod=writer' |
  grep 'container=app' >/dev/null; }
check "kubelet called PreStartContainer: prestart.mapped namespace=team-a pod=writer container=app" mapped
seg_id=$(grep 'event=dp.allocated' "$AGENT_LOG" | grep 'pages=16 ' | tail -1 | grep -o 'id=seg-[0-9a-f]*' | cut -d= -f2)
cid=$(kc get pod writer -n team-a -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
cpid=$(ctrd tasks ls 2>/dev/null | awk -v c="$cid" '$1==c{print $2}')
check "the container (pid $cpid) has MICROVIEW_SEGMENT=/var/run/microview/segment" \
  sh -c "tr '\\0' '\\n' </proc/$cpid/environ | grep -qx MICROVIEW_SEGMENT=/var/run/microview/segment"
check "the container has MICROVIEW_SEGMENT_ID=$seg_id" \
  sh -c "tr '\\0' '\\n' </proc/$cpid/environ | grep -qx MICROVIEW_SEGMENT_ID=$seg_id"
check "the container sees its segment mounted at /var/run/microview/segment" \
  test -f "/proc/$cpid/root/var/run/microview/segment"
series() {
  metrics 2>/dev/null | grep '^gen_' | grep 'namespace="team-a"' | grep "pod=\"$1\"" |
    grep 'container="app"' | grep 'app="checkout"' | grep 'tier="web"' >/dev/null
}
wait_for --what "collector series of writer" 30 series writer
check "collector /metrics has the writer's series with namespace, pod, container and annotation labels" series writer
t_series=$(now_ms)
gen_value() { metrics | grep '^gen_requests_total{' | grep -m1 'pod="writer"' | awk '{print $2}'; }

# --- kubelet restart: re-registration and allocatable
before_rereg=$(events dp.reregistered)
before_failed=$(events dp.register_failed)
# inode and ctime: a re-created socket may get the old inode number back
sock_ino() { stat -c "%i %.9Z" "$MV_DEVICE_PLUGIN_DIR/kubelet.sock" 2>/dev/null || echo none; }
ino0=$(sock_ino)
v0=$(gen_value)
# Every node update the API server sends from here on, with its allocatable, time-stamped.
WATCH=$D/node-watch.txt
setsid bash -c '"$0" --kubeconfig "$1" get node "$2" --watch \
  -o jsonpath="{.status.allocatable.microview\.io/metrics}{\" \"}{.metadata.resourceVersion}{\"\n\"}" |
  while read -r a rv; do echo "$(date +%s%3N) $a $rv"; done' \
  "$(k8s_bin)/kubectl" "$ADMIN_KUBECONFIG" "$MV_NODE" >"$WATCH" 2>&1 &
watch_pid=$!
wait_for --what "node watch" 10 test -s "$WATCH"
stop_proc kubelet 15
t_kstart=$(now_ms)
log "step: kubelet restarted"
start_kubelet
# The kubelet serves device-plugin registration once it re-creates kubelet.sock.
sock_new() { [ -S "$MV_DEVICE_PLUGIN_DIR/kubelet.sock" ] && [ "$(sock_ino)" != "$ino0" ]; }
wait_for --what "kubelet.sock re-created" 60 sock_new
check "the restarted kubelet re-created kubelet.sock" sock_new
# When the kubelet bound its registration socket (its ctime, ms resolution).
t_serving=$(stat -c %.3Z "$MV_DEVICE_PLUGIN_DIR/kubelet.sock" | tr -d .)
rereg() { [ "$(events dp.reregistered)" -gt "$before_rereg" ]; }
wait_for --what "dp.reregistered" 10 rereg
check "agent re-registered after the kubelet restart (dp.reregistered)" rereg
refused=$(($(events dp.register_failed) - before_failed))
check "refused Register calls while the kubelet was down were backed off ($refused dp.register_failed lines)" \
  test "$refused" -le 20
rereg_ts=$(grep 'event=dp.reregistered' "$AGENT_LOG" | tail -1 | grep -o '^ts=[^ ]*' | cut -d= -f2)
rereg_ms=$(date -d "$rereg_ts" +%s%3N)
rereg_s=$(secs "$t_serving" "$rereg_ms" 3)
check "re-registered within 1 s of the kubelet serving kubelet.sock (${rereg_s}s)" \
  awk -v s="$rereg_s" 'BEGIN{exit !(s <= 1.0)}'
# A pod admitted right after the restart gets the resource (no UnexpectedAdmissionError).
t_w2=$(now_ms)
writer_pod writer2 16
wait_for --what "pod writer2 Running" 90 is_running writer2
t_w2_run=$(now_ms)
log "step: writer2 running"
if [ $((t_w2_run - t_w2)) -gt 15000 ]; then
  echo "note: writer2 took $(secs "$t_w2" "$t_w2_run" 3)s to run; its events:"
  kc get events -n team-a --field-selector involvedObject.name=writer2 -o wide 2>&1 | head -20
fi
check "a pod created right after the kubelet restart is admitted and Running" is_running writer2
# Allocatable in every node update during and after the restart (the restarted kubelet posts
# node status when it changes; a dip would show here).
kill -- "-$watch_pid" 2>/dev/null
posts=$(awk -v t="$t_kstart" '$1 > t' "$WATCH" | wc -l)
min_seen=$(awk -v t="$t_kstart" -v m="$POOL" '$1 > t && $2 != "" && $2 + 0 < m {m = $2 + 0} END {print m}' "$WATCH")
last=$(tail -1 "$WATCH" | awk '{print $2}')
check "allocatable $RES never dropped below $POOL in the $posts node update(s) after the kubelet restart (lowest: $min_seen, last: $last)" \
  test "$min_seen" = "$POOL" -a "$last" = "$POOL"
not_failed() { ! kc get events -n team-a -o jsonpath='{.items[*].reason}' | grep UnexpectedAdmissionError >/dev/null; }
check "no UnexpectedAdmissionError events" not_failed
restarts=$(kc get pod writer -n team-a -o jsonpath='{.status.containerStatuses[0].restartCount}')
check "the first writer kept running through the kubelet restart (restartCount=$restarts)" \
  sh -c "[ '$(phase writer)' = Running ] && [ '$restarts' = 0 ]"
advanced() { v=$(gen_value); [ -n "$v" ] && [ -n "$v0" ] && awk -v a="$v0" -v b="$v" 'BEGIN{exit !(b > a)}'; }
wait_for --what "writer's counter advancing" 10 advanced
check "the writer's counter kept advancing in the collector ($v0 -> $(gen_value))" advanced

# --- pod deleted: segment collected, pages back
seg2=$(grep 'event=dp.allocated' "$AGENT_LOG" | grep 'pages=16 ' | tail -1 | grep -o 'id=seg-[0-9a-f]*' | cut -d= -f2)
t_del=$(now_ms)
log "step: deleting the writers"
kc delete pod writer writer2 -n team-a --wait=true --timeout=60s >/dev/null
log "step: writers deleted"
collected() { has_event segment.collected "id=$1"; }
wait_for --what "segment $seg_id collected" 30 collected "$seg_id"
check "segment $seg_id collected after its pod was deleted (segment.collected)" collected "$seg_id"
wait_for --what "segment $seg2 collected" 30 collected "$seg2"
check "segment $seg2 collected" collected "$seg2"
t_gc=$(now_ms)
log "step: segments collected"
check "the segment directory $STATE/$seg_id is gone" test ! -e "$STATE/$seg_id"
series_gone() { ! series writer; }
wait_for --what "writer series gone from the collector" 15 series_gone
check "the collector dropped the deleted pod's series" series_gone
# The whole pool in one pod: only possible if every page came back to the kubelet and the agent.
writer_pod full "$POOL"
wait_for --what "pod full Running" 90 is_running full
check "a pod asking for the whole pool ($POOL pages) is Running" is_running full
check "Allocate of the whole pool: dp.allocated pages=$POOL pool_used=$POOL" \
  has_event dp.allocated "pages=$POOL .*pool_used=$POOL pool_total=$POOL"

# Every registration the kubelet accepted came from this agent.
kreg=$(grep -c 'Got registration request from device plugin' "$LOGS/kubelet.log")
areg=$(($(events dp.registered) + $(events dp.reregistered)))
check "the kubelet's $kreg registration(s) all came from this agent ($areg)" test "$kreg" = "$areg"
no_foreign() { [ -z "$(foreign)" ]; }
check "no other device plugin appeared in $MV_DEVICE_PLUGIN_DIR" no_foreign

echo "device_plugin: up=$(secs "$t0" "$t_up" 3)s pod_running=$(secs "$t_up" "$t_running" 3)s" \
  "series=$(secs "$t_running" "$t_series" 3)s kubelet_start_to_sock=$(secs "$t_kstart" "$t_serving" 3)s" \
  "reregistration_after_sock=${rereg_s}s" \
  "pod_after_restart_running=$(secs "$t_w2" "$t_w2_run" 3)s node_updates_after_restart=$posts allocatable_min_during_restart=$min_seen gc_after_delete=$(secs "$t_del" "$t_gc" 3)s" \
  "total=$(secs "$t0" "$(now_ms)" 3)s failed=$fails"
[ "$fails" -eq 0 ] || {
  dump_logs 40
  exit 1
}
