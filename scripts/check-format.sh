#!/usr/bin/env bash
# Fails if any tracked C source or header differs from .clang-format's style.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format || command -v clang-format-14 || true)
if [ -z "$cf" ]; then
  echo "check-format: clang-format not installed (scripts/deps.sh test installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null || find cmd pkg tests bench -name '*.[ch]')
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! "$cf" --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) need clang-format -i:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files clean"
