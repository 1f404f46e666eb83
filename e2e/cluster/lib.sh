# shellcheck shell=bash disable=SC2034  # settings used by the scripts that source this file
# Shared settings and helpers of the e2e cluster scripts (sourced by up.sh, down.sh and the tests).
# Everything the cluster writes lives under $MV_CLUSTER_DIR except what the components hard-code
# (see README.md, "What lives outside the cluster directory").

MV_CLUSTER_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MV_CACHE=${MV_CACHE:-/var/cache/microview}
MV_CLUSTER_DIR=${MV_CLUSTER_DIR:-/var/tmp/mv-cluster}
# The node is named by its address, as in hack/local-up-cluster.sh: the kubelet refuses a loopback
# --node-ip but takes an IP given as --hostname-override for the InternalIP.
MV_NODE=${MV_NODE:-127.0.0.1}
MV_ETCD_PORT=${MV_ETCD_PORT:-23791}
MV_ETCD_PEER_PORT=${MV_ETCD_PEER_PORT:-23801}
MV_API_PORT=${MV_API_PORT:-16443}
MV_KCM_PORT=${MV_KCM_PORT:-10257}
MV_SCHED_PORT=${MV_SCHED_PORT:-10259}
MV_KUBELET_PORT=${MV_KUBELET_PORT:-10250}
MV_KUBELET_HEALTHZ_PORT=${MV_KUBELET_HEALTHZ_PORT:-10248}
MV_BRIDGE=${MV_BRIDGE:-mvbr0}
MV_POD_SUBNET=${MV_POD_SUBNET:-10.244.77.0/24}
MV_SERVICE_RANGE=${MV_SERVICE_RANGE:-10.96.77.0/24}
MV_SERVICE_IP=${MV_SERVICE_IP:-10.96.77.1}
MV_PAUSE_IMAGE=${MV_PAUSE_IMAGE:-mv.local/pause:e2e}
MV_HPA_SYNC=${MV_HPA_SYNC:-5s}
# The kubelet's device manager hard-codes this directory (k8s.io/kubelet deviceplugin/v1beta1
# KubeletSocket); it cannot be moved under $MV_CLUSTER_DIR.
MV_DEVICE_PLUGIN_DIR=/var/lib/kubelet/device-plugins
# The test agent's socket there: not the agent's default name, so that an agent started with
# defaults elsewhere on this host is neither clobbered nor mistaken for ours.
MV_AGENT_ENDPOINT=${MV_AGENT_ENDPOINT:-mv-e2e.sock}

D=$MV_CLUSTER_DIR
CERTS=$D/certs
LOGS=$D/logs
PIDS=$D/pids
CTRD=$D/containerd
CTRD_SOCK=$CTRD/containerd.sock
KUBELET_ROOT=$D/kubelet
POD_RESOURCES_SOCK=$KUBELET_ROOT/pod-resources/kubelet.sock
ADMIN_KUBECONFIG=$D/admin.kubeconfig

# log, die, skip, check, wait_for, now_ms, secs, free_port: the shared test helpers.
# (relative to the repository root, where scripts/check-shell.sh runs: this file is sourced from
# two directory depths)
# shellcheck source=tests/lib/testlib.sh
. "$MV_CLUSTER_SRC/../../tests/lib/testlib.sh"
TESTLIB_NAME=cluster

# cluster_exclusive "$@": called by each test first; runs the test again ($0) while holding the
# host's e2e cluster lock, since the cluster's ports, bridge and directory are fixed: test runs
# of two checkouts on one machine take turns instead of one tearing down the other's cluster
# (up.sh runs down.sh on a directory it finds). flock -o: the cluster's daemons do not inherit
# the lock. MV_CLUSTER_LOCK names the lock file.
cluster_exclusive() {
  [ -n "${MV_CLUSTER_LOCKED:-}" ] && return 0
  command -v flock >/dev/null || return 0
  local lock=${MV_CLUSTER_LOCK:-/run/lock/microview-e2e-cluster.lock}
  if ! flock -n "$lock" true; then
    log "another e2e cluster test holds $lock; waiting for it (up to 1 h)"
  fi
  MV_CLUSTER_LOCKED=1 exec flock -o -w 3600 "$lock" "$0" "$@"
}

# Directory with the component binaries (built by build.sh, cached by version).
k8s_bin() {
  if [ -z "${MV_K8S_BIN:-}" ] && [ -f "$D/bin" ]; then
    MV_K8S_BIN=$(cat "$D/bin") # written by up.sh
  fi
  if [ -z "${MV_K8S_BIN:-}" ]; then
    MV_K8S_BIN=$("$MV_CLUSTER_SRC/build.sh")
  fi
  echo "$MV_K8S_BIN"
}

kc() { "$(k8s_bin)/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }
ctrd() { ctr --address "$CTRD_SOCK" --namespace k8s.io "$@"; }

# start_proc NAME COMMAND...: runs COMMAND in the background with its output in $LOGS/NAME.log
# and its pid in $PIDS/NAME.pid.
start_proc() {
  local name=$1
  shift
  mkdir -p "$LOGS" "$PIDS"
  "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  log "started $name (pid $!, log $LOGS/$name.log)"
}

proc_alive() {
  local f=$PIDS/$1.pid
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# stop_proc NAME [SECONDS]: SIGTERM to the recorded pid, SIGKILL after SECONDS (default 10).
stop_proc() {
  local name=$1 grace=${2:-10} f=$PIDS/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for --what "$name to exit" "$grace" eval "! kill -0 $pid"; then
      log "$name (pid $pid) ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      wait_for --what "$name to die" 5 eval "! kill -0 $pid" || true
    fi
  fi
  rm -f "$f"
}

# start_kubelet: the kubelet with the configuration up.sh wrote (also used to restart it).
start_kubelet() {
  start_proc kubelet "$(k8s_bin)/kubelet" --config="$D/kubelet.yaml" \
    --kubeconfig="$D/kubelet.kubeconfig" --root-dir="$KUBELET_ROOT" \
    --hostname-override="$MV_NODE" --v=2
}

# https_ok URL CERT KEY: the URL answers 200 over TLS signed by the cluster CA.
https_ok() {
  curl -fsS --max-time 2 --cacert "$CERTS/ca.crt" --cert "$2" --key "$3" "$1" >/dev/null
}

# dump_logs [LINES]: the tail of every component log (for failing tests).
dump_logs() {
  local n=${1:-40} f
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last $n lines)"
    tail -n "$n" "$f"
  done
}

# need_host_tools: skip (77) when this host cannot run the cluster at all.
need_host_tools() {
  [ "$(id -u)" -eq 0 ] || skip "the e2e cluster needs root (kubelet, containerd, mounts)"
  local t
  for t in containerd runc ctr docker openssl curl; do
    command -v "$t" >/dev/null || skip "$t not installed (scripts/deps.sh test)"
  done
  [ -x /usr/lib/cni/bridge ] || skip "containernetworking-plugins not installed (scripts/deps.sh test)"
  docker info >/dev/null 2>&1 || skip "Docker Engine not running (images are built with docker build)"
  command -v "${GO:-go}" >/dev/null || skip "no Go toolchain to build the Kubernetes components"
}

# private_kubelet_dir SCRIPT ARGS...: re-runs the calling test in its own mount namespace with a
# tmpfs on /var/lib/kubelet, so the kubelet's fixed device-plugin dir is the test's alone (an
# agent started with its defaults elsewhere on this host can neither register with this
# kubelet nor lose its socket to down.sh). Returns only inside the namespace.
private_kubelet_dir() {
  [ -n "${MV_CLUSTER_PRIVATE:-}" ] && return 0
  command -v unshare >/dev/null || skip "unshare (util-linux) not installed"
  local made=0 rc
  if [ ! -d /var/lib/kubelet ]; then
    mkdir -p /var/lib/kubelet
    made=1
  fi
  MV_CLUSTER_PRIVATE=1 unshare --mount --propagation private \
    bash -c 'mount -t tmpfs mv-e2e-kubelet /var/lib/kubelet && exec "$@"' private "$@"
  rc=$?
  [ "$made" = 1 ] && rmdir /var/lib/kubelet 2>/dev/null
  exit "$rc"
}
