#!/usr/bin/python3
"""compat_bench.py: the prometheus_client drop-in against prometheus_client itself, in one
process and one run: the same loop bodies on metrics made by the same constructor calls,
prometheus_client's classes and microview's taking turns. Prints ns/op for each (the fastest
of the runs) and the ratio (prometheus_client / microview; the goal is >= 10 for every row).

Needs prometheus_client (python3-prometheus-client) and the microview package on sys.path
(bench/run.sh builds it into a temp dir)."""
import argparse
import os
import sys
import tempfile
import time

import prometheus_client

import microview

VALUES = [((j * 7919) % 1000) / 400.0 for j in range(1024)]  # 0 .. 2.5 s: the default buckets

# name -> (metric kind, constructor kwargs, loop body source: `m` is the metric, `i` the index)
ROWS = {
    # The interpreter's floor: the loop and one C method call that does nothing (object's
    # __sizeof__ on the metric). A row cannot cost less than this in either implementation.
    "floor_empty_call": ("Gauge", {}, "__sizeof__()"),
    "counter_inc": ("Counter", {}, "inc()"),
    "counter_add_fraction": ("Counter", {}, "inc(0.25)"),
    "gauge_set": ("Gauge", {}, "set(i)"),
    "gauge_inc": ("Gauge", {}, "inc(2.5)"),
    "histogram_observe": ("Histogram", {}, "observe(v[i & 1023])"),
    "summary_observe": ("Summary", {}, "observe(v[i & 1023])"),
    "labelled_counter_inc": ("Counter", {"labelnames": ["route", "code"]},
                             "labels('/api', '200').inc()"),
    "labelled_gauge_set": ("Gauge", {"labelnames": ["queue"]}, "labels('jobs').set(i)"),
    "labelled_histogram_observe": ("Histogram", {"labelnames": ["route"]},
                                   "labels('/api').observe(v[i & 1023])"),
    "labelled_kwargs_counter_inc": ("Counter", {"labelnames": ["route", "code"]},
                                    "labels(route='/api', code='200').inc()"),
}
GOAL = 10.0


def make_loop(body):
    """A function running `n` iterations of `m.<body>` (compiled once per row)."""
    src = "def run(m, v, n):\n    for i in range(n):\n        m.%s\n" % body
    env = {}
    exec(compile(src, "<bench>", "exec"), env)  # noqa: S102 (the loop body of a row)
    return env["run"]


def measure(run, metrics, n, runs):
    """ns/op of each implementation: runs interleaved (so both see the same machine load),
    the fastest run of each (the one least disturbed by other processes). Each
    implementation's runs last about as long as the other's (its iteration count is scaled
    to about `n` iterations of the faster one), so neither is more exposed to preemption."""
    per = {}
    for impl, m in metrics.items():
        run(m, VALUES, max(1, n // 10))  # warm up (and create the labelled child)
        t0 = time.perf_counter_ns()
        run(m, VALUES, max(1, n // 10))
        per[impl] = max(1.0, (time.perf_counter_ns() - t0) / max(1, n // 10))
    fastest = min(per.values())
    iters = {impl: max(1000, int(n * fastest / per[impl])) for impl in metrics}
    best = {impl: float("inf") for impl in metrics}
    for _ in range(runs):
        for impl, m in metrics.items():
            t0 = time.perf_counter_ns()
            run(m, VALUES, iters[impl])
            best[impl] = min(best[impl], (time.perf_counter_ns() - t0) / iters[impl])
    return best


def peer_version():
    try:
        from importlib import metadata
        return metadata.version("prometheus_client")
    except Exception:  # noqa: BLE001 (only printed)
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iters", type=int, default=30000)
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--quick", action="store_true", help="20k iterations, 9 runs")
    a = ap.parse_args()
    if a.quick:
        a.iters, a.runs = 20000, 9
    tmp = tempfile.mkdtemp(prefix="mvbench-compat-")
    path = os.path.join(tmp, "segment")
    with open(path, "wb") as f:
        f.write(bytes(1 << 20))
    microview.open_segment(path)  # REGISTRY's segment, as $MICROVIEW_SEGMENT gives a pod
    os.unlink(path)
    os.rmdir(tmp)
    print("# prometheus_client %s vs microview python=%s iters=%d runs=%d" % (
        peer_version(), sys.version.split()[0], a.iters, a.runs),
        flush=True)
    below, floor = [], 0.0
    for k, (row, (kind, kw, body)) in enumerate(ROWS.items()):
        run = make_loop(body)
        metrics = {impl: getattr(mod, kind)("bench_%d_%s" % (k, impl), "bench", **kw)
                   for impl, mod in (("prometheus_client", prometheus_client),
                                     ("microview", microview))}
        res = measure(run, metrics, a.iters, a.runs)
        ratio = res["prometheus_client"] / res["microview"]
        if row == "floor_empty_call":
            floor = res["microview"]
            print("impl=floor op=%s ns=%.1f" % (row, floor), flush=True)
            continue
        if ratio < GOAL:
            below.append(row)
        print("impl=compare op=%s prometheus_client_ns=%.1f microview_ns=%.1f ratio=%.1f goal=%s "
              "microview_above_floor_ns=%.1f" % (row, res["prometheus_client"], res["microview"],
                                                 ratio, "met" if ratio >= GOAL else "missed",
                                                 res["microview"] - floor), flush=True)
    print("# rows below %gx: %s" % (GOAL, ", ".join(below) if below else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
