#!/usr/bin/env bash
# Builds jsonpatch-check: gopkg.in/evanphx/json-patch.v4 at the version pinned in go.mod (the
# JSON Patch implementation kube-apiserver applies webhook patches with), from the Go module
# proxy into ${MV_CACHE:-/var/cache/microview}/jsonpatch/, and prints the binary's path.
# Exits 77 when no Go toolchain is installed.
exec "$(dirname "$0")/../gobuild.sh" "$(dirname "$0")" jsonpatch-check
