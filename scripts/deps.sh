#!/usr/bin/env bash
# Installs MicroView's build and test dependencies from Debian 12 packages.
# Usage: scripts/deps.sh [build|test]   (default: test, which includes build)
# Runs apt-get only for packages that are missing; uses sudo when not root.
set -euo pipefail

profile=${1:-test}

build_pkgs=(
  build-essential cmake pkg-config
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler
  libmicrohttpd-dev zlib1g-dev libyaml-dev libcurl4-openssl-dev libjson-c-dev
  libibverbs-dev librdmacm-dev rdma-core
  curl
  libgnutls28-dev
)
test_pkgs=(
  libcunit1-dev clang libclang-rt-14-dev clang-format
  prometheus
  python3 python3-grpcio python3-protobuf python3-grpc-tools python3-prometheus-client
  python3-yaml python3-dev python3-setuptools python3-pip
  golang-go golang-github-prometheus-client-golang-dev
  qemu-system-x86 qemu-utils busybox-static cpio xz-utils kmod
  ibverbs-utils perftest iproute2 util-linux
  yamllint
  openssl
  shellcheck
  containerd runc containernetworking-plugins iptables
)

pkgs=("${build_pkgs[@]}")
[ "$profile" = test ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt/dpkg run (a parallel build, unattended upgrades) instead of failing.
apt_opts=(-o DPkg::Lock::Timeout=900 -o Acquire::Retries=3)
$SUDO apt-get "${apt_opts[@]}" update -qq
$SUDO apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}"
