#!/usr/bin/python3
"""End-to-end: the collector's remote write into Debian's Prometheus
(--web.enable-remote-write-receiver), through a loopback stand-in that injects faults.

Starts, in a temp dir: the standalone agent, two `microviewctl gen` workloads, Prometheus, a
stand-in receiver (this process) that forwards to Prometheus' /api/v1/write and records what
Prometheus acknowledged, and two collectors remote-writing through it: "big" (a queue that
holds the whole outage) and "small" (a 64-sample queue). Phases:

  1. 429 with Retry-After: 2 once to "big": its next request comes >= 2 s later;
  2. 400 to "big" for 2 s: no request body is sent twice (4xx not retried), drops counted;
  3. both receivers down (503) for OUTAGE_S (30 s): afterwards "big" delivers every sample it
     queued (none dropped), "small" counts queue_full drops and delivers the rest;
  4. every sample Prometheus acknowledged for "big" is queryable with its exact value and
     timestamp, and Prometheus holds no other sample of its series.

Usage: test_remote_write.py BUILD_DIR   (exit 0 all passed, 1 a failure, 77 cannot run here)
"""
import hashlib
import http.client
import http.server
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from mvtest import Procs, Report, free_port, http_get, wait_until  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
OUTAGE_S = float(os.environ.get("MV_RW_OUTAGE_S", "30"))
BUDGET_S = 90 + OUTAGE_S


# ---- wire formats (a separate implementation from the collector's) --------------------------

def unsnappy(b):
    """Snappy block format decoder."""
    i, n, sh = 0, 0, 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << sh
        sh += 7
        if c < 0x80:
            break
    out = bytearray()
    while i < len(b):
        tag = b[i]
        i += 1
        t = tag & 3
        if t == 0:
            ln = tag >> 2
            if ln >= 60:
                nb = ln - 59
                ln = int.from_bytes(b[i:i + nb], "little")
                i += nb
            ln += 1
            out += b[i:i + ln]
            i += ln
            continue
        if t == 1:
            ln = ((tag >> 2) & 7) + 4
            off = ((tag >> 5) << 8) | b[i]
            i += 1
        elif t == 2:
            ln = (tag >> 2) + 1
            off = int.from_bytes(b[i:i + 2], "little")
            i += 2
        else:
            ln = (tag >> 2) + 1
            off = int.from_bytes(b[i:i + 4], "little")
            i += 4
        if off == 0 or off > len(out):
            raise ValueError("bad snappy offset")
        for _ in range(ln):
            out.append(out[-off])
    if len(out) != n:
        raise ValueError("snappy length mismatch")
    return bytes(out)


def fields(b):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 2:
            ln, i = varint(b, i)
            v = b[i:i + ln]
            i += ln
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v


def varint(b, i):
    v, sh = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << sh
        sh += 7
        if c < 0x80:
            return v, i


def write_request(body):
    """[(labels dict, [(ts_ms, value)])] of a snappy WriteRequest."""
    import struct
    out = []
    for f, _, ts in fields(unsnappy(body)):
        if f != 1:
            continue
        labels, samples = {}, []
        for g, _, v in fields(ts):
            if g == 1:
                kv = {h: x.decode() for h, _, x in fields(v)}
                labels[kv.get(1, "")] = kv.get(2, "")
            elif g == 2:
                val, t = 0.0, 0
                for h, wt, x in fields(v):
                    if h == 1:
                        val = struct.unpack("<d", x)[0]
                    elif h == 2:
                        t = x - (1 << 64) if x >= 1 << 63 else x
                samples.append((t, val))
        out.append((labels, samples))
    return out


# ---- the stand-in receiver -------------------------------------------------------------------

class Stub:
    lock = threading.Lock()
    prom = None
    mode = {}        # path -> "ok" | "down" | "400" | "429once"
    log = []         # (time, path, status, body sha1, samples)
    acked = {}       # path -> {series key: {ts: value}}
    prom_errors = []


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        path = self.path
        hdr_ok = (self.headers.get("Content-Encoding") == "snappy" and
                  self.headers.get("Content-Type", "").startswith("application/x-protobuf") and
                  self.headers.get("X-Prometheus-Remote-Write-Version") == "0.1.0" and
                  bool(self.headers.get("User-Agent")))
        with Stub.lock:
            mode = Stub.mode.get(path, "ok")
            if mode == "429once":
                Stub.mode[path] = "ok"
        series = write_request(body)
        n = sum(len(s) for _, s in series)
        extra = {}
        if not hdr_ok:
            status = 400
        elif mode == "down":
            status = 503
        elif mode == "400":
            status = 400
        elif mode == "429once":
            status, extra = 429, {"Retry-After": "2"}
        else:
            c = http.client.HTTPConnection("127.0.0.1", Stub.prom, timeout=10)
            c.request("POST", "/api/v1/write", body, {k: v for k, v in self.headers.items()
                                                      if k.lower() != "host"})
            r = c.getresponse()
            rb = r.read()
            status = r.status
            c.close()
            if status // 100 == 2:
                with Stub.lock:
                    acked = Stub.acked.setdefault(path, {})
                    for labels, samples in series:
                        key = tuple(sorted(labels.items()))
                        for t, v in samples:
                            acked.setdefault(key, {})[t] = v
            else:
                with Stub.lock:
                    Stub.prom_errors.append((status, rb[:300]))
        with Stub.lock:
            Stub.log.append((time.monotonic(), path, status, hashlib.sha1(body).hexdigest(), n,
                             hdr_ok))
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def metric(curl, name, label=None):
    st, _, body = http_get(curl + "/metrics", {"Accept": "text/plain"})
    if st != 200:
        return None
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or (label and line.startswith(name + "{" + label + "}")):
            return float(line.rsplit(" ", 1)[1])
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not os.access(PROMETHEUS, os.X_OK):
        print("SKIPPED: Debian's prometheus package is not installed (scripts/deps.sh test)")
        return 77
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="mv-rw-")
    procs = Procs(tmp)

    def on_alarm(signum, frame):
        raise TimeoutError("test exceeded %d s" % BUDGET_S)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(BUDGET_S))
    srv = None
    try:
        srv = run(rep, sys.argv[1], tmp, procs)
    except Exception as e:
        rep.check("test ran to completion", False, "%s: %s" % (type(e).__name__, e))
    finally:
        signal.alarm(0)
        procs.stop()
        if srv:
            srv.shutdown()
        if rep.failed:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    print("remote_write: %d passed, %d failed, %d skipped" % (rep.passed, rep.failed, rep.skipped))
    return 1 if rep.failed else 0


def run(rep, build, tmp, procs):
    bindir = os.path.join(build, "bin")
    sock = os.path.join(tmp, "agent.sock")
    procs.spawn("agent", [os.path.join(bindir, "microview-agent"), "--standalone", "--dir",
                          os.path.join(tmp, "segs"), "--socket", sock])
    if not wait_until(lambda: os.path.exists(sock), 5):
        raise RuntimeError("agent socket did not appear")
    for pod in ("a-1", "b-1"):
        procs.spawn("gen-" + pod, [os.path.join(bindir, "microviewctl"), "gen", "--agent",
                                   "unix:" + sock, "--label", "namespace=rw", "--label",
                                   "pod=" + pod, "--rate", "50", "--counters", "2", "--gauges",
                                   "1", "--histograms", "1"])
    pport = free_port()
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 15s\n")
    procs.spawn("prometheus", [PROMETHEUS, "--config.file=" + cfg,
                               "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                               "--web.listen-address=127.0.0.1:%d" % pport,
                               "--web.enable-remote-write-receiver", "--log.level=warn"])
    prom = "http://127.0.0.1:%d" % pport
    if not wait_until(lambda: http_get(prom + "/-/ready")[0] == 200, 15):
        raise RuntimeError("prometheus did not become ready")
    Stub.prom = pport
    sport = free_port()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", sport), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    curls = {}
    for name, queue in (("big", 200000), ("small", 64)):
        cport = free_port()
        procs.spawn("collector-" + name, [
            os.path.join(bindir, "microview-collector"), "--agent", "unix:" + sock, "--listen",
            "127.0.0.1:%d" % cport, "--tick-ms", "20", "--window-ms", "2000",
            "--remote-write-url", "http://127.0.0.1:%d/%s" % (sport, name),
            "--remote-write-interval-ms", "500", "--remote-write-queue-samples", str(queue),
            "--remote-write-max-backoff-ms", "1000", "--remote-write-shards", "2",
            "--remote-write-external-label", "collector=" + name,
            "--remote-write-external-label", "pod=not-used"])
        curls[name] = "http://127.0.0.1:%d" % cport
    for name, curl in curls.items():
        if not wait_until(lambda: http_get(curl + "/healthz")[0] == 200, 5):
            raise RuntimeError("collector %s did not answer /healthz" % name)

    def acked(path):
        with Stub.lock:
            return sum(len(v) for v in Stub.acked.get(path, {}).values())
    rep.check("both collectors' samples reach Prometheus",
              wait_until(lambda: acked("/big") > 0 and acked("/small") > 0, 10))
    with Stub.lock:
        hdrs = all(e[5] for e in Stub.log)
    rep.check("every request carries the four required headers (snappy, protobuf, version "
              "0.1.0, User-Agent)", hdrs)

    # ---- 1. 429 with Retry-After ----------------------------------------------------------------
    with Stub.lock:
        Stub.mode["/big"] = "429once"
    wait_until(lambda: any(e[1] == "/big" and e[2] == 429 for e in Stub.log), 5)
    time.sleep(3)
    with Stub.lock:
        i429 = [i for i, e in enumerate(Stub.log) if e[1] == "/big" and e[2] == 429]
        # The retry of the refused batch (its shard's next request; the other shard goes on).
        after = [e for e in Stub.log[i429[0] + 1:] if e[1] == "/big" and
                 e[3] == Stub.log[i429[0]][3]] if i429 else []
        gap = after[0][0] - Stub.log[i429[0]][0] if after else None
    rep.check("429 with Retry-After: 2 honoured: the same batch again after %s s (>= 1.9)"
              % (None if gap is None else round(gap, 2)), gap is not None and gap >= 1.9)

    # ---- 2. 400: dropped, not retried --------------------------------------------------------------
    dropped0 = metric(curls["big"], "microview_remote_write_samples_dropped_total",
                      'reason="http_4xx"') or 0
    with Stub.lock:
        Stub.mode["/big"] = "400"
        n0 = len(Stub.log)
    time.sleep(2)
    with Stub.lock:
        Stub.mode["/big"] = "ok"
        bad = [e for e in Stub.log[n0:] if e[1] == "/big" and e[2] == 400]
    time.sleep(1)
    sent400 = sum(e[4] for e in bad)
    dropped1 = metric(curls["big"], "microview_remote_write_samples_dropped_total",
                      'reason="http_4xx"') or 0
    rep.check("400: %d requests refused, none sent twice" % len(bad),
              len(bad) >= 2 and len({e[3] for e in bad}) == len(bad))
    rep.check("400: the refused samples are counted as dropped (%d of %d)"
              % (dropped1 - dropped0, sent400), dropped1 - dropped0 >= sent400 > 0)

    # ---- 3. receiver down ---------------------------------------------------------------------------
    queued_before = metric(curls["big"], "microview_remote_write_samples_dropped_total",
                           'reason="queue_full"') or 0
    with Stub.lock:
        Stub.mode["/big"] = Stub.mode["/small"] = "down"
        t_down = time.time()
    time.sleep(OUTAGE_S)
    age = metric(curls["big"], "microview_remote_write_queue_oldest_age_seconds")
    qlen = metric(curls["big"], "microview_remote_write_queue_samples")
    rep.check("while down: the queue holds samples (%s) and its oldest age shows the outage (%s s)"
              % (qlen, age), (qlen or 0) > 0 and (age or 0) >= OUTAGE_S * 0.8)
    with Stub.lock:
        Stub.mode["/big"] = Stub.mode["/small"] = "ok"
        t_up = time.time()
    rep.check("after the outage both queues drain", wait_until(
        lambda: metric(curls["big"], "microview_remote_write_queue_samples") == 0 and
        metric(curls["small"], "microview_remote_write_queue_samples") == 0, 20, 0.25))
    dq_big = (metric(curls["big"], "microview_remote_write_samples_dropped_total",
                     'reason="queue_full"') or 0) - queued_before
    dq_small = metric(curls["small"], "microview_remote_write_samples_dropped_total",
                      'reason="queue_full"') or 0
    rep.check("big queue: no sample dropped during the %ds outage" % OUTAGE_S, dq_big == 0,
              str(dq_big))
    rep.check("small queue (64 samples): drops beyond its bound counted (%d)" % dq_small,
              dq_small > 0)
    with Stub.lock:
        big = Stub.acked.get("/big", {})
        during = {k for k, v in big.items() if any(t_down * 1000 + 1500 <= t <= t_up * 1000 - 1500
                                                   for t in v)}
    raw_series = {k for k in big if dict(k).get("__name__", "").startswith("gen_requests_total")}
    rep.check("big: every raw series has samples from inside the outage, delivered after it "
              "(%d of %d)" % (len(raw_series & during), len(raw_series)),
              raw_series and raw_series <= during)
    for name, curl in curls.items():
        q = metric(curl, "microview_remote_write_samples_total") or 0
        print("info: %s: samples acknowledged %d" % (name, q))

    # ---- 4. exact values and timestamps in Prometheus ------------------------------------------------
    time.sleep(1)
    st, _, body = http_get(prom + "/api/v1/query?" + urllib.parse.urlencode(
        {"query": '{collector="big"}[10m]', "time": "%.3f" % (time.time() + 1)}), timeout=20)
    doc = json.loads(body) if st == 200 else {}
    stored = {}
    for r in doc.get("data", {}).get("result", []):
        key = tuple(sorted(r["metric"].items()))
        stored[key] = {int(round(float(t) * 1000)): float(v) for t, v in r["values"]}
    with Stub.lock:
        want = {k: dict(v) for k, v in Stub.acked.get("/big", {}).items()}
        perr = list(Stub.prom_errors)
    missing = wrong = 0
    for k, samples in want.items():
        got = stored.get(k, {})
        for t, v in samples.items():
            g = got.get(t)
            if g is None:
                missing += 1
            elif not (g == v or (math.isnan(g) and math.isnan(v))):
                wrong += 1
    extra = sum(len(set(stored.get(k, {})) - set(want.get(k, {}))) for k in stored)
    total = sum(len(v) for v in want.values())
    rep.check("every acknowledged sample of %d series (%d samples) queryable with its exact value "
              "and timestamp" % (len(want), total), total > 0 and missing == 0 and wrong == 0,
              "missing %d wrong %d" % (missing, wrong))
    rep.check("Prometheus holds no sample the collector did not send", extra == 0, str(extra))
    rep.check("series keep the collector's own pod label over the external one",
              all(dict(k).get("pod") in ("a-1", "b-1") for k in want if "pod" in dict(k)))
    rep.check("Prometheus refused nothing the collector sent", not perr, str(perr[:3]))
    return srv


if __name__ == "__main__":
    sys.exit(main())
