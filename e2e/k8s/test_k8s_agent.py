#!/usr/bin/python3
"""The agent in Kubernetes mode against the stand-in kubelet and API server.

Usage: test_k8s_agent.py BUILD_DIR SCENARIO      (SCENARIO "all" runs every one)
Each scenario starts its own stand-ins and agent in a fresh temp dir and ends with
"N passed, N failed". Exit 0 on success, 1 on failure, 77 when it cannot run here.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "e2e", "standins"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import protogen  # noqa: E402
from mvtest import Report, free_port, wait_until  # noqa: E402,F401 (re-exported to k8s_host.py)
from fake_kubelet import FakeKubelet, KubeletError  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402

dp, dp_grpc, pr, pr_grpc = protogen.load()

RES = "microview.io/metrics"
PAGE = 4096
PAGES = 16
CONTAINER_PATH = "/var/run/microview"
SKIP = 77

R = Report()
check = R.check


class Skip(Exception):
    pass


class Env:
    def __init__(self, build, **cfg):
        self.build = build
        self.bin = os.path.join(build, "bin")
        self.tmp = tempfile.mkdtemp(prefix="mvk8s-", dir="/tmp")
        self.plugin_dir = os.path.join(self.tmp, "dp")
        self.podres_dir = os.path.join(self.tmp, "pr")
        self.state = os.path.join(self.tmp, "state")
        self.token = os.path.join(self.tmp, "token")
        with open(self.token, "w") as f:
            f.write("tok-1\n")
        self.kubelet = FakeKubelet(self.plugin_dir, self.podres_dir).start()
        self.api = FakeApiServer(self.token, os.path.join(self.tmp, "pods.json")).start()
        self.cfg = {
            "resource_name": RES,
            "page_size": str(PAGE),
            "pool_size": str(PAGE * PAGES),
            "device_plugin_dir": self.plugin_dir,
            "pod_resources_socket": os.path.join(self.podres_dir, "kubelet.sock"),
            "api_server": self.api.url,
            "token_file": self.token,
            "ca_file": "",
            "state_dir": self.state,
            "gc_interval_ms": "200",
            "gc_grace_ms": "500",
            "identity_retry_ms": "300",
            "api_timeout_ms": "2000",
            "token_reread_seconds": "3600",
        }
        self.cfg.update({k: str(v) for k, v in cfg.items()})
        self.agent = None
        self.agent_runs = 0
        self.procs = []

    @property
    def agent_sock(self):
        return os.path.join(self.state, "agent.sock")

    @property
    def log_path(self):
        return os.path.join(self.tmp, "agent.log")

    def start_agent(self):
        yaml_path = os.path.join(self.tmp, "agent.yaml")
        with open(yaml_path, "w") as f:
            f.write("# agent configuration for this test\n")
            for k, v in self.cfg.items():
                f.write("%s: %s\n" % (k, json.dumps(v)))
        self.agent_runs += 1
        log = open(self.log_path, "a")
        self.agent = subprocess.Popen(
            [os.path.join(self.bin, "microview-agent"), "--config", yaml_path,
             "--node-name", "node-1"],
            stdout=log, stderr=log)
        log.close()
        return self.agent

    def stop_agent(self, sig=signal.SIGTERM):
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(sig)
            try:
                self.agent.wait(10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        rc = self.agent.returncode if self.agent else None
        self.agent = None
        return rc

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def log_has(self, event):
        return ("event=%s " % event) in self.log() or self.log().rstrip().endswith(
            "event=%s" % event)

    def catalog(self):
        res = subprocess.run([os.path.join(self.bin, "microviewctl"), "list", "--agent",
                              "unix:" + self.agent_sock, "--json"],
                             capture_output=True, text=True, timeout=10)
        if res.returncode != 0:
            return None
        return json.loads(res.stdout)

    def put_pod(self, ns, name, labels=None, annotations=None):
        self.api.put_pod({"namespace": ns, "name": name, "uid": "uid-" + name,
                          "labels": labels or {}, "annotations": annotations or {},
                          "nodeName": "node-1"})

    def registered(self, count=1, timeout=10.0):
        return self.kubelet.wait_registered(RES, count=count, timeout=timeout)

    def ready(self, count=1, timeout=10.0):
        """Registered and the device list received, as the kubelet needs before admitting."""
        return self.registered(count, timeout) and self.kubelet.wait_devices(
            RES, healthy=PAGES, timeout=timeout)

    def spawn(self, args, **kw):
        p = subprocess.Popen(args, **kw)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.agent is not None:
            rc = self.stop_agent()
            log = self.log()
            check("agent stopped cleanly on SIGTERM (exit 0, no sanitizer report)",
                  rc == 0 and "Sanitizer" not in log and "runtime error" not in log, rc)
        self.kubelet.stop()
        self.api.stop()
        if R.failed:
            sys.stdout.write("---- agent log ----\n" + self.log()[-6000:])
        shutil.rmtree(self.tmp, ignore_errors=True)


def by_pod(cat, ns, pod, container=None):
    for s in cat["segments"] if cat else []:
        lab = s["labels"]
        if lab.get("namespace") == ns and lab.get("pod") == pod and (
                container is None or lab.get("container") == container):
            return s
    return None


def seg_dir_of(alloc):
    return alloc["response"]["mounts"][0]["host_path"]


def envs_of(alloc):
    return alloc["response"].get("envs", {})


# ---- scenarios -------------------------------------------------------------------------


def sc_register(env):
    env.start_agent()
    check("agent registers with the kubelet (GetDevicePluginOptions answered during Register)",
          env.registered())
    st = env.kubelet.state()
    regs = [r for r in st["registrations"] if r["resource"] == RES]
    check("registration accepted with version v1beta1",
          regs and regs[0]["accepted"] and regs[0]["version"] == "v1beta1", regs)
    opts = regs[0].get("plugin_options") or {} if regs else {}
    check("plugin options ask for PreStartContainer", opts.get("pre_start_required") is True, opts)
    check("all %d pages advertised healthy" % PAGES,
          env.kubelet.wait_devices(RES, healthy=PAGES, timeout=10))
    check("registered event logged", wait_until(lambda: env.log_has("dp.registered"), 5))
    check("Agent service answers List in Kubernetes mode", env.catalog() is not None)


def sc_allocate(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0")
    a = env.kubelet.allocate("team-a", "web-0", "app", 2)
    resp = a["response"]
    mounts = resp.get("mounts", [])
    check("one mount at the container path", len(mounts) == 1 and
          mounts[0]["container_path"] == CONTAINER_PATH, mounts)
    host = mounts[0]["host_path"] if mounts else ""
    seg = os.path.join(host, "segment")
    check("segment file exists in the mounted host directory", os.path.isfile(seg), seg)
    check("segment size is 2 pages", os.path.isfile(seg) and os.path.getsize(seg) == 2 * PAGE)
    envs = envs_of(a)
    check("env MICROVIEW_SEGMENT points inside the container path",
          envs.get("MICROVIEW_SEGMENT") == CONTAINER_PATH + "/segment", envs)
    check("env MICROVIEW_SEGMENT_SIZE is the size", envs.get("MICROVIEW_SEGMENT_SIZE") ==
          str(2 * PAGE), envs)
    check("host directory is under the state dir", host.startswith(env.state + "/"), host)
    check("allocated event logged", wait_until(lambda: env.log_has("dp.allocated"), 5))
    with open(seg, "rb") as f:
        data = f.read()
    check("segment is formatted (header written)", any(data[:64]))
    check("segment's tail is zero", not any(data[PAGE:]))


def sc_prestart(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0", labels={"app": "checkout", "app.kubernetes.io/name": "checkout-api"},
                annotations={"microview.io/labels": "app=checkout, tier=web,bad-name=x,pod=evil"})
    a = env.kubelet.allocate("team-a", "web-0", "app", 1)
    check("PreStartContainer was called", a["prestart"] is True)
    cat = env.catalog()
    s = by_pod(cat, "team-a", "web-0", "app")
    check("catalog entry has namespace/pod/container", s is not None, cat)
    lab = s["labels"] if s else {}
    check("annotation labels app and tier present",
          lab.get("app") == "checkout" and lab.get("tier") == "web", lab)
    check("invalid and reserved annotation entries ignored",
          "bad-name" not in lab and lab.get("pod") == "web-0", lab)
    check("the pod's Kubernetes labels are published apart from the series labels",
          s and s.get("pod_labels") == {"app": "checkout",
                                        "app.kubernetes.io/name": "checkout-api"}, s)
    check("invalid annotation entry logged", wait_until(lambda: env.log_has("identity.annotation_label_ignored"), 5))
    check("prestart mapping logged", wait_until(lambda: env.log_has("prestart.mapped"), 5))
    check("catalog path is the mounted segment",
          s and s["path"] == os.path.join(seg_dir_of(a), "segment"), s)
    rev = cat["revision"]
    env.kubelet.restart_container("team-a", "web-0", "app")
    cat2 = env.catalog()
    check("container restart: PreStart is idempotent (same labels, same revision)",
          cat2["revision"] == rev and by_pod(cat2, "team-a", "web-0", "app") == s,
          (rev, cat2))
    # API-server token rotation: the new token is picked up after a 401.
    with open(env.token, "w") as f:
        f.write("tok-2\n")
    env.put_pod("team-b", "api-0", annotations={"microview.io/labels": "tier=api"})
    env.kubelet.allocate("team-b", "api-0", "srv", 1)
    s2 = by_pod(env.catalog(), "team-b", "api-0", "srv")
    check("rotated token is re-read (labels complete after rotation)",
          s2 is not None and s2["labels"].get("tier") == "api", s2)


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def start_container_writer(env, alloc, gen_args, name="writer"):
    """Runs `microviewctl gen GEN_ARGS` as a container would: its own mount namespace, a
    private /run, the allocated host directory bind-mounted at the container path, and
    exactly the env Allocate returned. Returns the Popen (killed by env.close)."""
    script = ('set -e; mount -t tmpfs mvk8s /run; mkdir -p "$CPATH"; '
              'mount --bind "$HOSTDIR" "$CPATH"; '
              'exec "$CTL" gen --segment "$MICROVIEW_SEGMENT" ' + gen_args)
    cenv = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CPATH": CONTAINER_PATH,
            "HOSTDIR": seg_dir_of(alloc), "CTL": os.path.join(env.bin, "microviewctl")}
    cenv.update(envs_of(alloc))
    wlog = open(os.path.join(env.tmp, name + ".log"), "w")
    p = env.spawn(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                  env=cenv, stdout=wlog, stderr=wlog)
    wlog.close()
    return p


def sc_writer(env):
    if os.geteuid() != 0:
        raise Skip("needs root for unshare --mount and bind mounts")
    if not shutil.which("unshare"):
        raise Skip("unshare (util-linux) not installed")
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0", labels={"app.kubernetes.io/name": "checkout", "tier": "web"},
                annotations={"microview.io/labels": "app=checkout"})
    a = env.kubelet.allocate("team-a", "web-0", "app", 4)
    port = free_port()
    clog = open(os.path.join(env.tmp, "collector.log"), "w")
    env.spawn([os.path.join(env.bin, "microview-collector"), "--agent", "unix:" + env.agent_sock,
               "--listen", "127.0.0.1:%d" % port, "--tick-ms", "20"], stdout=clog, stderr=clog)
    w = start_container_writer(env, a, "--rate 200 --counters 1 --gauges 1 --histograms 0")
    url = "http://127.0.0.1:%d/metrics" % port
    want = 'container="app"'

    def served():
        body = fetch(url)
        return [ln for ln in body.splitlines()
                if ln.startswith("gen_") and want in ln and 'namespace="team-a"' in ln and
                'pod="web-0"' in ln and 'app="checkout"' in ln]

    lines = wait_until(served, timeout=15)
    check("writer in its own mount namespace is running", w.poll() is None,
          open(os.path.join(env.tmp, "writer.log")).read()[-2000:])
    check("collector serves the writer's metrics with namespace/pod/container labels",
          bool(lines), fetch(url)[-2000:])
    # The workload query KEDA's metrics-api trigger sends: namespace plus the pods' selector.
    base = "http://127.0.0.1:%d/api/v1/value?metric=gen_requests_total&namespace=team-a" % port
    q = urllib.parse.quote
    hit = json.loads(fetch(base + "&selector=" + q("app.kubernetes.io/name=checkout,tier in (web,api),!canary")) or "{}")
    check("a selector over the pod's Kubernetes labels finds its series",
          hit.get("count", 0) >= 1 and hit.get("value", 0) > 0, hit)
    miss = json.loads(fetch(base + "&selector=" + q("app.kubernetes.io/name=other")) or "{}")
    check("a selector matching no pod here answers the empty value (0, count 0)",
          miss.get("value") == 0 and miss.get("count") == 0 and miss.get("empty") is True, miss)


def sc_kubelet_restart(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0")
    env.kubelet.allocate("team-a", "web-0", "app", 1)
    before = env.catalog()
    out = env.kubelet.restart(timeout=10)
    check("re-registered after the kubelet restart", out["seconds"] is not None, out)
    check("re-registration took at most 1 s", out["seconds"] is not None and
          out["seconds"] <= 1.0, out)
    check("re-registered event logged", wait_until(lambda: env.log_has("dp.reregistered"), 5))
    check("devices healthy again", env.kubelet.wait_devices(RES, healthy=PAGES, timeout=5))
    check("segments kept across the kubelet restart", env.catalog() == before)
    a = env.kubelet.allocate("team-a", "web-1", "app", 1)
    check("allocation works after the restart", bool(a["response"].get("mounts")))
    # A second restart, to be sure the watcher is re-armed.
    out2 = env.kubelet.restart(timeout=10)
    check("second kubelet restart re-registered within 1 s",
          out2["seconds"] is not None and out2["seconds"] <= 1.0, out2)
    # One Register per kubelet instance: older kubelets may drop the newer of two
    # registrations. Also when the kubelet touches its socket after listening.
    for touch in (False, True):
        base = accepted_registrations(env)
        out3 = env.kubelet.restart(timeout=10, touch_socket=touch)
        check("restart (socket touched after listen: %s) re-registered" % touch,
              out3["seconds"] is not None, out3)
        time.sleep(1.5)  # an observation window: a second Register would arrive within it
        n = accepted_registrations(env) - base
        check("exactly one Register for that kubelet instance (socket touched: %s)" % touch,
              n == 1, n)


def accepted_registrations(env):
    return sum(1 for r in env.kubelet.state()["registrations"]
               if r["resource"] == RES and r["accepted"])


def inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def sc_agent_kill(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0", annotations={"microview.io/labels": "app=checkout"})
    env.put_pod("team-a", "web-1")
    a = env.kubelet.allocate("team-a", "web-0", "app", 2)
    env.kubelet.allocate("team-a", "web-1", "app", 1)
    seg = os.path.join(seg_dir_of(a), "segment")
    wlog = open(os.path.join(env.tmp, "writer.log"), "w")
    w = env.spawn([os.path.join(env.bin, "microviewctl"), "gen", "--segment", seg, "--rate", "200",
                   "--counters", "1", "--gauges", "0", "--histograms", "0"],
                  stdout=wlog, stderr=wlog)
    wait_until(lambda: any(open(seg, "rb").read()[PAGE // 2:]), 5)
    before = env.catalog()
    ino = inode(seg)
    env.agent.kill()
    env.agent.wait()
    data1 = open(seg, "rb").read()
    env.start_agent()
    check("agent re-registers after kill -9", env.registered(count=2, timeout=10))
    after = wait_until(env.catalog, 10)
    check("catalog rebuilt exactly (ids, sizes, labels, paths, revision)", after == before,
          (before, after))
    check("segment file untouched (same inode)", inode(seg) == ino)
    check("writer unaffected (still running)", w.poll() is None)
    check("writer keeps writing into the same segment",
          wait_until(lambda: open(seg, "rb").read() != data1, 5))
    check("catalog loaded from the state dir", wait_until(lambda: env.log_has("catalog.loaded"), 5))
    env.kubelet.restart_container("team-a", "web-0", "app")
    check("PreStart after the agent restart keeps identity",
          by_pod(env.catalog(), "team-a", "web-0", "app") == by_pod(before, "team-a", "web-0",
                                                                      "app"))


def pool_used(env):
    """(used, total) from the last pool numbers the agent logged."""
    used = total = None
    for ln in env.log().splitlines():
        if "pool_used=" in ln:
            kv = dict(p.split("=", 1) for p in ln.split() if "=" in p)
            used, total = int(kv["pool_used"]), int(kv["pool_total"])
    return used, total


def sc_gc(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0")
    a = env.kubelet.allocate("team-a", "web-0", "app", 4)
    d = seg_dir_of(a)
    seg = os.path.join(d, "segment")
    with open(seg, "r+b") as f:  # the tenant's bytes
        f.seek(PAGE)
        f.write(b"\xAA" * (3 * PAGE))
    env.kubelet.remove_pod("team-a", "web-0")
    check("segment collected after its pod is gone",
          wait_until(lambda: by_pod(env.catalog(), "team-a", "web-0") is None and
                     not env.catalog()["segments"], 10), env.catalog())
    check("segment directory unlinked", not os.path.exists(d))
    check("collected event logged", wait_until(lambda: env.log_has("segment.collected"), 5))
    check("pages back in the pool", pool_used(env) == (0, PAGES), pool_used(env))
    env.put_pod("team-a", "web-2")
    b = env.kubelet.allocate("team-a", "web-2", "app", PAGES)
    seg2 = os.path.join(seg_dir_of(b), "segment")
    data = open(seg2, "rb").read()
    check("the whole pool can be allocated again", len(data) == PAGES * PAGE)
    nz = next((i for i in range(PAGE, len(data)) if data[i]), None)
    # The first page holds the freshly formatted header (random instance id, times): the
    # previous tenant's bytes were written from PAGE on, and that is what must be zero.
    check("reused pages are zeroed (no previous tenant's bytes)",
          b"\xAA" not in data[PAGE:] and nz is None,
          "first nonzero byte at %s: %r" % (nz, data[nz:nz + 16] if nz is not None else b""))
    # Re-allocation before GC ran: the stale segment is collected during Allocate.
    env.kubelet.remove_pod("team-a", "web-2")
    with open(seg2, "r+b") as f:
        f.seek(PAGE)
        f.write(b"\xBB" * PAGE)
    env.put_pod("team-a", "web-3")
    c = env.kubelet.allocate("team-a", "web-3", "app", 2)
    data3 = open(os.path.join(seg_dir_of(c), "segment"), "rb").read()
    nz3 = next((i for i in range(PAGE, len(data3)) if data3[i]), None)
    check("immediate re-allocation gets a fresh zeroed segment", b"\xBB" not in data3[PAGE:] and
          nz3 is None and seg_dir_of(c) != seg_dir_of(b),
          "dirs %s / %s, %d bytes, first nonzero byte past the header page at %s: %r" % (
              seg_dir_of(b), seg_dir_of(c), len(data3), nz3,
              data3[nz3:nz3 + 16] if nz3 is not None else b""))


def sc_pool(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "big-0")
    a = env.kubelet.allocate("team-a", "big-0", "app", PAGES)
    check("whole pool allocated", len(a["devices"]) == PAGES)
    try:
        env.kubelet.allocate("team-a", "big-1", "app", 1)
        refused = None
    except KubeletError as e:
        refused = str(e)
    check("kubelet refuses a container when the pool is exhausted", refused is not None and
          "0 healthy and free" in refused, refused)
    # The kubelet never hands out held devices; a request for them anyway is refused
    # by the agent with a message the kubelet would surface.
    ch = grpc.insecure_channel("unix:" + os.path.join(env.plugin_dir, "microview.sock"))
    stub = dp_grpc.DevicePluginStub(ch)
    try:
        stub.Allocate(dp.AllocateRequest(container_requests=[
            dp.ContainerAllocateRequest(devices_ids=[a["devices"][0]])]), timeout=10)
        err = None
    except grpc.RpcError as e:
        err = e
    check("Allocate of held pages refused with RESOURCE_EXHAUSTED",
          err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
          err and err.code())
    check("refusal message names the holder", err is not None and
          "still held by team-a/big-0/app" in (err.details() or ""), err and err.details())
    try:
        stub.Allocate(dp.AllocateRequest(container_requests=[
            dp.ContainerAllocateRequest(devices_ids=["page-99999"])]), timeout=10)
        err2 = None
    except grpc.RpcError as e:
        err2 = e
    check("unknown device ID refused with INVALID_ARGUMENT",
          err2 is not None and err2.code() == grpc.StatusCode.INVALID_ARGUMENT)
    check("refusal logged", wait_until(lambda: env.log_has("dp.allocate_refused"), 5))
    ch.close()


def sc_api_down(env):
    env.start_agent()
    env.ready()
    env.put_pod("team-a", "web-0", annotations={"microview.io/labels": "app=checkout"})
    env.api.set_unavailable(503)
    env.kubelet.allocate("team-a", "web-0", "app", 1)
    s = by_pod(env.catalog(), "team-a", "web-0", "app")
    check("API down: identity falls back to PodResources labels", s is not None and
          "app" not in s["labels"], s)
    check("API failure logged", wait_until(lambda: env.log_has("identity.api_unavailable"), 5))
    env.api.set_unavailable(0)
    got = wait_until(lambda: (by_pod(env.catalog(), "team-a", "web-0", "app") or {}).get(
        "labels", {}).get("app") == "checkout", 10)
    check("labels filled in once the API answers", got, env.catalog())
    # PodResources down as well: device-level labels, then the full identity.
    env.kubelet._stop_servers()
    env.put_pod("team-a", "web-1", annotations={"microview.io/labels": "app=search"})
    ch = grpc.insecure_channel("unix:" + os.path.join(env.plugin_dir, "microview.sock"))
    stub = dp_grpc.DevicePluginStub(ch)
    stub.Allocate(dp.AllocateRequest(container_requests=[
        dp.ContainerAllocateRequest(devices_ids=["page-7"])]), timeout=10)
    stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=["page-7"]), timeout=30)
    cat = env.catalog()
    devs = [x for x in cat["segments"] if x["labels"].get("device") == "page-7"]
    check("PodResources down: segment labelled by device", len(devs) == 1, cat)
    ch.close()


def devices_health(env):
    """(healthy, unhealthy) device counts the stand-in kubelet holds for RES."""
    r = env.kubelet.state()["resources"].get(RES) or {}
    devs = (r.get("devices") or {}).values()
    return (sum(1 for d in devs if d.get("health") == "Healthy"),
            sum(1 for d in devs if d.get("health") == "Unhealthy"))


def raw_list(port, token):
    """ListSegments on the agent's TCP control plane with grpcio (not our client);
    returns "OK" or the gRPC status code name."""
    ch = grpc.insecure_channel("127.0.0.1:%d" % port)
    f = ch.unary_unary("/microview.v1.Agent/ListSegments",
                       request_serializer=lambda x: x, response_deserializer=lambda x: x)
    md = [("authorization", "Bearer " + token)] if token else []
    try:
        f(b"", metadata=md, timeout=5)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name
    finally:
        ch.close()


def rdma_cfg(env, require):
    """Remote-collector keys: TCP control plane + rdma_cm listener + shared token. This
    machine has no RDMA device, so the RDMA target cannot come up."""
    tok = os.path.join(env.tmp, "collector-token")
    with open(tok, "w") as f:
        f.write("collector-tok-1\n")
    tcp = free_port()
    env.cfg.update({"listen": "127.0.0.1:%d" % tcp, "insecure_listen": "true",
                    "rdma_listen": "127.0.0.1:%d" % free_port(), "collector_token_file": tok, "require_rdma": "true" if require else "false",
                    "rdma_retry_ms": "200"})
    return tcp


def sc_rdma_required(env):
    if os.path.exists("/dev/infiniband/rdma_cm"):
        raise Skip("this machine has an RDMA device: the RDMA target would come up")
    tcp = rdma_cfg(env, require=True)
    env.start_agent()
    check("agent registers although RDMA is down", env.registered())
    got = wait_until(lambda: devices_health(env) == (0, PAGES), 10)
    check("require_rdma without RDMA: all %d devices reported Unhealthy" % PAGES, got,
          devices_health(env))
    check("RDMA failure logged at error level with the effect",
          wait_until(lambda: "level=error" in "".join(
              l for l in env.log().splitlines(True) if "event=rdma.unavailable" in l), 5))
    check("health change logged", env.log_has("dp.health_changed"))
    refused = False
    try:
        env.kubelet.allocate("team-a", "web-0", "app", 1)
    except KubeletError:
        refused = True
    check("the kubelet admits nothing on Unhealthy devices", refused)
    ch = grpc.insecure_channel("unix:" + os.path.join(env.plugin_dir, "microview.sock"))
    stub = dp_grpc.DevicePluginStub(ch)
    detail = ""
    try:
        stub.Allocate(dp.AllocateRequest(container_requests=[
            dp.ContainerAllocateRequest(devices_ids=["page-3"])]), timeout=10)
    except grpc.RpcError as e:
        detail = e.details() or ""
    ch.close()
    check("a direct Allocate is refused, naming RDMA and the reason",
          "RDMA is required" in detail and "require_rdma" in detail, detail)
    cat = env.catalog()
    check("no segment was created for the refused Allocate", cat and not cat["segments"], cat)
    time.sleep(1.0)  # ~5 retries at rdma_retry_ms=200
    errors = [l for l in env.log().splitlines() if "level=error" in l]
    check("retries do not repeat the error (one error line per distinct reason)",
          len(errors) == 1 and "event=rdma.unavailable" in errors[0], errors)
    check("TCP control plane: no token -> UNAUTHENTICATED", raw_list(tcp, None) == "UNAUTHENTICATED")
    check("TCP control plane: the collector token -> OK", raw_list(tcp, "collector-tok-1") == "OK")


def sc_rdma_optional(env):
    if os.path.exists("/dev/infiniband/rdma_cm"):
        raise Skip("this machine has an RDMA device: the RDMA target would come up")
    rdma_cfg(env, require=False)
    env.start_agent()
    check("RDMA optional and down: devices stay Healthy", env.ready())
    check("RDMA failure logged as a warning",
          wait_until(lambda: any("event=rdma.unavailable" in l and "level=warn" in l
                                 for l in env.log().splitlines()), 5))
    env.put_pod("team-a", "web-0")
    a = env.kubelet.allocate("team-a", "web-0", "app", 2)
    check("Allocate succeeds (same-host collectors still read the segment)",
          os.path.isfile(os.path.join(seg_dir_of(a), "segment")))
    res = subprocess.run([os.path.join(env.bin, "microviewctl"), "list", "--agent",
                          "unix:" + env.agent_sock, "--json"], capture_output=True, text=True,
                         timeout=10)
    s = by_pod(json.loads(res.stdout), "team-a", "web-0", "app") if res.returncode == 0 else None
    check("the catalog reports the segment as not RDMA-readable",
          s is not None and s["rdma"]["readable"] is False and s["rdma"]["rkey"] == 0, s)


def sc_pool_max(env):
    """The largest pool the agent accepts: its device list reaches a kubelet-like client whose
    gRPC receive limit is the kubelet's (4 MiB); one page more is refused at start."""
    max_pages = 65536
    env.cfg["pool_size"] = str(PAGE * max_pages)
    env.start_agent()
    check("agent registers with %d pages" % max_pages, env.registered(timeout=20))
    check("all %d devices received through ListAndWatch (4 MiB client limit)" % max_pages,
          env.kubelet.wait_devices(RES, healthy=max_pages, timeout=30))
    env.stop_agent()
    cfg = dict(env.cfg, pool_size=str(PAGE * (max_pages + 1)))
    yaml_path = os.path.join(env.tmp, "too-big.yaml")
    with open(yaml_path, "w") as f:
        for k, v in cfg.items():
            f.write("%s: %s\n" % (k, json.dumps(v)))
    res = subprocess.run([os.path.join(env.bin, "microview-agent"), "--config", yaml_path,
                          "--node-name", "node-1"], capture_output=True, text=True, timeout=20)
    check("one page more is refused at start", res.returncode != 0, res.returncode)
    check("the refusal names pool_size, the limit and the remedy",
          "pool_size" in res.stderr and "65536" in res.stderr and "4 MiB" in res.stderr and
          "raise page_size" in res.stderr, res.stderr[-500:])


def put_pod_spec(env, ns, name, pod_sc=None, container_sc=None):
    """A pod whose spec carries securityContexts (pod level and container "app")."""
    c = {"name": "app", "image": "example"}
    if container_sc:
        c["securityContext"] = container_sc
    spec = {"nodeName": "node-1", "containers": [c]}
    if pod_sc:
        spec["securityContext"] = pod_sc
    env.api.put_pod({"kind": "Pod", "apiVersion": "v1",
                     "metadata": {"namespace": ns, "name": name, "uid": "uid-" + name,
                                  "labels": {}, "annotations": {}},
                     "spec": spec, "status": {"phase": "Running"}})


def write_as(env, path, uid, gid, groups=()):
    """Runs `microviewctl gen` on the segment as uid:gid (and supplementary groups), as a
    container's process would; returns (exit code, output)."""
    args = ["setpriv", "--reuid", str(uid), "--regid", str(gid)]
    args += ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    args += [os.path.join(env.bin, "microviewctl"), "gen", "--segment", path, "--duration", "1",
             "--rate", "50", "--counters", "1", "--gauges", "0", "--histograms", "0"]
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    return res.returncode, (res.stdout + res.stderr)[-800:]


def sc_nonroot(env):
    """A writer that runs as non-root (what the restricted Pod Security Standard asks) can open
    its segment: the agent hands the file to the container's user and group from the pod spec
    at PreStartContainer, or makes it writable for the container when the spec names none."""
    if os.geteuid() != 0:
        raise Skip("needs root to run the writer as other users (setpriv)")
    if not shutil.which("setpriv"):
        raise Skip("setpriv (util-linux) not installed")
    env.start_agent()
    env.ready()
    # Bins must be reachable by the other users.
    for d in (env.tmp, env.state):
        os.chmod(d, 0o755)
    cases = [
        ("run-as", {"runAsUser": 1000, "runAsGroup": 1000}, None, (1000, 0, 0o660),
         (1000, 1000, ())),
        ("container-over-pod", {"runAsUser": 1000, "fsGroup": 2000}, {"runAsUser": 1500},
         (1500, 0, 0o660), (1500, 1500, (2000,))),
        ("group-only", {"fsGroup": 2000}, None, (0, 2000, 0o660), (1600, 1600, (2000,))),
        ("no-user", None, None, (0, 0, 0o666), (1002, 1002, ())),
    ]
    for name, pod_sc, c_sc, (want_uid, want_gid, want_mode), (wuid, wgid, groups) in cases:
        put_pod_spec(env, "team-a", name, pod_sc, c_sc)
        a = env.kubelet.allocate("team-a", name, "app", 1)
        path = os.path.join(seg_dir_of(a), os.path.basename(envs_of(a)["MICROVIEW_SEGMENT"]))

        def owned():
            st = os.stat(path)
            return (st.st_uid, st.st_gid, st.st_mode & 0o777) == (want_uid, want_gid, want_mode)

        got = wait_until(owned, 5)
        st = os.stat(path)
        check("%s: segment owned %d:%d mode %o" % (name, want_uid, want_gid, want_mode), got,
              (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)))
        rc, out = write_as(env, path, wuid, wgid, groups)
        check("%s: a writer running as %d:%d%s writes its segment" %
              (name, wuid, wgid, " +%s" % list(groups) if groups else ""), rc == 0, out)
        # The host-mode collector: uid 0, gid 0, no supplementary groups, no capabilities.
        r = subprocess.run(["setpriv", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
                            "--", "dd", "if=" + path, "of=/dev/null", "bs=4096", "count=1"],
                           capture_output=True, text=True)
        check("%s: root without capabilities (the host-mode collector) reads it" % name,
              r.returncode == 0, r.stderr.strip())
        if want_mode == 0o660:
            rc2, out2 = write_as(env, path, 4242, 4242)
            check("%s: another user cannot open it" % name, rc2 != 0, out2)
    check("ownership logged", env.log_has("segment.owner_set"))


def make_pki(d):
    """A test CA and the agent's certificate for agent.test (openssl); returns (ca, cert, key)."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/ca.key", "-out",
        d + "/ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/agent.key", "-out",
        d + "/agent.csr", "-subj", "/CN=agent.test")
    with open(d + "/agent.ext", "w") as f:
        f.write("subjectAltName=DNS:agent.test\n")
    run("x509", "-req", "-in", d + "/agent.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
        "-CAcreateserial", "-out", d + "/agent.pem", "-days", "2", "-extfile", d + "/agent.ext")
    return d + "/ca.pem", d + "/agent.pem", d + "/agent.key"


def sc_ctlplane(env):
    """The TCP control plane in Kubernetes mode: TLS from the config keys, the read token
    lists but cannot release, creates over TCP are refused whatever the token; segment_group
    gives the segment files and the socket a group a non-root collector reads them with."""
    if os.geteuid() != 0:
        raise Skip("needs root to act as other users (setpriv) and to chown")
    if not shutil.which("setpriv") or not shutil.which("openssl"):
        raise Skip("setpriv (util-linux) or openssl not installed")
    ca, cert, key = make_pki(env.tmp)
    read_tok, admin_tok = os.path.join(env.tmp, "read.tok"), os.path.join(env.tmp, "admin.tok")
    with open(read_tok, "w") as f:
        f.write("read-tok-k8s\n")
    with open(admin_tok, "w") as f:
        f.write("admin-tok-k8s\n")
    tcp = free_port()
    group = 4321
    env.cfg.update({"listen": "127.0.0.1:%d" % tcp, "tls_cert_file": cert, "tls_key_file": key,
                    "collector_token_file": read_tok, "admin_token_file": admin_tok,
                    "segment_group": str(group)})
    env.start_agent()
    env.ready()
    started = [l for l in env.log().splitlines() if "event=agent.started" in l]
    check("agent.started logs tls=on and the segment group",
          started and " tls=on " in started[0] and " segment_gid=%d " % group in started[0],
          started)
    st = os.stat(env.agent_sock)
    check("segment_group: the socket is root:%d mode 0660" % group,
          (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, group, 0o660),
          (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)))
    for d in (env.tmp, env.state):
        os.chmod(d, 0o755)
    put_pod_spec(env, "team-a", "run-as", {"runAsUser": 1000, "runAsGroup": 1000})
    a = env.kubelet.allocate("team-a", "run-as", "app", 1)
    path = os.path.join(seg_dir_of(a), os.path.basename(envs_of(a)["MICROVIEW_SEGMENT"]))

    def owned():
        s = os.stat(path)
        return (s.st_uid, s.st_gid, s.st_mode & 0o777) == (1000, group, 0o660)

    got = wait_until(owned, 5)
    s = os.stat(path)
    check("segment_group: the writer's file is 1000:%d mode 0660" % group, got,
          (s.st_uid, s.st_gid, oct(s.st_mode & 0o777)))

    def as_user(groups, *cmd):
        g = ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
        return subprocess.run(["setpriv", "--reuid", "5555", "--regid", "5555"] + g +
                              ["--inh-caps=-all", "--bounding-set=-all", "--"] + list(cmd),
                              capture_output=True, text=True, timeout=20)
    ctl = os.path.join(env.bin, "microviewctl")
    r = as_user([group], "dd", "if=" + path, "of=/dev/null", "bs=4096", "count=1")
    check("a non-root collector uid in the group reads the segment", r.returncode == 0, r.stderr)
    r = as_user([group], ctl, "list", "--agent", "unix:" + env.agent_sock)
    check("a non-root collector uid in the group lists over the socket",
          r.returncode == 0 and "1 segments" in r.stdout, r.stdout + r.stderr)
    r = as_user([], "dd", "if=" + path, "of=/dev/null", "bs=4096", "count=1")
    check("the same uid without the group cannot read the segment", r.returncode != 0)
    r = as_user([], ctl, "list", "--agent", "unix:" + env.agent_sock)
    check("the same uid without the group cannot connect to the socket", r.returncode != 0)

    tls = ["--agent", "127.0.0.1:%d" % tcp, "--agent-ca", ca, "--agent-server-name", "agent.test"]
    r = subprocess.run([ctl, "list"] + tls + ["--token-file", read_tok], capture_output=True,
                       text=True, timeout=20)
    check("TLS + read token: list OK", r.returncode == 0 and "1 segments" in r.stdout,
          r.stdout + r.stderr)
    r = subprocess.run([ctl, "list", "--agent", "127.0.0.1:%d" % tcp, "--token-file", read_tok],
                       capture_output=True, text=True, timeout=20)
    check("plaintext against the TLS listener: refused", r.returncode != 0, r.stdout)
    for tok in (read_tok, admin_tok):
        r = subprocess.run([ctl, "create"] + tls + ["--token-file", tok, "--size", "4096"],
                           capture_output=True, text=True, timeout=20)
        check("TCP create refused with the %s token, naming the page pool" %
              os.path.basename(tok).split(".")[0],
              r.returncode != 0 and "CreateSegment over TCP is refused" in r.stderr and
              "page pool" in r.stderr, r.stderr)
    sid = by_pod(env.catalog(), "team-a", "run-as", "app")["id"]
    r = subprocess.run([ctl, "release"] + tls + ["--token-file", read_tok, sid],
                       capture_output=True, text=True, timeout=20)
    check("read token: release refused naming the admin scope",
          r.returncode != 0 and "needs the admin scope" in r.stderr, r.stderr)
    check("the segment is still there", by_pod(env.catalog(), "team-a", "run-as", "app"))


SCENARIOS = {
    "register": sc_register,
    "allocate": sc_allocate,
    "prestart": sc_prestart,
    "writer": sc_writer,
    "kubelet_restart": sc_kubelet_restart,
    "agent_kill": sc_agent_kill,
    "gc": sc_gc,
    "pool": sc_pool,
    "api_down": sc_api_down,
    "rdma_required": sc_rdma_required,
    "rdma_optional": sc_rdma_optional,
    "pool_max": sc_pool_max,
    "nonroot": sc_nonroot,
    "ctlplane": sc_ctlplane,
}


def main():
    if len(sys.argv) != 3 or (sys.argv[2] not in SCENARIOS and sys.argv[2] != "all"):
        print("usage: %s BUILD_DIR {%s|all}" % (sys.argv[0], "|".join(SCENARIOS)))
        return 2
    build = os.path.abspath(sys.argv[1])
    names = list(SCENARIOS) if sys.argv[2] == "all" else [sys.argv[2]]
    skipped = 0
    for name in names:
        print("== %s" % name)
        env = Env(build)
        try:
            SCENARIOS[name](env)
        except Skip as e:
            print("SKIPPED %s: %s" % (name, e))
            skipped += 1
        except Exception:
            check("scenario %s ran without an exception" % name, False, traceback.format_exc())
        finally:
            env.close()
    print("%d passed, %d failed" % (R.passed, R.failed))
    if R.failed:
        return 1
    return SKIP if skipped and not R.passed else 0


if __name__ == "__main__":
    sys.exit(main())
