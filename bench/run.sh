#!/usr/bin/env bash
# run.sh: builds and runs the MicroView benchmarks and their Prometheus client peers, prints tables.
#
# Usage: bench/run.sh [--quick] [--out FILE] [--only GROUP]
#   --quick       fewer iterations and sizes (a smoke run, figures are noisy)
#   --out FILE    also save the raw key=value result lines to FILE
#   --only GROUP  run one group: tick (the collector's tick, its floor and the scale curve)
# Uses the CMake build dir `build` if it is an optimised, non-sanitized build,
# else configures `build-bench` (RelWithDebInfo, -O2). Go peers are built
# offline in GOPATH mode against Debian's client_golang, with all Go output
# and caches in a temp dir. Exits nonzero only when a benchmark fails to run.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
quick=()
out=
only=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=(--quick) ;;
    --out) out=${2:?--out needs a file}; shift ;;
    --only)
      only=${2:?--only needs a group}; shift
      case "$only" in
        tick) ;;
        *) echo "run.sh: unknown group $only (groups: tick)" >&2; exit 2 ;;
      esac ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mvbench-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.txt
: >"$results"
failed=0

note() { echo "run.sh: $*" >&2; }
# want GROUP: whether this run includes GROUP (every group without --only).
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }

# ---- Build the C benchmarks --------------------------------------------------
build=$root/build
if [ -f "$build/CMakeCache.txt" ]; then
  if grep -q '^MV_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" ||
     grep -q '^CMAKE_BUILD_TYPE:STRING=Debug$' "$build/CMakeCache.txt"; then
    note "build/ is a sanitized or debug build; using build-bench/ instead"
    build=$root/build-bench
  fi
else
  build=$root/build-bench
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMV_BUILD_TESTS=OFF >/dev/null ||
    { note "cmake configure failed"; exit 1; }
fi
if want other; then
  cmake --build "$build" -j"$(nproc)" --target writer_bench ingest_bench >/dev/null ||
    { note "building the C benchmarks failed"; exit 1; }
fi

# run NAME CMD...: runs one benchmark, keeps its result lines, echoes progress.
run() {
  local name=$1; shift
  note "running $name"
  if "$@" >"$tmp/$name.out"; then
    grep -v '^#' "$tmp/$name.out" >>"$results"
    grep '^#' "$tmp/$name.out" >&2
  else
    note "$name FAILED (exit $?)"
    cat "$tmp/$name.out" >&2
    failed=1
  fi
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if want other; then
  cmake --build "$build" -j"$(nproc)" --target mem_bench >/dev/null &&
    run mem_bench "$build/bin/mem_bench" "${quick[@]}"
  run writer_bench "$build/bin/writer_bench" "${quick[@]}"
  run ingest_bench "$build/bin/ingest_bench" "${quick[@]}"
fi
# The collector's benchmarks run with its heap as the chart runs it: on transparent huge pages
# where the kernel allows them (collector.mallocHugePages, on by default; tick_bench reports
# thp=, malloc_hugetlb= and anon_huge_bytes=). MV_BENCH_HUGE=0: 4 KiB pages.
collector_env=(env)
[ "${MV_BENCH_HUGE:-1}" = 0 ] || collector_env=(env GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
if want other; then
  cmake --build "$build" -j"$(nproc)" --target pipeline_bench >/dev/null &&
    run pipeline_bench "${collector_env[@]}" "$build/bin/pipeline_bench" "${quick[@]}"
fi
if want tick; then
  # 1 and 2 tick workers, 60 s each (--quick: 5 s), 10 % of the metrics changing each tick,
  # idle workers sleeping; 2 workers with 100 % changing; then 2 workers polling (--tick-poll,
  # for cores of the collector's own). CPU per tick: the tick workers' threads' CPU time.
  cmake --build "$build" -j"$(nproc)" --target tick_bench >/dev/null &&
    run tick_bench "${collector_env[@]}" "$build/bin/tick_bench" "${quick[@]}" &&
    run tick_bench_100 "${collector_env[@]}" "$build/bin/tick_bench" --change-pct 100 --workers 2 "${quick[@]}" &&
    run tick_bench_poll "${collector_env[@]}" "$build/bin/tick_bench" --poll --workers 2 "${quick[@]}"
  # The floor under those figures on this machine: the same collector with one segment of one
  # metric and analytics off (tick_bench --floor), sleeping and polling, as long as the runs
  # above; and, with nothing of MicroView running, how late the machine wakes a thread that
  # sleeps to each tick (cyclictest).
  if [ -x "$build/bin/tick_bench" ]; then # built just above
    run tick_floor "$build/bin/tick_bench" --floor --workers 2 "${quick[@]}"
    run tick_floor_poll "$build/bin/tick_bench" --floor --poll --workers 2 "${quick[@]}"
    # The scale curve: 100 / 1,000 / 4,000 segments x 64 metrics, 0 / 10 / 100 % changing,
    # 2 workers, 10 s each (--quick: 2 s).
    run tick_curve "${collector_env[@]}" "$build/bin/tick_bench" --curve "${quick[@]}"
  fi
  # The memory the tick's analytics touch per metric per tick, counted under callgrind's cache
  # simulation (the same on every run): pipeline_bench --tick-sim at 0, 10 and 100 %.
  if ! command -v valgrind >/dev/null; then
    note "tick_bytes SKIPPED: valgrind is not installed (Debian package valgrind, scripts/deps.sh test)"
  elif cmake --build "$build" -j"$(nproc)" --target pipeline_bench >/dev/null; then
    run tick_bytes "$root/bench/tick_bytes.sh" --build "$build" "${quick[@]}"
  else
    note "building pipeline_bench for tick_bytes failed"; failed=1
  fi
  if command -v cyclictest >/dev/null; then
    run host_wake "$root/bench/host_wake.sh" "${quick[@]}"
  else
    note "host_wake SKIPPED: cyclictest is not installed (Debian package rt-tests, scripts/deps.sh test)"
  fi
  # Missed ticks beyond the floor of this run: the 2-worker run's missed ticks less the floor
  # run's (same workers, same idle mode, same length), each raw count kept on the line.
  awk '
  function kv(line, key,   n, i, a, f) {
    n = split(line, f, " ")
    for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
    return ""
  }
  /^bench=tick / && kv($0, "workers") == "2" && kv($0, "change_pct") == "10" { m[kv($0, "tick_poll")] = kv($0, "missed"); s[kv($0, "tick_poll")] = kv($0, "seconds"); t[kv($0, "tick_poll")] = kv($0, "ticks") }
  /^bench=tick_floor / && kv($0, "workers") == "2" { f[kv($0, "tick_poll")] = kv($0, "missed"); fs[kv($0, "tick_poll")] = kv($0, "seconds") }
  /^goal=tick.host_floor / { hw = kv($0, "figure") }
  END {
    for (p = 0; p <= 1; p++) {
      if (!(p in m) || !(p in f)) continue
      x = m[p] - f[p]; if (x < 0) x = 0
      printf "goal=tick.missed_beyond_floor%s issue=40 workers=2 segments=1000 metrics=64 change_pct=10 figure=%d target=0 unit=ticks missed=%s ticks=%s seconds=%s floor_missed=%s floor_seconds=%s host_wake_skipped=%s tick_poll=%d met=%s\n", p ? "_poll" : "", x, m[p], t[p], s[p], f[p], fs[p], hw == "" ? "-" : hw, p, x == 0 ? "yes" : "no"
    }
  }' "$results" >"$tmp/goals_floor.txt"
  cat "$tmp/goals_floor.txt" >>"$results"
fi

if want other; then
# The agent's cost on its node with 1,000 segments and a collector reading them every 1 ms.
node_args=()
[ ${#quick[@]} -gt 0 ] && node_args=(--quick --segments 200)
cmake --build "$build" -j"$(nproc)" --target microview-agent microview-collector microviewctl >/dev/null &&
  run node_bench "$root/bench/node_bench.sh" --build "$build" "${node_args[@]}"

# What the verbs collector's READs cost the host whose segments they read (two Soft-RoCE VMs).
if "$root/e2e/vm/check.sh" >/dev/null 2>&1; then
  verbs_args=()
  [ ${#quick[@]} -gt 0 ] && verbs_args=(--seconds 5 --segments 8)
  run verbs_host_cpu "$root/bench/verbs_host_cpu.sh" --build "$build" "${verbs_args[@]}"
else
  note "verbs_host_cpu SKIPPED: the VM harness cannot run here (e2e/vm/check.sh says why)"
fi

# ---- Go peers (client_golang from Debian, GOPATH mode, offline) ------------------
if command -v go >/dev/null; then
  export GO111MODULE=off GOPROXY=off GOFLAGS="" GOTOOLCHAIN=local
  export GOPATH=$tmp/gopath:/usr/share/gocode GOCACHE=$tmp/gocache GOTMPDIR=$tmp
  mkdir -p "$tmp/gopath"
  for p in writer expo; do
    if (cd "$root" && go build -o "$tmp/go-$p" "./bench/peers/go/$p"); then
      run "go_$p" "$tmp/go-$p" "${quick[@]}"
    else
      note "building the Go $p peer failed (needs golang-go, golang-github-prometheus-client-golang-dev)"
      failed=1
    fi
  done
else
  note "go not found (needs golang-go); Go peers not run"
  failed=1
fi

# ---- Python peers (Debian's interpreter and python3-prometheus-client) -----------
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import prometheus_client' 2>/dev/null; then
  run py_writer "$py" "$root/bench/peers/python/writer_bench.py" "${quick[@]}"
  run py_expo "$py" "$root/bench/peers/python/expo_bench.py" "${quick[@]}"
else
  note "$py with prometheus_client not found (needs python3-prometheus-client); Python peers not run"
  failed=1
fi

# ---- MicroView Go and Python writers (writers/), beside their peers -------------------
# Go: module mode, the versions pinned in bench/writers/go/go.sum, from the Go module proxy
# into ${MV_CACHE:-/var/cache/microview}/gomod. Python: writers/python built against this
# build's libmicroview into the temp dir (pip --no-build-isolation, no PyPI).
if command -v go >/dev/null; then
  if (cd "$root/bench/writers/go" && env GO111MODULE=on GOFLAGS=-mod=readonly GOPATH="$tmp/gopath" \
        GOMODCACHE="${MV_CACHE:-/var/cache/microview}/gomod" GOPROXY=https://proxy.golang.org \
        go build -o "$tmp/go-writers" .); then
    run go_writers "$tmp/go-writers" "${quick[@]}"
  else
    note "building the MicroView Go writer benchmark failed"; failed=1
  fi
fi
if cmake --build "$build" --target microview_static >/dev/null; then
  mvh=$(find "$root/pkg" -name microview.h -print -quit)
  if [ -n "$mvh" ] && mkdir -p "$tmp/pywriter" && cp -r "$root/writers/python" "$tmp/pywriter/src" &&
     MICROVIEW_INCLUDE_DIR=$(dirname "$mvh") MICROVIEW_LIBRARY=$build/lib/libmicroview.a \
       "$py" -m pip install -q --no-build-isolation --no-deps --no-index --target "$tmp/pywriter/site" \
       "$tmp/pywriter/src" >/dev/null 2>&1; then
    run py_writers env PYTHONPATH="$tmp/pywriter/site" "$py" "$root/bench/writers/python/writer_bench.py" "${quick[@]}"
    # The prometheus_client drop-in against prometheus_client, in one process (goal: >= 10x).
    if "$py" -c 'import prometheus_client' 2>/dev/null; then
      run py_compat env PYTHONPATH="$tmp/pywriter/site" "$py" "$root/bench/writers/python/compat_bench.py" "${quick[@]}"
    fi
  else
    note "building writers/python failed (needs python3-dev, python3-setuptools, python3-pip)"; failed=1
  fi
fi

fi # want other

[ -n "$out" ] && cp "$results" "$out"

# ---- Tables ---------------------------------------------------------------------
echo
echo "== Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "   load average before: $load_before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   (figures from a busy machine are inflated; compare rows of the same run only)"
# The tick's figures follow these: it walks ~20 MB of state per millisecond.
awk '/^bench=memory /{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
  if (f["chains"] == 1) lat = lat sprintf(" %s KiB %s ns;", f["ws_kib"], f["ns_per_line"])
  else mlp = mlp sprintf(" %s chains %s ns;", f["chains"], f["ns_per_line"]) }
  END { if (lat != "") { print "   memory: a random line, one at a time:" lat
                         print "   at 64 MiB, per line with independent chains:" mlp } }' "$results"
if want other; then
echo
echo "== Update cost, ns per operation per thread (median; lower is better)"
echo "   wall: the slowest thread's loop time / iterations; clean: median of the timed chunks"
echo "   during which every thread of the row ran without being switched out (co-running), the"
echo "   figure a machine shared with other jobs distorts least; clean% = share of updates in them"
# Goal: every 2t row at or below client_golang's (this table), and 2t_diff within 1.3x of 1t
# (writer_bench's own goal lines). Two threads on one metric are judged on the metric sharded
# for them (2t_same_sharded, docs/segment-format.md section 5.2) against client_golang's
# 2t_same; the unsharded 2t_same row (one contended line in both libraries) is printed as
# information (info=writer_2t), not as a goal. Rows are judged on the clean figures when both
# have at least 20 clean chunks; when one has fewer although both 1t rows have clean chunks,
# the threads seldom ran at the same moment (a busy machine): basis=busy, met=unknown;
# without clean chunks at all, on the wall figures. The goal lines are added to the results.
awk -v goals="$tmp/goals_update.txt" '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
function d(x) { return x == "" ? "-" : x }
!/^goal=/ && kv($0, "op") != "" && kv($0, "ns_per_op") != "" {
  k = kv($0, "op") SUBSEP kv($0, "mode"); i = kv($0, "impl"); v[i, k] = kv($0, "ns_per_op")
  c[i, k] = kv($0, "clean_ns_per_op"); cn[i, k] = kv($0, "clean_chunks"); cf[i, k] = kv($0, "clean_frac")
  if (!(k in seen)) { seen[k] = 1; order[++n] = k }
}
END {
  printf "%-18s %-15s %8s %8s %6s %14s %14s %18s %12s %6s\n", "operation", "threads", "ours", "clean", "clean%", "client_golang", "golang_clean", "prometheus_client", "ours/golang", "basis"
  for (j = 1; j <= n; j++) {
    k = order[j]; split(k, p, SUBSEP)
    pm = p[2]; sub(/_sharded$/, "", pm); pk = p[1] SUBSEP pm  # the peer row: no shards there
    o = v["libmicroview", k]; g = v["client_golang", pk]; y = v["prometheus_client", pk]
    oc = c["libmicroview", k]; gc = c["client_golang", pk]
    b = (cn["libmicroview", k] + 0 >= 20 && cn["client_golang", pk] + 0 >= 20) ? "clean" : "wall"
    one = p[1] SUBSEP "1t"
    if (b == "wall" && cn["libmicroview", one] + 0 >= 20 && cn["client_golang", one] + 0 >= 20) b = "busy"
    r = "-"
    if (o != "" && g != "") {
      num = b == "clean" ? oc : o; den = b == "clean" ? gc : g
      if (den + 0 > 0) r = sprintf("%.2f", num / den)
    }
    pct = cf["libmicroview", k] == "" ? "-" : sprintf("%.0f", 100 * cf["libmicroview", k])
    printf "%-18s %-15s %8s %8s %6s %14s %14s %18s %12s %6s\n", p[1], p[2], d(o), d(oc), pct, d(g), d(gc), d(y), r, r == "-" ? "-" : b
    if (p[2] ~ /^2t_/ && r != "-")
      printf "%s=writer_2t check=vs_client_golang op=%s mode=%s target=<=1.00 figure=%s basis=%s ns=%s ns_client_golang=%s met=%s\n", p[2] == "2t_same" ? "info" : "goal", p[1], p[2], r, b, b == "clean" ? oc : o, b == "clean" ? gc : g, b == "busy" ? "unknown" : r + 0 <= 1.0 ? "yes" : "no" > goals
  }
}' "$results"
[ -f "$tmp/goals_update.txt" ] && cat "$tmp/goals_update.txt" >>"$results"
echo
echo "   goals (every 2t row <= client_golang's, two threads on one metric sharded for them;"
echo "   2t_diff <= 1.3x 1t); then the unsharded 2t_same rows, for information:"
grep -h '^goal=writer_2t' "$results" | sed 's/^/   /'
grep -h '^info=writer_2t' "$results" | sed 's/^/   /'
echo
echo "== MicroView writers vs their Prometheus clients, ns per operation per thread (median)"
echo "   go = microview.io/writers/go, go_dropin = its client_golang drop-in; speedup = peer/ours;"
echo "   client_golang = v1.14.0 built into the Go writers' benchmark (same process and builder)"
echo "   (goals: Go speedup >= 1 in every row, Python speedup >= 10)"
awk '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
function r(peer, ours) { return (peer != "" && ours != "" && ours + 0 > 0) ? sprintf("%.2f", peer / ours) : "-" }
function d(x) { return x == "" ? "-" : x }
kv($0, "op") != "" && kv($0, "ns_per_op") != "" {
  k = kv($0, "op") SUBSEP kv($0, "mode"); v[kv($0, "impl"), k] = kv($0, "ns_per_op")
  if (!(k in seen)) { seen[k] = 1; order[++n] = k }
}
END {
  printf "%-18s %-15s %8s %10s %14s %9s %9s %10s %18s %9s\n", "operation", "threads", "go", "go_dropin", "client_golang", "speedup", "dropin", "python", "prometheus_client", "speedup"
  for (i = 1; i <= n; i++) {
    k = order[i]; split(k, p, SUBSEP)
    # client_golang: the copy built into the Go writers benchmark (same process, same
    # builder as the drop-in) when it ran, else the Debian peer
    g = v["microview_go", k]; gd = v["microview_go_prom", k]; cg = v["client_golang_same_run", k]
    if (cg == "") cg = v["client_golang", k]
    y = v["microview_py", k]; pc = v["prometheus_client", k]
    if (g == "" && gd == "" && y == "") continue
    printf "%-18s %-15s %8s %10s %14s %9s %9s %10s %18s %9s\n", p[1], p[2], d(g), d(gd), d(cg), r(cg, g), r(cg, gd), d(y), d(pc), r(pc, y)
  }
}' "$results"
echo
echo "== Collector ingest (copy + validate + read, one core)"
grep 'bench=ingest' "$results" | tr ' ' '\n' | grep -E '^(segments|metrics_per_segment|ns_per_segment|copy_only_ns_per_segment|metrics_per_s_core|samples_per_s_core|goal_samples_per_s_core|goal_met)=' |
  sed 's/^/  /'
echo
echo "== Exposition peers, text format (seconds per render, median)"
awk '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
kv($0, "peer") != "" {
  s = kv($0, "series"); p = kv($0, "peer")
  if (!(s in seen)) { seen[s] = 1; order[++n] = s }
  if (kv($0, "skipped") == "1") { sec[p, s] = "skipped"; by[p, s] = "-" }
  else { sec[p, s] = kv($0, "seconds"); by[p, s] = kv($0, "bytes") }
}
END {
  printf "%-10s %16s %14s %20s %16s\n", "series", "golang seconds", "golang bytes", "python seconds", "python bytes"
  for (i = 1; i <= n; i++) {
    s = order[i]
    printf "%-10s %16s %14s %20s %16s\n", s, sec["client_golang", s], by["client_golang", s], sec["prometheus_client", s], by["prometheus_client", s]
  }
}' "$results"

echo
echo "== Exposition: MicroView vs client_golang, text format, ns per series (median, same run)"
echo "   warm: steady-state scrape (cached names and labels, values formatted); first: first"
echo "   scrape into a new cache; rebuild: after every catalog changed; uncached: no cache."
echo "   speedup = client_golang / ours (goal: warm >= 10x, raw and default derived, each size)"
awk '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
function r(peer, ours) { return (peer != "" && ours != "" && ours + 0 > 0) ? sprintf("%.1f", peer / ours) : "-" }
function d(x) { return x == "" ? "-" : x }
kv($0, "peer") == "client_golang" && kv($0, "skipped") != "1" { g[kv($0, "series")] = kv($0, "ns_per_series") }
/^bench=expo / {
  s = kv($0, "series"); k = s SUBSEP kv($0, "derived")
  if (!(s in seen)) { seen[s] = 1; order[++n] = s }
  warm[k] = kv($0, "ns_per_series"); first[k] = kv($0, "first_ns_per_series")
  reb[k] = kv($0, "rebuild_ns_per_series"); unc[k] = kv($0, "uncached_ns_per_series")
}
END {
  printf "%-9s %-8s %9s %9s %9s %9s %14s %8s %8s\n", "series", "derived", "warm", "first", "rebuild", "uncached", "client_golang", "speedup", "first"
  for (i = 1; i <= n; i++) {
    s = order[i]
    for (j = 1; j <= 3; j++) {
      dv = j == 1 ? "none" : j == 2 ? "default" : "all"; k = s SUBSEP dv
      if (!(k in warm)) continue
      printf "%-9s %-8s %9s %9s %9s %9s %14s %8s %8s\n", s, dv, d(warm[k]), d(first[k]), d(reb[k]), d(unc[k]), d(g[s]), r(g[s], warm[k]), r(g[s], first[k])
    }
  }
  for (i = 1; i <= n; i++) {
    s = order[i]; kr = s SUBSEP "none"; kd = s SUBSEP "default"
    xr = r(g[s], warm[kr]); xd = r(g[s], warm[kd])
    met = (xr != "-" && xd != "-" && xr + 0 >= 10 && xd + 0 >= 10) ? "yes" : "no"
    line = sprintf("goal=expo_10x series=%s figure=%s raw_speedup=%s derived_speedup=%s target=10 met=%s", s, (xr + 0 < xd + 0 ? xr : xd), xr, xd, met)
    print line
    print line > goals
  }
}' goals="$tmp/goals_expo.txt" "$results"
[ -f "$tmp/goals_expo.txt" ] && cat "$tmp/goals_expo.txt" >>"$results"

echo
echo "== Collector analytics pipeline, exposition and freshness (pipeline_bench)"
grep -E '^bench=(pipeline|expo|freshness|calm) ' "$results" | sed 's/^/  /'
echo "   goals (issue goals 3 and 6; samples/s/core by the thread's CPU clock, detection and scorer on;"
echo "   analytics bytes per series from the allocator, values in a narrow range):"
grep -E '^goal=(pipeline\.[a-z]+|memory\.(counter|gauge|histogram)) ' "$results" | sed 's/^/  /'
fi # want other

if want tick; then
echo
echo "== Collector tick: 1,000 segments x 64 metrics read every 1 ms, analytics on (tick_bench)"
echo "   change_pct: metrics changing each ms (whole segments, in turn);"
echo "   cpu_per_tick_us: the tick workers' threads' CPU time (schedstat) per tick, not wall time,"
echo "   polling excluded (process_cpu_per_tick_us: the process less the writer, as before); cpu_cores: cores they kept busy;"
echo "   cpu_ns_per_sample: that CPU per metric read (the per-core cost); collector_rss_anon_bytes:"
echo "   the collector's anonymous RSS beyond the writer's; analytics_bytes_per_metric: accounted"
grep -E '^bench=tick ' "$results" | sed 's/^/  /'
echo "   goals (issue goals 4 and 6):"
grep -E '^goal=(tick\.[a-z_0-9]+|memory\.collector_rss) ' "$results" | grep -vE '^goal=tick\.(floor|host|missed_beyond)' | sed 's/^/  /'
echo "   the floor: the same collector with 1 segment of 1 metric, analytics off (tick_bench --floor),"
echo "   and how late the machine wakes a sleeping thread at each tick, nothing of ours running (cyclictest):"
grep -E '^bench=(tick_floor|host_wake) ' "$results" | sed 's/^/  /'
grep -E '^goal=tick\.(floor|host)' "$results" | sed 's/^/  /'
awk '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
/^bench=tick / && kv($0, "workers") == "2" && kv($0, "change_pct") == "10" {
  m = kv($0, "tick_poll") == "1" ? "polling" : "sleeping"; modes[m] = 1
  missed[m] = kv($0, "missed"); secs[m] = kv($0, "seconds")
  clean[m] = kv($0, "seconds_without_miss"); med[m] = kv($0, "missed_per_second_median")
  late[m] = kv($0, "start_late_max_ms"); nlate[m] = kv($0, "starts_late_half_tick")
  deferred[m] = kv($0, "reads_deferred"); share[m] = kv($0, "reads_deferred_share")
  pc[m] = kv($0, "poll_cores")
}
END {
  if (!("sleeping" in modes) && !("polling" in modes)) print "   goal (no missed tick with 2 workers): not measured"
  for (m in modes)
    printf "   goal (no missed tick with 2 workers, idle workers %s): %s (missed=%s in %s s; %s whole seconds without a miss, median %s missed per second; ticks started up to %s ms late, %s times over half a tick; %s segment reads deferred to the next tick, a share of %s; %s cores spent polling)\n", m, missed[m] + 0 == 0 ? "met" : "not met", missed[m], secs[m], clean[m], med[m], late[m], nlate[m], deferred[m], share[m], pc[m]
}' "$results"
echo "   missed ticks beyond the floor of this run (the 2-worker run's less the floor run's, raw counts kept):"
grep -E '^goal=tick\.missed_beyond' "$results" | sed 's/^/  /'
echo "   bytes touched per metric per tick: the shared memory the ticks read (probes and copies,"
echo "   segment_bytes_per_metric_per_tick of the runs above) and the analytics' state and copies,"
echo "   as 64-byte lines a 32 KiB first-level cache fetched (bench/tick_bytes.sh, callgrind, 100 segments):"
grep -E '^bench=tick ' "$results" | awk '{ w = ""; p = ""; b = ""
  for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == "workers") w = a[2]; if (a[1] == "change_pct") p = a[2]; if (a[1] == "segment_bytes_per_metric_per_tick") b = a[2] }
  printf "   segment side: workers=%s change_pct=%s segment_bytes_per_metric_per_tick=%s\n", w, p, b }'
grep -E '^bench=tick_bytes ' "$results" | sed 's/^/  /'
echo
echo "== Collector tick, scale curve: CPU per tick (us, tick workers' thread CPU time), 2 workers, 1 ms"
echo "   rows: segments x 64 metrics; columns: metrics changing each ms; ns/metric in brackets"
awk '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
/^bench=tick_curve / {
  sg = kv($0, "segments"); p = kv($0, "change_pct") + 0
  if (!(sg in seen)) { seen[sg] = 1; order[++n] = sg }
  v[sg, p] = sprintf("%s (%s)", kv($0, "cpu_per_tick_us"), kv($0, "cpu_ns_per_sample"))
  ms[sg, p] = kv($0, "missed")
}
END {
  if (n == 0) { print "   (not measured)"; exit }
  printf "   %-9s %-22s %-22s %-22s\n", "segments", "0 %", "10 %", "100 %"
  for (i = 1; i <= n; i++) {
    sg = order[i]
    printf "   %-9s %-22s %-22s %-22s\n", sg, v[sg, 0], v[sg, 10], v[sg, 100]
  }
}' "$results"
fi # want tick

if want other; then
echo
echo "== The agent on its node (node_bench: standalone agent, live owners, collector at 1 ms)"
grep -E '^bench=node(_thread)? ' "$results" | sed 's/^/  /'

echo
echo "== What the verbs collector's READs cost the host (verbs_host_cpu: two Soft-RoCE VMs)"
grep -E '^bench=verbs_host_cpu ' "$results" | sed 's/^/  /'
fi # want other

if want other; then
echo
echo "== microview (Python) against prometheus_client, one process (compat_bench; goal >= 10x)"
grep -E '^impl=(compare|floor) ' "$results" | sed 's/^/  /'
fi # want other

echo
echo "== Goals (each from a row above, this run)"
awk '
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return substr(f[i], length(key) + 2) }
  return ""
}
/^goal=/ { g[++n] = $0 }
END {
  printf "%-34s %-26s %-26s %s\n", "goal", "target", "figure", "met"
  for (i = 1; i <= n; i++)
    printf "%-34s %-26s %-26s %s\n", kv(g[i], "goal"), kv(g[i], "target"), kv(g[i], "figure"), kv(g[i], "met")
  if (n == 0) print "(no goal lines: a benchmark did not run)"
}' "$results"

if [ "$failed" -ne 0 ]; then
  note "some benchmarks failed to run (see above)"
  exit 1
fi
exit 0
