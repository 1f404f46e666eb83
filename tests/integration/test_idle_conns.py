#!/usr/bin/python3
"""1,000 idle connections while a real Prometheus keeps scraping the collector.

Starts, on loopback and in a temp dir: the standalone agent, one `microviewctl gen` workload, the
collector with its default HTTP limits (8,192 connections, 64 per client address, 10 s idle
timeout) and Debian's Prometheus scraping it every second. Then holds 1,000 idle TCP connections
to the collector for HOLD_S seconds, re-opening each one the collector closes:
  - 500 from 127.0.0.2 alone (one noisy client: all but 64 must be refused),
  - 500 spread over 127.0.0.3 .. 127.0.0.12 (50 per address: all accepted).
Asserts that Prometheus (from 127.0.0.1) scraped every second of that time without a failure or
a slow scrape, that fresh connections from 127.0.0.1 were answered at once throughout, that the
collector counted the per-client refusals and held no more connections than its limits allow.

Usage: test_idle_conns.py BUILD_DIR     (exit 0 all passed, 1 a failure, 77 cannot run here)
"""
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import mvtest  # noqa: E402
from mvtest import Procs, Report, free_port, wait_until  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NOISY = ("127.0.0.2", 500)  # one client address, far over the per-client limit
SPREAD = [("127.0.0.%d" % i, 50) for i in range(3, 13)]  # 10 addresses x 50: within limits
PER_CLIENT = 64  # the collector's default --http-max-conns-per-client
HOLD_S = 15  # longer than the 10 s idle timeout: closed connections are re-opened
SLOW_SCRAPE_S = 0.5
TOTAL_BUDGET_S = 80


def metric(body, name, labels=""):
    """The value of the sample `name{labels}` in a text exposition body, or None."""
    want = name + ("{" + labels + "}" if labels else "")
    for line in body.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[1])
    return None


def http_get(url, timeout=3):
    """(status, body text); status 0 when the request failed."""
    st, _, body = mvtest.http_get(url, timeout=timeout)
    return st or 0, body.decode("utf-8", "replace")


def prom_query(base, q):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    st, body = http_get(url)
    if st != 200:
        return None
    r = json.loads(body)["data"]["result"]
    return float(r[0]["value"][1]) if r else None


class Flood:
    """Idle connections from chosen source addresses, re-opened when the server closes them."""

    def __init__(self, port, plan):
        self.port, self.plan = port, plan
        self.socks = {src: [] for src, _ in plan}
        self.opened = self.failed = 0

    def top_up(self):
        for src, want in self.plan:
            live = []
            for s in self.socks[src]:
                if self.closed_by_peer(s):
                    s.close()
                else:
                    live.append(s)
            while len(live) < want:
                s = socket.socket()
                s.setblocking(True)
                s.settimeout(1)
                try:
                    s.bind((src, 0))
                    s.connect(("127.0.0.1", self.port))
                    self.opened += 1
                    live.append(s)
                except OSError:
                    self.failed += 1
                    s.close()
                    break  # try again at the next top-up
            self.socks[src] = live

    @staticmethod
    def closed_by_peer(s):
        s.setblocking(False)
        try:
            return s.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            s.setblocking(True)

    def close(self):
        for lst in self.socks.values():
            for s in lst:
                s.close()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bindir = os.path.join(sys.argv[1], "bin")
    if not os.access(PROMETHEUS, os.X_OK):
        print("SKIPPED: Debian's prometheus package is not installed (scripts/deps.sh test)")
        return 77
    need = sum(n for _, n in [NOISY] + SPREAD) + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print("SKIPPED: the open-files hard limit %d is below the %d this test holds" % (hard, need))
        return 77
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="mv-idle-")
    procs = Procs(tmp)
    t0 = time.monotonic()
    try:
        run(rep, bindir, tmp, procs.spawn, t0)
    except Exception as e:  # report, then clean up
        rep.check("test ran to completion", False, "%s: %s" % (type(e).__name__, e))
    finally:
        procs.stop()
        if rep.failed:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    print("elapsed %.1f s" % (time.monotonic() - t0))
    print(rep.summary("idle_conns"))
    return 1 if rep.failed else 0


def run(rep, bindir, tmp, spawn, t0):
    sock = os.path.join(tmp, "agent.sock")
    spawn("agent", [os.path.join(bindir, "microview-agent"), "--standalone", "--dir",
                    os.path.join(tmp, "segs"), "--socket", sock])
    if not wait_until(lambda: os.path.exists(sock), 5, 0.05):
        raise RuntimeError("agent socket did not appear")
    spawn("gen", [os.path.join(bindir, "microviewctl"), "gen", "--agent", "unix:" + sock,
                  "--label", "service=idle", "--rate", "100"])
    cport = free_port()
    spawn("collector", [os.path.join(bindir, "microview-collector"), "--agent", "unix:" + sock,
                        "--listen", "127.0.0.1:%d" % cport])
    curl = "http://127.0.0.1:%d" % cport
    if not wait_until(lambda: http_get(curl + "/healthz")[0] == 200, 5):
        raise RuntimeError("collector did not answer /healthz")

    pport = free_port()
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global: {scrape_interval: 1s, scrape_timeout: 900ms}\n"
                "scrape_configs:\n"
                "  - job_name: microview\n"
                "    honor_labels: true\n"
                "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" % cport)
    spawn("prometheus", [PROMETHEUS, "--config.file=" + cfg,
                         "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                         "--web.listen-address=127.0.0.1:%d" % pport, "--log.level=warn"])
    prom = "http://127.0.0.1:%d" % pport
    up = wait_until(lambda: prom_query(prom, 'up{job="microview"}') == 1, 30, 0.5)
    rep.check("Prometheus scrapes the collector before the flood", up)
    if not up:
        return

    # Prometheus keeps its connection alive between scrapes; a new client (a restarted
    # Prometheus, kubectl port-forward, an autoscaler) needs a fresh connection: probe with one
    # from 127.0.0.1 twice a second, each with a 2 s timeout.
    flood = Flood(cport, [NOISY] + SPREAD)
    probes, probe_fail, probe_worst = 0, 0, 0.0
    start = time.time()
    while time.time() - start < HOLD_S and time.monotonic() - t0 < TOTAL_BUDGET_S - 25:
        flood.top_up()
        p0 = time.monotonic()
        st, _ = http_get(curl + "/metrics", timeout=2)
        probes += 1
        probe_fail += st != 200
        probe_worst = max(probe_worst, time.monotonic() - p0)
        time.sleep(0.5)
    held = sum(len(v) for v in flood.socks.values())
    spread_held = sum(len(flood.socks[src]) for src, _ in SPREAD)
    noisy_held = len(flood.socks[NOISY[0]])
    st, body = http_get(curl + "/metrics", timeout=2)
    end = time.time()
    print("info: %d connections held at the end (%d from %s, %d spread), %d opened, "
          "%d connect failures" % (held, noisy_held, NOISY[0], spread_held, flood.opened,
                                   flood.failed))
    rep.check("/metrics answers at once with 1,000 idle connections open", st == 200,
              "status %s" % st)
    rep.check("every fresh /metrics request during the flood was answered (%d of %d, slowest "
              "%.3f s)" % (probes - probe_fail, probes, probe_worst),
              probes > 0 and probe_fail == 0 and probe_worst < SLOW_SCRAPE_S)
    rep.check("the 500 spread connections are all accepted and kept", spread_held == 500,
              "%d kept" % spread_held)
    open_now = metric(body, "microview_http_connections_open") if st == 200 else None
    # 500 spread + at most 64 of the noisy client + Prometheus and this request.
    bound = 500 + PER_CLIENT + 8
    rep.check("the collector holds at most %d connections: the spread ones, 64 of the noisy "
              "client's, Prometheus's (%s open)" % (bound, open_now),
              open_now is not None and open_now <= bound)
    refused = metric(body, "microview_http_connections_refused_total", 'limit="per_client"') \
        if st == 200 else None
    rep.check("the noisy client's connections over the per-client limit are refused and "
              "counted (%s)" % refused, refused is not None and refused >= NOISY[1] - PER_CLIENT)
    flood.close()

    # Every scrape Prometheus made during the flood succeeded, quickly, once a second.
    time.sleep(1.5)  # the last scrape of the flood window lands in the TSDB
    rng = "%ds" % int(end - start)
    at = "@%.3f" % end
    n = prom_query(prom, 'count_over_time(up{job="microview"}[%s] %s)' % (rng, at))
    worst = prom_query(prom, 'min_over_time(up{job="microview"}[%s] %s)' % (rng, at))
    slow = prom_query(prom, 'max_over_time(scrape_duration_seconds{job="microview"}[%s] %s)'
                      % (rng, at))
    print("info: during the flood: %s scrapes, min(up)=%s, max scrape duration %s s"
          % (n, worst, slow))
    rep.check("Prometheus scraped about once a second during the flood (%s scrapes in %s)"
              % (n, rng), n is not None and n >= int(end - start) - 2)
    rep.check("no scrape failed during the flood (min up = %s)" % worst, worst == 1)
    rep.check("no scrape took over %.1f s during the flood (max %s s)" % (SLOW_SCRAPE_S, slow),
              slow is not None and slow < SLOW_SCRAPE_S)


if __name__ == "__main__":
    sys.exit(main())
