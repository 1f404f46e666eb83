#!/usr/bin/env bash
# Go writer tests, go test -race (the race detector needs cgo, i.e. a C compiler).
#   test_go.sh core        writers/go: shared vectors, concurrency, locking; offline (stdlib only)
#   test_go.sh prometheus  writers/go/prometheus (client_golang v1.14.0 from the Go module
#                          proxy, pinned in go.sum) and bench/writers/go (vet); 77 if the
#                          modules cannot be downloaded
set -uo pipefail
. "$(dirname "$0")/lib.sh"
part=${1:?usage: test_go.sh core|prometheus}
go_env
race=-race
[ "$(go env CGO_ENABLED)" = 1 ] || race=
echo "== $(go version)"
rc=0
case $part in
  core)
    cd "$root/writers/go" || exit 1
    GOPROXY=off go vet ./... || rc=1
    GOPROXY=off go test $race -count=1 ./... || rc=1
    bad=$(cd "$root" && gofmt -l writers/go tests/writers bench/writers)
    [ -z "$bad" ] || { echo "gofmt: files need formatting: $bad"; rc=1; }
    ;;
  prometheus)
    for m in writers/go/prometheus bench/writers/go tests/writers/goservice; do
      (cd "$root/$m" && go mod download) || skip "cannot download the Go modules of $m (Go module proxy unreachable?)"
    done
    (cd "$root/writers/go/prometheus" && go vet ./... && go test $race -count=1 ./...) || rc=1
    (cd "$root/bench/writers/go" && go vet .) || rc=1
    ;;
  *) echo "usage: test_go.sh core|prometheus" >&2; exit 2 ;;
esac
exit $rc
