#!/usr/bin/python3
"""End-to-end: a real Prometheus scrapes the collector; the autoscaling queries shipped in
deploy/autoscaling/ run against it.

Starts, on loopback and in a temp dir: the standalone agent, four `microviewctl gen` workloads
labelled like Kubernetes pods, the collector, Debian's Prometheus (1 s scrapes, generated config,
temp storage) and a tiny recorder that shows which Accept header Prometheus sends. Then asserts
over Prometheus's HTTP API that the target is up and parsed as OpenMetrics, that rates and
quantiles match the generators, that series carry the pod labels, and that the prometheus-adapter
rules, the KEDA triggers and the HPA metric names from deploy/autoscaling/ give one value per pod.

Assertions that need the collector's derived series (<base>_rate, <name>_window, ...) or its
/api/v1/value endpoint print "SKIPPED: ..." when the collector does not serve them, and become
strict as soon as it does (a collector that advertises --window-ms must serve them).

Usage: test_prometheus.py BUILD_DIR        (exit 0 all passed, 1 a failure, 77 cannot run here)
"""
import http.server
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

try:
    import yaml  # Debian's python3-yaml
except ImportError:
    print("SKIPPED: python3-yaml is not installed (scripts/deps.sh installs it)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from mvtest import Procs, Report, free_port, http_get, wait_until  # noqa: E402
AUTOSCALING = os.path.join(ROOT, "deploy", "autoscaling")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

WINDOW_MS = 2000  # export window asked of the collector when it supports --window-ms
MAX_INTERVAL_MS = 50  # slowest adaptive read interval, when the collector has adaptive sampling
TOTAL_BUDGET_S = 58  # every wait below is bounded; this is the hard ceiling

# The pods the generators pretend to be: (namespace, pod, rate_hz, counters).
# staging/checkout-1 shares a pod name with shop/checkout-1 to prove namespace scoping.
PODS = [
    ("shop", "checkout-1", 200, 2),
    ("shop", "checkout-2", 100, 2),
    ("shop", "cart-1", 50, 1),
    ("staging", "checkout-1", 70, 1),
]
# The HPA's view: the Deployment "checkout" in namespace "shop" owns these pods.
HPA_NS, HPA_PODS = "shop", ["checkout-1", "checkout-2"]
RATE_TOL = 0.15  # relative tolerance on per-second rates
# gen_latency_seconds: 5 ms * exp(0.5 z); exact quantiles of that log-normal.
TRUE_Q = {0.5: 0.005, 0.99: 0.005 * math.exp(0.5 * 2.3263478740)}
BUCKET_RATIO = 2.0  # the generator's histogram buckets grow by 2x: quantiles are within 2x


def expected_rate(ns, pod):
    for n, p, r, c in PODS:
        if (n, p) == (ns, pod):
            return r * c
    raise KeyError((ns, pod))


class AcceptRecorder(http.server.BaseHTTPRequestHandler):
    """Serves a one-gauge OpenMetrics body and remembers the Accept header of each scrape."""

    seen = []
    body = b"# TYPE accept_probe gauge\naccept_probe 1\n# EOF\n"

    def do_GET(self):
        AcceptRecorder.seen.append(self.headers.get("Accept", ""))
        self.send_response(200)
        self.send_header("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


class Prom:
    def __init__(self, base):
        self.base = base

    def api(self, path, **params):
        url = self.base + path + "?" + urllib.parse.urlencode(params, doseq=True)
        st, _, body = http_get(url)
        if st != 200:
            raise RuntimeError("%s -> %s %s" % (url, st, body[:300].decode("utf-8", "replace")))
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise RuntimeError("%s -> %s" % (url, doc))
        return doc["data"]

    def query(self, q, at=None):
        params = {"query": q}
        if at is not None:
            params["time"] = "%.3f" % at
        data = self.api("/api/v1/query", **params)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def series_names(self, match):
        return sorted({s["__name__"] for s in self.api("/api/v1/series", **{"match[]": match})})


def per_pod(results):
    """{(namespace, pod): value}, or None if two results share a pod."""
    out = {}
    for labels, v in results:
        key = (labels.get("namespace"), labels.get("pod"))
        if key in out:
            return None
        out[key] = v
    return out


def within(v, want, tol):
    return v is not None and math.isfinite(v) and abs(v - want) <= tol * want


def in_bucket_bound(v, true_q):
    return v is not None and math.isfinite(v) and true_q / BUCKET_RATIO / 1.01 <= v <= true_q * BUCKET_RATIO * 1.01


def quote_meta(s):
    """Go's regexp.QuoteMeta (what the adapter uses): PromQL's RE2 rejects escapes like \\-."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", s)


def render_adapter_query(template, series, namespace, pods):
    """Renders a prometheus-adapter metricsQuery the way the adapter does for a Pods metric
    request in one namespace: label matchers select the namespace and the pods, GroupBy is the
    pod label."""
    matchers = 'namespace="%s",pod=~"%s"' % (namespace, "|".join(quote_meta(p) for p in pods))
    out = template.replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
    out = out.replace("<<.GroupBy>>", "pod")
    if "<<" in out:
        raise ValueError("unsupported template field in %r" % template)
    return out


def adapter_name(rule, series):
    """The custom metric name the adapter exposes for `series` under `rule` (None: no match)."""
    name = rule.get("name", {})
    m = re.search(name.get("matches", "(.*)"), series)
    if not m:
        return None
    as_ = name.get("as", "")
    if not as_:
        return m.group(1) if m.groups() else m.group(0)
    return re.sub(r"\$\{?(\d+)\}?", lambda g: m.group(int(g.group(1))) or "", as_)


def gjson_get(doc, path):
    """The subset of GJSON paths KEDA's metrics-api examples use: dot-separated keys and indices."""
    cur = doc
    for part in path.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def load_yaml(name):
    """The first document of deploy/autoscaling/NAME (the files may add helper objects after
    it, e.g. a TriggerAuthentication)."""
    with open(os.path.join(AUTOSCALING, name)) as f:
        return next(d for d in yaml.safe_load_all(f) if d)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bindir = os.path.join(sys.argv[1], "bin")
    if not (os.access(PROMETHEUS, os.X_OK) and os.access(PROMTOOL, os.X_OK)):
        print("SKIPPED: Debian's prometheus package is not installed (scripts/deps.sh test)")
        return 77
    t0 = time.monotonic()
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="mv-prom-")
    procs = Procs(tmp)
    spawn = procs.spawn

    # A hard ceiling on the whole test, whatever happens.
    def on_alarm(signum, frame):
        raise TimeoutError("test exceeded %d s" % TOTAL_BUDGET_S)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TOTAL_BUDGET_S)
    try:
        run(rep, bindir, tmp, spawn)
    except TimeoutError as e:
        rep.check("finished within the time budget", False, str(e))
    except Exception as e:  # report, then clean up
        rep.check("test ran to completion", False, "%s: %s" % (type(e).__name__, e))
    finally:
        signal.alarm(0)
        procs.stop()
        if rep.failed:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    print("elapsed %.1f s" % (time.monotonic() - t0))
    print("prometheus: %d passed, %d failed, %d skipped" % (rep.passed, rep.failed, rep.skipped))
    return 1 if rep.failed else 0


def run(rep, bindir, tmp, spawn):
    # ---- agent, workloads, collector --------------------------------------------------------
    sock = os.path.join(tmp, "agent.sock")
    spawn("agent", [os.path.join(bindir, "microview-agent"), "--standalone", "--dir",
                    os.path.join(tmp, "segs"), "--socket", sock, "--reap-interval-ms", "200"])
    if not wait_until(lambda: os.path.exists(sock), 5, 0.05):
        raise RuntimeError("agent socket did not appear")
    for ns, pod, rate, counters in PODS:
        spawn("gen-%s-%s" % (ns, pod),
              [os.path.join(bindir, "microviewctl"), "gen", "--agent", "unix:" + sock,
               "--label", "namespace=" + ns, "--label", "pod=" + pod, "--label", "container=app",
               "--rate", str(rate), "--counters", str(counters), "--gauges", "1",
               "--histograms", "1"])
    collector = os.path.join(bindir, "microview-collector")
    help_text = subprocess.run([collector, "--help"], capture_output=True, text=True,
                               timeout=5).stdout
    window_flag = "--window-ms" in help_text
    cport = free_port()
    argv = [collector, "--agent", "unix:" + sock, "--listen", "127.0.0.1:%d" % cport,
            "--tick-ms", "5"]
    if window_flag:
        argv += ["--window-ms", str(WINDOW_MS)]
    if "--derived" in help_text:
        # The checks below read every derived series, not only the default choice.
        argv += ["--derived", "counter=all", "--derived", "gauge=all", "--derived", "histogram=all"]
    if "--max-interval-ms" in help_text:
        # Adaptive sampling lets a steady segment's raw values age up to the slow interval; a
        # 1 s age jitter is 25% of a 4 s rate span. Keep it small: this test is about Prometheus.
        argv += ["--max-interval-ms", str(MAX_INTERVAL_MS)]
    coll = spawn("collector", argv)
    curl = "http://127.0.0.1:%d" % cport
    if not wait_until(lambda: http_get(curl + "/healthz")[0] == 200, 5):
        raise RuntimeError("collector did not answer /healthz")

    # ---- Accept-header recorder and Prometheus -------------------------------------------------
    rport = free_port()
    recorder = http.server.ThreadingHTTPServer(("127.0.0.1", rport), AcceptRecorder)
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    try:
        run_with_prometheus(rep, tmp, spawn, curl, cport, rport, window_flag)
    finally:
        recorder.shutdown()
        recorder.server_close()
    # After serving a real Prometheus: a clean exit (under ASan this includes the leak check).
    coll.terminate()
    try:
        rc = coll.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = "no exit within 10 s"
    rep.check("collector exits 0 on SIGTERM after the scrapes", rc == 0, "exit %s" % rc)


def run_with_prometheus(rep, tmp, spawn, curl, cport, rport, window_flag):
    pport = free_port()
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("""global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  # honor_labels keeps the pods' namespace/pod/container labels as the collector serves them.
  - job_name: microview
    honor_labels: true
    static_configs:
      - targets: ['127.0.0.1:%d']
  - job_name: accept-probe
    static_configs:
      - targets: ['127.0.0.1:%d']
""" % (cport, rport))
    r = subprocess.run([PROMTOOL, "check", "config", cfg], capture_output=True, text=True,
                       timeout=10)
    rep.check("promtool check config accepts the generated config", r.returncode == 0,
              r.stdout + r.stderr)
    spawn("prometheus", [PROMETHEUS, "--config.file=" + cfg,
                         "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                         "--web.listen-address=127.0.0.1:%d" % pport,
                         "--storage.tsdb.retention.time=1h", "--log.level=warn"])
    prom = Prom("http://127.0.0.1:%d" % pport)
    if not wait_until(lambda: http_get(prom.base + "/-/ready")[0] == 200, 10):
        raise RuntimeError("prometheus did not become ready")

    # ---- the scrape target is up (Prometheus applies new targets after ~5 s) -----------------
    def target():
        for t in prom.api("/api/v1/targets")["activeTargets"]:
            if t["labels"].get("job") == "microview" and t["health"] == "up":
                return t
        return None

    t = wait_until(target, 15, 0.25)
    rep.check("Prometheus scrapes the collector: target health up, no error",
              t is not None and t["lastError"] == "", json.dumps(t))

    # ---- OpenMetrics negotiated ---------------------------------------------------------------
    accept = wait_until(lambda: AcceptRecorder.seen and AcceptRecorder.seen[-1], 5)
    print("info: Prometheus scrape Accept header: %s" % accept)
    rep.check("Prometheus asks for OpenMetrics 1.0.0 first",
              bool(accept) and accept.startswith("application/openmetrics-text;version=1.0.0"),
              repr(accept))
    st, hdr, om_body = http_get(curl + "/metrics", {"Accept": accept or ""})
    ctype = hdr.get("Content-Type", "") if hdr else ""
    rep.check("collector answers that Accept header with OpenMetrics 1.0.0",
              st == 200 and ctype.startswith("application/openmetrics-text; version=1.0.0"), ctype)
    rep.check("OpenMetrics body ends with # EOF", om_body.endswith(b"# EOF\n"), om_body[-40:])

    def metadata():
        md = prom.api("/api/v1/targets/metadata", match_target='{job="microview"}')
        return {m["metric"]: m for m in md} if md else None

    md = wait_until(lambda: (lambda m: m if m and "gen_latency_seconds" in m else None)(metadata()), 5)
    md = md or {}
    # Only the OpenMetrics parser knows units and names a counter family without _total.
    rep.check("Prometheus parsed the scrape as OpenMetrics: counter family gen_requests",
              md.get("gen_requests", {}).get("type") == "counter", json.dumps(sorted(md))[:300])
    rep.check("Prometheus parsed the scrape as OpenMetrics: # UNIT seconds kept",
              md.get("gen_latency_seconds", {}).get("unit") == "seconds",
              json.dumps(md.get("gen_latency_seconds")))

    st, hdr, text_body = http_get(curl + "/metrics", {"Accept": "text/plain"})
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text_body, capture_output=True,
                       timeout=10)
    rep.check("promtool check metrics accepts the text 0.0.4 output",
              st == 200 and r.returncode == 0, (r.stdout + r.stderr).decode()[:500])

    # ---- labels ---------------------------------------------------------------------------------
    want_pods = {(ns, pod) for ns, pod, _, _ in PODS}
    res = prom.query("gen_requests_total")
    got = {(m.get("namespace"), m.get("pod")) for m, _ in res}
    rep.check("series carry namespace/pod/container for every generator pod",
              got == want_pods and all(m.get("container") == "app" for m, _ in res),
              str(sorted(got)))

    # ---- raw rates and quantiles ----------------------------------------------------------------
    # Enough data for [5s] windows: every series older than the window (6 scrapes in the last
    # 6 s), so Prometheus extrapolates to the window's start instead of stopping at the first
    # sample and underestimating.
    enough = wait_until(lambda: len(prom.query(
        "min by (namespace, pod) (count_over_time(gen_requests_total[6s])) >= 6")) == len(PODS), 12, 0.5)
    rep.check("6 scrapes of every pod in the last 6 s", enough)
    now = time.time()
    rates = per_pod(prom.query("sum by (namespace, pod) (rate(gen_requests_total[5s]))", now))
    for ns, pod, _, _ in PODS:
        v = (rates or {}).get((ns, pod))
        rep.check("rate(gen_requests_total[5s]) of %s/%s = %s, generator %d/s (+-%d%%)"
                  % (ns, pod, "%.1f" % v if v is not None else None, expected_rate(ns, pod),
                     RATE_TOL * 100), within(v, expected_rate(ns, pod), RATE_TOL))
    for q, tq in TRUE_Q.items():
        qs = per_pod(prom.query("histogram_quantile(%g, sum by (namespace, pod, le) "
                                "(rate(gen_latency_seconds_bucket[5s])))" % q, now))
        ok = qs is not None and len(qs) == len(PODS) and all(in_bucket_bound(v, tq) for v in qs.values())
        rep.check("histogram_quantile(%g) from raw buckets within the 2x bucket bound of %.2f ms "
                  "for every pod" % (q, tq * 1e3), ok,
                  str({"%s/%s" % k: round(v * 1e3, 2) for k, v in (qs or {}).items()}))

    # ---- derived series (served by the collector's pipeline) --------------------------------------
    def derived_served():
        st, _, body = http_get(curl + "/metrics", {"Accept": "text/plain"})
        return st == 200 and b"\ngen_requests_rate{" in body

    served = derived_served() or (window_flag and wait_until(derived_served, 3 * WINDOW_MS / 1000 + 2))
    if window_flag and not served:
        rep.check("collector with --window-ms serves derived series (gen_requests_rate)", False)
    if served:
        in_prom = wait_until(lambda: len(prom.query(
            'count by (namespace, pod) (gen_requests_rate) and count by (namespace, pod) '
            '(gen_latency_seconds_window{quantile="0.99"})')) == len(PODS), 3 * WINDOW_MS / 1000 + 3, 0.5)
        rep.check("derived series reach Prometheus for every pod", in_prom)
    derived_checks(rep, prom, served)

    # ---- prometheus-adapter rules -------------------------------------------------------------------
    adapter_checks(rep, prom, served)
    keda_checks(rep, prom, curl, served)


SKIP_DERIVED = "derived series not served yet"


def derived_checks(rep, prom, served):
    descs = ["<base>_rate per pod within tolerance of the generator",
             "<base>_rate_max >= <base>_rate",
             "<name>_window p50/p99 of the pod histogram within the bucket bound",
             "gauge window min <= mean <= max, within the generator's range"]
    if not served:
        for d in descs:
            rep.skip(d, SKIP_DERIVED)
        return
    now = time.time()
    rates = per_pod(prom.query("sum by (namespace, pod) (gen_requests_rate)", now)) or {}
    rep.check(descs[0], all(within(rates.get((n, p)), expected_rate(n, p), RATE_TOL)
                            for n, p, _, _ in PODS), str(rates))
    rmax = per_pod(prom.query("sum by (namespace, pod) (gen_requests_rate_max)", now)) or {}
    rep.check(descs[1], len(rmax) == len(PODS) and
              all(rmax.get(k, 0) >= 0.95 * rates.get(k, math.inf) for k in rmax), str(rmax))
    ok, detail = True, {}
    for q, tq in TRUE_Q.items():
        qs = per_pod(prom.query('max by (namespace, pod) (gen_latency_seconds_window{quantile="%g"})'
                                % q, now)) or {}
        detail[q] = {"%s/%s" % k: round(v * 1e3, 2) for k, v in qs.items()}
        ok = ok and len(qs) == len(PODS) and all(in_bucket_bound(v, tq) for v in qs.values())
    rep.check(descs[2], ok, str(detail))
    parts = {s: per_pod(prom.query("max by (namespace, pod) (gen_queue_depth_window_%s)" % s, now))
             or {} for s in ("min", "mean", "max")}
    ok = all(len(parts[s]) == len(PODS) for s in parts) and all(
        9.0 <= parts["min"][k] <= parts["mean"][k] <= parts["max"][k] <= 91.0 for k in parts["min"])
    rep.check(descs[3], ok, str(parts))


def adapter_checks(rep, prom, served):
    cm = load_yaml("prometheus-adapter-rules.yaml")
    rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    rep.check("adapter ConfigMap holds rules for custom.metrics.k8s.io", len(rules) >= 2)
    exposed = {}
    now = time.time()
    for i, rule in enumerate(rules):
        ov = rule.get("resources", {}).get("overrides", {})
        rep.check("adapter rule %d maps namespace and pod labels to resources" % i,
                  ov.get("namespace", {}).get("resource") == "namespace"
                  and ov.get("pod", {}).get("resource") in ("pod", "pods"), str(ov))
        names = [n for n in prom.series_names(rule["seriesQuery"]) if n.startswith("gen_")]
        derived_rule = "<<.Series>>{" in rule["metricsQuery"] and "rate(" not in rule["metricsQuery"]
        if not names:
            if derived_rule and not served:
                rep.skip("adapter rule %d (%s) finds series" % (i, rule["seriesQuery"]), SKIP_DERIVED)
            else:
                rep.check("adapter rule %d (%s) finds series" % (i, rule["seriesQuery"]), False)
            continue
        for series in names:
            metric = adapter_name(rule, series)
            if metric is None:
                continue
            q = render_adapter_query(rule["metricsQuery"], series, HPA_NS, HPA_PODS)
            vals = per_pod(prom.query(q, now))
            got = {p: v for (ns, p), v in (vals or {}).items()}
            ok = vals is not None and sorted(got) == sorted(HPA_PODS) and all(
                math.isfinite(v) for v in got.values())
            rep.check("adapter %s: one value per pod %s" % (metric, q), ok, str(vals))
            exposed[metric] = got
    # Values of the metrics the HPA uses, checked against the generators.
    for metric, got in sorted(exposed.items()):
        if metric in ("gen_requests_per_second",):
            rep.check("adapter %s within tolerance of the generators" % metric,
                      all(within(got.get(p), expected_rate(HPA_NS, p), RATE_TOL) for p in HPA_PODS),
                      str(got))
        elif metric == "gen_requests_per_second_1m":
            # rate over 1m on a series younger than 1m is underestimated; positive is all we know.
            rep.check("adapter %s positive for every pod" % metric,
                      all(got.get(p, 0) > 0 for p in HPA_PODS), str(got))
        elif metric in ("gen_latency_seconds_p99", "gen_latency_seconds_p99_1m"):
            rep.check("adapter %s within the bucket bound of %.2f ms" % (metric, TRUE_Q[0.99] * 1e3),
                      all(in_bucket_bound(got.get(p), TRUE_Q[0.99]) for p in HPA_PODS), str(got))
    hpa = load_yaml("hpa.yaml")
    rep.check("HPA is autoscaling/v2", hpa.get("apiVersion") == "autoscaling/v2")
    for m in hpa["spec"]["metrics"]:
        rep.check("HPA metric is of type Pods", m.get("type") == "Pods", str(m))
        name = m.get("pods", {}).get("metric", {}).get("name")
        if name in exposed:
            rep.check("HPA metric %s is served by the adapter rules for every pod" % name, True)
        elif not served:
            rep.skip("HPA metric %s is served by the adapter rules" % name, SKIP_DERIVED)
        else:
            rep.check("HPA metric %s is served by the adapter rules" % name, False, str(sorted(exposed)))


def keda_checks(rep, prom, curl, served):
    so = load_yaml("keda-scaledobject.yaml")
    triggers = so["spec"]["triggers"]
    types = [t["type"] for t in triggers]
    rep.check("KEDA ScaledObject has a prometheus and a metrics-api trigger",
              "prometheus" in types and "metrics-api" in types, str(types))
    for trig in triggers:
        md = trig["metadata"]
        if trig["type"] == "prometheus":
            q = md["query"]
            if not served:
                rep.skip("KEDA prometheus query %s" % q, SKIP_DERIVED)
                continue
            now = time.time()
            res = prom.query(q, now)
            want = sum(expected_rate(HPA_NS, p) for p in HPA_PODS)
            # KEDA needs exactly one element; it is the sum over the Deployment's pods.
            pods = per_pod(prom.query(render_adapter_query(
                "sum by (<<.GroupBy>>) (gen_requests_rate{<<.LabelMatchers>>})",
                "gen_requests_rate", HPA_NS, HPA_PODS), now)) or {}
            ok = len(res) == 1 and within(res[0][1], want, RATE_TOL) and len(pods) == len(HPA_PODS) \
                and abs(res[0][1] - sum(pods.values())) < 1e-6 * max(1.0, want)
            rep.check("KEDA prometheus query returns one value = sum of one value per pod "
                      "(%s, want ~%d)" % (q, want), ok, "%s / %s" % (res, pods))
        elif trig["type"] == "metrics-api":
            u = urllib.parse.urlsplit(md["url"])
            if md.get("aggregateFromKubeServiceEndpoints") == "true":
                # What KEDA asks each endpoint: the url's path decoded once (its query is
                # dropped), so the example carries the query %3F-encoded inside the path.
                rep.check("KEDA metrics-api url carries its query inside the path (%s)" % md["url"],
                          not u.query and "%3F" in u.path, u.geturl())
                u = urllib.parse.urlsplit("http://endpoint" + urllib.parse.unquote(u.path))
            params = dict(urllib.parse.parse_qsl(u.query))
            query = u.query
            sel_pods = None
            if "selector" in params:
                # The selector names the Deployment's pods by their Kubernetes labels, which only
                # the agent's Kubernetes mode publishes (k8s_writer checks that path). Here the
                # generators have identity labels only: the same query shape, with a selector
                # over those, stands for it.
                rep.check("KEDA metrics-api asks every collector and sums (%s)" % md["url"],
                          md.get("aggregateFromKubeServiceEndpoints") == "true" and
                          md.get("aggregationType") in ("sum", "max") and
                          params.get("namespace") == HPA_NS, str(md))
                sel_pods = HPA_PODS
                params["selector"] = "pod in (%s)" % ",".join(HPA_PODS)
                query = urllib.parse.urlencode(params)
            live = curl + u.path + ("?" + query if query else "")
            # The collector's index page lists its endpoints; a 404 from a collector that has
            # /api/v1/value means "no such metric", which is a failure.
            has_endpoint = b"/api/v1/value" in (http_get(curl + "/")[2] or b"")
            if not has_endpoint or not served:
                rep.skip("KEDA metrics-api %s" % live, SKIP_DERIVED if not served
                         else "JSON endpoint /api/v1/value not served yet")
                continue
            st, _, body = http_get(live)
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            v = gjson_get(doc, md["valueLocation"]) if doc is not None else None
            ok = st == 200 and isinstance(v, (int, float)) and not isinstance(v, bool)
            rep.check("KEDA metrics-api %s: valueLocation %s is a number" % (live, md["valueLocation"]),
                      ok, "%s %s" % (st, body[:300]))
            if ok and params.get("metric") in ("gen_requests_rate", "gen_requests_rate_short"):
                if sel_pods:
                    want = sum(expected_rate(HPA_NS, p) for p in sel_pods)
                else:
                    want = expected_rate(params.get("namespace"), params.get("pod"))
                rep.check("KEDA metrics-api value %.1f within tolerance of the generator (%d/s)"
                          % (v, want), within(float(v), want, RATE_TOL))


if __name__ == "__main__":
    sys.exit(main())
