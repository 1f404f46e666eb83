#!/usr/bin/env bash
# tick_bytes.sh: the memory a tick's analytics touch, per metric per tick, counted (not timed).
#
# Usage: bench/tick_bytes.sh [--quick] [--build DIR] [--segments N]
#   --quick        1,000 measured ticks instead of 2,000 (after the same 16,000 warm-up ones)
#   --build DIR    the build whose bin/pipeline_bench runs (default build/)
#   --segments N   segments of 64 metrics (default 100)
# Runs `pipeline_bench --tick-sim` (the analytics part of tick_bench's tick on a simulated
# clock, the same work on every run) under callgrind's cache simulation, at 0, 10 and 100 %
# of the metrics changing per tick. Counts the measured ticks only (--toggle-collect=sim_tick):
#   analytics_lines_per_metric_per_tick: 64-byte lines the simulated first-level data cache
#     (32 KiB, 8-way) had to fetch, reads and writes, per metric per tick: the state and copy
#     bytes a tick brings to the core (state that is not touched costs nothing here)
#   analytics_bytes_per_metric_per_tick: the same in bytes (× 64)
#   instructions_per_metric_per_tick: callgrind's instruction count per metric per tick
# The segment side (probes and copies of the shared memory) is tick_bench's
# segment_bytes_per_metric_per_tick. Prints one bench=tick_bytes line per point; exits 77
# when valgrind is missing, nonzero when a run fails.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
ticks=2000
segs=100
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) ticks=1000 ;;
    --build) build=${2:?--build needs a directory}; shift ;;
    --segments) segs=${2:?--segments needs a number}; shift ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "tick_bytes.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$segs" in '' | *[!0-9]*) echo "tick_bytes.sh: --segments takes a number" >&2; exit 2 ;; esac
if ! command -v valgrind >/dev/null; then
  echo "tick_bytes.sh: SKIPPED: valgrind is not installed (Debian package valgrind, scripts/deps.sh test)" >&2
  exit 77
fi
bin=$build/bin/pipeline_bench
[ -x "$bin" ] || { echo "tick_bytes.sh: $bin is not built" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mvbench-bytes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rc=0
for pct in 0 10 100; do
  out=$tmp/cg.$pct
  if ! valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --I1=32768,8,64 \
    --LL=33554432,16,64 --toggle-collect=sim_tick --callgrind-out-file="$out" \
    "$bin" --tick-sim --segments "$segs" --change-pct "$pct" --ticks "$ticks" \
    >"$tmp/run.$pct" 2>&1; then
    echo "tick_bytes.sh: pipeline_bench --tick-sim --change-pct $pct failed under valgrind:" >&2
    tail -n 20 "$tmp/run.$pct" >&2
    rc=1
    continue
  fi
  # The "events:" and "summary:" lines of callgrind's output name and count the events.
  awk -v segs="$segs" -v ticks="$ticks" -v pct="$pct" '
    /^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
    /^summary:/ { for (i = 2; i <= NF; i++) val[i - 1] = $i }
    END {
      if (!("D1mr" in col) || !("Ir" in col)) { print "tick_bytes.sh: no cache events in the output" > "/dev/stderr"; exit 1 }
      per = segs * 64 * ticks
      lines = (val[col["D1mr"]] + val[col["D1mw"]]) / per
      printf "bench=tick_bytes segments=%d metrics=64 change_pct=%d ticks=%d analytics_lines_per_metric_per_tick=%.3f analytics_bytes_per_metric_per_tick=%.1f read_lines_per_metric_per_tick=%.3f write_lines_per_metric_per_tick=%.3f instructions_per_metric_per_tick=%.1f d1=32768,8,64 tool=callgrind\n", segs, pct, ticks, lines, lines * 64, val[col["D1mr"]] / per, val[col["D1mw"]] / per, val[col["Ir"]] / per
    }' "$out" || rc=1
done
exit $rc
