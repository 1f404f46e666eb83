#!/usr/bin/env bash
# prometheus_client's own unit tests for the metric types (tests/test_core.py of the Debian
# source package of the python3-prometheus-client version installed here) run against the
# microview package, with only their imports changed (prom_client_tests.py says which and
# lists every test that cannot apply, with its reason).
# Usage: test_prometheus_client_py.sh INCLUDE_DIR LIBMICROVIEW_A
#
# The source package is downloaded once from the Debian mirror apt uses here (.dsc, then the
# .orig tarball it names, checked against the .dsc's SHA-256) and unpacked into
# $MV_CACHE/python-prometheus-client-VERSION (default /var/cache/microview), never into the
# tree. If the download fails, put the unpacked upstream release of that version there.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
inc=${1:?usage: test_prometheus_client_py.sh INCLUDE_DIR LIBRARY}
lib=${2:?usage: test_prometheus_client_py.sh INCLUDE_DIR LIBRARY}
[ -z "${MV_SANITIZED:-}" ] || skip "an ASan-built libmicroview cannot be loaded into python3"
/usr/bin/python3 -c 'import pytest, prometheus_client' 2>/dev/null ||
  skip "python3-pytest / python3-prometheus-client missing (scripts/deps.sh test)"

debver=$(dpkg-query -W -f='${Version}' python3-prometheus-client 2>/dev/null) ||
  skip "python3-prometheus-client is not installed"
upver=${debver#*:}
upver=${upver%-*}
src=$cache/python-prometheus-client-$upver

# The mirror this host's apt uses (deb822 .sources or one-line lists), else Debian's.
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' "$f"
  done
  awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null
  echo "http://deb.debian.org/debian"
}

fetch_source() {
  local base dl dsc orig sum got
  base="$(mirror | head -n 1)/pool/main/p/python-prometheus-client"
  dl=$(mktemp -d "${TMPDIR:-/tmp}/mv-promsrc.XXXXXX") || return 1
  dsc="python-prometheus-client_${debver#*:}.dsc"
  if ! curl -fsS --max-time 120 -o "$dl/$dsc" "$base/$dsc"; then
    rm -rf "$dl"
    return 1
  fi
  read -r sum orig < <(awk '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 }
    on && $3 ~ /\.orig\.tar\./ { print $1, $3; exit }' "$dl/$dsc")
  if [ -z "${orig:-}" ] || ! curl -fsS --max-time 300 -o "$dl/$orig" "$base/$orig"; then
    log "the mirror served $dsc but not ${orig:-its .orig tarball}"
    rm -rf "$dl"
    return 1
  fi
  got=$(sha256sum "$dl/$orig" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    log "$orig: SHA-256 $got, the .dsc says $sum"
    rm -rf "$dl"
    return 1
  fi
  mkdir -p "$dl/x" && tar -xf "$dl/$orig" -C "$dl/x" --strip-components=1 &&
    mkdir -p "$cache" && rm -rf "$src.tmp" && mv "$dl/x" "$src.tmp" && mv "$src.tmp" "$src"
  local rc=$?
  rm -rf "$dl"
  return $rc
}

# The mirror keeps only the source files a suite still names: when the installed version's
# tarball is gone from the pool, the newest suite's source package (its tests/test_core.py has
# the same import block) is taken instead, checked against that suite's Sources index.
fetch_newer_source() {
  local suite idx entry ver orig sum dl got
  for suite in trixie sid; do
    idx=$(curl -fsS --max-time 120 "$(mirror | head -n 1)/dists/$suite/main/source/Sources.xz" |
      xz -dc 2>/dev/null) || continue
    entry=$(awk '/^Package: python-prometheus-client$/ { on = 1 } on && /^$/ { exit } on' <<<"$idx")
    ver=$(awk '/^Version:/ { print $2; exit }' <<<"$entry")
    read -r sum orig < <(awk '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 }
      on && $3 ~ /\.orig\.tar\./ { print $1, $3; exit }' <<<"$entry")
    [ -n "$ver" ] && [ -n "${orig:-}" ] || continue
    upver=${ver#*:}
    upver=${upver%-*}
    src=$cache/python-prometheus-client-$upver
    [ -f "$src/tests/test_core.py" ] && return 0
    dl=$(mktemp -d "${TMPDIR:-/tmp}/mv-promsrc.XXXXXX") || return 1
    if curl -fsS --max-time 300 -o "$dl/$orig" \
      "$(mirror | head -n 1)/pool/main/p/python-prometheus-client/$orig"; then
      got=$(sha256sum "$dl/$orig" | cut -d' ' -f1)
      if [ "$got" = "$sum" ] && mkdir -p "$dl/x" &&
        tar -xf "$dl/$orig" -C "$dl/x" --strip-components=1 && mkdir -p "$cache" &&
        rm -rf "$src.tmp" && mv "$dl/x" "$src.tmp" && mv "$src.tmp" "$src"; then
        rm -rf "$dl"
        log "using the tests of Debian $suite's python-prometheus-client $ver"
        return 0
      fi
      log "$orig: SHA-256 $got, $suite's Sources says $sum"
    fi
    rm -rf "$dl"
  done
  return 1
}

if [ ! -f "$src/tests/test_core.py" ]; then
  log "fetching Debian's source package of python-prometheus-client $debver"
  if ! fetch_source; then
    src_installed=$src
    for d in "$cache"/python-prometheus-client-*/tests/test_core.py; do
      [ -f "$d" ] && src=${d%/tests/test_core.py} && break
    done
    [ -f "$src/tests/test_core.py" ] || fetch_newer_source ||
      skip "could not get Debian's source package python-prometheus-client $debver" \
        "or a newer suite's (put the unpacked $upver release in $src_installed)"
  fi
fi
log "prometheus_client's tests from $src"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-promtests.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
build_py "$tmp" "$inc" "$lib"
cd "$tmp" && PYTHONPATH=$tmp/site /usr/bin/python3 "$root/tests/writers/prom_client_tests.py" \
  "$src/tests/test_core.py" "$tmp/run"
