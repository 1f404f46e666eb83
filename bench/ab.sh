#!/usr/bin/env bash
# bench/ab.sh: compares two builds of one benchmark by runs alternated in time, on machines
# whose speed drifts from minute to minute (shared memory, other tenants): each pair runs A
# and B back to back, in the order A,B then B,A then A,B..., so neither build always runs
# second; per pair the ratio B/A of one figure; at the end the median ratio and how often B
# was the lower.
#
#   bench/ab.sh [--pairs N] [--key KEY] [--line PREFIX] BIN_A BIN_B [-- ARGS...]
#
# BIN_A, BIN_B: the two executables (e.g. build-old/bin/tick_bench build/bin/tick_bench);
# ARGS: the benchmark's own arguments, the same for both (default: --seconds 5 --workers 1).
# KEY: the figure compared, lower is better (default cpu_per_tick_us); PREFIX: the result
# line it is taken from, the first that starts with it (default "bench=tick ").
set -euo pipefail

pairs=8
key=cpu_per_tick_us
line='bench=tick '
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --line) line=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: bench/ab.sh [--pairs N] [--key KEY] [--line PREFIX] BIN_A BIN_B [-- ARGS...]" >&2
  exit 2
fi
a=$1 b=$2
shift 2
if [ "${1:-}" = "--" ]; then shift; fi
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--seconds 5 --workers 1)
case "$pairs" in ''|*[!0-9]*|0) echo "ab.sh: --pairs takes a whole number, 1 or more" >&2; exit 2 ;; esac
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "ab.sh: $bin is not an executable" >&2; exit 2; }
done

# figure BIN: runs it once and prints the figure of the first matching line.
figure() {
  local out v
  out=$("$1" "${args[@]}" 2>/dev/null) || { echo "ab.sh: $1 failed" >&2; return 1; }
  v=$(printf '%s\n' "$out" | awk -v p="$line" -v k="$key" '
    index($0, p) == 1 {
      for (i = 1; i <= NF; i++) { n = index($i, "="); if (substr($i, 1, n - 1) == k) { print substr($i, n + 1); exit } }
    }')
  [ -n "$v" ] || { echo "ab.sh: no $key= on a line starting with '$line' from $1" >&2; return 1; }
  echo "$v"
}

echo "# ab.sh: A=$a B=$b key=$key pairs=$pairs args=${args[*]}"
ratios=()
for ((i = 1; i <= pairs; i++)); do
  if ((i % 2)); then
    fa=$(figure "$a"); fb=$(figure "$b"); order=AB
  else
    fb=$(figure "$b"); fa=$(figure "$a"); order=BA
  fi
  r=$(awk -v x="$fa" -v y="$fb" 'BEGIN { if (x > 0) printf "%.3f", y / x; else print "nan" }')
  ratios+=("$r")
  echo "ab pair=$i order=$order a=$fa b=$fb ratio_b_a=$r"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk -v n="$pairs" -v k="$key" '
  { r[NR] = $1; if ($1 < 1) lower++ }
  END {
    med = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
    printf "ab summary key=%s pairs=%d median_ratio_b_a=%.3f b_lower=%d of %d min=%s max=%s\n",
      k, n, med, lower, NR, r[1], r[NR]
  }'
