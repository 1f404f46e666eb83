#!/usr/bin/env bash
# host_wake.sh: how late this machine wakes a thread that asks to run once per tick, with
# nothing of MicroView running: cyclictest (Debian's rt-tests) with one thread per core, under
# the scheduling policy the collector's tick workers run with (SCHED_OTHER, not pinned), each
# sleeping to absolute 1 ms deadlines. A wake-up a whole tick late is a tick that no collector
# could have started on time on this machine: the floor under tick_bench's missed ticks
# (issue goal 4). --policy fifo: SCHED_FIFO priority 80 with the memory locked instead (needs
# CAP_SYS_NICE), to see whether real-time scheduling inside the machine would help. Prints a
# bench=host_wake line and a report-only goal line; never asserts.
#
# Usage: bench/host_wake.sh [--seconds S] [--tick-us US] [--threads N] [--policy other|fifo] [--quick]
set -uo pipefail
seconds=60 tick_us=1000 threads=$(nproc) policy=other
while [ $# -gt 0 ]; do
  case "$1" in
    --policy) policy=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --tick-us) tick_us=${2:?}; shift ;;
    --threads) threads=${2:?}; shift ;;
    --quick) seconds=5 ;;
    -h | --help) sed -n '2,12p' "$0" | cut -c3-; exit 0 ;;
    *) echo "host_wake.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$seconds$tick_us$threads" in
  *[!0-9]*) echo "host_wake.sh: --seconds, --tick-us and --threads take whole numbers" >&2; exit 2 ;;
esac
case "$policy" in
  other) sched=(--policy=other --priority=0) ;;
  fifo) sched=(--policy=fifo --priority=80 --mlockall) ;;
  *) echo "host_wake.sh: --policy takes other or fifo, not $policy" >&2; exit 2 ;;
esac
if ! command -v cyclictest >/dev/null; then
  echo "host_wake.sh: cyclictest not found (Debian package rt-tests; scripts/deps.sh test installs it)" >&2
  exit 2
fi

out=$(mktemp "${TMPDIR:-/tmp}/mvwake.XXXXXX")
trap 'rm -f "$out"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg)
# --histogram=TICK: latencies of 0..TICK-1 us are counted per microsecond, longer ones are the
# overflows: the wake-ups at least a whole tick late. --policy=other --priority=0: the default
# scheduler, as the tick workers run; no --mlockall (the collector does not lock its memory).
# --laptop: cyclictest otherwise asks the kernel for a CPU wake-up latency of 0 through
# /dev/cpu_dma_latency for the whole machine, which keeps idle CPUs polling instead of halting,
# and the collector asks for no such thing (its --tick-poll keeps only its own workers polling).
if ! cyclictest --threads="$threads" --interval="$tick_us" --distance=0 --duration="$seconds" \
  "${sched[@]}" --laptop --histogram="$tick_us" --quiet >"$out" 2>"$out.err"; then
  echo "host_wake.sh: cyclictest failed:" >&2
  cat "$out.err" >&2
  rm -f "$out.err"
  exit 1
fi
rm -f "$out.err"

# The summary lines hold one figure per thread: "# Total: 000059990 000059988",
# "# Max Latencies: 00312 00127", "# Histogram Overflows: 00002 00000". cyclictest goes on from
# the next deadline still ahead after a late wake-up, so a thread stopped for 9.6 ms wakes late
# once and skips 9 deadlines: the deadlines skipped (the wake-ups each thread fell short of
# seconds / tick) are the ticks a 1 ms loop doing nothing else would have missed, as tick_bench
# counts them (a tick started whole periods late).
awk -v threads="$threads" -v tick_us="$tick_us" -v seconds="$seconds" -v load="$load_before" -v policy="$policy" '
function max_fields(s,   n, f, m, i) { n = split(s, f, " "); m = 0; for (i = 1; i <= n; i++) if (f[i] + 0 > m) m = f[i] + 0; return m }
function sum_fields(s,   n, f, t, i) { n = split(s, f, " "); t = 0; for (i = 1; i <= n; i++) t += f[i] + 0; return t }
/^# Total:/ {
  sub(/^# Total:/, ""); n = split($0, f, " "); want = int(seconds * 1000000 / tick_us)
  for (i = 1; i <= n; i++) { cycles += f[i]; if (want > f[i] + 0) skipped += want - f[i] }
  got++
}
/^# Max Latencies:/       { sub(/^# Max Latencies:/, ""); maxus = max_fields($0); got++ }
/^# Histogram Overflows:/ { sub(/^# Histogram Overflows:/, ""); late = sum_fields($0); got++ }
# Histogram rows: "LATENCY_US COUNT_THREAD1 COUNT_THREAD2 ..."; half a tick late or more.
/^[0-9]+ / { if ($1 + 0 >= tick_us / 2) for (i = 2; i <= NF; i++) half += $i }
END {
  if (got != 3 || cycles == 0) { print "host_wake.sh: cyclictest printed no summary" > "/dev/stderr"; exit 1 }
  printf "bench=host_wake tool=cyclictest threads=%d tick_us=%d seconds=%d wakeups=%d late_tick=%d late_half_tick=%d deadlines_skipped=%d max_us=%d policy=%s load_before=%s\n", threads, tick_us, seconds, cycles, late, half + late, skipped, maxus, policy, load
  printf "goal=tick.host_floor%s issue_goal=4 threads=%d seconds=%d figure=%d target=report unit=ticks_missed_doing_nothing late_tick=%d max_us=%d policy=%s met=yes\n", policy == "fifo" ? "_fifo" : "", threads, seconds, skipped, late, maxus, policy
}' "$out"
