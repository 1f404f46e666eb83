#!/usr/bin/env bash
# go-tools.sh: builds pinned Go tools from the Go module proxy into a cache outside the tree and
# prints the path of the binary.
#
# Usage:  scripts/go-tools.sh TOOL          e.g. HELM=$(scripts/go-tools.sh helm)
#         scripts/go-tools.sh --list        the tools and their pinned versions
# Tools:  helm      helm.sh/helm/v3/cmd/helm at HELM_VERSION
#         k8scheck  tests/tools/k8scheck (this tree), keyed by a hash of its sources
#         prometheus3  github.com/prometheus/prometheus/cmd/prometheus at PROMETHEUS3_VERSION
#         prometheus-adapter  sigs.k8s.io/prometheus-adapter/cmd/adapter, pinned as a tool of
#                   the module e2e/cluster/adapter (go install ...@version needs the proxy's
#                   version list, which it does not serve for every module)
#         keda      KEDA's operator and metrics API server (github.com/kedacore/keda/v2 cmd/operator,
#                   cmd/adapter), pinned as tools of the module e2e/cluster/keda, plus the CRDs of
#                   the same module version; prints the directory holding operator, adapter, crds/
#
# Binaries land in $MV_CACHE/bin/<tool>-<version> (default /var/cache/microview, or
# ~/.cache/microview when that is not writable); a binary already there is reused without
# touching the network. Build output goes to stderr, so stdout holds
# only the path. Concurrent callers of one tool serialise on a lock file in the cache.
#
# Other scripts can add tools: source this file and call
#   mv_go_tool NAME MODULE/PATH/TO/CMD VERSION [-ldflags...]
# which prints the path like the command does (sourcing changes no shell option).

HELM_VERSION=v3.21.4
HELM_K8S_MINOR=36 # helm v3.21.4 is built on client-go v0.36.2
# Prometheus 3.x for remote write 2.0 and native-histogram scrapes: the module's v0.3xx.y
# tag is release 3.xx.y (Debian's package is 2.x).
PROMETHEUS3_VERSION=v0.316.0

# The cache: $MV_CACHE, else /var/cache/microview when it can be written (root), else the
# user's cache directory.
if [ -z "${MV_CACHE:-}" ]; then
  MV_CACHE=/var/cache/microview
  if ! mkdir -p "$MV_CACHE/bin" 2>/dev/null || [ ! -w "$MV_CACHE/bin" ]; then
    MV_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/microview
  fi
fi
MV_GO_TOOLS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The Go toolchain: /usr/local/go (recent) first, then whatever `go` is on PATH.
mv_go_bin() {
  if [ -n "${GO:-}" ]; then
    echo "$GO"
  elif [ -x /usr/local/go/bin/go ]; then
    echo /usr/local/go/bin/go
  elif command -v go >/dev/null 2>&1; then
    command -v go
  else
    echo "go-tools: no Go toolchain (expected /usr/local/go/bin/go or go on PATH)" >&2
    return 1
  fi
}

# mv_go_locked NAME CMD...: runs CMD while holding the lock of tool NAME (flock when available).
mv_go_locked() {
  local lock=$MV_CACHE/bin/.$1.lock
  shift
  mkdir -p "$MV_CACHE/bin"
  if command -v flock >/dev/null 2>&1; then
    (
      flock 9
      "$@"
    ) 9>"$lock"
  else
    "$@"
  fi
}

# mv_go_tool NAME PKG VERSION [GO BUILD FLAGS...]: go install PKG@VERSION into the cache as
# NAME-VERSION (module mode, static, no VCS stamping) and print its path.
mv_go_tool() {
  local name=$1 pkg=$2 version=$3
  shift 3
  local out="$MV_CACHE/bin/$name-$version"
  if [ ! -x "$out" ]; then
    mv_go_locked "$name" _mv_go_install "$out" "$pkg@$version" "$@" >&2
  fi
  [ -x "$out" ] || { echo "go-tools: $name $version was not built" >&2; return 1; }
  echo "$out"
}

_mv_go_install() {
  local out=$1 target=$2
  shift 2
  [ -x "$out" ] && return 0 # built by a concurrent caller while we waited for the lock
  local go gobin
  go=$(mv_go_bin)
  gobin=$(mktemp -d "$MV_CACHE/bin/.build.XXXXXX")
  echo "go-tools: building $target with $("$go" version | cut -d' ' -f3) (once; cached in $MV_CACHE/bin)"
  if ! GOBIN=$gobin GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0 \
    nice -n 19 "$go" install -trimpath "$@" "$target"; then
    rm -rf "$gobin"
    echo "go-tools: go install $target failed (is the Go module proxy reachable? GOPROXY=$("$go" env GOPROXY))"
    return 1
  fi
  mv "$gobin/$(basename "${target%@*}")" "$out" || {
    rm -rf "$gobin"
    return 1
  }
  rm -rf "$gobin"
}

# mv_go_local NAME DIR [PKG]: builds the main package PKG (default: the module's root) of the
# in-tree module DIR into the cache as NAME-<hash of its go.mod, go.sum and .go files> and
# prints its path.
mv_go_local() {
  local name=$1 dir=$2 pkg=${3:-.} hash out
  hash=$(cd "$dir" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort |
    xargs sha256sum | sha256sum | cut -c1-16)
  out="$MV_CACHE/bin/$name-$hash"
  if [ ! -x "$out" ]; then
    mv_go_locked "$name" _mv_go_build_local "$out" "$dir" "$pkg" >&2
  fi
  [ -x "$out" ] || { echo "go-tools: $name was not built" >&2; return 1; }
  echo "$out"
}

_mv_go_build_local() {
  local out=$1 dir=$2 pkg=$3 go
  [ -x "$out" ] && return 0
  go=$(mv_go_bin)
  echo "go-tools: building $dir (once; cached in $MV_CACHE/bin)"
  (cd "$dir" && GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0 \
    nice -n 19 "$go" build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg") || {
    rm -f "$out.tmp"
    echo "go-tools: go build in $dir failed (is the Go module proxy reachable?)"
    return 1
  }
  mv "$out.tmp" "$out"
}

# mv_go_keda: builds KEDA's operator and adapter from the wrapper module e2e/cluster/keda into
# $MV_CACHE/keda-<version>-<hash of the module's go.mod and go.sum>/ and copies next to them the
# manifests of the same module version: crds/ (config/crd/bases) and rbac/ (the ServiceAccount,
# the operator's and the metrics server's roles and bindings). Prints the directory. A directory
# with its stamp is reused without touching the network.
mv_go_keda() {
  local dir=$MV_GO_TOOLS_ROOT/e2e/cluster/keda version hash out
  version=$(sed -n 's|^\tgithub.com/kedacore/keda/v2 \(v[^ ]*\).*|\1|p' "$dir/go.mod")
  [ -n "$version" ] || { echo "go-tools: no KEDA version in $dir/go.mod" >&2; return 1; }
  hash=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-16)
  out="$MV_CACHE/keda-$version-$hash"
  if [ ! -f "$out/stamp" ]; then
    mv_go_locked keda _mv_go_build_keda "$out" "$dir" "$version" >&2
  fi
  [ -f "$out/stamp" ] || { echo "go-tools: keda $version was not built" >&2; return 1; }
  echo "$out"
}

_mv_go_build_keda() {
  local out=$1 dir=$2 version=$3 go src
  [ -f "$out/stamp" ] && return 0
  go=$(mv_go_bin)
  mkdir -p "$out" || return 1
  if [ ! -x "$out/operator" ] || [ ! -x "$out/adapter" ]; then
    echo "go-tools: building KEDA $version operator and adapter (once; cached in $out)"
    rm -rf "$out/.build" && mkdir -p "$out/.build" || return 1
    (cd "$dir" && GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0 nice -n 19 "$go" build -trimpath \
      -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=${version#v}" -o "$out/.build/" \
      github.com/kedacore/keda/v2/cmd/operator github.com/kedacore/keda/v2/cmd/adapter) || {
      rm -rf "$out/.build"
      echo "go-tools: go build of KEDA in $dir failed (is the Go module proxy reachable?)"
      return 1
    }
    mv "$out/.build/operator" "$out/.build/adapter" "$out/" && rm -rf "$out/.build" || return 1
  fi
  src=$(cd "$dir" && GOFLAGS=-mod=mod GOTOOLCHAIN=local "$go" list -m -f '{{.Dir}}' github.com/kedacore/keda/v2) ||
    return 1
  rm -rf "$out/crds" "$out/rbac" && mkdir -p "$out/crds" "$out/rbac" || return 1
  (cd "$src" && cp config/crd/bases/*.yaml "$out/crds/" &&
    cp config/service_account/service_account.yaml "$out/rbac/service-account.yaml" &&
    cp config/rbac/role.yaml "$out/rbac/operator-role.yaml" &&
    cp config/rbac/role_binding.yaml "$out/rbac/operator-role-binding.yaml" &&
    cp config/metrics-server/role.yaml "$out/rbac/metrics-server-role.yaml" &&
    cp config/metrics-server/role_binding.yaml "$out/rbac/metrics-server-role-binding.yaml") || {
    echo "go-tools: KEDA's manifests (config/crd/bases, config/rbac, ...) not found in $src"
    return 1
  }
  chmod -R u+w "$out" && echo "$version" >"$out/stamp"
}

mv_go_tools_main() {
  case "${1:-}" in
  helm)
    # The ldflags of helm's release Makefile: its version, and the Kubernetes version that
    # `helm template`/`helm lint` assume without a cluster (client-go v0.M.N -> 1.M).
    local kv="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR"
    kv+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR"
    mv_go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION $kv"
    ;;
  k8scheck)
    mv_go_local k8scheck "$MV_GO_TOOLS_ROOT/tests/tools/k8scheck"
    ;;
  prometheus-adapter)
    mv_go_local prometheus-adapter "$MV_GO_TOOLS_ROOT/e2e/cluster/adapter" \
      sigs.k8s.io/prometheus-adapter/cmd/adapter
    ;;
  keda)
    mv_go_keda
    ;;
  prometheus3)
    # v0.MNN.P of the module is release 3.(MNN - 300).P
    local v=${PROMETHEUS3_VERSION#v0.}
    # remove_all_sd: only the file and http service discovery are compiled in (the tests use
    # static targets); the cloud SDKs and client-go would triple the build on 2 cores.
    mv_go_tool prometheus3 github.com/prometheus/prometheus/cmd/prometheus "$PROMETHEUS3_VERSION" \
      -tags remove_all_sd -ldflags "-s -w -X github.com/prometheus/common/version.Version=3.$((${v%%.*} - 300)).${v#*.}"
    ;;
  --list)
    echo "helm $HELM_VERSION"
    echo "prometheus3 $PROMETHEUS3_VERSION (github.com/prometheus/prometheus/cmd/prometheus)"
    echo "prometheus-adapter $(sed -n 's|^\tsigs.k8s.io/prometheus-adapter \(v[^ ]*\).*|\1|p' "$MV_GO_TOOLS_ROOT/e2e/cluster/adapter/go.mod")"
    echo "keda $(sed -n 's|^\tgithub.com/kedacore/keda/v2 \(v[^ ]*\).*|\1|p' "$MV_GO_TOOLS_ROOT/e2e/cluster/keda/go.mod")"
    echo "k8scheck (tests/tools/k8scheck, by source hash)"
    ;;
  *)
    echo "usage: scripts/go-tools.sh helm|k8scheck|keda|prometheus-adapter|prometheus3|--list" >&2
    return 2
    ;;
  esac
}

# Run as a command, not when sourced.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  mv_go_tools_main "$@"
fi
