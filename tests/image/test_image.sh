#!/usr/bin/env bash
# The container image end to end: builds the local base images and microview/microview:VERSION,
# then on a private (internal) Docker network runs the agent (standalone), a `microviewctl gen`
# workload and the collector from that image, sharing a tmpfs volume for the agent's socket and
# segments. Asserts that /metrics, fetched from inside the network, carries the workload's
# series and passes `promtool check metrics`; that the collector and webhook containers run as a
# non-root uid; that every binary and libmicroview resolve all their libraries (ldd) in the final
# image; that it holds no compiler and no -dev package; and the OCI labels.
# Exit 77 (ctest SKIP) only when Docker cannot run here at all.
#
# Environment: MV_CACHE (base image tarballs). The images are kept afterwards:
# the docker layer cache is what makes the next run fast.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1

# shellcheck source=SCRIPTDIR/docker-lib.sh
. "$root/tests/image/docker-lib.sh"

# ---- Docker: use the running daemon, or start one (stopped again at exit) ----------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
docker_ensure "$tmp/dockerd.log"

version=$(sed -nE 's/^project\(microview VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
image=microview/microview:$version
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
p=mvimg-$$ # every container, network and volume this run makes is named $p-*
containers=()
cleanup() {
  for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1; done
  docker network rm "$p-net" >/dev/null 2>&1
  docker volume rm "$p-run" >/dev/null 2>&1
  docker_stop
  rm -rf "$tmp"
}
trap cleanup EXIT

# ---- build ------------------------------------------------------------------------------------
t0=$SECONDS
if ! scripts/base-image.sh build runtime; then
  echo "FAIL: scripts/base-image.sh build runtime"
  exit 1
fi
t_base=$((SECONDS - t0))
t0=$SECONDS
if ! docker build -q -t "$image" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  . >"$tmp/build.log" 2>&1; then
  tail -n 40 "$tmp/build.log"
  echo "FAIL: docker build"
  exit 1
fi
t_build=$((SECONDS - t0))
echo "timing: base images ${t_base}s, docker build ${t_build}s"

# ---- the final image's contents ----------------------------------------------------------------
in_image() { docker run --rm --network none --entrypoint /bin/sh "$image" -c "$1"; }
in_image 'ls /usr/bin/microview* /usr/lib/*/libmicroview.so.* /usr/include/microview.h /usr/lib/*/pkgconfig/libmicroview.pc' \
  >"$tmp/files.txt" 2>&1
for f in microview-agent microview-collector microviewctl libmicroview.so.0 microview.h libmicroview.pc; do
  check "image has $f" grep -q "/$f\$" "$tmp/files.txt"
done
if [ -d cmd/microview-webhook ]; then
  check "image has microview-webhook (cmd/microview-webhook is in the tree)" \
    grep -q '/microview-webhook$' "$tmp/files.txt"
fi
if [ -d cmd/microview-scaler ]; then
  check "image has microview-scaler (cmd/microview-scaler is in the tree)" \
    grep -q '/microview-scaler$' "$tmp/files.txt"
fi
# shellcheck disable=SC2016
in_image 'for f in /usr/bin/microview* /usr/lib/*/libmicroview.so.*; do
            ldd "$f" >/dev/null 2>&1 || { echo "$f: ldd failed"; continue; }
            ldd "$f" | sed -n "s|^|$f: |; /not found/p"; done' >"$tmp/ldd.txt" 2>&1
check "ldd: every library of every binary and libmicroview resolves in the image" \
  test ! -s "$tmp/ldd.txt"
[ -s "$tmp/ldd.txt" ] && cat "$tmp/ldd.txt"
in_image "dpkg-query -W -f '\${Package}\n'" >"$tmp/pkgs.txt"
grep -E -- '-dev$|^(gcc|g\+\+|cpp|clang|llvm|binutils|make|cmake|build-essential|libtool|autoconf)(-[0-9.]+)?$' \
  "$tmp/pkgs.txt" >"$tmp/devpkgs.txt"
check "no compiler or -dev package in the image ($(wc -l <"$tmp/pkgs.txt") packages)" \
  test ! -s "$tmp/devpkgs.txt"
[ -s "$tmp/devpkgs.txt" ] && cat "$tmp/devpkgs.txt"
check "no cc, gcc, ld, make or cmake on the image's PATH" \
  in_image '! command -v cc && ! command -v gcc && ! command -v ld && ! command -v make && ! command -v cmake'
label() { docker image inspect -f "{{ index .Config.Labels \"$1\" }}" "$image"; }
check "label org.opencontainers.image.version=$version" test "$(label org.opencontainers.image.version)" = "$version"
check "label org.opencontainers.image.revision=$revision" test "$(label org.opencontainers.image.revision)" = "$revision"
check "default user is 65532:65532" test "$(docker image inspect -f '{{.Config.User}}' "$image")" = 65532:65532

# ---- agent + workload + collector on a private network ---------------------------------------
docker network create --internal "$p-net" >/dev/null || { echo "FAIL: docker network create"; exit 1; }
# The agent's socket and segments: one tmpfs shared by the three containers, owned by 65532.
docker volume create --driver local --opt type=tmpfs --opt device=tmpfs \
  --opt o=size=64m,uid=65532,gid=65532,mode=0750 "$p-run" >/dev/null
run() { # <name> <docker run options and command...>
  local n=$p-$1; shift
  containers+=("$n")
  docker run -d --name "$n" --hostname "$n" --network "$p-net" "$@" >/dev/null
}
# Standalone mode needs no privilege: it runs as the image's default user here. (In Kubernetes
# the chart runs the agent as root for the kubelet's device-plugin directory; docs/image.md.)
run agent -v "$p-run:/run/microview" "$image" /usr/bin/microview-agent --standalone \
  --dir /run/microview --reap-interval-ms 200
agent_up() { docker exec "$p-agent" /usr/bin/microviewctl list >/dev/null 2>&1; }
check "agent answers on its unix socket" wait_for 30 agent_up
# Standalone mode checks a writer's liveness by pid: the workload shares the agent's pid namespace.
run gen --pid "container:$p-agent" -v "$p-run:/run/microview" "$image" /usr/bin/microviewctl gen \
  --label service=checkout --label instance=img --rate 200 --counters 2 --gauges 1 --histograms 1
run collector -v "$p-run:/run/microview:ro" "$image" /usr/bin/microview-collector \
  --listen 0.0.0.0:9469 --tick-ms 10
# A client on the same internal network: the build base image has curl.
run probe --entrypoint /bin/sleep microview-base/build:bookworm-amd64 infinity
scrape() { docker exec "$p-probe" curl -sf "http://$p-collector:9469/metrics" >"$tmp/metrics.txt" 2>/dev/null; }
has() { scrape && grep -q "$1" "$tmp/metrics.txt"; }
check "collector serves the workload's counter with its identity labels (fetched in the network)" \
  wait_for 30 has 'gen_requests_total{instance="img",service="checkout",worker="0"} '
check "histogram buckets with +Inf" grep -q 'gen_latency_seconds_bucket{instance="img",service="checkout",worker="0",le="+Inf"}' "$tmp/metrics.txt"
if command -v promtool >/dev/null; then
  check "promtool check metrics accepts /metrics" promtool check metrics <"$tmp/metrics.txt"
else
  check "promtool is installed (Debian: prometheus; scripts/deps.sh test)" false
fi
counter() { scrape && awk '/^gen_requests_total\{instance="img",service="checkout",worker="0"\} / { print $2 }' "$tmp/metrics.txt"; }
v1=$(counter)
advanced() { local v; v=$(counter); [ -n "$v" ] && [ -n "$v1" ] && awk -v a="$v1" -v b="$v" 'BEGIN { exit !(b > a) }'; }
check "the counter advances between scrapes" wait_for 10 advanced
check "the host cannot reach the internal network's collector (no published port)" \
  test -z "$(docker port "$p-collector")"

uid_of() { docker exec "$1" id -u; }
check "collector runs as a non-root uid ($(uid_of "$p-collector"))" test "$(uid_of "$p-collector")" -ne 0
check "collector's configured user is 65532" \
  test "$(docker inspect -f '{{.Config.User}}' "$p-collector")" = 65532:65532

# ---- webhook: a test key pair bind-mounted, default user ---------------------------------------------
if grep -q '/microview-webhook$' "$tmp/files.txt"; then
  mkdir -p "$tmp/tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$p-webhook" \
    -addext "subjectAltName=DNS:$p-webhook" -keyout "$tmp/tls/tls.key" -out "$tmp/tls/tls.crt" 2>/dev/null
  chmod 0755 "$tmp" "$tmp/tls" && chmod 0644 "$tmp/tls/tls.key" # a throw-away key, read by uid 65532
  run webhook -v "$tmp/tls:/tls:ro" "$image" /usr/bin/microview-webhook \
    --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key --listen :8443
  docker cp "$tmp/tls/tls.crt" "$p-probe:/tmp/ca.crt"
  healthz() { docker exec "$p-probe" curl -sf --cacert /tmp/ca.crt "https://$p-webhook:8443/healthz" >/dev/null 2>&1; }
  check "webhook answers /healthz over TLS (its own name, the test CA)" wait_for 30 healthz
  check "webhook runs as a non-root uid" test "$(uid_of "$p-webhook")" -ne 0
  check "webhook's configured user is the image default 65532" \
    test "$(docker inspect -f '{{.Config.User}}' "$p-webhook")" = 65532:65532
else
  echo "note: no microview-webhook in this tree's build; webhook checks not run"
fi

echo "image: $passes passed, $fails failed (base ${t_base}s, build ${t_build}s)"
if [ $fails -ne 0 ]; then
  for c in agent gen collector webhook; do
    docker logs "$p-$c" >/dev/null 2>&1 || continue
    echo "--- $c"; docker logs --tail 20 "$p-$c" 2>&1
  done
fi
[ $fails -eq 0 ]
