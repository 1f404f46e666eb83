#!/usr/bin/env bash
# Guest script (one Soft-RoCE VM): the collector's RDMA read path next to perftest's
# ib_read_bw / ib_read_lat at the same sizes on the same rxe device; prints ratios.
set -uo pipefail
# shellcheck source=/dev/null
. "$REPO/e2e/tests/guest/lib.sh"

dev=$E2E_RDMA_DEV
ip=$E2E_SELF_IP
secs=${RDMA_BENCH_SECONDS:-2}
maxq=${RDMA_BENCH_QPS:-4}
out=/tmp/bench
mkdir -p "$out"

e2e_log "collector read path: $BUILD/bin/rdma_bench $ip $secs $maxq 1000"
timeout 300 "$BUILD/bin/rdma_bench" "$ip" "$secs" "$maxq" 1000 | tee "$out/mv.txt"

port=18515
# perf SIZE QPS: ib_read_bw server + client on this VM; prints "BW_MBps MSGRATE_Mpps", or
# fails when the client printed no result row (perf_lat likewise; each is tried twice, as
# perftest gives no report when its clock calibration fails on a busy host).
perf_bw() {
  local size=$1 q=$2 f=$out/bw-$1-$2.txt bw rate
  port=$((port + 1))
  timeout 60 ib_read_bw -d "$dev" -s "$size" -q "$q" -D "$secs" -p "$port" >/dev/null 2>&1 &
  e2e_wait_tcp "$port" 20 >/dev/null || return 1
  timeout 60 ib_read_bw -d "$dev" -s "$size" -q "$q" -D "$secs" -p "$port" "$ip" >"$f" 2>&1
  wait
  bw=$(e2e_perf_field "$f" "$size" 4) && rate=$(e2e_perf_field "$f" "$size" 5) || return 1
  echo "$bw $rate"
}
perf_lat() {
  local size=$1 f=$out/lat-$1.txt
  port=$((port + 1))
  timeout 60 ib_read_lat -d "$dev" -s "$size" -n 300 -p "$port" >/dev/null 2>&1 &
  e2e_wait_tcp "$port" 20 >/dev/null || return 1
  timeout 60 ib_read_lat -d "$dev" -s "$size" -n 300 -p "$port" "$ip" >"$f" 2>&1
  wait
  e2e_perf_field "$f" "$size" 5
}

printf '%-7s %-4s %14s %14s %10s %12s %12s %8s\n' size qps mv_segs/s perf_msgs/s ratio mv_MB/s \
  perf_MB/s lat_us | tee "$out/table.txt"
for size in 1024 4096 65536; do
  lat=$(perf_lat "$size") || lat=$(perf_lat "$size") || lat='?'
  for q in $(seq 1 "$maxq"); do
    case "$q" in 1 | 2 | 4 | 8 | 16) ;; *) continue ;; esac
    res=$(perf_bw "$size" "$q") || res=$(perf_bw "$size" "$q") || res=
    bw=${res% *} rate=${res#* }
    mv=$(awk -v s="$size" -v q="$q" '$1 == "collector_read" {
      split($2, a, "="); split($3, b, "="); if (a[2] == s && b[2] == q) print $5, $6 }' "$out/mv.txt")
    segs=${mv%% *}; segs=${segs#segs_per_s=}
    mb=${mv##* }; mb=${mb#MBps=}
    msgs=$(awk -v r="${rate:-0}" 'BEGIN { printf "%.0f", r * 1e6 }')
    ratio=$(awk -v a="${segs:-0}" -v b="$msgs" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
    printf '%-7s %-4s %14s %14s %10s %12s %12s %8s\n' "$size" "$q" "${segs:-?}" "$msgs" "$ratio" \
      "${mb:-?}" "${bw:-?}" "${lat:-?}" | tee -a "$out/table.txt"
    e2e_result "size=$size qps=$q mv_segs_per_s=${segs:-0} perf_msgs_per_s=$msgs ratio=$ratio"
  done
done
grep '^tick_' "$out/mv.txt"
# Raw perftest output of failed runs, for the log.
for f in "$out"/bw-*.txt "$out"/lat-*.txt; do
  grep -q '^ *[0-9]' "$f" 2>/dev/null && continue
  echo "--- $f"
  cat "$f"
done
