#!/usr/bin/python3
"""End-to-end: remote write 2.0 from the collector into a current Prometheus 3 built from the Go
module proxy (scripts/go-tools.sh prometheus3), and the two fallbacks to 1.0.

  - collector "v2" -> a loopback recorder -> Prometheus 3 (both messages accepted): stays on 2.0,
    the answers carry the written headers, every float sample Prometheus acknowledged is
    queryable with its exact value and timestamp, and the pods' histograms are stored as
    native histograms;
  - collector "v415" -> Prometheus 3 accepting prometheus.WriteRequest only: 415, then 1.0 for
    good, and its series arrive;
  - collector "nohdr" -> Debian's Prometheus 2 (a 1.0 receiver): 2xx without the written
    headers, which the spec says means nothing was written: the batch goes again as 1.0 and
    its series arrive.

Usage: test_remote_write2.py BUILD_DIR   (exit 0 all passed, 1 a failure, 77 cannot run here)
"""
import http.client
import http.server
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, HERE)
from mvtest import Procs, Report, free_port, http_get, wait_until  # noqa: E402
from test_remote_write import fields, unsnappy, metric  # noqa: E402

PROM2 = shutil.which("prometheus") or "/usr/bin/prometheus"


def v2_request(body):
    """[(labels, [(ts, value)])] of a snappy io.prometheus.write.v2.Request."""
    raw = unsnappy(body)
    symbols, series = [], []
    for f, _, v in fields(raw):
        if f == 4:
            symbols.append(v.decode())
        elif f == 5:
            series.append(v)
    out = []
    for ts in series:
        refs, samples = [], []
        for g, wt, v in fields(ts):
            if g == 1:
                if wt == 2:  # packed
                    i = 0
                    while i < len(v):
                        x, sh = 0, 0
                        while True:
                            c = v[i]
                            i += 1
                            x |= (c & 0x7F) << sh
                            sh += 7
                            if c < 0x80:
                                break
                        refs.append(x)
                else:
                    refs.append(v)
            elif g == 2:
                val, t = 0.0, 0
                for h, _, x in fields(v):
                    if h == 1:
                        val = struct.unpack("<d", x)[0]
                    elif h == 2:
                        t = x - (1 << 64) if x >= 1 << 63 else x
                samples.append((t, val))
        labels = {symbols[refs[i]]: symbols[refs[i + 1]] for i in range(0, len(refs), 2)}
        out.append((labels, samples))
    return out, symbols


class Rec:
    lock = threading.Lock()
    prom = None
    acked = {}
    written_headers = []
    ctypes = []
    first_symbol_empty = True


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ctype = self.headers.get("Content-Type", "")
        c = http.client.HTTPConnection("127.0.0.1", Rec.prom, timeout=10)
        c.request("POST", "/api/v1/write", body,
                  {k: v for k, v in self.headers.items() if k.lower() != "host"})
        r = c.getresponse()
        r.read()
        hdrs = {k: v for k, v in r.getheaders() if k.lower().startswith("x-prometheus-remote-write")}
        c.close()
        with Rec.lock:
            Rec.ctypes.append(ctype)
            Rec.written_headers.append(hdrs)
            if r.status // 100 == 2 and "v2.Request" in ctype:
                series, symbols = v2_request(body)
                Rec.first_symbol_empty &= bool(symbols) and symbols[0] == ""
                for labels, samples in series:
                    key = tuple(sorted(labels.items()))
                    for t, v in samples:
                        Rec.acked.setdefault(key, {})[t] = v
        self.send_response(r.status)
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def prometheus3():
    try:
        r = subprocess.run([os.path.join(ROOT, "scripts", "go-tools.sh"), "prometheus3"],
                           capture_output=True, text=True, timeout=3000)
    except subprocess.TimeoutExpired:
        return None, "build timed out"
    path = r.stdout.strip()
    return (path, "") if r.returncode == 0 and os.access(path, os.X_OK) else \
        (None, r.stderr[-300:])


def start_prom(procs, tmp, name, binary, extra):
    port = free_port()
    cfg = os.path.join(tmp, name + ".yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 15s\n")
    procs.spawn(name, [binary, "--config.file=" + cfg,
                       "--storage.tsdb.path=" + os.path.join(tmp, name + "-tsdb"),
                       "--web.listen-address=127.0.0.1:%d" % port,
                       "--web.enable-remote-write-receiver", "--log.level=warn"] + extra)
    base = "http://127.0.0.1:%d" % port
    if not wait_until(lambda: http_get(base + "/-/ready")[0] == 200, 20):
        raise RuntimeError("%s did not become ready" % name)
    return port, base


def count_series(base, collector):
    st, _, body = http_get(base + "/api/v1/query?" + urllib.parse.urlencode(
        {"query": 'count({collector="%s"})' % collector}))
    try:
        return int(float(json.loads(body)["data"]["result"][0]["value"][1]))
    except (ValueError, KeyError, IndexError, TypeError):
        return 0


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    prom3, why = prometheus3()
    if not prom3:
        print("SKIPPED: Prometheus 3 could not be built from the Go module proxy: %s" % why)
        return 77
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="mv-rw2-")
    procs = Procs(tmp)
    srv = None
    try:
        srv = run(rep, sys.argv[1], tmp, procs, prom3)
    except Exception as e:
        rep.check("test ran to completion", False, "%s: %s" % (type(e).__name__, e))
    finally:
        procs.stop()
        if srv:
            srv.shutdown()
        if rep.failed:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    print("remote_write2: %d passed, %d failed, %d skipped" % (rep.passed, rep.failed, rep.skipped))
    return 1 if rep.failed else 0


def run(rep, build, tmp, procs, prom3):
    bindir = os.path.join(build, "bin")
    sock = os.path.join(tmp, "agent.sock")
    procs.spawn("agent", [os.path.join(bindir, "microview-agent"), "--standalone", "--dir",
                          os.path.join(tmp, "segs"), "--socket", sock])
    if not wait_until(lambda: os.path.exists(sock), 5):
        raise RuntimeError("agent socket did not appear")
    for pod in ("a-1", "b-1"):
        procs.spawn("gen-" + pod, [os.path.join(bindir, "microviewctl"), "gen", "--agent",
                                   "unix:" + sock, "--label", "namespace=rw2", "--label",
                                   "pod=" + pod, "--rate", "50", "--counters", "2", "--gauges",
                                   "1", "--histograms", "1"])
    p3, p3base = start_prom(procs, tmp, "prom3", prom3, [])
    _, p3v1base = start_prom(procs, tmp, "prom3v1", prom3, [
        "--web.remote-write-receiver.accepted-protobuf-messages=prometheus.WriteRequest"])
    have2 = os.access(PROM2, os.X_OK)
    p2base = start_prom(procs, tmp, "prom2", PROM2, [])[1] if have2 else None
    Rec.prom = p3
    sport = free_port()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", sport), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    targets = {"v2": "http://127.0.0.1:%d/write" % sport,
               "v415": p3v1base + "/api/v1/write"}
    if p2base:
        targets["nohdr"] = p2base + "/api/v1/write"
    curls = {}
    for name, url in targets.items():
        cport = free_port()
        procs.spawn("collector-" + name, [
            os.path.join(bindir, "microview-collector"), "--agent", "unix:" + sock, "--listen",
            "127.0.0.1:%d" % cport, "--tick-ms", "20", "--window-ms", "2000",
            "--remote-write-url", url, "--remote-write-version", "2",
            "--remote-write-interval-ms", "500", "--remote-write-external-label",
            "collector=" + name, "--native-gauge-histograms"])
        curls[name] = "http://127.0.0.1:%d" % cport
    for name, curl in curls.items():
        if not wait_until(lambda: http_get(curl + "/healthz")[0] == 200, 5):
            raise RuntimeError("collector %s did not answer /healthz" % name)
    wait_until(lambda: all((metric(c, "microview_remote_write_samples_total") or 0) > 100
                           for c in curls.values()), 20, 0.5)
    time.sleep(2)

    # ---- 2.0 into Prometheus 3 ---------------------------------------------------------------------
    c = curls["v2"]
    rep.check("2.0 receiver: the collector stays on 2.0",
              metric(c, "microview_remote_write_version") == 2)
    rep.check("2.0 receiver: samples acknowledged (%s)" % metric(c, "microview_remote_write_samples_total"),
              (metric(c, "microview_remote_write_samples_total") or 0) > 0)
    with Rec.lock:
        hdr_ok = Rec.written_headers and all("X-Prometheus-Remote-Write-Samples-Written" in h
                                             for h in Rec.written_headers)
        ct_ok = Rec.ctypes and all("proto=io.prometheus.write.v2.Request" in t for t in Rec.ctypes)
        want = {k: dict(v) for k, v in Rec.acked.items()}
        sym_ok = Rec.first_symbol_empty
    rep.check("2.0 requests carry Content-Type proto=io.prometheus.write.v2.Request", ct_ok)
    rep.check("the symbols table starts with the empty string", sym_ok)
    rep.check("Prometheus 3 answers with the written headers", hdr_ok,
              str(Rec.written_headers[:1]))
    rep.check("no written-headers fallback against a 2.0 receiver",
              (metric(c, "microview_remote_write_written_headers_missing_total") or 0) == 0)
    st, _, body = http_get(p3base + "/api/v1/query?" + urllib.parse.urlencode(
        {"query": '{collector="v2"}[10m]', "time": "%.3f" % (time.time() + 1)}), timeout=20)
    stored, native, gauge_hist = {}, {}, {}
    for r in (json.loads(body).get("data", {}).get("result", []) if st == 200 else []):
        key = tuple(sorted(r["metric"].items()))
        if "histograms" in r and r["metric"].get("__name__", "").endswith("_window_distribution"):
            gauge_hist[key] = r["histograms"]  # the gauges' window distributions
            continue
        if "histograms" in r:  # the pods' histograms, sent as native histograms
            native[key] = r["histograms"]
            continue
        stored[key] = {int(round(float(t) * 1000)): float(v) for t, v in r["values"]}
    missing = wrong = 0
    for k, samples in want.items():
        got = stored.get(k, {})
        for t, v in samples.items():
            g = got.get(t)
            if g is None:
                missing += 1
            elif not (g == v or (math.isnan(g) and math.isnan(v))):
                wrong += 1
    total = sum(len(v) for v in want.values())
    hist_ok = native and all(k and dict(k).get("__name__") == "gen_latency_seconds" and
                             float(h[-1][1]["count"]) > 0 for k, h in native.items())
    rep.check("2.0: the pods' histograms stored as native histograms in Prometheus 3 (%d series)"
              % len(native), bool(hist_ok), str(list(native.items())[:1])[:300])
    # A gauge histogram is one window's distribution: its count is the reads of that window,
    # and the window summary's _window_count of the same gauge says how many.
    gh_ok = gauge_hist and all(float(h[-1][1]["count"]) > 0 and
                               dict(k).get("__name__") == "gen_queue_depth_window_distribution"
                               for k, h in gauge_hist.items())
    rep.check("2.0: the gauges' window distributions (--native-gauge-histograms) stored as native "
              "gauge histograms in Prometheus 3 (%d series)" % len(gauge_hist), bool(gh_ok),
              str(list(gauge_hist.items())[:1])[:300])
    rep.check("2.0: every acknowledged sample of %d series (%d samples) queryable in Prometheus 3 "
              "with its exact value and timestamp" % (len(want), total),
              total > 0 and missing == 0 and wrong == 0, "missing %d wrong %d" % (missing, wrong))

    # ---- 415 ------------------------------------------------------------------------------------------
    c = curls["v415"]
    rep.check("415 from a 1.0-only receiver: fallback to 1.0 counted, version 1",
              (metric(c, "microview_remote_write_fallbacks_total") or 0) >= 1 and
              metric(c, "microview_remote_write_version") == 1)
    rep.check("415: the series arrive as 1.0 (%d)" % count_series(p3v1base, "v415"),
              wait_until(lambda: count_series(p3v1base, "v415") > 10, 5, 0.5))
    _, _, mbody = http_get(c + "/metrics")
    m = re.search(r'^microview_remote_write_samples_dropped_total\{reason="native_in_1\.0"\} (\S+)$',
                  mbody.decode() if isinstance(mbody, bytes) else mbody, re.M)
    rep.check("415: gauge histograms, which 1.0 cannot carry, counted as dropped (%s)"
              % (m.group(1) if m else None), bool(m) and float(m.group(1)) > 0)

    # ---- 2xx without the written headers ----------------------------------------------------------------
    if "nohdr" in curls:
        c = curls["nohdr"]
        rep.check("2xx without written headers (a 1.0 receiver): counted, version 1",
                  (metric(c, "microview_remote_write_written_headers_missing_total") or 0) >= 1 and
                  metric(c, "microview_remote_write_version") == 1)
        rep.check("no written headers: the batch sent again as 1.0 and the series arrive (%d)"
                  % count_series(p2base, "nohdr"),
                  wait_until(lambda: count_series(p2base, "nohdr") > 10, 5, 0.5))
    else:
        rep.skip("2xx without written headers", "Debian's prometheus is not installed")
    return srv


if __name__ == "__main__":
    sys.exit(main())
