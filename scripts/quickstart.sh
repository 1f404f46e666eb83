#!/usr/bin/env bash
# One-command local pipeline: installs missing Debian packages (`scripts/deps.sh build`), builds
# the three binaries it runs (no tests), starts a standalone agent, a synthetic workload
# (microviewctl gen) and the shm collector, shows where /metrics is and live values, then runs
# until Ctrl-C.
#   --once        exit 0 after showing live values (and checking the output with promtool when
#                 it is installed: Debian package prometheus, in `scripts/deps.sh test`)
#   --port N      collector port (default 9469)
#   --seconds N   how long to show live values (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

once=0 port=9469 seconds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --once) once=1 ;;
    --port) port=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

./scripts/deps.sh build
# A new build directory is configured without the tests (they need the test profile's packages);
# an existing one keeps its settings. Either way only the binaries run below are compiled.
tests_off=()
[ -f build/CMakeCache.txt ] || tests_off=(-DMV_BUILD_TESTS=OFF)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${tests_off[@]}" >/dev/null
cmake --build build -j"$(nproc)" --target microview-agent microviewctl microview-collector >/dev/null
bin=$(pwd)/build/bin

if [ "$(id -u)" -eq 0 ]; then rundir=/run/microview-quickstart; else rundir=${XDG_RUNTIME_DIR:-/tmp}/microview-quickstart-$(id -u); fi
mkdir -p "$rundir"
logdir=$rundir/logs; mkdir -p "$logdir"
agent_sock=$rundir/agent.sock
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "quickstart: state and logs in $rundir"
"$bin/microview-agent" --standalone --dir "$rundir/segments" --socket "$agent_sock" \
  2>"$logdir/agent.log" & pids+=($!)
for _ in $(seq 50); do [ -S "$agent_sock" ] && break; sleep 0.1; done
[ -S "$agent_sock" ] || { echo "quickstart: agent did not start; see $logdir/agent.log" >&2; cat "$logdir/agent.log" >&2; exit 1; }

"$bin/microviewctl" gen --agent "unix:$agent_sock" --label service=checkout --label instance=a \
  --rate 200 2>"$logdir/gen-a.log" & pids+=($!)
"$bin/microviewctl" gen --agent "unix:$agent_sock" --label service=search --label instance=b \
  --rate 50 --histograms 2 2>"$logdir/gen-b.log" & pids+=($!)
"$bin/microview-collector" --transport shm --agent "unix:$agent_sock" \
  --listen "127.0.0.1:$port" --tick-ms 10 2>"$logdir/collector.log" & pids+=($!)

url="http://127.0.0.1:$port/metrics"
for _ in $(seq 50); do curl -sf -o /dev/null "$url" && break; sleep 0.1; done
curl -sf -o /dev/null "$url" || { echo "quickstart: collector not answering; see $logdir/collector.log" >&2; cat "$logdir/collector.log" >&2; exit 1; }

echo
echo "MicroView is running:"
echo "  metrics:   $url        (try: curl -s $url | grep gen_)"
echo "  segments:  http://127.0.0.1:$port/debug/segments"
echo "  list:      $bin/microviewctl list --agent unix:$agent_sock"
echo
for i in $(seq "$seconds"); do
  sleep 1
  echo "--- live values, t=${i}s"
  curl -s "$url" | grep -E '^gen_(requests_total|queue_depth|latency_seconds_count)\{.*worker="0"'
done

if [ $once -eq 1 ]; then
  if command -v promtool >/dev/null; then
    if curl -s "$url" | promtool check metrics; then
      echo "quickstart: promtool check metrics passed"
    else
      echo "quickstart: promtool check metrics failed" >&2
      exit 1
    fi
  else
    echo "quickstart: promtool not installed (Debian package prometheus, part of" \
      "scripts/deps.sh test): the exposition format was not checked"
  fi
  echo "quickstart: --once done"
  exit 0
fi
echo
echo "Running until Ctrl-C."
wait
