#!/usr/bin/env bash
# Brings up a one-node cluster of real Kubernetes components as plain processes on this host:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a private containerd (CRI) with
# runc and the Debian CNI bridge, and a kubelet. Prints the admin kubeconfig path when the node
# is Ready. Needs root. Undo with down.sh (up.sh runs it first if a previous cluster is left).
# Env: see lib.sh (MV_CLUSTER_DIR, MV_CACHE, ports, MV_HPA_SYNC, ...).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$MV_CLUSTER_SRC/certs.sh"

[ "$(id -u)" -eq 0 ] || die "needs root (kubelet, containerd, mounts, cgroups)"
for t in containerd containerd-shim-runc-v2 runc ctr openssl curl docker ip; do
  command -v "$t" >/dev/null || die "$t not found; run scripts/deps.sh test"
done
[ -x /usr/lib/cni/bridge ] || die "/usr/lib/cni/bridge missing; run scripts/deps.sh test (containernetworking-plugins)"

t0=$(now_ms)
if [ -d "$D" ]; then
  log "a previous cluster directory exists; running down.sh first"
  "$MV_CLUSTER_SRC/down.sh"
fi
BIN=$(k8s_bin)
MV_K8S_BIN=$BIN
t_build=$(now_ms)
mkdir -p "$D" "$LOGS" "$PIDS"
echo "$BIN" >"$D/bin"
# Host state the kubelet changes, restored by down.sh.
sysctl -n vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes >"$D/sysctl.before"
[ -d "$MV_DEVICE_PLUGIN_DIR" ] || touch "$D/created-device-plugin-dir"

gen_certs

# --- etcd
start_proc etcd "$BIN/etcd" --name mv-e2e --data-dir "$D/etcd" \
  --listen-client-urls "http://127.0.0.1:$MV_ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$MV_ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$MV_ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$MV_ETCD_PEER_PORT" \
  --initial-cluster "mv-e2e=http://127.0.0.1:$MV_ETCD_PEER_PORT" \
  --unsafe-no-fsync --log-level warn
wait_for --what "etcd health" 60 curl -fsS --max-time 1 "http://127.0.0.1:$MV_ETCD_PORT/health" ||
  die "etcd did not become healthy; see $LOGS/etcd.log"

# --- kube-apiserver
start_proc kube-apiserver "$BIN/kube-apiserver" \
  --bind-address=127.0.0.1 --secure-port="$MV_API_PORT" --advertise-address=127.0.0.1 \
  --endpoint-reconciler-type=none \
  --etcd-servers="http://127.0.0.1:$MV_ETCD_PORT" \
  --tls-cert-file="$CERTS/apiserver.crt" --tls-private-key-file="$CERTS/apiserver.key" \
  --client-ca-file="$CERTS/ca.crt" \
  --kubelet-client-certificate="$CERTS/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$CERTS/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$CERTS/ca.crt" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-key-file="$CERTS/sa.pub" \
  --service-account-signing-key-file="$CERTS/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range="$MV_SERVICE_RANGE" \
  --authorization-mode=Node,RBAC --allow-privileged=true \
  --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds,NodeRestriction,Priority,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota \
  --requestheader-client-ca-file="$CERTS/front-proxy-ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$CERTS/front-proxy-client.crt" \
  --proxy-client-key-file="$CERTS/front-proxy-client.key" \
  --enable-aggregator-routing=true \
  --v=1
wait_for --what "kube-apiserver /readyz" 120 \
  https_ok "https://127.0.0.1:$MV_API_PORT/readyz" "$CERTS/admin.crt" "$CERTS/admin.key" ||
  die "kube-apiserver not ready; see $LOGS/kube-apiserver.log"
t_api=$(now_ms)

# --- kube-controller-manager (HPA synced every $MV_HPA_SYNC) and kube-scheduler
start_proc kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$D/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$D/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$D/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$MV_KCM_PORT" \
  --tls-cert-file="$CERTS/kcm-serving.crt" --tls-private-key-file="$CERTS/kcm-serving.key" \
  --client-ca-file="$CERTS/ca.crt" --requestheader-client-ca-file="$CERTS/front-proxy-ca.crt" \
  --service-account-private-key-file="$CERTS/sa.key" --root-ca-file="$CERTS/ca.crt" \
  --cluster-signing-cert-file="$CERTS/ca.crt" --cluster-signing-key-file="$CERTS/ca.key" \
  --use-service-account-credentials=true --leader-elect=false \
  --service-cluster-ip-range="$MV_SERVICE_RANGE" \
  --horizontal-pod-autoscaler-sync-period="$MV_HPA_SYNC" \
  --horizontal-pod-autoscaler-downscale-stabilization=15s \
  --v=1
start_proc kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$D/scheduler.kubeconfig" \
  --authentication-kubeconfig="$D/scheduler.kubeconfig" \
  --authorization-kubeconfig="$D/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$MV_SCHED_PORT" \
  --tls-cert-file="$CERTS/scheduler-serving.crt" --tls-private-key-file="$CERTS/scheduler-serving.key" \
  --client-ca-file="$CERTS/ca.crt" --requestheader-client-ca-file="$CERTS/front-proxy-ca.crt" \
  --leader-elect=false --v=2

# --- CNI: a bridge of our own with host-local IPAM (state under $D)
mkdir -p "$D/cni/net.d" "$D/cni/ipam"
cat >"$D/cni/net.d/10-mv-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "mv-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$MV_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$MV_POD_SUBNET"}]],
        "dataDir": "$D/cni/ipam"
      }
    }
  ]
}
EOF

# --- containerd with the CRI plugin: own root, state, socket (Docker's containerd is untouched)
mkdir -p "$CTRD/root" "$CTRD/state"
cat >"$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[debug]
  address = "$CTRD/debug.sock"
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$MV_PAUSE_IMAGE"
  enable_selinux = false
  # This sandbox has no CAP_SYS_RESOURCE (not even in root's bounding set), so no process may
  # lower its oom_score_adj: runc fails the kubelet's -998 for sandboxes with "can't get final
  # child's PID from pipe: EOF". Clamp to containerd's own score, as rootless setups do.
  restrict_oom_score_adj = true
  # Sandbox network namespaces under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF
start_proc containerd containerd --config "$CTRD/config.toml"
wait_for --what "containerd socket" 30 ctr --address "$CTRD_SOCK" version ||
  die "containerd did not start; see $LOGS/containerd.log"

# --- images: the pause image (and any test images) built with docker, imported into k8s.io
"$MV_CLUSTER_SRC/images.sh" pause
t_images=$(now_ms)

# --- kubelet
mkdir -p "$KUBELET_ROOT" "$D/pod-logs" "$MV_DEVICE_PLUGIN_DIR"
cat >"$D/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $MV_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $MV_KUBELET_HEALTHZ_PORT
tlsCertFile: $CERTS/kubelet-serving.crt
tlsPrivateKeyFile: $CERTS/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CERTS/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
failSwapOn: false
# 0, not -999: the kubelet cannot lower its own score here (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
failCgroupV1: false
podLogsDir: $D/pod-logs
clusterDomain: cluster.local
resolvConf: ""
volumePluginDir: $D/volume-plugins
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
fileCheckFrequency: 5s
EOF
start_kubelet
wait_for --what "node $MV_NODE Ready" 120 \
  sh -c "'$BIN/kubectl' --kubeconfig '$ADMIN_KUBECONFIG' get node '$MV_NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" ||
  {
    dump_logs 30 >&2
    die "node $MV_NODE did not become Ready; logs in $LOGS"
  }
# Pods of the default service account need the account to exist before they can be created.
wait_for --what "default service account" 60 "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" get serviceaccount default -n default
t_ready=$(now_ms)
log "cluster up in $(secs "$t0" "$t_ready")s (binaries $(secs "$t0" "$t_build")s, etcd+apiserver $(secs "$t_build" "$t_api")s, images $(secs "$t_api" "$t_images")s, node Ready $(secs "$t_images" "$t_ready")s); logs in $LOGS"
echo "up_seconds=$(secs "$t0" "$t_ready")" >"$D/timings"
echo "$ADMIN_KUBECONFIG"
