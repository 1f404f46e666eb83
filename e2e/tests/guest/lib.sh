#!/usr/bin/env bash
# Helpers for guest scripts (sourced; bash): waiting, perftest runs and result lines.

# e2e_log MSG...: one line on stdout (it ends up in the console and <role>.log).
e2e_log() { echo "[$E2E_ROLE] $*"; }

# e2e_result KEY=VALUE...: a line run-side tests grep for ("RESULT key=value ...").
e2e_result() { echo "RESULT $*"; }

# e2e_wait_tcp PORT [SECONDS]: waits until something listens on local TCP PORT.
e2e_wait_tcp() {
  local port=$1 limit=${2:-30} i
  for ((i = 0; i < limit * 10; i++)); do
    ss -Hltn "sport = :$port" | grep -q . && return 0
    sleep 0.1
  done
  e2e_log "nothing listens on port $port after ${limit}s"
  return 1
}

# e2e_wait_file PATH [SECONDS]: waits for a file (e.g. a flag in $E2E_RUN from the peer VM).
e2e_wait_file() {
  local path=$1 limit=${2:-60} i
  for ((i = 0; i < limit * 10; i++)); do
    [ -e "$path" ] && return 0
    sleep 0.1
  done
  e2e_log "no $path after ${limit}s"
  return 1
}

# e2e_perf_field FILE BYTES COLUMN: prints COLUMN of the perftest result row for message size BYTES.
e2e_perf_field() {
  awk -v b="$2" -v c="$3" '$1 == b && NF >= c && $2 ~ /^[0-9]+$/ {print $c; found = 1; exit}
    END {exit !found}' "$1"
}
