#!/usr/bin/python3
"""Stand-in Kubernetes API server for tests: bearer-token auth and pod GET/list over plain HTTP."""

import argparse
import hmac
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20  # control requests larger than this are refused

_POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")
_NS_PODS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
_CTL_POD_PATH = re.compile(r"^/_control/pods/([^/]+)/([^/]+)$")


def log(msg, **kv):
    parts = ["ts=%.3f" % time.time(), "component=fake-apiserver", "msg=" + json.dumps(msg)]
    parts += ["%s=%s" % (k, json.dumps(str(v))) for k, v in kv.items()]
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()


def make_pod(namespace, name, uid="", labels=None, annotations=None, node_name="", **extra):
    """A minimal v1 Pod object as the API server would return it."""
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid5(uuid.NAMESPACE_URL, "pod/%s/%s" % (namespace, name))),
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {"nodeName": node_name, "containers": extra.get("containers", [])},
        "status": {"phase": extra.get("phase", "Running")},
    }
    return pod


def normalize_pod(obj):
    """Accepts a full Pod object or the short form {namespace,name,uid,labels,annotations,
    nodeName}; returns a full Pod object. Raises ValueError."""
    if not isinstance(obj, dict):
        raise ValueError("a pod must be a JSON object")
    if "metadata" in obj:
        md = obj["metadata"]
        if not md.get("name") or not md.get("namespace"):
            raise ValueError("pod metadata needs name and namespace")
        pod = json.loads(json.dumps(obj))
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("spec", {})
        return pod
    if not obj.get("name") or not obj.get("namespace"):
        raise ValueError("a pod needs name and namespace")
    return make_pod(obj["namespace"], obj["name"], obj.get("uid", ""), obj.get("labels"),
                    obj.get("annotations"), obj.get("nodeName", ""),
                    containers=obj.get("containers", []), phase=obj.get("phase", "Running"))


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class FakeApiServer:
    """Pods held in memory, optionally loaded from (and reloaded on change of) a JSON file.

    Python API for tests in the same process; the /_control/ HTTP endpoints do the same for
    other processes. The token file is re-read on every request, so rotation can be tested.
    """

    def __init__(self, token_file, state_file=None, host="127.0.0.1", port=0):
        if not host.startswith("127.") and host not in ("localhost", "::1"):
            raise ValueError("the stand-in API server listens on loopback only")
        self.token_file = token_file
        self.state_file = state_file
        self._lock = threading.Lock()
        self._pods = {}  # (ns, name) -> pod
        self._file_pods = set()  # keys that came from the state file
        self._state_mtime = None
        self._unavailable = 0  # 0 or the HTTP status to answer with
        self._rv = 1
        self._requests = []  # bounded log of served requests
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.api = self
        self._thread = None
        self._reload_state()

    @property
    def port(self):
        return self._httpd.server_address[1]

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        log("serving", url=self.url)
        return self

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---- state ---------------------------------------------------------------------------

    def put_pod(self, pod):
        pod = normalize_pod(pod)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self._lock:
            self._rv += 1
            pod["metadata"]["resourceVersion"] = str(self._rv)
            self._pods[key] = pod
            self._file_pods.discard(key)
        return pod

    def delete_pod(self, namespace, name):
        with self._lock:
            self._file_pods.discard((namespace, name))
            return self._pods.pop((namespace, name), None) is not None

    def set_unavailable(self, status=503):
        """Answer every API request with `status` (0 or None: serve normally)."""
        with self._lock:
            self._unavailable = int(status or 0)
        log("availability", answer=status or "normal")

    def requests(self):
        with self._lock:
            return list(self._requests)

    def _reload_state(self):
        if not self.state_file:
            return
        try:
            mtime = os.stat(self.state_file).st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._state_mtime:
            return
        with open(self.state_file) as f:
            data = json.load(f)
        pods = data.get("pods", []) if isinstance(data, dict) else data
        loaded = [normalize_pod(p) for p in pods]
        with self._lock:
            for k in self._file_pods:
                self._pods.pop(k, None)
            self._file_pods = set()
            for p in loaded:
                self._rv += 1
                p["metadata"]["resourceVersion"] = str(self._rv)
                k = (p["metadata"]["namespace"], p["metadata"]["name"])
                self._pods[k] = p
                self._file_pods.add(k)
            self._state_mtime = mtime
        log("state loaded", file=self.state_file, pods=len(loaded))

    def _token(self):
        try:
            with open(self.token_file) as f:
                return f.read().strip()
        except OSError:
            return None

    def _note(self, method, path, status, authed):
        with self._lock:
            self._requests.append({"method": method, "path": path, "status": status,
                                   "authenticated": authed, "t": time.time()})
            del self._requests[:-1000]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver/1"

    def log_message(self, fmt, *args):  # one logfmt line per request is written by _send
        pass

    def _send(self, code, body, authed=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        api = self.server.api
        api._note(self.command, self.path, code, authed)
        log("request", method=self.command, path=self.path, status=code)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise ValueError("body too large")
        return json.loads(self.rfile.read(n) or b"null")

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/_control/"):
            return self._control("GET", url)
        api = self.server.api
        with api._lock:
            unavailable = api._unavailable
        if unavailable:
            return self._send(unavailable, status_body(unavailable, "ServiceUnavailable",
                                                       "the server is currently unavailable"))
        token = api._token()
        auth = self.headers.get("Authorization", "")
        authed = bool(token) and auth.startswith("Bearer ") and \
            hmac.compare_digest(auth[len("Bearer "):].strip().encode(), token.encode())
        if not authed:
            return self._send(401, status_body(401, "Unauthorized", "Unauthorized"), False)
        try:
            api._reload_state()
        except (OSError, ValueError) as e:
            return self._send(500, status_body(500, "InternalError", "state file: %s" % e), True)
        m = _POD_PATH.match(url.path)
        if m:
            ns, name = (urllib.parse.unquote(x) for x in m.groups())
            with api._lock:
                pod = api._pods.get((ns, name))
            if pod is None:
                return self._send(404, status_body(404, "NotFound", 'pods "%s" not found' % name,
                                                   {"name": name, "kind": "pods"}), True)
            return self._send(200, pod, True)
        ns = None
        m = _NS_PODS_PATH.match(url.path)
        if m:
            ns = urllib.parse.unquote(m.group(1))
        elif url.path != "/api/v1/pods":
            return self._send(404, status_body(404, "NotFound", "the server could not find "
                                               "the requested resource"), True)
        q = urllib.parse.parse_qs(url.query)
        node = None
        for sel in q.get("fieldSelector", []):
            for term in sel.split(","):
                if term.startswith("spec.nodeName="):
                    node = term[len("spec.nodeName="):]
                elif term:
                    return self._send(400, status_body(400, "BadRequest",
                                                       "unsupported field selector %r" % term),
                                      True)
        if q.get("watch", ["0"])[0] not in ("0", "false", ""):
            return self._send(400, status_body(400, "BadRequest", "watch is not emulated"), True)
        with api._lock:
            items = [p for (pns, _), p in sorted(api._pods.items())
                     if (ns is None or pns == ns) and
                     (node is None or p.get("spec", {}).get("nodeName") == node)]
            rv = str(api._rv)
        return self._send(200, {"kind": "PodList", "apiVersion": "v1",
                                "metadata": {"resourceVersion": rv}, "items": items}, True)

    def do_POST(self):
        self._control("POST", urllib.parse.urlsplit(self.path))

    def do_DELETE(self):
        self._control("DELETE", urllib.parse.urlsplit(self.path))

    def _control(self, method, url):
        api = self.server.api
        try:
            if method == "POST" and url.path == "/_control/pods":
                return self._send(201, api.put_pod(self._body()))
            if method == "POST" and url.path == "/_control/unavailable":
                body = self._body() or {}
                api.set_unavailable(body.get("status", 503) if body.get("enabled", True) else 0)
                return self._send(200, {"unavailable": api._unavailable})
            if method == "GET" and url.path == "/_control/requests":
                return self._send(200, {"requests": api.requests()})
            m = _CTL_POD_PATH.match(url.path)
            if method == "DELETE" and m:
                ok = api.delete_pod(*(urllib.parse.unquote(x) for x in m.groups()))
                return self._send(200 if ok else 404, {"deleted": ok})
        except ValueError as e:
            return self._send(400, status_body(400, "BadRequest", str(e)))
        return self._send(404, status_body(404, "NotFound", "no such control endpoint"))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--token-file", required=True, help="file holding the accepted bearer token")
    ap.add_argument("--state", help="JSON file {\"pods\": [...]}, reloaded when it changes")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 (default): an ephemeral port")
    ap.add_argument("--port-file", help="written (atomically) with the port once serving")
    args = ap.parse_args()
    api = FakeApiServer(args.token_file, args.state, args.host, args.port).start()
    print("listening %s" % api.url, flush=True)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % api.port)
        os.rename(tmp, args.port_file)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    api.stop()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
