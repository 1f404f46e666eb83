"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
JSON messages ending in a NUL byte on file descriptors 3 and 4), so tests need no WebSocket
library. Only what the live view's tests use: open a page, evaluate an expression, take a
screenshot."""
import base64
import json
import os
import shutil
import subprocess
import time


def find_chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    def __init__(self, binary, width=1280, height=900, log=None):
        self.r_in, self.w_in = os.pipe()    # to the browser (its fd 3)
        self.r_out, self.w_out = os.pipe()  # from the browser (its fd 4)

        def child_fds():
            # dup2 leaves the copies inheritable; the originals stay close-on-exec. Moved out
            # of the way first, in case one of them is 3 or 4 already.
            a, b = os.dup(self.r_in), os.dup(self.w_out)
            os.dup2(a, 3)
            os.dup2(b, 4)

        argv = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
                "--user-data-dir=" + os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                  "mv-cdp-%d" % os.getpid()),
                "--window-size=%d,%d" % (width, height), "about:blank"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log or subprocess.DEVNULL,
                                     stderr=log or subprocess.DEVNULL, preexec_fn=child_fds,
                                     close_fds=False)
        os.close(self.r_in)
        os.close(self.w_out)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def _send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w_in, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def call(self, method, params=None, session=True, timeout=20):
        want = self._send(method, params, session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                m = json.loads(raw)
                if m.get("id") == want:
                    if "error" in m:
                        raise RuntimeError("%s: %s" % (method, m["error"]))
                    return m.get("result", {})
            chunk = os.read(self.r_out, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buf += chunk
        raise TimeoutError(method)

    def open(self, url):
        t = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        s = self.call("Target.attachToTarget", {"targetId": t["targetId"], "flatten": True},
                      session=False)
        self.session = s["sessionId"]
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            return None
        return r.get("result", {}).get("value")

    def screenshot(self, path):
        r = self.call("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self):
        try:
            self._send("Browser.close", session=False)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.w_in, self.r_out):
            try:
                os.close(fd)
            except OSError:
                pass
