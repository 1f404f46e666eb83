# Shared helpers of the writer tests (sourced). Go modules come from the Go module proxy at
# the versions pinned in each go.mod/go.sum, cached outside the tree in $MV_CACHE/gomod.
# shellcheck shell=bash
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${MV_CACHE:-/var/cache/microview}

# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$root/tests/lib/testlib.sh"

# go_env: a Go toolchain and module settings for building the writers offline-first.
go_env() {
  command -v go >/dev/null || skip "go not found (golang-go)"
  mkdir -p "$cache/gomod" "$cache/gobuild" || skip "cannot create the Go cache in $cache"
  export GOTOOLCHAIN=local GOMODCACHE=$cache/gomod GOCACHE=$cache/gobuild GOFLAGS=-mod=readonly
  export GOPROXY=${GOPROXY:-https://proxy.golang.org} GOTELEMETRY=off
}

# build_py DEST INCLUDE_DIR LIBRARY: pip-installs writers/python into DEST/site from a copy
# of the source (the tree stays clean); no PyPI: --no-build-isolation --no-index.
build_py() {
  local dest=$1 inc=$2 lib=$3
  [ -x /usr/bin/python3 ] || skip "/usr/bin/python3 missing"
  [ -f "$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] ||
    skip "Python.h missing (python3-dev)"
  /usr/bin/python3 -c 'import setuptools, pip' 2>/dev/null || skip "python3-setuptools / python3-pip missing"
  cp -r "$root/writers/python" "$dest/src"
  MICROVIEW_INCLUDE_DIR=$inc MICROVIEW_LIBRARY=$lib PIP_DISABLE_PIP_VERSION_CHECK=1 \
    /usr/bin/python3 -m pip install -q --no-build-isolation --no-deps --no-index \
    --target "$dest/site" "$dest/src" 2>&1 | grep -v "Running pip as the 'root' user" >&2
  [ -f "$dest/site/microview/__init__.py" ] || { echo "building writers/python failed" >&2; exit 1; }
}
