#!/usr/bin/env bash
# rdma_bench.sh: the collector's RDMA read path vs perftest (ib_read_bw, ib_read_lat) on the same
# Soft-RoCE device in one qemu VM; prints a table with ratios and the per-tick latency for
# 1,000 segments. Figures under TCG are ratios, not hardware speed (see docs/benchmarks.md).
#
# Usage: bench/rdma_bench.sh [--build DIR] [--seconds S] [--qps N] [--smp N]
#   On a host with a real RDMA device, run the pieces directly instead:
#     build/bin/rdma_bench <ip-of-rdma-netdev> 5 8 1000
#     ib_read_bw -d <dev> -s 4096 -q 1 -D 5 & ib_read_bw -d <dev> -s 4096 -q 1 -D 5 <ip>
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build} secs=2 qps=4 smp=2
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift ;;
    --seconds) secs=$2; shift ;;
    --qps) qps=$2; shift ;;
    --smp) smp=$2; shift ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "rdma_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$build/bin/rdma_bench" ] || { echo "rdma_bench.sh: build $build/bin/rdma_bench first" >&2; exit 1; }
# Guests get only the harness's variables: pass the settings through a small wrapper script.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#!/usr/bin/env bash\nexport RDMA_BENCH_SECONDS=%q RDMA_BENCH_QPS=%q\nexec %q\n' \
  "$secs" "$qps" "$root/bench/guest/rdma_bench_guest.sh" >"$tmp/rdma_bench.sh"
set +e
"$root/e2e/vm/run.sh" --vms 1 --smp "$smp" --mem 1024 --script "$tmp/rdma_bench.sh" \
  --name rdma_bench --build "$build" --timeout 500
rc=$?
set -e
dir=$(ls -td "${E2E_CACHE:-$root/e2e/.cache}/logs/rdma_bench"-* 2>/dev/null | head -n 1)
sed -n '/^size /,$p' "$dir/a.log" | grep -v '^RESULT' || true
echo "rdma_bench.sh: exit $rc (logs: $dir)"
exit "$rc"
