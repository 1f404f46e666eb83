#!/usr/bin/python3
"""End-to-end: Prometheus scrapes the collector's protobuf exposition and aggregates the native
histograms across pods.

Starts, on loopback and in a temp dir: the standalone agent, three segments labelled like pods
(microviewctl create), the collector (3 s windows aligned to the wall clock) and Debian's
Prometheus with --enable-feature=native-histograms (1 s scrapes). This process writes into the
segments through libmicroview (ctypes): a histogram whose bounds are the boundaries of native
schema 6 (2^(k/64)), and a known log-normal sample per pod, all within one window. Then:

  - histogram_quantile(0.99, sum(rate(nh_latency_seconds[1m]))) is within the schema-6 bound
    (2^(1/64) - 1, 1.09 %) of the exact p99 of all observations together;
  - per pod, histogram_quantile(0.99, ...) agrees with the collector's own window p99 (the
    nh_latency_seconds_window summary) within the same bound;
  - the collector answers Prometheus' Accept header with the protobuf exposition, and the
    classic _bucket series are not what Prometheus stored.

The collector also runs with --native-gauge-histograms: each pod's gauge nh_temp holds two
known values in one window (a, then b from the middle of the window; negative values and zero
included), so that the window's count and sum (its _window_count and _window_sum) give how many
reads saw each, i.e. the exact multiset of the values read. Then, on the gauge histograms
nh_temp_window_distribution (GAUGE_HISTOGRAM):

  - histogram_quantile(q, sum(nh_temp_window_distribution)) is within
    eps = (1 + alpha) 2^(1/64) - 1 (2.10 %, docs/exposition.md) of the exact q-quantile of all
    the gauge values read in that window by the three pods together (q = 0.99, 0.5, 0.05);
  - per pod, histogram_quantile(0.99, ...) is within eps of the exact p99 and of the
    collector's own window p99 (nh_temp_window{quantile="0.99"}).

With "prom3" after BUILD_DIR the scraper is a current Prometheus 3 built from the Go module
proxy (scripts/go-tools.sh prometheus3) with scrape_native_histograms: true.

Usage: test_native_histograms.py BUILD_DIR [prom3]   (exit 0 all passed, 1 a failure, 77 cannot
run here)
"""
import ctypes
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from mvtest import Procs, Report, free_port, http_get, wait_until  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROM3 = False
WINDOW_MS = 3000
BUDGET_S = 110
SCHEMA = 6
BOUND = 2 ** (2 ** -SCHEMA) - 1  # relative width of one native bucket
# Pod bounds: the schema-6 boundaries 2^(k/64) from 2^-7 (7.8 ms) to 2^(-289/64) (44 ms).
BOUNDS = [2 ** (k / 64) for k in range(-448, -288)]
# (pod, median seconds, log sigma, observations)
PODS = [("web-1", 0.015, 0.20, 2000), ("web-2", 0.020, 0.25, 3000), ("web-3", 0.025, 0.15, 1500)]
ALPHA = 0.01
EPS = (1 + ALPHA) * 2 ** (2 ** -SCHEMA) - 1  # gauge histograms: sketch + native bucket
ZERO_T = 2.0 ** -128
# (pod, a, b): the gauge holds a, then b from the middle of the window.
GAUGES = {"web-1": (10.0, 20.0), "web-2": (12.5, 40.0), "web-3": (-8.0, 0.0)}
PROTO_ACCEPT = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")


class MvGauge(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_void_p)]


class MvLabel(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


def load_lib(build):
    path = os.path.join(build, "lib", "libmicroview.so")
    if not os.path.exists(path):
        return None
    lib = ctypes.CDLL(path)
    lib.mv_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.mv_histogram_register.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
        ctypes.POINTER(MvLabel), ctypes.c_size_t, ctypes.POINTER(ctypes.c_double),
        ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    lib.mv_histogram_observe.argtypes = [ctypes.c_void_p, ctypes.c_double]
    lib.mv_heartbeat.argtypes = [ctypes.c_void_p]
    lib.mv_gauge_register.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
        ctypes.POINTER(MvLabel), ctypes.c_size_t, ctypes.POINTER(MvGauge)]
    lib.mv_gauge_add.argtypes = [MvGauge, ctypes.c_double]
    lib.mv_gauge_value.argtypes = [MvGauge]
    lib.mv_gauge_value.restype = ctypes.c_double
    return lib


def gauge_set(lib, g, v):
    """Sets a gauge through the exported add (the values used make it exact)."""
    lib.mv_gauge_add(g, v - lib.mv_gauge_value(g))


def weighted_quantile_range(pairs, q):
    """The values between ranks floor(q(n-1)) and ceil(qn) of a multiset given as
    (value, count) pairs."""
    s = sorted(pairs)
    n = sum(c for _, c in s)

    def at(rank):
        seen = 0
        for v, c in s:
            seen += c
            if seen > rank:
                return v
        return s[-1][0]
    return at(int(math.floor(q * (n - 1)))), at(min(n - 1, int(math.ceil(q * n))))


def near_eps(v, lo, hi):
    return (v is not None and math.isfinite(v) and
            lo - EPS * abs(lo) - ZERO_T <= v <= hi + EPS * abs(hi) + ZERO_T)


def exact_quantile_range(values, q):
    """The values between the ranks a q-quantile may be taken at (floor(q(n-1)) .. ceil(qn))."""
    s = sorted(values)
    lo = s[int(math.floor(q * (len(s) - 1)))]
    hi = s[min(len(s) - 1, int(math.ceil(q * len(s))))]
    return lo, hi


def near(v, lo, hi, bound):
    return v is not None and math.isfinite(v) and lo / (1 + bound) <= v <= hi * (1 + bound)


def query(base, q, at=None):
    args = {"query": q}
    if at is not None:
        args["time"] = "%.3f" % at
    st, _, body = http_get(base + "/api/v1/query?" + urllib.parse.urlencode(args))
    if st != 200:
        return None
    doc = json.loads(body)
    return doc["data"]["result"] if doc.get("status") == "success" else None


def scalar_of(res):
    if not res or len(res) != 1 or "value" not in res[0]:
        return None
    return float(res[0]["value"][1])


def main():
    global PROMETHEUS, PROM3
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "prom3"):
        print(__doc__)
        return 2
    build = sys.argv[1]
    if len(sys.argv) == 3:
        r = subprocess.run([os.path.join(ROOT, "scripts", "go-tools.sh"), "prometheus3"],
                           capture_output=True, text=True, timeout=3000)
        if r.returncode != 0:
            print("SKIPPED: Prometheus 3 could not be built from the Go module proxy: %s"
                  % r.stderr[-300:])
            return 77
        PROMETHEUS, PROM3 = r.stdout.strip(), True
    if not os.access(PROMETHEUS, os.X_OK):
        print("SKIPPED: Debian's prometheus package is not installed (scripts/deps.sh test)")
        return 77
    if os.environ.get("MV_SANITIZED"):
        print("SKIPPED: an ASan-built libmicroview cannot be loaded into python3")
        return 77
    lib = load_lib(build)
    if lib is None:
        print("SKIPPED: libmicroview.so not built")
        return 77
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="mv-nh-")
    procs = Procs(tmp)

    def on_alarm(signum, frame):
        raise TimeoutError("test exceeded %d s" % BUDGET_S)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(BUDGET_S)
    try:
        run(rep, build, lib, tmp, procs)
    except Exception as e:
        rep.check("test ran to completion", False, "%s: %s" % (type(e).__name__, e))
    finally:
        signal.alarm(0)
        procs.stop()
        if rep.failed:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    print("native_histograms: %d passed, %d failed, %d skipped"
          % (rep.passed, rep.failed, rep.skipped))
    return 1 if rep.failed else 0


def run(rep, build, lib, tmp, procs):
    bindir = os.path.join(build, "bin")
    sock = os.path.join(tmp, "agent.sock")
    procs.spawn("agent", [os.path.join(bindir, "microview-agent"), "--standalone", "--dir",
                          os.path.join(tmp, "segs"), "--socket", sock])
    if not wait_until(lambda: os.path.exists(sock), 5):
        raise RuntimeError("agent socket did not appear")
    hists = {}
    for pod, _, _, _ in PODS:
        out = subprocess.run([os.path.join(bindir, "microviewctl"), "create", "--agent",
                              "unix:" + sock, "--size", "64Ki", "--label", "namespace=shop",
                              "--label", "pod=" + pod], capture_output=True, text=True,
                             timeout=10)
        path = dict(l.split("=", 1) for l in out.stdout.split() if "=" in l).get("path")
        if out.returncode != 0 or not path:
            raise RuntimeError("microviewctl create: %s" % out.stderr)
        seg = ctypes.c_void_p()
        if lib.mv_open(path.encode(), ctypes.byref(seg)) != 0:
            raise RuntimeError("mv_open %s failed" % path)
        bounds = (ctypes.c_double * len(BOUNDS))(*BOUNDS)
        h = ctypes.c_void_p()
        rc = lib.mv_histogram_register(seg, b"nh_latency_seconds", b"Request latency.",
                                       b"seconds", None, 0, bounds, len(BOUNDS), ctypes.byref(h))
        if rc != 0:
            raise RuntimeError("mv_histogram_register: %d" % rc)
        g = MvGauge()
        labels = (MvLabel * 1)(MvLabel(b"sensor", b"inlet"))
        rc = lib.mv_gauge_register(seg, b"nh_temp", b"A temperature.", None, labels, 1,
                                   ctypes.byref(g))
        if rc != 0:
            raise RuntimeError("mv_gauge_register: %d" % rc)
        lib.mv_heartbeat(seg)
        hists[pod] = (seg, h, g)

    cport = free_port()
    procs.spawn("collector", [os.path.join(bindir, "microview-collector"), "--agent",
                              "unix:" + sock, "--listen", "127.0.0.1:%d" % cport, "--tick-ms",
                              "10", "--window-ms", str(WINDOW_MS), "--window-align", "wall",
                              "--derived", "histogram=all", "--derived", "gauge=all",
                              "--native-schema", str(SCHEMA), "--native-gauge-histograms"])
    curl = "http://127.0.0.1:%d" % cport
    if not wait_until(lambda: http_get(curl + "/healthz")[0] == 200, 5):
        raise RuntimeError("collector did not answer /healthz")

    wait_until(lambda: b"nh_latency_seconds_bucket{" in
               (http_get(curl + "/metrics", {"Accept": "text/plain"})[2] or b""), 5, 0.1)
    st, hdr, body = http_get(curl + "/metrics", {"Accept": PROTO_ACCEPT})
    ctype = hdr.get("Content-Type", "") if hdr else ""
    rep.check("the collector answers Prometheus' native-histogram Accept with protobuf",
              st == 200 and ctype.startswith("application/vnd.google.protobuf") and
              "encoding=delimited" in ctype, ctype)
    st, hdr, body = http_get(curl + "/metrics", {"Accept": "text/plain"})
    rep.check("text 0.0.4 still served to a client that does not ask for protobuf",
              st == 200 and hdr.get("Content-Type", "").startswith("text/plain") and
              b"nh_latency_seconds_bucket{" in body, (hdr or {}).get("Content-Type"))

    pport = free_port()
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n"
                "  - job_name: microview\n    honor_labels: true\n%s    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n"
                % ("    scrape_native_histograms: true\n" if PROM3 else "", cport))
    procs.spawn("prometheus", [PROMETHEUS, "--config.file=" + cfg,
                               "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                               "--web.listen-address=127.0.0.1:%d" % pport,
                               "--enable-feature=native-histograms", "--log.level=warn"])
    prom = "http://127.0.0.1:%d" % pport
    if not wait_until(lambda: http_get(prom + "/-/ready")[0] == 200, 15):
        raise RuntimeError("prometheus did not become ready")
    # Every pod's (empty) native histogram stored before the observations begin, so that
    # rate() over the range sees all of them as an increase.
    have = wait_until(lambda: (lambda r: r if r and len(r) == len(PODS) and
                               all("histogram" in x for x in r) else None)(
        query(prom, "nh_latency_seconds")), 25, 0.25)
    rep.check("Prometheus stored a native histogram per pod (protobuf scrape)", bool(have),
              json.dumps(query(prom, "nh_latency_seconds"))[:400])
    if not have:
        return
    time.sleep(1.5)  # two more scrapes of the empty histograms
    classic = query(prom, "nh_latency_seconds_bucket")
    rep.check("no classic _bucket series stored (the native histogram replaced them)",
              classic == [], json.dumps(classic)[:200])

    # All observations inside one wall-clock window: start just after a boundary.
    now_ms = time.time() * 1000
    wait_s = (WINDOW_MS - now_ms % WINDOW_MS) / 1000 + 0.2
    time.sleep(wait_s)
    rnd = random.Random(37)
    values = {}
    t0 = time.time()
    for pod, med, sigma, n in PODS:
        seg, h, _ = hists[pod]
        vs = [med * math.exp(sigma * rnd.gauss(0, 1)) for _ in range(n)]
        for v in vs:
            lib.mv_histogram_observe(h, v)
        lib.mv_heartbeat(seg)
        values[pod] = vs
    took = time.time() - t0
    rep.check("observations written within one window (%.2f s)" % took, took < WINDOW_MS / 1000 - 0.5)

    # The collector's own window p99 per pod, once the window closed.
    def own():
        st, _, body = http_get(curl + "/metrics", {"Accept": "text/plain"})
        if st != 200:
            return None
        got, counts = {}, {}
        for line in body.decode().splitlines():
            if line.startswith("nh_latency_seconds_window{") and 'quantile="0.99"' in line:
                pod = line.split('pod="', 1)[1].split('"', 1)[0]
                got[pod] = float(line.rsplit(" ", 1)[1])
            elif line.startswith("nh_latency_seconds_window_count{"):
                pod = line.split('pod="', 1)[1].split('"', 1)[0]
                counts[pod] = int(float(line.rsplit(" ", 1)[1]))
        ok = all(counts.get(p) == n for p, _, _, n in PODS)
        return got if ok else None
    mine = wait_until(own, WINDOW_MS / 1000 * 2 + 2, 0.2)
    rep.check("the collector's window summary holds every observation of each pod",
              bool(mine), str(mine))
    total = sum(n for _, _, _, n in PODS)

    def all_in_prom():
        r = query(prom, "sum(nh_latency_seconds)")
        try:
            return float(r[0]["histogram"][1]["count"]) == total
        except (TypeError, IndexError, KeyError, ValueError):
            return False
    rep.check("Prometheus has every observation (sum of native histogram counts = %d)" % total,
              wait_until(all_in_prom, 8, 0.25))
    time.sleep(1.2)

    everything = [v for vs in values.values() for v in vs]
    lo, hi = exact_quantile_range(everything, 0.99)
    agg = scalar_of(query(prom, "histogram_quantile(0.99, sum(rate(nh_latency_seconds[1m])))"))
    rep.check("histogram_quantile(0.99, sum(rate(nh_latency_seconds[1m]))) = %s within %.2f %% "
              "of the exact p99 of all pods %.5f" % (agg, BOUND * 100, (lo + hi) / 2),
              near(agg, lo, hi, BOUND), "exact range %.6f..%.6f" % (lo, hi))
    print("info: aggregated p99 error vs exact: %.3f %%"
          % (100 * abs(agg - (lo + hi) / 2) / ((lo + hi) / 2) if agg else float("nan")))
    for pod, _, _, _ in PODS:
        q = scalar_of(query(prom, 'histogram_quantile(0.99, sum(rate(nh_latency_seconds'
                                  '{pod="%s"}[1m])))' % pod))
        plo, phi = exact_quantile_range(values[pod], 0.99)
        rep.check("%s: native p99 %s within %.2f %% of the exact p99 %.5f" % (pod, q, BOUND * 100,
                  plo), near(q, plo, phi, BOUND))
        c = (mine or {}).get(pod)
        rep.check("%s: native p99 %s agrees with the collector's window p99 %s within %.2f %%"
                  % (pod, q, c, BOUND * 100),
                  q is not None and c is not None and abs(q - c) <= BOUND * c)
    gauge_windows(rep, lib, hists, curl, prom)


def gauge_windows(rep, lib, hists, curl, prom):
    """Gauge windows as native gauge histograms, against the exact values read."""
    # a from before a window's start, b from its middle, kept past its end.
    now_ms = time.time() * 1000
    time.sleep((WINDOW_MS - now_ms % WINDOW_MS) / 1000 + 0.1)
    for pod, (a, _) in GAUGES.items():
        gauge_set(lib, hists[pod][2], a)
        lib.mv_heartbeat(hists[pod][0])
    now_ms = time.time() * 1000
    start_ms = now_ms - now_ms % WINDOW_MS + WINDOW_MS  # the window W measured
    time.sleep((start_ms + WINDOW_MS / 2) / 1000 - time.time())
    for pod, (_, b) in GAUGES.items():
        gauge_set(lib, hists[pod][2], b)
        lib.mv_heartbeat(hists[pod][0])
    time.sleep((start_ms + WINDOW_MS) / 1000 + 0.3 - time.time())  # W closed

    def window():
        st, _, body = http_get(curl + "/metrics", {"Accept": "text/plain"})
        if st != 200:
            return None
        got = {}
        for line in body.decode().splitlines():
            if not line.startswith("nh_temp_window"):
                continue
            name = line.split("{", 1)[0]
            pod = line.split('pod="', 1)[1].split('"', 1)[0]
            d = got.setdefault(pod, {})
            if name == "nh_temp_window" and 'quantile="0.99"' in line:
                d["p99"] = float(line.rsplit(" ", 1)[1])
            elif name in ("nh_temp_window_count", "nh_temp_window_sum"):
                d[name[15:]] = float(line.rsplit(" ", 1)[1])
        return got if all(len(got.get(p, {})) == 3 for p in GAUGES) else None
    got = wait_until(window, 3, 0.1)
    if not got:
        rep.check("the collector summarised each pod's gauge window", False)
        return
    # How many reads saw a and b: n_a a + n_b b = sum, n_a + n_b = count.
    pairs, per_pod = [], {}
    for pod, (a, b) in GAUGES.items():
        n, s = got[pod]["count"], got[pod]["sum"]
        na = (s - n * b) / (a - b)
        ok = abs(na - round(na)) < 1e-6 and 0 < round(na) < n
        rep.check("%s: the window read both values (%s of %d reads saw %s)" % (pod, na, n, a), ok)
        if not ok:
            return
        per_pod[pod] = [(a, int(round(na))), (b, int(n - round(na)))]
        pairs += per_pod[pod]
    total = sum(c for _, c in pairs)
    total_sum = sum(v * c for v, c in pairs)

    # An evaluation time at which Prometheus holds window W for every pod (its count and sum:
    # the next window, on b alone, may have the same count).
    def holds_w():
        t = time.time()
        r = query(prom, "sum(nh_temp_window_distribution)", t)
        try:
            h = r[0]["histogram"][1]
            return (t if float(h["count"]) == total and
                    abs(float(h["sum"]) - total_sum) <= 1e-9 * abs(total_sum) else None)
        except (TypeError, IndexError, KeyError, ValueError):
            return None
    t = wait_until(holds_w, 2.5, 0.1)
    typ = query(prom, "nh_temp_window_distribution")
    rep.check("Prometheus stored a native gauge histogram per pod (count %d together)" % total,
              bool(t) and typ is not None and len(typ) == 3 and
              all("histogram" in x for x in typ), json.dumps(typ)[:300])
    if not t:
        return
    for q in (0.99, 0.5, 0.05):
        lo, hi = weighted_quantile_range(pairs, q)
        v = scalar_of(query(prom, "histogram_quantile(%g, sum(nh_temp_window_distribution))"
                            % q, t))
        rep.check("histogram_quantile(%g, sum(nh_temp_window_distribution)) = %s within "
                  "%.2f %% of the exact quantile of all pods' values read (%s..%s)"
                  % (q, v, EPS * 100, lo, hi), near_eps(v, lo, hi))
    for pod in GAUGES:
        v = scalar_of(query(prom, 'histogram_quantile(0.99, nh_temp_window_distribution'
                                  '{pod="%s"})' % pod, t))
        lo, hi = weighted_quantile_range(per_pod[pod], 0.99)
        own = got[pod]["p99"]
        rep.check("%s: gauge histogram p99 %s within %.2f %% of the exact %s and of the "
                  "collector's window p99 %s" % (pod, v, EPS * 100, hi, own),
                  near_eps(v, lo, hi) and near_eps(v, own, own))


if __name__ == "__main__":
    sys.exit(main())
