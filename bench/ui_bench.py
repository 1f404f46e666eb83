#!/usr/bin/python3
"""ui_bench: the live view's write-to-screen latency and the collector CPU it adds.

A writer (mv_burst_writer) sets a gauge to 100 for 20 ms every PERIOD ms of wall-clock time
(and keeps 9 more series moving); the collector reads every 1 ms. VIEWERS clients stream 10
series each from /api/v1/stream (width 800, window 5 s: a 6.25 ms bucket per pixel), as the
page does. Latency: from the burst's first write (a wall-clock multiple of PERIOD) to the
moment a viewer holds the event whose bucket shows the gauge at 100 - what the page draws at
its next animation frame (at most 16.7 ms later at 60 Hz, not included). CPU: the collector's
user + system time per second with the viewers, against the same collector with none (the
peer, measured in the same run).

Prints bench=ui_latency and bench=ui_cpu key=value lines and the goals (p99 <= 50 ms, added
CPU <= 2 % of a core); never asserts.

Usage: bench/ui_bench.py [--build DIR] [--viewers N] [--seconds S] [--period-ms MS] [--quick]
"""
import argparse
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Viewer:
    def __init__(self, port, path):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        self.s.setblocking(False)
        self.buf = b""
        self.bw = None

    def fileno(self):
        return self.s.fileno()

    def events(self):
        """The complete events received so far (chunk framing lines are ignored: an event's
        lines never start with hex digits only)."""
        try:
            d = self.s.recv(1 << 20)
        except BlockingIOError:
            return []
        self.buf += d
        out = []
        while b"\n\n" in self.buf:
            ev, self.buf = self.buf.split(b"\n\n", 1)
            out.append(ev)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--viewers", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--period-ms", type=int, default=200)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.seconds = 6
    coll = os.path.join(a.build, "bin", "microview-collector")
    writer = os.path.join(a.build, "bin", "mv_burst_writer")
    if not (os.access(coll, os.X_OK) and os.access(writer, os.X_OK)):
        print("ui_bench: build %s first (microview-collector, mv_burst_writer)" % a.build)
        return 1
    tmp = tempfile.mkdtemp(prefix="mv-ui-bench-")
    seg = os.path.join(tmp, "seg")
    with open(seg, "wb") as f:
        f.truncate(64 * 1024)
    w = subprocess.Popen([writer, seg, str(a.seconds * 2 + 30), str(a.period_ms), "7"],
                         stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    port = free_port()
    c = subprocess.Popen([coll, "--no-agent", "--segment", seg, "--listen",
                          "127.0.0.1:%d" % port, "--tick-ms", "1"],
                         stderr=open(os.path.join(tmp, "collector.log"), "w"))
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(1)
        c0 = cpu_s(c.pid)
        time.sleep(a.seconds)
        base = (cpu_s(c.pid) - c0) / a.seconds
        path = ("/api/v1/stream?seg=static:%s&%s&width=800&window_ms=5000"
                % (seg, "&".join("m=%d" % i for i in range(10))))
        vs = [Viewer(port, path) for _ in range(a.viewers)]
        lat = []
        seen = [set() for _ in vs]
        t_end = time.monotonic() + a.seconds
        c1, t1 = cpu_s(c.pid), time.monotonic()
        while time.monotonic() < t_end:
            rd, _, _ = select.select(vs, [], [], 0.05)
            now_ms = time.time() * 1000
            for v in rd:
                vi = vs.index(v)
                for ev in v.events():
                    if b"event: hello" in ev:
                        v.bw = int(ev.split(b'"bw":', 1)[1].split(b",", 1)[0]) / 1e6
                        continue
                    if b"event: data" not in ev or not v.bw:
                        continue
                    part = ev.split(b'{"i":1,"b":[', 1)
                    if len(part) < 2:
                        continue
                    for b in part[1].split(b"]]", 1)[0].split(b"],["):
                        f = b.strip(b"[]").split(b",")
                        if len(f) < 3 or f[2] == b"null" or float(f[2]) != 100:
                            continue
                        t = int(f[0]) * v.bw
                        burst = (t + v.bw) // a.period_ms * a.period_ms
                        if burst in seen[vi] or not (t <= burst + 20 and burst <= t + v.bw):
                            continue
                        seen[vi].add(burst)
                        lat.append(now_ms - burst)
        dur = time.monotonic() - t1
        with_v = (cpu_s(c.pid) - c1) / dur
        st = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port).read().decode()
        hook = [ln for ln in st.splitlines() if ln.startswith("microview_ui_hook_seconds_total ")]
        for v in vs:
            v.s.close()
    finally:
        c.terminate()
        w.terminate()
        c.wait()
        w.wait()
    lat.sort()

    def q(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
    print("bench=ui_latency viewers=%d series_per_viewer=10 tick_ms=1 period_ms=%d samples=%d "
          "p50_ms=%.1f p95_ms=%.1f p99_ms=%.1f max_ms=%.1f"
          % (a.viewers, a.period_ms, len(lat), q(0.5), q(0.95), q(0.99),
             lat[-1] if lat else float("nan")))
    print("bench=ui_cpu viewers=%d series_per_viewer=10 collector_cpu_pct_no_viewers=%.2f "
          "collector_cpu_pct_viewers=%.2f added_pct=%.2f ratio=%.2f %s"
          % (a.viewers, 100 * base, 100 * with_v, 100 * (with_v - base),
             with_v / base if base else float("nan"), hook[0].replace(" ", "=") if hook else ""))
    print("goal: write-to-screen p99 <= 50 ms (+ one frame): %s; added CPU <= 2%% of a core: %s"
          % ("met" if lat and q(0.99) <= 50 else "NOT met",
             "met" if with_v - base <= 0.02 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
