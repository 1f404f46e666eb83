# Shared by the image tests (sourced): a working Docker daemon or exit 77, loudly.
# Uses the running daemon; when `docker info` fails and this is root, starts dockerd and stops
# it again at exit (docker_stop, called from the caller's EXIT trap).
# Also sources tests/lib/testlib.sh (check, wait_for, skip, ...) for the image tests.
# shellcheck shell=bash
# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
dockerd_pid=
docker_skip() {
  echo "SKIPPED: $(basename "$0"): nothing was built or tested in a container on this machine" >&2
  skip "$@"
}
docker_ok() { docker info >/dev/null 2>&1; }
docker_wait() { wait_for "$1" docker_ok; } # <seconds>
docker_ensure() { # <log file for dockerd>
  command -v docker >/dev/null || docker_skip "docker CLI is not installed (Debian: docker.io)"
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || docker_skip "docker info fails and dockerd is not installed"
  [ "$(id -u)" -eq 0 ] || docker_skip "docker info fails and starting dockerd needs root"
  echo "docker info failed: starting dockerd (log: $1)"
  dockerd >"$1" 2>&1 &
  dockerd_pid=$!
  if ! docker_wait 60; then
    tail -n 20 "$1"
    docker_stop
    docker_skip "dockerd did not come up within 60 s"
  fi
}
docker_stop() {
  [ -n "$dockerd_pid" ] || return 0
  kill "$dockerd_pid" 2>/dev/null
  wait "$dockerd_pid" 2>/dev/null
  dockerd_pid=
}
