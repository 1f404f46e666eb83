#!/usr/bin/env bash
# Builds writers/python against libmicroview into a temp dir and runs its unittest suite
# (shared vectors, API, threads). Usage: test_python.sh INCLUDE_DIR LIBMICROVIEW_A
set -uo pipefail
. "$(dirname "$0")/lib.sh"
inc=${1:?usage: test_python.sh INCLUDE_DIR LIBRARY}
lib=${2:?usage: test_python.sh INCLUDE_DIR LIBRARY}
[ -z "${MV_SANITIZED:-}" ] || skip "an ASan-built libmicroview cannot be loaded into python3"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-pywriter.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
build_py "$tmp" "$inc" "$lib"
cd "$tmp" && PYTHONPATH=$tmp/site /usr/bin/python3 -W error::ResourceWarning -m unittest discover \
  -s "$root/writers/python/tests" -v
