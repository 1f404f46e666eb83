#!/usr/bin/env bash
# The Go writer's tests (shared vectors, concurrency, locking; go test -race) and the
# client_golang adapter's tests (client_golang v1.14.0 from the Go module proxy).
# Usage: tests/writers/test_go.sh
set -uo pipefail
. "$(dirname "$0")/lib.sh"
go_env
race=-race
[ "$(go env CGO_ENABLED)" = 1 ] || race=  # the race detector needs cgo (a C compiler)
rc=0
echo "== writers/go ($(go version))"
(cd "$root/writers/go" && GOPROXY=off go test $race -count=1 ./...) || rc=1
echo "== writers/go/prometheus"
(cd "$root/writers/go/prometheus" && go mod download && go test $race -count=1 ./...) || rc=1
echo "== go vet"
(cd "$root/writers/go" && GOPROXY=off go vet ./... && cd prometheus && go vet ./...) || rc=1
(cd "$root/bench/writers/go" && go mod download && go vet .) || rc=1
[ -z "$(cd "$root" && gofmt -l writers/go tests/writers bench/writers 2>/dev/null)" ] ||
  { echo "gofmt: files need formatting:"; (cd "$root" && gofmt -l writers/go tests/writers bench/writers); rc=1; }
exit $rc
