#!/usr/bin/env bash
# Soak: the chaos test's harness (tests/chaos/chaos.py) for hours. The agent, the collector and
# writers are SIGKILLed and restarted at random while every scrape is checked against what the
# writers wrote; a line of figures every --report-every seconds (scrapes, kills, violations,
# agent/collector RSS and CPU, time-to-appear percentiles). Not in CI. Exit 0 iff no violation.
#
#   bench/soak.sh [--hours H (4)] [--build DIR (build)] [--report-every S (300)] [--out FILE]
#                 [-- chaos.py options, e.g. --seed N --writers 16 --event-every 2,20]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hours=4 build=$root/build every=300 out=/dev/null
while [ $# -gt 0 ]; do
  case $1 in
    --hours) hours=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --report-every) every=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,8p' "$0" | cut -c3-; exit 0 ;;
    *) echo "soak: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in microview-agent microview-collector microviewctl chaos_writer; do
  [ -x "$build/bin/$b" ] || { echo "soak: $build/bin/$b missing: cmake --build $build" >&2; exit 2; }
done
duration=$(awk -v h="$hours" 'BEGIN { if (h <= 0) exit 1; printf "%d", h * 3600 }') ||
  { echo "soak: --hours wants a positive number" >&2; exit 2; }
# Processes live longer than in the CI run (events every 2..20 s), so RSS and CPU figures show
# drift; logs at warn keep hours of restarts small. Later options override these.
/usr/bin/python3 "$root/tests/chaos/chaos.py" "$build" --duration "$duration" \
  --report-every "$every" --event-every 2,20 --max-down 3 --log-level warn "$@" | tee "$out"
exit "${PIPESTATUS[0]}"
