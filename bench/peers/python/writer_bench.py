#!/usr/bin/python3
"""writer_bench.py: prometheus_client update cost (ns/op), same operations and
thread placements as bench/writer_bench.c, with fewer iterations."""
import argparse
import math
import statistics
import sys
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

VALUES_LEN = 1024
VALUES = [math.pow(2.0, (j % 64) * 17.0 / 64.0) for j in range(VALUES_LEN)]
OPS = ["counter_inc", "counter_add", "counter_add_local", "gauge_set", "gauge_add",
       "histogram_observe"]
MODES = ["1t", "2t_same", "2t_diff"]


def make_loop(op, m, k):
    """Returns a function running n iterations of `op` on metric slot k."""
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
    """Runs n iterations per thread; returns the slowest thread's seconds."""
    threads = 1 if mode == "1t" else 2
    barrier = threading.Barrier(threads)
    elapsed = [0.0] * threads

    def worker(t, k):
        run = make_loop(op, m, k)
        barrier.wait()
        t0 = time.perf_counter_ns()
        run(n)
        elapsed[t] = time.perf_counter_ns() - t0

    ths = []
    for t in range(threads):
        k = 1 if (t == 1 and mode == "2t_diff") else 0
        ths.append(threading.Thread(target=worker, args=(t, k)))
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

    reg = CollectorRegistry()
    buckets = [2.0 ** i for i in range(16)]
    cv = Counter("bench_counter", "bench", ["id"], registry=reg)
    gv = Gauge("bench_gauge", "bench", ["id"], registry=reg)
    hv = Histogram("bench_seconds", "bench", ["id"], registry=reg, buckets=buckets)
    m = {"c": [cv.labels("0"), cv.labels("1")],
         "g": [gv.labels("0"), gv.labels("1")],
         "h": [hv.labels("0"), hv.labels("1")]}

    print(f"# prometheus_client writer python={sys.version.split()[0]} iters={a.iters} "
          f"hist_iters={a.hist_iters} runs={a.runs}", flush=True)
    for op in OPS:
        if a.op and a.op != op:
            continue
        for mode in MODES:
            if op == "counter_add_local":
                print(f"impl=prometheus_client op={op} mode={mode} skipped=1 reason=no_equivalent")
                continue
            n = a.hist_iters if op == "histogram_observe" else a.iters
            threads = 1 if mode == "1t" else 2
            one_round(op, m, mode, max(1, n // 10))
            res = []
            for _ in range(a.runs):
                before = m["c"][0]._value.get()
                res.append(one_round(op, m, mode, n) / n)
                if op in ("counter_inc", "counter_add"):
                    want = n * (3 if op == "counter_add" else 1) * (2 if mode == "2t_same" else 1)
                    got = m["c"][0]._value.get() - before
                    if got != want:
                        print(f"writer_bench.py: {op} {mode} lost updates: {got} != {want}",
                              file=sys.stderr)
                        return 1
            res.sort()
            med = statistics.median(res)
            print(f"impl=prometheus_client op={op} mode={mode} threads={threads} iters={n} "
                  f"runs={a.runs} ns_per_op={med:.2f} min={res[0]:.2f} max={res[-1]:.2f} "
                  f"mops_total={threads * 1e3 / med:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
