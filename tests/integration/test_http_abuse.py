#!/usr/bin/python3
"""Abusive HTTP clients against the real collector and webhook on loopback.

Starts, in a temp dir: the standalone agent, the collector (plain HTTP) and the webhook (HTTPS
with a test CA made by openssl). Against each server:
  - slowloris: SLOW_CONNS connections spread over 127.0.0.2 .. 127.0.0.41 (50 per address), each
    sending one byte a second and never finishing its request (the webhook's: a TLS record
    header announcing a 16 KiB ClientHello, then one byte a second), re-opened when the server
    closes them, for HOLD_S seconds (past the 10 s request deadline). Meanwhile a good client on
    127.0.0.1 sends a fresh request every 0.1 s (collector: GET /metrics; webhook: a real
    AdmissionReview POST /mutate over TLS); prints p50/max latency and asserts each is answered
    in under 1 s;
  - a request with 400 query parameters and one with a 64 KiB header: a 4xx with a body, at
    once;
  - requests carrying invalid UTF-8 (query keys and values, path, an annotation value cut at
    64 bytes inside a character): every error body is valid UTF-8 (strict decode);
  - webhook only: TLS 1.0 and 1.1 refused (openssl s_client, the client's security level
    lowered so it really offers them), TLS 1.2 and 1.3 accepted.

Usage: test_http_abuse.py BUILD_DIR     (exit 0 all passed, 1 a failure, 77 cannot run here)
"""
import json
import os
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from mvtest import Procs, Report, free_port, wait_until  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLOW_CONNS = 2000
ADDRS = ["127.0.0.%d" % i for i in range(2, 42)]  # 40 addresses x 50 connections
HOLD_S = 14
GOOD_EVERY_S = 0.1
GOOD_LIMIT_S = 1.0
REVIEW = os.path.join(ROOT, "tests/data/webhook/cases/patch-64Ki/request.json")


class Slowloris:
    """SLOW_CONNS connections that each send one byte a second and never complete a request."""

    def __init__(self, port, first):
        self.port, self.first = port, first
        self.socks = []  # [socket, source address]
        self.opened = self.reopened = self.connect_failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_one(self, src):
        s = socket.socket()
        s.settimeout(1)
        try:
            s.bind((src, 0))
            s.connect(("127.0.0.1", self.port))
            s.sendall(self.first)
            s.setblocking(False)
            return s
        except OSError:
            self.connect_failed += 1
            s.close()
            return None

    def start(self):
        per = SLOW_CONNS // len(ADDRS)
        for src in ADDRS:
            for _ in range(per):
                s = self.open_one(src)
                self.opened += s is not None
                self.socks.append([s, src])
        self.thread.start()

    def run(self):
        while not self.stop.wait(1.0):
            for entry in self.socks:
                s, src = entry
                alive = s is not None
                if alive:
                    try:
                        if s.recv(1, socket.MSG_PEEK) == b"":
                            alive = False
                    except BlockingIOError:
                        pass
                    except OSError:
                        alive = False
                if alive:
                    try:
                        s.send(b"a")
                    except OSError:
                        alive = False
                if not alive:
                    if s is not None:
                        s.close()
                    entry[0] = self.open_one(src)
                    self.reopened += entry[0] is not None

    def held(self):
        return sum(1 for s, _ in self.socks if s is not None)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        for s, _ in self.socks:
            if s is not None:
                s.close()


def raw_request(port, data, tls_ctx=None, timeout=5.0):
    """Sends raw request bytes from 127.0.0.1 and reads until the server closes or the
    response is complete. Returns (status or None, body bytes, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if tls_ctx:
            s = tls_ctx.wrap_socket(s, server_hostname="127.0.0.1")
        s.sendall(data)
        buf = b""
        while True:
            try:
                c = s.recv(65536)
            except (socket.timeout, ssl.SSLError, OSError):
                break
            if not c:
                break
            buf += c
            head, sep, body = buf.partition(b"\r\n\r\n")
            if sep:
                cl = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
                if cl and len(body) >= int(cl[0].split(b":")[1]):
                    break
    except (OSError, ssl.SSLError):
        return None, b"", time.monotonic() - t0
    finally:
        s.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        status = None
    return status, body, time.monotonic() - t0


def good_requests(rep, name, do_one, seconds):
    """Times a fresh good request every GOOD_EVERY_S for `seconds`; checks each < 1 s."""
    lat, fails = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        ok = do_one()
        dt = time.monotonic() - t0
        lat.append(dt)
        fails += not ok
        time.sleep(max(0.0, GOOD_EVERY_S - dt))
    lat.sort()
    p50 = lat[len(lat) // 2] if lat else float("nan")
    worst = lat[-1] if lat else float("nan")
    print("info: %s: %d good requests under %d slow connections: p50 %.1f ms, max %.1f ms, "
          "%d failed" % (name, len(lat), SLOW_CONNS, p50 * 1e3, worst * 1e3, fails))
    rep.check("%s: every good request answered in < %.0f s under %d slow connections "
              "(%d of %d ok, p50 %.1f ms, max %.1f ms)"
              % (name, GOOD_LIMIT_S, SLOW_CONNS, len(lat) - fails, len(lat), p50 * 1e3,
                 worst * 1e3),
              lat and fails == 0 and worst < GOOD_LIMIT_S)


def slowloris(rep, name, port, first, do_one):
    flood = Slowloris(port, first)
    flood.start()
    print("info: %s: %d slow connections opened (%d connect failures)"
          % (name, flood.opened, flood.connect_failed))
    try:
        good_requests(rep, name, do_one, HOLD_S)
    finally:
        print("info: %s: at the end %d slow connections held, %d re-opened after the server "
              "closed them" % (name, flood.held(), flood.reopened))
        flood.close()


def utf8_ok(body):
    try:
        body.decode("utf-8", "strict")
        return True
    except UnicodeDecodeError:
        return False


def oversized(rep, name, port, path, tls_ctx=None):
    q = "&".join("a%d=1" % i for i in range(400))
    st, body, dt = raw_request(port, ("GET %s?%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                      % (path, q)).encode(), tls_ctx)
    print("info: %s: 400 query parameters: %s, %d body bytes, %.1f ms" % (name, st, len(body),
                                                                         dt * 1e3))
    rep.check("%s: 400 query parameters get a 4xx with a body (%s, %d bytes, %.0f ms)"
              % (name, st, len(body), dt * 1e3),
              st is not None and 400 <= st < 500 and body and dt < 2)
    req = ("GET %s HTTP/1.1\r\nHost: x\r\nX-Long: %s\r\nConnection: close\r\n\r\n"
           % (path, "a" * 65536)).encode()
    st, body, dt = raw_request(port, req, tls_ctx)
    print("info: %s: 64 KiB header: %s, %d body bytes, %.1f ms" % (name, st, len(body), dt * 1e3))
    rep.check("%s: a 64 KiB header gets a 4xx with a body (%s, %d bytes, %.0f ms)"
              % (name, st, len(body), dt * 1e3),
              st is not None and 400 <= st < 500 and body and dt < 2)


def check_utf8(rep, name, port, requests, tls_ctx=None):
    bad = []
    for label, req in requests:
        st, body, _ = raw_request(port, req, tls_ctx)
        if st is None or not utf8_ok(body):
            bad.append("%s -> %s %r" % (label, st, body[:120]))
    rep.check("%s: every response body to %d requests with invalid UTF-8 is valid UTF-8"
              % (name, len(requests)), not bad, "; ".join(bad))


def tls_versions(rep, port, ca):
    if not shutil.which("openssl"):
        rep.skip("webhook: TLS versions", "openssl is not installed")
        return
    for flag, want in (("-tls1", False), ("-tls1_1", False), ("-tls1_2", True),
                       ("-tls1_3", True)):
        args = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, flag, "-CAfile", ca]
        if not want:
            args += ["-cipher", "DEFAULT:@SECLEVEL=0"]  # or Debian's client will not offer it
        p = subprocess.run(args, input=b"", capture_output=True, timeout=10)
        out = p.stdout.decode(errors="replace")
        proto = [ln.split(":", 1)[1].strip() for ln in out.splitlines()
                 if ln.strip().startswith("Protocol")]
        got = p.returncode == 0 and "Cipher is (NONE)" not in out and "Cipher is" in out
        print("info: webhook: openssl s_client %s: %s (offered %s)"
              % (flag, "handshake done" if got else "refused", proto[0] if proto else "?"))
        rep.check("webhook: %s %s" % (flag, "accepted" if want else "refused"), got == want,
                  out[-300:])


def make_certs(tmp):
    def run(*a):
        subprocess.run(a, check=True, capture_output=True)
    ca, key, crt = (os.path.join(tmp, n) for n in ("ca.crt", "tls.key", "tls.crt"))
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-days", "2", "-subj", "/CN=abuse-ca", "-keyout", os.path.join(tmp, "ca.key"),
        "-out", ca)
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=microview-webhook", "-keyout", key, "-out", os.path.join(tmp, "csr"))
    with open(os.path.join(tmp, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", os.path.join(tmp, "csr"), "-CA", ca, "-CAkey",
        os.path.join(tmp, "ca.key"), "-CAcreateserial", "-days", "1", "-extfile",
        os.path.join(tmp, "ext"), "-out", crt)
    return ca, key, crt


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bindir = os.path.join(sys.argv[1], "bin")
    if not shutil.which("openssl"):
        print("SKIPPED: openssl is not installed (test CA for the webhook)")
        return 77
    need = SLOW_CONNS + 512
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print("SKIPPED: the open-files hard limit %d is below the %d this test holds" % (hard, need))
        return 77
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="mv-abuse-")
    procs = Procs(tmp)
    t0 = time.monotonic()
    try:
        run(rep, bindir, tmp, procs.spawn)
    except Exception as e:  # report, then clean up
        rep.check("test ran to completion", False, "%s: %s" % (type(e).__name__, e))
    finally:
        procs.stop()
        if rep.failed:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    print("elapsed %.1f s" % (time.monotonic() - t0))
    print(rep.summary("http_abuse"))
    return 1 if rep.failed else 0


def run(rep, bindir, tmp, spawn):
    sock = os.path.join(tmp, "agent.sock")
    spawn("agent", [os.path.join(bindir, "microview-agent"), "--standalone", "--dir",
                    os.path.join(tmp, "segs"), "--socket", sock])
    if not wait_until(lambda: os.path.exists(sock), 5, 0.05):
        raise RuntimeError("agent socket did not appear")
    cport = free_port()
    spawn("collector", [os.path.join(bindir, "microview-collector"), "--agent", "unix:" + sock,
                        "--listen", "127.0.0.1:%d" % cport])
    ca, key, crt = make_certs(tmp)
    wport = free_port()
    spawn("webhook", [os.path.join(bindir, "microview-webhook"), "--listen",
                      "127.0.0.1:%d" % wport, "--tls-cert-file", crt, "--tls-key-file", key])
    ctx = ssl.create_default_context(cafile=ca)
    get_c = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    if not wait_until(lambda: raw_request(cport, get_c)[0] == 200, 5):
        raise RuntimeError("the collector did not answer /metrics")
    with open(REVIEW, "rb") as f:
        review = f.read()
    post_w = (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(review)) + review
    if not wait_until(lambda: raw_request(wport, post_w, ctx)[0] == 200, 5):
        raise RuntimeError("the webhook did not answer POST /mutate")

    # ---- requests too large, invalid UTF-8 -------------------------------------------------
    oversized(rep, "collector", cport, "/api/v1/value")
    oversized(rep, "webhook", wport, "/healthz", ctx)

    def get(path):
        return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    e64 = "\u00e9".encode() * 40  # 80 bytes of 2-byte characters
    check_utf8(rep, "collector", cport, [
        ("invalid key", get(b"/api/v1/value?\xff\xfe=1")),
        ("long key of 2-byte characters", get(b"/api/v1/value?x" + e64 * 4 + b"=1")),
        ("invalid metric", get(b"/api/v1/value?metric=\xc3")),
        ("invalid label value", get(b"/api/v1/value?metric=up&pod=\xff")),
        ("invalid label filter", get(b"/api/v1/value?metric=up&label=\xe2\x82=\xff")),
        ("invalid path", get(b"/\xff\xfe")),
    ])
    def mutate(value):
        r = json.loads(review)
        r["request"]["object"]["metadata"].setdefault("annotations", {})[
            "microview.io/metrics-memory"] = "__V__"
        body = json.dumps(r).encode().replace(b"__V__", value)
        return (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    check_utf8(rep, "webhook", wport, [
        ("annotation of 2-byte characters cut at 64 bytes", mutate(b"x" + e64)),
        ("annotation with invalid bytes", mutate(b"64\xff\xfeKi")),
        ("annotation cut inside a 3-byte character", mutate(b"1" + "\u20ac".encode() * 30)),
        ("invalid path", get(b"/\xff\xfe")),
    ], ctx)

    tls_versions(rep, wport, ca)

    # ---- slowloris ---------------------------------------------------------------------------
    def good_collector():
        st, _, _ = raw_request(cport, get_c, timeout=GOOD_LIMIT_S * 3)
        return st == 200
    slowloris(rep, "collector", cport, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ",
              good_collector)

    def good_webhook():
        st, body, _ = raw_request(wport, post_w, ctx, timeout=GOOD_LIMIT_S * 3)
        return st == 200 and b'"allowed":true' in body
    # A TLS handshake record announcing 16 KiB that never comes.
    slowloris(rep, "webhook", wport, b"\x16\x03\x01\x40\x00\x01", good_webhook)


if __name__ == "__main__":
    sys.exit(main())
