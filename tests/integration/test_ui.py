#!/usr/bin/python3
"""The live view (/ui) in headless Chromium against a running collector.

The workload (mv_burst_writer) makes a 20 ms burst every 2 s of wall-clock time: the gauge
burst_inflight is 100 during a burst and 1 otherwise, the counter burst_requests_total grows
by 50 per millisecond during a burst and by 1 otherwise. The collector reads every 1 ms.

Asserts, from what the page says it drew (window.__mvState.drawn): every burst of the last
5 s is drawn at its time (within one pixel's bucket) with the gauge at exactly 100, no other
pixel of the gauge above 1, the counter's rate at least 20,000/s in each burst; change
markers at the bursts; the pod list names the pod, the state band shows "ok", one chart per
metric. A screenshot is kept (BUILD/artifacts/ui_live.png). With --auth kubernetes (a
stand-in API server): the page loads, asks for a token when the stream answers 401, refuses a
forbidden token (403), and streams with an allowed one; the stream endpoint answers 401 with
WWW-Authenticate without a token. microviewctl top --watch draws the bursts as sparklines.

Usage: test_ui.py BUILD_DIR [SCREENSHOT_COPY]   (exit 0 passed, 1 a failure, 77 cannot run)
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import cdp  # noqa: E402
import mvtest  # noqa: E402
from mvtest import Procs, Report, free_port, wait_until  # noqa: E402

OWN_TOKEN = "collector-own-token"
VIEWER = "system:serviceaccount:monitoring:viewer"
LIVE_PATHS = ("/api/v1/stream", "/api/v1/live/segments")


def stand_in_api():
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(n) or b"{}")
            if self.headers.get("Authorization") != "Bearer " + OWN_TOKEN:
                return self.reply(401, {"kind": "Status", "code": 401})
            if self.path.endswith("/tokenreviews"):
                tok = req.get("spec", {}).get("token", "")
                user = VIEWER if tok == "good-token" else "x:other" if tok == "nobody" else None
                st = {"authenticated": bool(user)}
                if user:
                    st["user"] = {"username": user, "uid": "u", "groups": ["system:authenticated"]}
                return self.reply(201, {"apiVersion": "authentication.k8s.io/v1",
                                        "kind": "TokenReview", "status": st})
            if self.path.endswith("/subjectaccessreviews"):
                spec = req.get("spec", {})
                nra = spec.get("nonResourceAttributes", {})
                ok = spec.get("user") == VIEWER and nra.get("path") in LIVE_PATHS
                return self.reply(201, {"apiVersion": "authorization.k8s.io/v1",
                                        "kind": "SubjectAccessReview", "status": {"allowed": ok}})
            return self.reply(404, {"kind": "Status", "code": 404})

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def bursts_of(path):
    out = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 2 and p[0] == "burst":
                out.append(int(p[1]))
    return out


def check_page(r, br, writer_out, shot):
    """The no-auth checks on an open page."""
    # Wait for 6 s of drawn data: at least two bursts inside the window.
    def enough():
        s = br.eval("JSON.stringify({d: window.__mvState.drawn, c: window.__mvState.connected})")
        if not s:
            return None
        j = json.loads(s)
        d = j["d"]
        if not d or len(d["series"]) != 3 or not d["series"][1]["points"]:
            return None
        pts = d["series"][1]["points"]
        return j if pts[0]["t"] <= d["t1"] - 4800 else None
    j = wait_until(enough, timeout=30, step=0.25)
    if not r.check("the page connects and draws 5 s of the three series", j):
        return
    time.sleep(0.3)
    br.screenshot(shot)
    r.check("screenshot kept: %s" % shot, os.path.getsize(shot) > 10000)
    d = json.loads(br.eval("JSON.stringify(window.__mvState.drawn)"))
    bw = br.eval("window.__mvState.bw") / 1e6  # ms per pixel
    gauge = d["series"][1]["points"]
    counter = d["series"][0]["points"]
    first, last = gauge[0]["t"], gauge[-1]["t"]
    bursts = [b for b in bursts_of(writer_out) if first + bw < b < last - 40]
    if not r.check("at least two bursts fall in the drawn window", len(bursts) >= 2,
                   (bursts_of(writer_out)[-4:], first, last)):
        return
    tol = bw + 3  # one pixel's bucket, and the read's own 1 ms
    for b in bursts:
        hits = [p for p in gauge if p["max"] == 100 and b - tol <= p["t"] <= b + 20 + tol]
        r.check("burst at %d drawn at its time with the gauge at 100" % b, hits,
                [(p["t"] - b, p["max"]) for p in gauge if abs(p["t"] - b) < 60])
        rates = [p["max"] for p in counter if b - tol <= p["t"] <= b + 20 + tol]
        r.check("burst at %d: the counter's rate per read reaches 20,000/s" % b,
                rates and max(rates) >= 20000, rates)
    hist = d["series"][2]["points"]
    for b in bursts:
        hb = [p for p in hist if b - tol <= p["t"] <= b + 20 + tol]
        r.check("burst at %d: the heatmap's 32-64 ms bin holds its 50 ms observations" % b,
                hb and sum(p["h"][6] for p in hb) >= 10, [(p["t"] - b, p["h"]) for p in hb])
    quiet = [p for p in hist if p["h"][6] and not any(
        b - tol <= p["t"] <= b + 20 + tol for b in bursts_of(writer_out))]
    r.check("the heatmap's 32-64 ms bin is empty outside the bursts", not quiet, quiet[:3])
    stray = [p for p in gauge if p["max"] > 1 and not any(b - tol <= p["t"] <= b + 20 + tol
                                                          for b in bursts_of(writer_out))]
    r.check("no pixel outside a burst has the gauge above 1", not stray, stray[:5])
    marks = [m for m in d["markers"] if m["i"] == 1]
    r.check("change markers at the bursts",
            any(any(b - tol <= m["t"] <= b + 200 for m in marks) for b in bursts), marks[:10])
    dom = json.loads(br.eval(
        "JSON.stringify({pods: Array.from(document.querySelectorAll('#pods li'))"
        ".map(e => e.textContent), ok: document.querySelectorAll("
        "'#stateband span[data-state=\"ok\"]').length, charts: "
        "document.querySelectorAll('#charts .chart').length, heat: "
        "document.querySelectorAll('#charts canvas.heat').length, promql: "
        "document.getElementById('promql').value})"))
    r.check("pod list names demo/web-1/app", any("demo/web-1/app" in p for p in dom["pods"]), dom)
    r.check("state band shows the segment ok", dom["ok"] >= 1, dom)
    r.check("one chart per metric, a heatmap under the histogram's",
            dom["charts"] == 3 and dom["heat"] == 1, dom)
    r.check("PromQL link for the counter", dom["promql"].startswith(
        'rate(burst_requests_total{namespace="demo",pod="web-1",container="app"}'), dom)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    copy = sys.argv[2] if len(sys.argv) > 2 else None
    coll_bin = os.path.join(build, "bin", "microview-collector")
    writer = os.path.join(build, "bin", "mv_burst_writer")
    r = Report()
    if not (os.access(coll_bin, os.X_OK) and os.access(writer, os.X_OK)):
        r.skip("live view in a browser", "collector or mv_burst_writer not built")
        return 77
    chromium = cdp.find_chromium()
    if not chromium:
        r.skip("live view in a browser", "chromium not installed (scripts/deps.sh test)")
        return 77
    tmp = tempfile.mkdtemp(prefix="mv-ui-")
    os.environ["TMPDIR"] = tmp
    art = os.path.join(build, "artifacts")
    os.makedirs(art, exist_ok=True)
    procs = Procs(tmp)
    seg = os.path.join(tmp, "seg")
    with open(seg, "wb") as f:
        f.truncate(64 * 1024)
    wout = os.path.join(tmp, "bursts.txt")
    wf = open(wout, "w")
    wproc = subprocess.Popen([writer, seg, "120"], stdout=wf, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    segarg = seg + ",namespace=demo,pod=web-1,container=app"
    segid = "static:" + seg
    br = None
    try:
        port = free_port()
        base = "http://127.0.0.1:%d" % port
        p = procs.spawn("collector", [coll_bin, "--no-agent", "--segment", segarg, "--listen",
                                      "127.0.0.1:%d" % port, "--tick-ms", "1"])
        if not r.check("collector starts", wait_until(
                lambda: mvtest.http_get(base + "/healthz")[0] == 200, timeout=15)):
            procs.dump_logs()
            return 1
        st, _, body = mvtest.http_get(base + "/ui")
        r.check("/ui is served as HTML", st == 200 and b"MicroView live" in body, st)
        br = cdp.Browser(chromium, log=open(os.path.join(tmp, "chromium.log"), "w"))
        br.open(base + "/ui?seg=%s&m=0,1,2&window_ms=6000" % segid)
        shot = os.path.join(art, "ui_live.png")
        check_page(r, br, wout, shot)
        if copy and os.path.exists(shot):
            shutil.copyfile(shot, copy)
        br.close()
        br = None
        # microviewctl top --watch: the same stream as sparklines in a terminal.
        ctl = os.path.join(build, "bin", "microviewctl")
        t = subprocess.run([ctl, "top", "--collector", base, "--watch", segid, "--metrics", "1",
                            "--width", "60", "--window-ms", "3000", "--seconds", "4.5"],
                           capture_output=True, text=True, timeout=30)
        lines = [ln for ln in t.stdout.splitlines() if ln.startswith("burst_inflight")]
        r.check("microviewctl top --watch draws the bursts as full bars",
                t.returncode == 0 and lines and "\u2588" in lines[-1] and "(max 100)" in lines[-1],
                (t.returncode, t.stdout[-400:], t.stderr[-300:]))
        procs.stop()
        p.wait()

        # The same page with --auth kubernetes.
        api = stand_in_api()
        tokfile = os.path.join(tmp, "token")
        with open(tokfile, "w") as f:
            f.write(OWN_TOKEN + "\n")
        port = free_port()
        base = "http://127.0.0.1:%d" % port
        procs = Procs(tmp)
        p = procs.spawn("collector-auth", [
            coll_bin, "--no-agent", "--segment", segarg, "--listen", "127.0.0.1:%d" % port,
            "--tick-ms", "1", "--auth", "kubernetes", "--kube-api-server",
            "http://127.0.0.1:%d" % api.server_address[1], "--kube-token-file", tokfile])
        if not r.check("collector starts with --auth kubernetes", wait_until(
                lambda: mvtest.http_get(base + "/healthz")[0] == 200, timeout=15)):
            procs.dump_logs()
            return 1
        st, hd, _ = mvtest.http_get(base + "/api/v1/stream?seg=%s&m=0" % segid)
        r.check("stream without a token: 401 with WWW-Authenticate", st == 401 and hd and
                "Bearer" in (hd.get("WWW-Authenticate") or ""), st)
        st, _, _ = mvtest.http_get(base + "/api/v1/stream?seg=%s&m=0" % segid,
                                   {"Authorization": "Bearer nobody"})
        r.check("stream with a token not allowed the path: 403", st == 403, st)
        st, _, _ = mvtest.http_get(base + "/metrics", {"Authorization": "Bearer good-token"})
        r.check("the viewer's token is not allowed /metrics (paths are checked one by one)",
                st == 403, st)
        br = cdp.Browser(chromium, log=open(os.path.join(tmp, "chromium2.log"), "w"))
        br.open(base + "/ui?seg=%s&m=1" % segid)
        asked = wait_until(lambda: br.eval(
            "window.__mvState && window.__mvState.error === 'auth 401' && "
            "getComputedStyle(document.getElementById('token')).display !== 'none'"), timeout=15)
        r.check("without a token the page asks for one", asked)
        br.open(base + "/ui#token=good-token&seg=%s&m=1" % segid)
        drawn = wait_until(lambda: br.eval(
            "window.__mvState.drawn && window.__mvState.drawn.series.length === 1 && "
            "window.__mvState.drawn.series[0].points.length > 50"), timeout=20)
        r.check("with an allowed token the page streams and draws", drawn,
                br.eval("JSON.stringify({e: window.__mvState.error, c: window.__mvState.connected})"))
        br.screenshot(os.path.join(art, "ui_live_auth.png"))
    finally:
        if br:
            br.close()
        procs.stop()
        wproc.terminate()
        wproc.wait()
        wf.close()
    print(r.summary("test_ui"))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
