"""Helpers shared by the Python integration and e2e tests (stdlib only).

One definition each of what every test script needs: counted checks that print one
`PASS: ...` / `FAIL: ... -- detail` / `SKIPPED: ...` line each, a bounded wait on a condition
(never a fixed sleep), a free loopback port and an HTTP GET that never raises.

Import it from a test script with
    sys.path.insert(0, os.path.join(<repository root>, "tests", "lib"))
    import mvtest
"""
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


class Report:
    """Counts checks. check() returns its condition so it can guard what follows."""

    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def check(self, desc, ok, detail=""):
        if ok:
            self.passed += 1
            print("PASS: %s" % desc)
        else:
            self.failed += 1
            print("FAIL: %s%s" % (desc, (" -- %s" % (detail,)) if detail != "" else ""))
        sys.stdout.flush()
        return ok

    def skip(self, desc, why):
        """A check that cannot run here: printed, counted, and appended to $MV_TEST_SKIP_LOG
        when set, so scripts/test.sh counts it as skipped, never as passed."""
        self.skipped += 1
        line = "SKIPPED: %s (%s)" % (desc, why)
        print(line)
        sys.stdout.flush()
        log = os.environ.get("MV_TEST_SKIP_LOG")
        if log:
            try:
                with open(log, "a") as f:
                    f.write("%s: %s\n" % (os.path.basename(sys.argv[0]), line))
            except OSError as e:
                print("mvtest: cannot append to MV_TEST_SKIP_LOG=%s: %s" % (log, e),
                      file=sys.stderr)

    def summary(self, name):
        """The closing `NAME: N passed, N failed, N skipped` line."""
        return "%s: %d passed, %d failed, %d skipped" % (name, self.passed, self.failed,
                                                         self.skipped)


def wait_until(pred, timeout=10.0, step=0.05):
    """Polls pred() until it returns something truthy or `timeout` seconds pass; returns its
    last value. An OSError from pred counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except OSError:
            v = None
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def free_port(host="127.0.0.1"):
    """A TCP port free on `host` right now (bind to port 0, read it back, close)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url, headers=None, timeout=3):
    """GET url: (status, headers, body bytes), or (None, None, error text as bytes)."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()
    except (urllib.error.URLError, OSError) as e:
        return None, None, str(e).encode()


class Procs:
    """Processes a test starts, each with its stderr in DIR/NAME.log; stop() ends them all."""

    def __init__(self, logdir):
        self.logdir, self.procs, self.logs = logdir, [], {}

    def spawn(self, name, argv):
        self.logs[name] = "%s/%s.log" % (self.logdir, name)
        with open(self.logs[name], "w") as err:
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(p)
        return p

    def stop(self):
        """SIGTERM to every process still running, SIGKILL to those not gone within 5 s."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def dump_logs(self, lines=15):
        """Prints the last lines of every process's log."""
        for name, path in self.logs.items():
            with open(path, errors="replace") as f:
                print("--- %s.log\n%s" % (name, "".join(f.readlines()[-lines:])), end="")
