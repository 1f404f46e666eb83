#!/bin/busybox sh
# shellcheck shell=dash
# Guest /init for the e2e VMs: loads modules, sets up net + rxe0, chroots into the host's root, runs the test.
#
# Kernel command line words read here (set by run.sh):
#   e2e.role=a|b        role name; selects /mnt/e2e/guest-<role>.sh and rc-<role>
#   e2e.ip=ADDR/LEN     static address for eth0 (default 10.0.2.15/24)
#   e2e.share=1         also mount the 9p tag "e2eshare" at /mnt/share (read-write)
#   e2e.shell=1         drop to a busybox shell on the console instead of powering off (debugging)
# 9p tags: "hostroot" (host /, read-only, becomes the chroot), "e2erun" (run dir, read-write).
# The outcome is written to /mnt/e2e/rc-<role> (exit code) and /mnt/e2e/<role>.log (output).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

role=a
ip4=10.0.2.15/24
share=0
shell=0
read -r cmdline </proc/cmdline
for w in $cmdline; do
  case "$w" in
  e2e.role=*) role=${w#e2e.role=} ;;
  e2e.ip=*) ip4=${w#e2e.ip=} ;;
  e2e.share=*) share=${w#e2e.share=} ;;
  e2e.shell=*) shell=${w#e2e.shell=} ;;
  esac
done

log() { echo "e2e-init[$role]: $*" >/dev/console; }
finish() {
  if [ "$shell" = 1 ]; then
    log "e2e.shell=1: starting a shell; 'poweroff -f' to exit"
    setsid cttyhack sh
  fi
  sync
  poweroff -f
  sleep 5
}
fail() {
  log "FAILED: $*"
  [ -d /sysroot/mnt/e2e ] && echo 125 >"/sysroot/mnt/e2e/rc-$role" 2>/dev/null
  finish
}

log "loading modules"
while read -r ko; do
  insmod "$ko" || fail "insmod $ko"
done </etc/e2e/modules

ip link set lo up
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 50 ]; do
  sleep 0.1
  n=$((n + 1))
done
[ -e /sys/class/net/eth0 ] || fail "no eth0 (virtio_net)"
ip addr add "$ip4" dev eth0 || fail "ip addr add $ip4"
ip link set eth0 up || fail "ip link set eth0 up"

log "mounting the host root (read-only) and the run dir"
o=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$o,ro,cache=loose" hostroot /sysroot || fail "mount 9p hostroot"
mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm || fail "mount /dev/shm"
mount -t devpts devpts /dev/pts 2>/dev/null
for d in proc sys dev; do
  mount -o rbind "/$d" "/sysroot/$d" || fail "bind /$d"
done
mount -t tmpfs -o mode=1777 tmp /sysroot/tmp || fail "mount /tmp"
mount -t tmpfs -o mode=0755 run /sysroot/run || fail "mount /run"
mount -t tmpfs -o mode=0755 mnt /sysroot/mnt || fail "mount /mnt"
mkdir -p /sysroot/mnt/e2e /sysroot/mnt/share
mount -t 9p -o "$o" e2erun /sysroot/mnt/e2e || fail "mount 9p e2erun"
if [ "$share" = 1 ]; then
  mount -t 9p -o "$o" e2eshare /sysroot/mnt/share || fail "mount 9p e2eshare"
fi

log "creating rxe0 on eth0"
chroot /sysroot /usr/bin/env PATH=/usr/sbin:/usr/bin:/sbin:/bin rdma link add rxe0 type rxe netdev eth0 ||
  fail "rdma link add rxe0"
[ -e /dev/infiniband/uverbs0 ] || fail "no /dev/infiniband/uverbs0"

log "running guest-$role.sh"
ulimit -l unlimited
set -o pipefail
chroot /sysroot /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/tmp TERM=dumb LANG=C.UTF-8 /bin/bash "/mnt/e2e/guest-$role.sh" </dev/null 2>&1 |
  tee "/sysroot/mnt/e2e/$role.log" >/dev/console
rc=$?
log "guest-$role.sh exited with $rc"
echo "$rc" >"/sysroot/mnt/e2e/rc-$role"
finish
