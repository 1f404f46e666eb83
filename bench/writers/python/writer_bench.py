#!/usr/bin/python3
"""writer_bench.py: the MicroView Python writer's update cost (ns/op) with the operations,
thread placements and iteration counts of bench/peers/python/writer_bench.py (the
prometheus_client peer), plus writer_bench.c's 2t_diff_padded. Needs the microview package
on sys.path (bench/run.sh builds it into a temp dir)."""
import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time

import microview
from microview import Counter, Gauge, Histogram

VALUES_LEN = 1024
VALUES = [math.pow(2.0, (j % 64) * 17.0 / 64.0) for j in range(VALUES_LEN)]
OPS = ["counter_inc", "counter_add", "counter_add_local", "gauge_set", "gauge_add",
       "histogram_observe"]
MODES = ["1t", "2t_same", "2t_diff", "2t_diff_padded"]
SECOND = {"1t": None, "2t_same": 0, "2t_diff": 1, "2t_diff_padded": 2}


def make_loop(op, m, k):
    """Returns a function running n iterations of `op` on metric slot k (the same loop
    bodies as the prometheus_client peer)."""
    if op == "counter_inc":
        inc = m["c"][k].inc

        def run(n):
            for _ in range(n):
                inc()
    elif op == "counter_add":
        inc = m["c"][k].inc

        def run(n):
            for _ in range(n):
                inc(3)
    elif op == "gauge_set":
        set_ = m["g"][k].set

        def run(n):
            for i in range(n):
                set_(float(i))
    elif op == "gauge_add":
        inc = m["g"][k].inc

        def run(n):
            for _ in range(n):
                inc(1.0)
    elif op == "histogram_observe":
        observe = m["h"][k].observe
        values = VALUES

        def run(n):
            for i in range(n):
                observe(values[i & (VALUES_LEN - 1)])
    else:
        raise ValueError(op)
    return run


def one_round(op, m, mode, n):
    """Runs n iterations per thread; returns the slowest thread's nanoseconds."""
    slots = [0] if mode == "1t" else [0, SECOND[mode]]
    barrier = threading.Barrier(len(slots))
    elapsed = [0] * len(slots)

    def worker(t, k):
        run = make_loop(op, m, k)
        barrier.wait()
        t0 = time.perf_counter_ns()
        run(n)
        elapsed[t] = time.perf_counter_ns() - t0

    ths = [threading.Thread(target=worker, args=(t, k)) for t, k in enumerate(slots)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return max(elapsed)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iters", type=int, default=1000000)
    ap.add_argument("--hist-iters", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200k iterations, 3 runs")
    ap.add_argument("--op", default="")
    a = ap.parse_args()
    if a.quick:
        a.iters, a.hist_iters, a.runs = 200000, 200000, 3

    tmp = tempfile.mkdtemp(prefix="mvbench-py-")
    path = os.path.join(tmp, "segment")
    with open(path, "wb") as f:
        f.write(bytes(1 << 20))
    seg = microview.open_segment(path)
    os.unlink(path)
    os.rmdir(tmp)
    buckets = [2.0 ** i for i in range(16)]
    cv = Counter("bench_counter", "bench", ["id"], segment=seg)
    gv = Gauge("bench_gauge", "bench", ["id"], segment=seg)
    hv = Histogram("bench_seconds", "bench", ["id"], segment=seg, buckets=buckets)
    m = {"c": [], "g": [], "h": []}
    for i in range(3):  # slot 2 is 64 bytes past slot 1, as in writer_bench.c
        if i == 2:
            for f in range(7):
                Counter("bench_pad_%d" % f, "pad", segment=seg)
        m["c"].append(cv.labels(str(i)))
    for i in range(3):
        if i == 2:
            for f in range(7, 14):
                Counter("bench_pad_%d" % f, "pad", segment=seg)
        m["g"].append(gv.labels(str(i)))
    m["h"] = [hv.labels(str(i)) for i in range(3)]

    print(f"# microview Python writer python={sys.version.split()[0]} iters={a.iters} "
          f"hist_iters={a.hist_iters} runs={a.runs}", flush=True)
    for op in OPS:
        if a.op and a.op != op:
            continue
        for mode in MODES:
            if op == "counter_add_local":
                print(f"impl=microview_py op={op} mode={mode} skipped=1 reason=no_equivalent")
                continue
            n = a.hist_iters if op == "histogram_observe" else a.iters
            threads = 1 if mode == "1t" else 2
            one_round(op, m, mode, max(1, n // 10))
            res = []
            for _ in range(a.runs):
                before = m["c"][0].get()
                res.append(one_round(op, m, mode, n) / n)
                if op in ("counter_inc", "counter_add"):
                    want = n * (3 if op == "counter_add" else 1) * (2 if mode == "2t_same" else 1)
                    got = m["c"][0].get() - before
                    if got != want:
                        print(f"writer_bench.py: {op} {mode} lost updates: {got} != {want}",
                              file=sys.stderr)
                        return 1
            res.sort()
            med = statistics.median(res)
            print(f"impl=microview_py op={op} mode={mode} threads={threads} iters={n} "
                  f"runs={a.runs} ns_per_op={med:.2f} min={res[0]:.2f} max={res[-1]:.2f} "
                  f"mops_total={threads * 1e3 / med:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
