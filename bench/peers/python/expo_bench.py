#!/usr/bin/python3
"""expo_bench.py: times prometheus_client rendering N labelled gauges to the
Prometheus text format (generate_latest on a registry)."""
import argparse
import gc
import statistics
import sys
import time

from prometheus_client import CollectorRegistry, Gauge, generate_latest

LABEL_NAMES = ["namespace", "pod", "container", "node", "zone", "cluster", "job",
               "instance", "app", "version"]


def label_values(i):
    """Series i's 10 label values; same scheme as bench/peers/go/expo."""
    return ("ns-%d" % (i % 50), "pod-%07d" % i, "c-%d" % (i % 4), "node-%03d" % (i % 200),
            "zone-" + "abc"[i % 3], "cluster-1", "kubernetes-pods",
            "10.%d.%d.%d:9100" % (i >> 16 & 255, i >> 8 & 255, i & 255),
            "app-%d" % (i % 100), "v1.%d" % (i % 10))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--families", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-series", type=int, default=100000,
                    help="sizes above this are skipped (1M takes minutes and GBs); "
                         "pass --max-series 1000000 to run them")
    ap.add_argument("--quick", action="store_true", help="sizes 10000,100000, 1 run")
    a = ap.parse_args()
    if a.quick:
        a.sizes, a.runs = "10000,100000", 1
    print(f"# prometheus_client expo python={sys.version.split()[0]} families={a.families} "
          f"labels={len(LABEL_NAMES)} runs={a.runs} max_series={a.max_series}", flush=True)
    for s in a.sizes.split(","):
        n = int(s)
        if n > a.max_series:
            print(f"peer=prometheus_client series={n} skipped=1 reason=over_max_series "
                  f"max_series={a.max_series}", flush=True)
            continue
        t0 = time.perf_counter()
        reg = CollectorRegistry()
        fams = [Gauge("bench_gauge_%d" % f, "Benchmark gauge.", LABEL_NAMES, registry=reg)
                for f in range(a.families)]
        for i in range(n):
            fams[i % a.families].labels(*label_values(i)).set(i * 0.5)
        setup = time.perf_counter() - t0
        out = generate_latest(reg)  # warm-up
        secs = []
        for _ in range(a.runs):
            t = time.perf_counter()
            out = generate_latest(reg)
            secs.append(time.perf_counter() - t)
        med = statistics.median(secs)
        lines = out.count(b"\n")
        print(f"peer=prometheus_client series={n} families={a.families} seconds={med:.4f} "
              f"bytes={len(out)} lines={lines} ns_per_series={med * 1e9 / n:.0f} "
              f"setup_seconds={setup:.2f} runs={a.runs}", flush=True)
        del reg, fams, out
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
