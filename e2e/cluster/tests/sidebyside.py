#!/usr/bin/env python3
"""sidebyside.py: the load step of cluster_keda (keda.sh), measured on every path at once.

Each path is one Deployment of the sample app with its own autoscaler (an HPA on
prometheus-adapter's custom metric, or the HPA a KEDA ScaledObject made). All Deployments get
the same load (RATE requests/s each, spread over their ready pods) from the same moment; the
script polls, every POLL seconds and for each path:
  - the collector's own answer for the Deployment (/api/v1/value, the source every path reads
    in the end, directly or through Prometheus),
  - the metrics API the path's HPA reads (custom.metrics.k8s.io or external.metrics.k8s.io,
    through the real API server, with the selector the HPA itself uses), timing each call,
  - the HPA's desiredReplicas and the Deployment's replicas,
and records when each first crossed the target. Once every path is at MAX ready replicas (or
UP_TIMEOUT passed) the load stops and the same is recorded on the way down.

Prints one line per path and writes the figures as JSON (OUT). Exit 0 when the run completed
(the caller asserts on the JSON), 1 on a usage or setup error.
"""
import argparse
import json
import ssl
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request

UNITS = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def quantity(v):
    """A Kubernetes quantity as the metrics APIs print them ("20", "19500m", "1k") -> float."""
    v = str(v)
    suffix = v.lstrip("0123456789.-e+")
    return float(v[: len(v) - len(suffix)]) * UNITS[suffix]


class Api:
    """GETs on the API server with the admin client certificate."""

    def __init__(self, url, ca, cert, key):
        self.url = url.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)

    def get(self, path, timeout=5):
        with urllib.request.urlopen(self.url + path, context=self.ctx, timeout=timeout) as r:
            return json.load(r)


def http_json(url, timeout=3):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


class Load:
    """RATE requests/s to each Deployment's ready pods, until stop()."""

    WORKERS = 3  # per Deployment; a slow request never holds the others' schedule

    def __init__(self, api, ns, deployments, rate):
        self.api, self.ns, self.deployments, self.rate = api, ns, deployments, rate
        self.ips = {d: [] for d in deployments}
        self.sent = {d: 0 for d in deployments}
        self.errors = {d: 0 for d in deployments}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.running = threading.Event()
        self.threads = []

    def refresh_once(self):
        sel = urllib.parse.quote("app in (%s)" % ",".join(self.deployments))
        pods = self.api.get("/api/v1/namespaces/%s/pods?labelSelector=%s" % (self.ns, sel))
        got = {d: [] for d in self.deployments}
        for p in pods["items"]:
            app = p["metadata"].get("labels", {}).get("app")
            st = p.get("status", {})
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in st.get("conditions", []))
            if app in got and ready and st.get("podIP") and not p["metadata"].get("deletionTimestamp"):
                got[app].append(st["podIP"])
        with self.lock:
            for d in self.deployments:
                self.ips[d] = sorted(got[d])

    def refresh(self):
        while not self.stopping.is_set():
            try:
                self.refresh_once()
            except Exception:
                pass
            self.stopping.wait(1.0)

    def worker(self, d, k):
        period = self.WORKERS / self.rate
        self.running.wait()
        i, next_at = k, time.monotonic() + k / self.rate
        while not self.stopping.is_set():
            with self.lock:
                cur = list(self.ips[d])
            if cur:
                try:
                    urllib.request.urlopen("http://%s:8080/" % cur[i % len(cur)], timeout=2).read()
                    key = "sent"
                except Exception:
                    key = "errors"
                with self.lock:
                    getattr(self, key)[d] += 1
            i += self.WORKERS
            next_at += period
            late = time.monotonic() - next_at
            if late < 0:
                time.sleep(-late)
            elif late > 1.0:
                next_at = time.monotonic()

    def prepare(self):
        self.refresh_once()
        self.threads.append(threading.Thread(target=self.refresh, daemon=True))
        for d in self.deployments:
            for k in range(self.WORKERS):
                self.threads.append(threading.Thread(target=self.worker, args=(d, k), daemon=True))
        for t in self.threads:
            t.start()

    def start(self):
        self.running.set()

    def stop(self):
        self.stopping.set()
        self.running.set()
        for t in self.threads:
            t.join(timeout=3)


class Path:
    """One autoscaling path: its Deployment, HPA, the API the HPA reads, the collector's value."""

    def __init__(self, cfg, api, ns, target):
        self.name, self.label = cfg["name"], cfg["label"]
        self.deployment, self.hpa = cfg["deployment"], cfg["hpa"]
        self.source_url = cfg["source_url"]
        self.api, self.ns, self.target = api, ns, target
        self.api_path = None
        self.events = {}
        self.query_ms = []
        self.last = {}

    def resolve(self):
        """The metrics API path the HPA reads, from the HPA's own spec."""
        h = self.api.get("/apis/autoscaling/v2/namespaces/%s/horizontalpodautoscalers/%s" % (self.ns, self.hpa))
        m = h["spec"]["metrics"][0]
        if m["type"] == "External":
            name = m["external"]["metric"]["name"]
            sel = m["external"]["metric"].get("selector", {}).get("matchLabels", {})
            q = urllib.parse.quote(",".join("%s=%s" % kv for kv in sorted(sel.items())))
            self.api_path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=%s" % (self.ns, name, q)
        elif m["type"] == "Pods":
            name = m["pods"]["metric"]["name"]
            q = urllib.parse.quote("app=%s" % self.deployment)
            self.api_path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/%s/pods/*/%s?labelSelector=%s" % (self.ns, name, q)
        else:
            raise ValueError("HPA %s: metric type %s" % (self.hpa, m["type"]))

    def api_value(self):
        """The Deployment's total as the HPA reads it (external: the value; pods: the sum)."""
        t0 = time.monotonic()
        body = self.api.get(self.api_path)
        self.query_ms.append((time.monotonic() - t0) * 1000)
        items = body.get("items", [])
        if not items:
            return None
        return sum(quantity(it["value"]) for it in items)

    def source_value(self):
        return float(http_json(self.source_url)["value"])

    def mark(self, key, t):
        if key not in self.events:
            self.events[key] = t


def poll_paths(paths, stop, phase, t0, poll):
    """Per path: the collector's value and the HPA's metrics API, every poll seconds."""
    def loop(p):
        while not stop.is_set():
            now = time.monotonic()
            for kind, fn in (("source", p.source_value), ("api", p.api_value)):
                try:
                    v = fn()
                except Exception:
                    continue
                if v is None:
                    continue
                p.last[kind] = v
                above = v > p.target
                if (phase[0] == "up" and above) or (phase[0] == "down" and not above):
                    p.mark("%s_%s" % (kind, phase[0]), now - t0[0])
            stop.wait(max(0.0, poll - (time.monotonic() - now)))
    threads = [threading.Thread(target=loop, args=(p,), daemon=True) for p in paths]
    for t in threads:
        t.start()
    return threads


def poll_hpas(api, ns, paths, stop, phase, t0, poll, maxr):
    """Every HPA's desiredReplicas and every Deployment's replicas, every poll seconds."""
    by_hpa = {p.hpa: p for p in paths}
    by_dep = {p.deployment: p for p in paths}
    def loop():
        while not stop.is_set():
            now = time.monotonic()
            try:
                hpas = api.get("/apis/autoscaling/v2/namespaces/%s/horizontalpodautoscalers" % ns)
                deps = api.get("/apis/apps/v1/namespaces/%s/deployments" % ns)
            except Exception:
                stop.wait(poll)
                continue
            rel = now - t0[0]
            for h in hpas["items"]:
                p = by_hpa.get(h["metadata"]["name"])
                if p is None:
                    continue
                want = h.get("status", {}).get("desiredReplicas", 0)
                p.last["desired"] = want
                if phase[0] == "up" and want > 1:
                    p.mark("desired_up", rel)
                if phase[0] == "down" and want == 1:
                    p.mark("desired_down", rel)
            for d in deps["items"]:
                p = by_dep.get(d["metadata"]["name"])
                if p is None:
                    continue
                spec = d["spec"].get("replicas", 0)
                ready = d.get("status", {}).get("readyReplicas", 0)
                p.last["replicas"], p.last["ready"] = spec, ready
                if phase[0] == "up":
                    if spec > 1:
                        p.mark("spec_up", rel)
                    if ready >= maxr:
                        p.mark("ready_up", rel)
                elif phase[0] == "down":
                    if spec == 1:
                        p.mark("spec_down", rel)
                    if spec == 1 and ready == 1 and d.get("status", {}).get("replicas", 0) == 1:
                        p.mark("ready_down", rel)
            stop.wait(max(0.0, poll - (time.monotonic() - now)))
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return [t]


def fmt(v):
    return "-" if v is None else "%.1f" % v


def diff(ev, a, b):
    return ev[b] - ev[a] if a in ev and b in ev else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--paths", required=True, help="JSON file: [{name, label, deployment, hpa, source_url}]")
    ap.add_argument("--rate", type=float, required=True, help="requests/s per Deployment")
    ap.add_argument("--target", type=float, required=True, help="the autoscalers' per-pod target")
    ap.add_argument("--max", type=int, default=3, help="maxReplicas of every path")
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--warm-timeout", type=float, default=180)
    ap.add_argument("--up-timeout", type=float, default=150)
    ap.add_argument("--down-timeout", type=float, default=150)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    api = Api(a.api, a.ca, a.cert, a.key)
    with open(a.paths) as f:
        paths = [Path(c, api, a.namespace, a.target) for c in json.load(f)]

    # Every HPA reads its metric and every source answers before the step.
    deadline = time.monotonic() + a.warm_timeout
    pending = list(paths)
    while pending and time.monotonic() < deadline:
        for p in list(pending):
            try:
                if p.api_path is None:
                    p.resolve()
                h = api.get("/apis/autoscaling/v2/namespaces/%s/horizontalpodautoscalers/%s" % (a.namespace, p.hpa))
                if h.get("status", {}).get("currentMetrics") and p.api_value() is not None:
                    p.source_value()
                    pending.remove(p)
            except Exception:
                pass
        time.sleep(1)
    not_ready = {}
    for p in pending:
        # Left out of the step (its checks fail for want of figures), the others still run.
        print("path (%s) %s: not ready before the step: HPA %s has no current metric or %s does not answer"
              % (p.name, p.label, p.hpa, p.api_path), flush=True)
        not_ready[p.name] = {"label": p.label, "not_ready": True, "up": {}, "down": {}}
        paths.remove(p)
    if not paths:
        return 1

    load = Load(api, a.namespace, [p.deployment for p in paths], a.rate)
    load.prepare()
    stop = threading.Event()
    for p in paths:
        p.query_ms.clear()
    phase, t0 = ["up"], [time.monotonic()]
    load.start()
    threads = poll_paths(paths, stop, phase, t0, a.poll) + poll_hpas(api, a.namespace, paths, stop, phase, t0, a.poll, a.max)
    t_step = time.time()
    deadline = t0[0] + a.up_timeout
    while time.monotonic() < deadline and not all("ready_up" in p.events for p in paths):
        time.sleep(0.2)
    time.sleep(3)  # a few seconds at the top before the load stops
    up_query = {p.name: list(p.query_ms) for p in paths}
    sent = dict(load.sent)
    errors = dict(load.errors)
    load.stop()
    up_events = {p.name: dict(p.events) for p in paths}
    for p in paths:
        p.events.clear()
    t0[0] = time.monotonic()
    phase[0] = "down"
    deadline = t0[0] + a.down_timeout
    while time.monotonic() < deadline and not all("ready_down" in p.events for p in paths):
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=5)

    result = {"step_at": t_step, "rate": a.rate, "target": a.target, "paths": dict(not_ready)}
    for p in paths:
        up, down = up_events[p.name], dict(p.events)
        q = up_query[p.name]
        r = {
            "label": p.label, "deployment": p.deployment, "hpa": p.hpa, "api": p.api_path,
            "up": up, "down": down, "sent": sent.get(p.deployment, 0), "errors": errors.get(p.deployment, 0),
            "query_ms_median": statistics.median(q) if q else None,
            "query_ms_p90": sorted(q)[int(0.9 * (len(q) - 1))] if q else None,
            "last": p.last,
        }
        result["paths"][p.name] = r
        print("path (%s) %s: load->desired %s s [collector above target %s s, API the HPA reads %s s later"
              " (data age), HPA decision %s s later, metrics API query %s ms median]; Deployment spec %s s later,"
              " %d ready at %s s; scale-down: load stop->desired 1 %s s (API below target at %s s), 1 ready at %s s;"
              " requests %d, errors %d" % (
                  p.name, p.label, fmt(up.get("desired_up")), fmt(up.get("source_up")),
                  fmt(diff(up, "source_up", "api_up")), fmt(diff(up, "api_up", "desired_up")),
                  "-" if r["query_ms_median"] is None else "%.0f" % r["query_ms_median"],
                  fmt(diff(up, "desired_up", "spec_up")), a.max, fmt(up.get("ready_up")),
                  fmt(down.get("desired_down")), fmt(down.get("api_down")), fmt(down.get("ready_down")),
                  r["sent"], r["errors"]), flush=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
