# Shared helpers for the shell integration tests (sourced, not run).
# Sets: bin, tmp, pids, passes, fails; the caller passes BUILD_DIR as $1.
# shellcheck shell=bash
build=${1:?usage: $0 BUILD_DIR}
# shellcheck disable=SC2034 # read by the scripts that source this file
bin=$build/bin
tmp=$(mktemp -d)
pids=()
fails=0 passes=0
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
check() { # <description> <command...>
  local d=$1; shift
  if "$@"; then passes=$((passes + 1)); echo "PASS: $d"; else fails=$((fails + 1)); echo "FAIL: $d"; fi
}
wait_for() { # <seconds> <command...>
  local until=$((SECONDS + $1)); shift
  while [ $SECONDS -lt $until ]; do "$@" && return 0; sleep 0.1; done
  "$@"
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
