#!/usr/bin/env bash
# Fails when C code calls a function that cannot bound its output or keeps hidden state:
# sprintf, vsprintf, strcpy, strcat, strncpy, strncat, gets, strtok, tmpnam, mktemp. Use
# snprintf (mv_util_fmt checks truncation), memcpy with a known length, strtok_r, mkstemp/mkdtemp.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
banned='sprintf|vsprintf|strcpy|strcat|strncpy|strncat|gets|strtok|tmpnam|mktemp'
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null)
[ ${#files[@]} -gt 0 ] || { echo "check-banned: no C files found (not a git checkout?)" >&2; exit 1; }
# A call is the name as a word followed by '('; comment lines are skipped.
if hits=$(grep -nE "(^|[^A-Za-z0-9_])($banned)[[:space:]]*\(" "${files[@]}" |
          grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*|//)'); then
  echo "check-banned: banned functions called:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "check-banned: ${#files[@]} files clean"
