# shellcheck shell=bash
# The one helper library of the shell tests (sourced, not run): integration tests, writer,
# webhook, chart and image tests, the e2e cluster scripts, the VM harness and the guest
# scripts that run inside the e2e VMs (those run under /bin/bash too, see e2e/vm/init.sh).
# It needs bash only: no other program except free_port (python3), log (date) and the
# commands passed to it. Sourcing it defines functions and sets passes=0 fails=0; it runs
# nothing and sets no traps or shell options.
#
# Settings read at call time:
#   TESTLIB_NAME    the name log() prints (default: the script's file name)
#   TESTLIB_PREFIX  printed before each PASS:/FAIL: line (default: nothing)

# shellcheck disable=SC2034 # read by the scripts that source this file
passes=0 fails=0

# log MSG...: one line "HH:MM:SS NAME: MSG" on stderr. Returns 0.
log() { printf '%s %s: %s\n' "$(date -u +%H:%M:%S)" "${TESTLIB_NAME:-${0##*/}}" "$*" >&2; }

# die MSG...: logs "ERROR: MSG" (see log) and exits 1. A setup error, not a test result.
die() {
  log "ERROR: $*"
  exit 1
}

# skip MSG...: prints "SKIPPED: MSG" on stdout and exits 77, the SKIP_RETURN_CODE that
# tests/CMakeLists.txt gives the tests which can skip.
skip() {
  echo "SKIPPED: $*"
  exit 77
}

# pass DESC / fail DESC: records one result: prints "PASS: DESC" or "FAIL: DESC" on stdout
# (after $TESTLIB_PREFIX) and adds one to passes or fails. Both return 0: fail does not exit
# (die does).
pass() {
  passes=$((passes + 1))
  echo "${TESTLIB_PREFIX:-}PASS: $*"
}
fail() {
  fails=$((fails + 1))
  echo "${TESTLIB_PREFIX:-}FAIL: $*"
}

# check DESC COMMAND...: runs COMMAND (its output is not hidden) and records its success or
# failure with pass/fail. Returns 0 either way: the script decides at its end from $fails.
check() {
  local desc=$1
  shift
  if "$@"; then pass "$desc"; else fail "$desc"; fi
}

# now_ms: prints the wall clock in milliseconds since the epoch. Returns 0.
now_ms() {
  local t=${EPOCHREALTIME:-}
  if [ -n "$t" ]; then
    t=${t/[.,]/}
    echo $((10#$t / 1000))
  else
    date +%s%3N
  fi
}

# secs FROM_MS TO_MS [DIGITS]: prints (TO_MS - FROM_MS) in seconds with DIGITS decimals
# (default 1). Returns 0.
secs() { awk -v a="$1" -v b="$2" -v d="${3:-1}" 'BEGIN{printf "%.*f", d, (b-a)/1000}'; }

# wait_for [--what WHAT] SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds or
# SECONDS (an integer) have passed (it runs at least once, the last time at or after the deadline). Returns 0 when it
# succeeded, else COMMAND's last status. Without --what COMMAND's output is shown and a timeout
# prints nothing; with --what COMMAND's output is hidden and a timeout logs "timed out after
# SECONDSs waiting for WHAT" (see log).
wait_for() {
  local what='' deadline rc
  if [ "$1" = --what ]; then
    what=$2
    shift 2
  fi
  local limit=$1
  shift
  deadline=$(($(now_ms) + limit * 1000))
  while :; do
    # (in && lists, so that a failing COMMAND does not end a `set -e` caller)
    if [ -n "$what" ]; then
      "$@" >/dev/null 2>&1 && return 0
    else
      "$@" && return 0
    fi
    rc=$?
    [ "$(now_ms)" -lt "$deadline" ] || break
    sleep 0.1
  done
  [ -n "$what" ] && log "timed out after ${limit}s waiting for $what"
  return "$rc"
}

# free_port: prints a loopback TCP port nobody listens on (bound once by the kernel's choice
# and released). Returns non-zero when python3 fails.
free_port() {
  /usr/bin/python3 -c \
    'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
