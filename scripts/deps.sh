#!/usr/bin/env bash
# Installs MicroView's build and test dependencies from Debian 12 packages.
# Usage: scripts/deps.sh [build|test]   (default: test, which includes build)
#        scripts/deps.sh --list build|test|runtime|cross-arm64   (print a list, install nothing)
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
  libsnappy-dev
)
test_pkgs=(
  libcunit1-dev clang libclang-rt-14-dev clang-format
  prometheus
  python3 python3-grpcio python3-protobuf python3-grpc-tools python3-prometheus-client
  python3-yaml python3-dev python3-setuptools python3-pip python3-pytest
  golang-go golang-github-prometheus-client-golang-dev
  qemu-system-x86 qemu-utils busybox-static cpio xz-utils kmod
  ibverbs-utils perftest iproute2 util-linux
  yamllint
  openssl
  shellcheck
  rt-tests
  containerd runc containernetworking-plugins iptables
)
# The container image tests: debootstrap makes the base images.
test_pkgs+=(debootstrap)
# The live view's browser test (tests/integration/test_ui.py): headless Chromium.
test_pkgs+=(chromium)
# bench/tick_bytes.sh counts the tick's memory traffic under callgrind's cache simulation.
test_pkgs+=(valgrind)
# Not installed on this machine: package lists for the container images (scripts/base-image.sh)
# and the arm64 cross build (scripts/cross-arm64.sh). `scripts/deps.sh --list NAME` prints one.
# Runtime libraries of the binaries and libmicroview (the image's final stage; checked with ldd).
runtime_pkgs=(
  libgrpc29 libprotobuf-c1 libmicrohttpd12 zlib1g libjson-c5 libyaml-0-2 libcurl4
  libibverbs1 librdmacm1 ibverbs-providers ca-certificates
  libsnappy1v5
)
# Cross toolchain + the arm64 halves of build_pkgs' -dev packages (multiarch) + CUnit, and
# qemu-user to run the arm64 unit tests.
cross_arm64_pkgs=(crossbuild-essential-arm64 libcunit1-dev:arm64 qemu-user-static)
for p in "${build_pkgs[@]}"; do
  case $p in *-dev) cross_arm64_pkgs+=("$p:arm64") ;; esac
done
if [ "$profile" = --list ]; then
  case ${2:-} in
    build) printf '%s\n' "${build_pkgs[@]}" ;;
    test) printf '%s\n' "${test_pkgs[@]}" ;;
    runtime) printf '%s\n' "${runtime_pkgs[@]}" ;;
    cross-arm64) printf '%s\n' "${cross_arm64_pkgs[@]}" ;;
    *) echo "usage: $0 --list build|test|runtime|cross-arm64" >&2; exit 2 ;;
  esac
  exit 0
fi

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
