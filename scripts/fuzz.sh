#!/usr/bin/env bash
# Builds the libFuzzer drivers with clang in build-fuzz/ and runs each fuzz_* target for a while.
# Usage: scripts/fuzz.sh [seconds-per-target]   (default 30)
# Each target bin/fuzz_<x> starts from a scratch copy of tests/fuzz/corpus/<x>/ (the committed seeds
# are never modified). Exits nonzero if any target crashes, leaks or trips a sanitizer; the
# reproducer is left in build-fuzz/fuzz/artifacts/.
set -euo pipefail

secs=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz

command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/deps.sh installs it)" >&2; exit 1; }
CC=clang cmake -S "$root" -B "$build" -DMV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

mkdir -p "$build/fuzz/artifacts"
status=0
found=0
for bin in "$build"/bin/fuzz_*; do
  [ -x "$bin" ] || continue
  found=1
  name=$(basename "$bin")
  seeds=$root/tests/fuzz/corpus/${name#fuzz_}
  work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/
  echo "fuzz: $name for ${secs}s ($(ls "$work" | wc -l) seeds)"
  if ! "$bin" -max_total_time="$secs" -print_final_stats=1 -max_len=65536 \
       -artifact_prefix="$build/fuzz/artifacts/$name-" "$work" >"$build/fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED; see $build/fuzz/$name.log" >&2
    tail -n 30 "$build/fuzz/$name.log" >&2
    status=1
  else
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$build/fuzz/$name.log" || true
  fi
  rm -rf "$work"
done
[ "$found" = 1 ] || { echo "fuzz: no fuzz_* targets were built" >&2; exit 1; }
exit $status
