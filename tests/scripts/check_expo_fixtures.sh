#!/usr/bin/env bash
# Validates the expected mv_expo renderings with independent parsers: promtool (text 0.0.4)
# and the Python prometheus_client text and OpenMetrics parsers.
# Usage: tests/scripts/check_expo_fixtures.sh [fixture-dir]
# promtool exits 1 on parse errors (fail) and 3 on lint problems (printed, tolerated).
set -u
dir=${1:-tests/data/expo}
fail=0
shopt -s nullglob
proms=("$dir"/*.prom)
if [ ${#proms[@]} -eq 0 ]; then
  echo "no .prom fixtures in $dir" >&2
  exit 1
fi

if command -v promtool >/dev/null; then
  for f in "${proms[@]}"; do
    out=$(promtool check metrics <"$f" 2>&1)
    rc=$?
    case $rc in
    0) echo "ok    promtool $f" ;;
    3) echo "lint  promtool $f"; printf '%s\n' "$out" | sed 's/^/        /' ;;
    *) echo "FAIL  promtool $f (exit $rc)"; printf '%s\n' "$out" | sed 's/^/        /'; fail=1 ;;
    esac
  done
else
  echo "FAIL  promtool not found (Debian package: prometheus)"
  fail=1
fi

if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
  /usr/bin/python3 - "$dir" <<'PY' || fail=1
import glob, sys
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
bad = 0
for ext, parse in (("prom", parse_text), ("om", parse_om)):
    for path in sorted(glob.glob(f"{sys.argv[1]}/*.{ext}")):
        try:
            with open(path, encoding="utf-8") as f:
                n = len(list(parse(f.read())))
            print(f"ok    python-{ext} {path} ({n} families)")
        except Exception as e:  # any parser complaint is a failure
            print(f"FAIL  python-{ext} {path}: {e}")
            bad = 1
sys.exit(bad)
PY
else
  echo "FAIL  /usr/bin/python3 lacks prometheus_client (Debian package: python3-prometheus-client)"
  fail=1
fi
exit $fail
