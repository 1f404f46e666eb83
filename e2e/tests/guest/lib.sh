#!/usr/bin/env bash
# Helpers for guest scripts (sourced; bash, as e2e/vm/init.sh runs them): waiting, perftest runs
# and result lines, on top of the shared tests/lib/testlib.sh (check, wait_for, ...), whose
# PASS:/FAIL: lines carry the role here like e2e_log's.
# shellcheck source=SCRIPTDIR/../../../tests/lib/testlib.sh
. "$REPO/tests/lib/testlib.sh"
TESTLIB_PREFIX="[$E2E_ROLE] "

# e2e_log MSG...: one line on stdout (it ends up in the console and <role>.log).
e2e_log() { echo "[$E2E_ROLE] $*"; }

# e2e_result KEY=VALUE...: a line run-side tests grep for ("RESULT key=value ...").
e2e_result() { echo "RESULT $*"; }

# e2e_listening PORT: something listens on local TCP PORT.
e2e_listening() { ss -Hltn "sport = :$1" | grep -q .; }

# e2e_wait_tcp PORT [SECONDS]: waits until something listens on local TCP PORT.
e2e_wait_tcp() {
  wait_for "${2:-30}" e2e_listening "$1" && return 0
  e2e_log "nothing listens on port $1 after ${2:-30}s"
  return 1
}

# e2e_wait_file PATH [SECONDS]: waits for a file (e.g. a flag in $E2E_RUN from the peer VM).
e2e_wait_file() {
  wait_for "${2:-60}" test -e "$1" && return 0
  e2e_log "no $1 after ${2:-60}s"
  return 1
}

# e2e_perf_field FILE BYTES COLUMN: prints COLUMN of the perftest result row for message size BYTES.
e2e_perf_field() {
  awk -v b="$2" -v c="$3" '$1 == b && NF >= c && $2 ~ /^[0-9]+$/ {print $c; found = 1; exit}
    END {exit !found}' "$1"
}

# e2e_perf_uncalibrated FILE: perftest's output in FILE says it could not produce its report
# because its clock calibration failed (a correlation coefficient below 0.9: the host was
# too busy while it timed its cycle counter), which says nothing about the RDMA path; the run
# is worth repeating.
e2e_perf_uncalibrated() { grep -q "Can't produce a report" "$1"; }

# e2e_perf_local OUT TOOL ARGS...: runs perftest TOOL (ib_read_bw, ib_read_lat, ...) as server
# and client on this VM (client output in OUT, the server's in OUT.server), up to three times
# while the runs fail only for e2e_perf_uncalibrated, on a new port each time. Returns the
# last client's status.
e2e_perf_local() {
  local out=$1 tool=$2 attempt port rc server
  shift 2
  for attempt in 1 2 3; do
    port=$((18514 + attempt))
    timeout 60 "$tool" "$@" -p "$port" >"$out.server" 2>&1 &
    server=$!
    e2e_wait_tcp "$port" || { kill "$server" 2>/dev/null; return 1; }
    rc=0
    timeout 60 "$tool" "$@" -p "$port" "$E2E_SELF_IP" >"$out" 2>&1 || rc=$?
    cat "$out"
    if ! wait "$server"; then
      cat "$out.server"
      e2e_perf_uncalibrated "$out.server" || { e2e_log "FAIL: $tool server"; return 1; }
      [ "$rc" -ne 0 ] || rc=1
    fi
    if [ "$rc" -ne 0 ] && [ "$attempt" -lt 3 ] &&
      { e2e_perf_uncalibrated "$out" || e2e_perf_uncalibrated "$out.server"; }; then
      e2e_log "$tool: perftest's clock calibration failed (busy host), run $attempt of 3; again"
      continue
    fi
    return "$rc"
  done
}
