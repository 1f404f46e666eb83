#!/usr/bin/python3
"""A Python service instrumented as with prometheus_client (only the import names MicroView);
tests/writers/e2e.py starts it with the environment and mount an Allocate gives.

Usage: pyservice.py READY_FILE   (writes the values, creates READY_FILE, waits for SIGTERM)
"""
import signal
import sys
import threading

from microview import Counter, Gauge, Histogram

REQUESTS = Counter("svc_requests_total", "Requests served.", ["route"])
INFLIGHT = Gauge("svc_inflight", "Requests in flight.")
LATENCY = Histogram("svc_latency_seconds", "Request latency.", buckets=[0.1, 1])


def main():
    if len(sys.argv) != 2:
        print("usage: pyservice.py READY_FILE", file=sys.stderr)
        return 2
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())

    def work():
        for _ in range(17):
            REQUESTS.labels("/cart").inc()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    INFLIGHT.set(2.25)
    for v in (0.05, 0.5):
        LATENCY.observe(v)
    with open(sys.argv[1], "w") as f:
        f.write("ready\n")
    done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
