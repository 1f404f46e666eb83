#!/usr/bin/env bash
# Builds the pinned Kubernetes components (one multi-call binary from kube/main.go) into
# ${MV_CACHE:-/var/cache/microview}/k8s-<version>/ and prints that directory.
# Idempotent: a stamp keyed by go.mod, go.sum, kube/main.go and the Go version skips the build;
# concurrent callers wait on a lock file for the one build in progress.
# Env: MV_CACHE (cache root), GO (go binary, default: go on PATH; needs Go >= 1.24).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${MV_CACHE:-/var/cache/microview}
GO=${GO:-go}

kver=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$here/go.mod")
[ -n "$kver" ] || { echo "build.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
out="$cache/k8s-$kver"
gover=$("$GO" env GOVERSION)
key=$(cat "$here/go.mod" "$here/go.sum" "$here/kube/main.go" | sha256sum | cut -c1-16)-$gover
names=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

built() { [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$key" ] && [ -x "$out/kube" ]; }
if built; then
  echo "$out"
  exit 0
fi

mkdir -p "$out"
# One build at a time (scripts/prebuild.sh may be building it in the background): wait for it.
exec 9>"$out/.lock"
flock 9
if built; then
  echo "$out"
  exit 0
fi
major=${kver#v}; major=${major%%.*}
minor=${kver#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
echo "build.sh: building Kubernetes $kver components with $gover into $out (slow on a cold cache)" >&2
start=$(date +%s)
(cd "$here" && CGO_ENABLED=0 nice -n 19 "$GO" build -trimpath -ldflags="$ldflags" \
  -o "$out/kube.tmp" ./kube) >&2
mv -f "$out/kube.tmp" "$out/kube"
for n in "${names[@]}"; do ln -sfn kube "$out/$n"; done
echo "$key" > "$out/.stamp"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$out"
