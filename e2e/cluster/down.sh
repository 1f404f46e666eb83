#!/usr/bin/env bash
# Tears down what up.sh started: the kubelet, every container of the private containerd, the
# containerd, the control plane, etcd; then mounts, network namespaces, the bridge, cgroups,
# sysctls the kubelet changed, and the cluster directory. Safe to run twice.
# MV_KEEP_LOGS=DIR copies the component logs to DIR first.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ -d "$D" ] || exit 0
if [ -n "${MV_KEEP_LOGS:-}" ] && [ -d "$LOGS" ]; then
  mkdir -p "$MV_KEEP_LOGS" && cp -a "$LOGS"/. "$MV_KEEP_LOGS"/
fi

stop_proc kubelet 15

# Containers of pods: stop their tasks through containerd (the kubelet is gone, nobody else
# would). Their network namespaces live under containerd's state dir and are unmounted below.
if proc_alive containerd; then
  for c in $(ctrd tasks ls -q 2>/dev/null); do
    ctrd tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
  done
  for c in $(ctrd tasks ls -q 2>/dev/null); do
    wait_for --what "task $c to stop" 10 sh -c "! ctr --address '$CTRD_SOCK' -n k8s.io tasks ls | grep -q '^$c .*RUNNING'" || true
    ctrd tasks delete -f "$c" >/dev/null 2>&1 || true
  done
  for c in $(ctrd containers ls -q 2>/dev/null); do
    ctrd containers delete "$c" >/dev/null 2>&1 || true
  done
fi
stop_proc containerd 15
stop_proc kube-scheduler
stop_proc kube-controller-manager
stop_proc kube-apiserver 20
stop_proc etcd

# Shims left by killed tasks exit on their own once containerd is gone; any that still point
# at our state dir are ours and are ended by pid.
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTRD_SOCK" 2>/dev/null); do
  kill -KILL "$p" 2>/dev/null || true
done

# Mounts under the cluster dir (sandbox /dev/shm, projected volumes, overlay rootfs), deepest first.
findmnt -rn -o TARGET | grep -F "$D/" | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
done

ip link del "$MV_BRIDGE" 2>/dev/null || true

# The kubelet's cgroups (cgroup v1: one tree per controller; v2: one tree).
for base in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/kubepods.slice; do
  [ -d "$base" ] && find "$base" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# Sysctls the kubelet sets on start-up, back to their values before up.sh.
if [ -f "$D/sysctl.before" ]; then
  mapfile -t vals <"$D/sysctl.before"
  keys=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
  for i in "${!keys[@]}"; do
    [ -n "${vals[$i]:-}" ] && sysctl -qw "${keys[$i]}=${vals[$i]}" 2>/dev/null
  done
fi

# The kubelet's iptables canary chains.
for t in mangle nat filter; do
  for ch in KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT KUBE-FIREWALL; do
    for ipt in iptables ip6tables; do
      if $ipt -w -t $t -S "$ch" >/dev/null 2>&1; then
        $ipt -w -t $t -F "$ch" 2>/dev/null
        $ipt -w -t $t -X "$ch" 2>/dev/null
      fi
    done
  done
done

# The device-plugin dir is fixed by the kubelet and shared with anything else on the host:
# remove only the kubelet's files and the test agent's socket, and the dir if up.sh made it.
if [ -d "$MV_DEVICE_PLUGIN_DIR" ]; then
  rm -f "$MV_DEVICE_PLUGIN_DIR/kubelet.sock" "$MV_DEVICE_PLUGIN_DIR/kubelet_internal_checkpoint" \
    "$MV_DEVICE_PLUGIN_DIR/$MV_AGENT_ENDPOINT"
  if [ -f "$D/created-device-plugin-dir" ]; then
    rmdir "$MV_DEVICE_PLUGIN_DIR" 2>/dev/null
    rmdir /var/lib/kubelet 2>/dev/null
  fi
fi

rm -rf --one-file-system "$D"
[ -d "$D" ] && log "could not remove $D completely" && exit 1
log "cluster down"
exit 0
