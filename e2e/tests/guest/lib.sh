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
