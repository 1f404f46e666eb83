# Shared setup of the shell integration tests (sourced, not run); the helpers (check, wait_for,
# free_port, ...) are tests/lib/testlib.sh's.
# Sets: bin, tmp, pids; the caller passes BUILD_DIR as $1.
# shellcheck shell=bash
# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
build=${1:?usage: $0 BUILD_DIR}
# shellcheck disable=SC2034 # read by the scripts that source this file
bin=$build/bin
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
