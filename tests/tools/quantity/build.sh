#!/usr/bin/env bash
# Builds quantity-check: k8s.io/apimachinery's resource.ParseQuantity at the version pinned in
# go.mod, from the Go module proxy into ${MV_CACHE:-/var/cache/microview}/quantity/, and prints
# the binary's path. Exits 77 when no Go toolchain (1.24 or later) is installed.
exec "$(dirname "$0")/../gobuild.sh" "$(dirname "$0")" quantity-check
