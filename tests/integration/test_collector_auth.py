#!/usr/bin/python3
"""The collector's --auth kubernetes against a stand-in API server on loopback.

The stand-in answers TokenReview and SubjectAccessReview the way kube-apiserver does, and in
the fault cases the way a broken or hostile one could (invalid JSON, wrong types, a body over
the size limit, an answer slower than --auth-timeout-ms, no server at all). It checks that the
collector presents its own service-account token (--kube-token-file).

Asserts: no token, a malformed header or a rejected token get 401 with WWW-Authenticate:
Bearer; an identity without the nonResourceURL gets 403 naming the path; an allowed one gets
/metrics, /api/v1/value and /debug/segments; /healthz stays open; repeated requests are
answered from the cache (one review per token and path, counted on /metrics); every bad
answer and an unreachable or slow API server give 503 (fail closed) within the timeout;
denials are cached for a shorter time than approvals. Prints the latency an access check adds,
cached and uncached, against /healthz.

Usage: test_collector_auth.py BUILD_DIR     (exit 0 all passed, 1 a failure, 77 cannot run)
"""
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import mvtest  # noqa: E402
from mvtest import Procs, Report, free_port, wait_until  # noqa: E402

OWN_TOKEN = "collector-own-token"
ALLOWED_PATHS = ("/metrics", "/api/v1/value", "/debug/segments")
PROM = "system:serviceaccount:monitoring:prometheus"
TIMEOUT_MS = 400


class Stand:
    """What the stand-in API server saw, and its answers per token."""

    def __init__(self):
        self.lock = threading.Lock()
        self.token_reviews = self.access_reviews = 0
        self.bad_own_token = 0
        self.slow_starts = []  # when each hanging TokenReview arrived
        self.own_token = OWN_TOKEN  # the collector's token the stand-in accepts
        self.last_sar = None


def make_handler(st):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass  # the collector gave up waiting (the slow case)

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(n) or b"{}")
            if self.headers.get("Authorization") != "Bearer " + st.own_token:
                with st.lock:
                    st.bad_own_token += 1
                return self.reply(401, {"kind": "Status", "code": 401})
            if self.path == "/apis/authentication.k8s.io/v1/tokenreviews":
                with st.lock:
                    st.token_reviews += 1
                return self.token_review(req)
            if self.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
                with st.lock:
                    st.access_reviews += 1
                    st.last_sar = req
                return self.access_review(req)
            return self.reply(404, {"kind": "Status", "code": 404})

        def token_review(self, req):
            tok = req.get("spec", {}).get("token", "")
            base = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}
            user = None
            if tok.startswith("good"):
                user = PROM
            elif tok.startswith("nobody"):
                user = "system:serviceaccount:tenant-a:default"
            elif tok == "sar-garbage":
                user = "sar-garbage"
            elif tok == "sar-wrongtype":
                user = "sar-wrongtype"
            elif tok == "tr-garbage":
                return self.reply(201, b'{"kind":"TokenReview","status":{"authenticated":tru')
            elif tok == "tr-wrongtype":
                return self.reply(201, dict(base, status={"authenticated": "yes",
                                                          "user": {"username": "x"}}))
            elif tok == "tr-nouser":
                return self.reply(201, dict(base, status={"authenticated": True}))
            elif tok == "tr-huge":
                return self.reply(201, dict(base, status={"authenticated": True,
                                                          "user": {"username": "x" * 70000}}))
            elif tok == "tr-deep":
                return self.reply(201, b'{"kind":"TokenReview","status":' + b"[" * 100 + b"]" * 100
                                  + b"}")
            elif tok == "tr-500":
                return self.reply(500, {"kind": "Status", "code": 500})
            elif tok.startswith("slow"):
                with st.lock:
                    st.slow_starts.append(time.monotonic())
                time.sleep(TIMEOUT_MS / 1000.0 * 3)
                user = PROM
            if user is None:
                return self.reply(201, dict(base, status={"authenticated": False,
                                                          "error": "token not valid"}))
            return self.reply(201, dict(base, status={
                "authenticated": True,
                "user": {"username": user, "uid": "u-1",
                         "groups": ["system:serviceaccounts", "system:authenticated"]}}))

        def access_review(self, req):
            spec = req.get("spec", {})
            user = spec.get("user")
            path = spec.get("nonResourceAttributes", {}).get("path")
            verb = spec.get("nonResourceAttributes", {}).get("verb")
            base = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
            if user == "sar-garbage":
                return self.reply(201, b"\xff\xfe not json")
            if user == "sar-wrongtype":
                return self.reply(201, dict(base, status={"allowed": 1}))
            ok = user == PROM and path in ALLOWED_PATHS and verb == "get"
            return self.reply(201, dict(base, status={"allowed": ok,
                                                      "reason": "RBAC" if ok else ""}))

    return H


def metric(body, name, labels=""):
    want = name + ("{" + labels + "}" if labels else "")
    for line in body.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[1])
    return None


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    coll_bin = os.path.join(build, "bin", "microview-collector")
    if not os.access(coll_bin, os.X_OK):
        print("SKIPPED: %s not built" % coll_bin)
        return 77
    r = Report()
    # Flags: a bad mode is refused (2); kubernetes without any API server does not start (1);
    # the usage text names the loopback default.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    p = subprocess.run([coll_bin, "--auth", "off"], capture_output=True, text=True, timeout=10)
    r.check("--auth off refused with exit 2 naming the modes",
            p.returncode == 2 and "not none or kubernetes" in p.stderr, (p.returncode, p.stderr))
    p = subprocess.run([coll_bin, "--no-agent", "--listen", "127.0.0.1:0", "--auth",
                        "kubernetes"], capture_output=True, text=True, timeout=10, env=env)
    r.check("--auth kubernetes without an API server: exit 1, names --kube-api-server",
            p.returncode == 1 and "--kube-api-server" in p.stderr, (p.returncode, p.stderr[-300:]))
    p = subprocess.run([coll_bin, "--help"], capture_output=True, text=True, timeout=10)
    r.check("usage: --listen default 127.0.0.1:9469", "default 127.0.0.1:9469" in p.stdout)
    tmp = tempfile.mkdtemp(prefix="mv-auth-")
    procs = Procs(tmp)
    st = Stand()
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(st))
    api.daemon_threads = True
    threading.Thread(target=api.serve_forever, daemon=True).start()
    api_url = "http://127.0.0.1:%d" % api.server_address[1]
    tokfile = os.path.join(tmp, "token")
    with open(tokfile, "w") as f:
        f.write(OWN_TOKEN + "\n")
    port = free_port()
    base = "http://127.0.0.1:%d" % port
    try:
        p = procs.spawn("collector", [coll_bin, "--no-agent", "--listen", "127.0.0.1:%d" % port,
                                      "--auth", "kubernetes", "--kube-api-server", api_url,
                                      "--kube-token-file", tokfile,
                                      "--auth-timeout-ms", str(TIMEOUT_MS)])
        up = wait_until(lambda: mvtest.http_get(base + "/healthz")[0] == 200 or p.poll() is not None,
                        timeout=15)
        if not r.check("collector starts with --auth kubernetes", up and p.poll() is None):
            procs.dump_logs()
            return 1

        def get(path, token=None, header=None):
            h = {}
            if header is not None:
                h["Authorization"] = header
            elif token is not None:
                h["Authorization"] = "Bearer " + token
            return mvtest.http_get(base + path, headers=h, timeout=5)

        s, h, b = get("/metrics")
        r.check("no token: /metrics 401", s == 401, s)
        r.check("401 carries WWW-Authenticate: Bearer",
                h is not None and (h.get("WWW-Authenticate") or "").startswith("Bearer"),
                h and h.get("WWW-Authenticate"))
        for path in ("/api/v1/value?metric=x", "/debug/segments"):
            s, _, _ = get(path)
            r.check("no token: %s 401" % path, s == 401, s)
        s, _, _ = get("/metrics", header="Basic Zm9vOmJhcg==")
        r.check("Basic credentials: 401", s == 401, s)
        s, _, _ = get("/metrics", header="Bearer ")
        r.check("empty bearer token: 401", s == 401, s)
        s, _, _ = get("/metrics", token="bad-token")
        r.check("token the API server rejects: 401", s == 401, s)
        s, _, b = get("/healthz")
        r.check("/healthz open without a token", s == 200, s)

        s, _, b = get("/metrics", token="good")
        r.check("allowed identity: /metrics 200", s == 200, (s, b[:200]))
        r.check("SubjectAccessReview asked for the non-resource URL /metrics, verb get",
                st.last_sar and st.last_sar["spec"].get("nonResourceAttributes")
                == {"path": "/metrics", "verb": "get"}
                and st.last_sar["spec"].get("groups") == ["system:serviceaccounts",
                                                          "system:authenticated"]
                and st.last_sar["spec"].get("uid") == "u-1", st.last_sar)
        s, _, b = get("/debug/segments", token="good")
        r.check("allowed identity: /debug/segments 200", s == 200, s)
        s, _, b = get("/api/v1/value?metric=nothing_here", token="good")
        r.check("allowed identity: /api/v1/value served (404: no such series)", s == 404, (s, b))
        s, _, b = get("/metrics", token="nobody")
        r.check("identity without the nonResourceURL: 403", s == 403, s)
        r.check("403 body names the path", b"/metrics" in b, b)
        r.check("the collector presented its own token on every review", st.bad_own_token == 0,
                st.bad_own_token)

        # Cache: 50 more requests with the same token and path cost no review.
        with st.lock:
            before = st.token_reviews
        ok = all(get("/metrics", token="good")[0] == 200 for _ in range(50))
        with st.lock:
            after = st.token_reviews
        r.check("50 repeated requests all 200", ok)
        r.check("repeated requests answered from the cache (0 reviews)", after == before,
                after - before)
        s, _, b = get("/metrics", token="good")
        body = b.decode()
        hits = metric(body, "microview_http_auth_cache_total", 'result="hit"')
        miss = metric(body, "microview_http_auth_cache_total", 'result="miss"')
        r.check("cache hits and misses on /metrics", hits is not None and miss is not None
                and hits >= 50, (hits, miss))
        if hits is not None and miss:
            print("cache: %d hits, %d misses, hit ratio %.3f" % (hits, miss, hits / (hits + miss)))
        with st.lock:
            before = st.token_reviews
        get("/metrics", token="nobody")
        with st.lock:
            after = st.token_reviews
        r.check("a denial is cached too", after == before, after - before)

        # Hostile or broken answers: fail closed with 503.
        for tok, what in (("tr-garbage", "truncated TokenReview JSON"),
                          ("tr-wrongtype", "authenticated of the wrong type"),
                          ("tr-nouser", "authenticated without a user"),
                          ("tr-huge", "answer over 64 KiB"),
                          ("tr-deep", "JSON nested 100 deep"),
                          ("tr-500", "HTTP 500"),
                          ("sar-garbage", "SubjectAccessReview not UTF-8 JSON"),
                          ("sar-wrongtype", "allowed of the wrong type")):
            s, _, b = get("/metrics", token=tok)
            r.check("%s: 503" % what, s == 503, (s, b))
        t0 = time.monotonic()
        s, _, _ = get("/metrics", token="slow")
        dt = time.monotonic() - t0
        r.check("API server slower than --auth-timeout-ms: 503 within 2 x timeout",
                s == 503 and dt < 2 * TIMEOUT_MS / 1000.0 + 0.3, (s, round(dt, 3)))
        s, _, _ = get("/metrics", token="tr-garbage")
        r.check("503 is not cached (asked again)", s == 503)

        # 8 requests at once whose reviews hang: at most --auth-max-inflight (4) reviews wait,
        # the rest get 503 without one, and the other HTTP threads keep answering. A request that
        # the server queued on a thread holding a review waits for it (bounded by the timeout).
        res = {}

        def slow(i):
            t = time.monotonic()
            st_, _, _ = get("/metrics", token="slow-%d" % i)
            res[i] = (st_, time.monotonic() - t)

        with st.lock:
            st.slow_starts = []
        ths = [threading.Thread(target=slow, args=(i,)) for i in range(8)]
        for t in ths:
            t.start()
        time.sleep(0.1)
        t = time.monotonic()
        hs, _, _ = get("/healthz")
        gs, _, _ = get("/debug/segments", token="good")
        side = time.monotonic() - t
        for t in ths:
            t.join()
        fast = sum(1 for st_, dt_ in res.values() if st_ == 503 and dt_ < TIMEOUT_MS / 2000.0)
        print("8 hanging reviews at once: %d answered 503 at once, all: %s; /healthz + a cached "
              "request meanwhile took %.1f ms" % (fast, sorted(v[0] for v in res.values()),
                                                  side * 1e3))
        # No review slot frees before the first one times out, so the reviews that reached the API
        # server before then are the ones waiting at once.
        with st.lock:
            starts = sorted(st.slow_starts)
        peak = sum(1 for x in starts if x < starts[0] + TIMEOUT_MS / 1000.0 * 0.9) if starts else 0
        print("hanging reviews at the API server before the first timed out: %d" % peak)
        r.check("hanging reviews: all 503 within 4 x --auth-timeout-ms",
                all(v[0] == 503 and v[1] < 4 * TIMEOUT_MS / 1000.0 + 0.3 for v in res.values()),
                res)
        r.check("at most --auth-max-inflight (4) reviews at once", 1 <= peak <= 4, peak)
        r.check("meanwhile /healthz and a cached token answered (within 2 x timeout)",
                hs == 200 and gs == 200 and side < 2 * TIMEOUT_MS / 1000.0 + 0.2, (hs, gs, side))

        # Latency the check adds: /healthz (no check) vs cached vs uncached /metrics is not
        # comparable (rendering), so compare /debug/segments with a cached and new tokens.
        def lat(fn, n):
            v = []
            for i in range(n):
                t = time.monotonic()
                fn(i)
                v.append((time.monotonic() - t) * 1e3)
            return statistics.median(v)

        n = 200
        cached = lat(lambda i: get("/debug/segments", token="good"), n)
        uncached = lat(lambda i: get("/debug/segments", token="good-%d" % i), n)
        open_ = lat(lambda i: get("/healthz"), n)
        print("latency (median of %d, ms): /healthz open %.3f, /debug/segments cached %.3f, "
              "uncached (TokenReview + SubjectAccessReview on a loopback stand-in) %.3f"
              % (n, open_, cached, uncached))
        r.check("cached check adds < 10 ms over an open route", cached - open_ < 10.0,
                (cached, open_))

        # The collector's own token rotates: the old one gets a 401, the file is re-read at once.
        with st.lock:
            st.own_token = "rotated-own-token"
            bad_before = st.bad_own_token
        with open(tokfile, "w") as f:
            f.write("rotated-own-token\n")
        s, _, _ = get("/metrics", token="good-after-rotation")
        with st.lock:
            bad = st.bad_own_token - bad_before
        r.check("own token rotated: re-read after one 401, request served", s == 200 and bad == 1,
                (s, bad))

        # API server gone: what was cached keeps its answer until it expires, the rest 503.
        api.shutdown()
        api.server_close()
        s, _, _ = get("/metrics", token="good")
        r.check("API server down: a cached approval still 200", s == 200, s)
        s, _, _ = get("/metrics", token="good-new")
        r.check("API server down: a new token 503 (fail closed)", s == 503, s)
        s, _, _ = get("/metrics")
        r.check("API server down: no token still 401", s == 401, s)
        s, _, _ = get("/healthz")
        r.check("API server down: /healthz 200", s == 200, s)
        r.check("collector still running", p.poll() is None)
    finally:
        procs.stop()
        if r.failed:
            procs.dump_logs(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(r.summary("test_collector_auth"))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
