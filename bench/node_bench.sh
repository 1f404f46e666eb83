#!/usr/bin/env bash
# node_bench.sh: what the agent costs its node at steady state. A standalone agent hands out N
# segments (default 1,000) through N real `microviewctl create` calls, each with a live owner
# process (so the reaper watches N pids) and a writer-sized catalog; a collector follows it over
# the Watch stream and reads every segment every tick. After a warm-up, the agent's CPU time
# (utime + stime from /proc/PID/stat) is sampled over a window and its RSS read from
# /proc/PID/status. Prints key=value lines (bench=node ...) and goal lines; never asserts speed.
#
# Usage: bench/node_bench.sh [--build DIR] [--segments N] [--seconds S] [--tick-ms MS] [--quick]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build segments=1000 seconds=60 tick_ms=1 warmup=10
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=${2:?}; shift ;;
    --segments) segments=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --tick-ms) tick_ms=${2:?}; shift ;;
    --quick) seconds=10 warmup=3 ;;
    -h | --help) sed -n '2,9p' "$0" | cut -c3-; exit 0 ;;
    *) echo "node_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
for b in microview-agent microview-collector microviewctl; do
  [ -x "$build/bin/$b" ] || { echo "node_bench.sh: $build/bin/$b missing (cmake --build $build)" >&2; exit 2; }
done
# shellcheck source=SCRIPTDIR/../tests/lib/testlib.sh
. "$root/tests/lib/testlib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mvnode.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

hz=$(getconf CLK_TCK)
# cpu_ticks PID: utime + stime of PID in clock ticks (fields 14 and 15 of /proc/PID/stat; the
# command name in field 2 may hold spaces, so count from the closing parenthesis).
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
rss_kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }

"$build/bin/microview-agent" --standalone --dir "$tmp/segs" --log-level warn 2>"$tmp/agent.log" &
agent=$!; pids+=("$agent")
wait_for 10 test -S "$tmp/segs/agent.sock" || { echo "node_bench.sh: agent did not start" >&2; cat "$tmp/agent.log" >&2; exit 1; }

# One owner process for all segments: the reaper checks each segment's pid every interval.
sleep 100000 & owner=$!; pids+=("$owner")
t0=$(now_ms)
for ((i = 0; i < segments; i++)); do
  "$build/bin/microviewctl" create --agent "unix:$tmp/segs/agent.sock" --size 8192 \
    --owner-pid "$owner" --label service=node-bench --label "replica=$i" >/dev/null 2>>"$tmp/create.err" ||
    { echo "node_bench.sh: create $i failed:" >&2; tail -n 3 "$tmp/create.err" >&2; exit 1; }
done
create_ms=$(($(now_ms) - t0))

port=$(free_port)
"$build/bin/microview-collector" --agent "unix:$tmp/segs/agent.sock" --listen "127.0.0.1:$port" \
  --tick-ms "$tick_ms" --no-analytics --log-level warn 2>"$tmp/collector.log" &
collector=$!; pids+=("$collector")
ok_count() { curl -sf "http://127.0.0.1:$port/metrics" | sed -n 's/^microview_segments{state="ok"} \([0-9]*\)$/\1/p'; }
all_ok() { test "$(ok_count)" = "$segments"; }
wait_for 120 all_ok || { echo "node_bench.sh: the collector did not read all $segments segments" >&2; exit 1; }

# thread_runtimes PID: "TID NAME NS SLICES" per thread (/proc/PID/task/*/schedstat: time on a
# CPU and the number of times it ran), to say which of the agent's threads spend its CPU.
thread_runtimes() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm")" "$(cut -d' ' -f1,3 "$t/schedstat")"
  done 2>/dev/null | sort
}

sleep "$warmup"
thread_runtimes "$agent" >"$tmp/threads0"
a0=$(cpu_ticks "$agent") c0=$(cpu_ticks "$collector") w0=$(now_ms)
sleep "$seconds"
a1=$(cpu_ticks "$agent") c1=$(cpu_ticks "$collector") w1=$(now_ms)
thread_runtimes "$agent" >"$tmp/threads1"
kill -0 "$agent" 2>/dev/null || { echo "node_bench.sh: the agent died" >&2; exit 1; }

awk -v seg="$segments" -v a="$((a1 - a0))" -v c="$((c1 - c0))" -v hz="$hz" -v ms="$((w1 - w0))" \
  -v rss="$(rss_kib "$agent" VmRSS)" -v hwm="$(rss_kib "$agent" VmHWM)" \
  -v crss="$(rss_kib "$collector" VmRSS)" -v cms="$create_ms" -v tick="$tick_ms" 'BEGIN {
  s = ms / 1000; apct = 100 * a / hz / s; cpct = 100 * c / hz / s
  printf "bench=node segments=%d seconds=%.1f tick_ms=%d agent_cpu_pct_core=%.3f agent_rss_kib=%d agent_hwm_kib=%d collector_cpu_pct_core=%.1f collector_rss_kib=%d create_ms_per_segment=%.2f clk_tck=%d\n",
    seg, s, tick, apct, rss, hwm, cpct, crss, cms / seg, hz
  # CPU time has clock-tick resolution: report the bound when no tick was charged.
  printf "goal=agent_cpu target=<=0.1%%_of_a_core figure=%.3f%% resolution=%.3f%% met=%s\n",
    apct, 100 / hz / s, apct <= 0.1 ? "yes" : "no"
}'
# Per thread of the agent that ran in the window (threads that started or ended inside it are
# left out): milliseconds on a CPU and wakeups per second.
join "$tmp/threads0" "$tmp/threads1" | awk -v ms="$((w1 - w0))" '
  $7 > $4 { printf "bench=node_thread name=%s cpu_ms=%.2f wakeups_per_s=%.2f\n", $2, ($6 - $3) / 1e6, ($7 - $4) / (ms / 1000) }'
