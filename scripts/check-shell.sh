#!/usr/bin/env bash
# Runs shellcheck on every shell script in the repository (tracked files with a sh/bash shebang or a
# .sh name), following sourced files relative to each script. Warnings and errors fail.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
command -v shellcheck >/dev/null || { echo "SKIPPED: shellcheck not installed (scripts/deps.sh test)"; exit 77; }
mapfile -t scripts < <(git ls-files 2>/dev/null | while read -r f; do
  [ -f "$f" ] || continue
  case $f in *.sh) echo "$f"; continue ;; esac
  head -n 1 "$f" | grep -qE '^#!.*\b(bash|sh)\b' && echo "$f"
done)
[ ${#scripts[@]} -gt 0 ] || { echo "check-shell: no scripts found (not a git checkout?)" >&2; exit 1; }
shellcheck -x -P SCRIPTDIR -S warning "${scripts[@]}"
echo "check-shell: ${#scripts[@]} scripts clean"
