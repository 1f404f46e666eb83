#!/usr/bin/python3
"""Cross-language end to end: a Go service (client_golang code on writers/go/prometheus) and a
Python service (prometheus_client-style code on writers/python), each started as a container
of a pod: the agent (Kubernetes mode, stand-in kubelet and API server) allocates a segment,
the service runs in its own mount namespace with the allocated directory bind-mounted at the
container path and only the env Allocate returned. The shm collector must serve both
services' series with namespace/pod/container labels and exactly the values they wrote.

Usage: e2e.py BUILD_DIR GOSERVICE_BIN PYTHON_SITE_DIR    (root; exit 77 when it cannot run)
"""
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "e2e", "k8s"))
import test_k8s_agent as k8s  # noqa: E402

CONTAINER_PATH = k8s.CONTAINER_PATH


def start_container(env, alloc, name, argv, extra_env=None):
    """Runs argv as a container would: private /run, the allocated host directory
    bind-mounted at the container path, exactly the env Allocate returned (plus extra_env)."""
    script = ('set -e; mount -t tmpfs mvk8s /run; mkdir -p "$CPATH"; '
              'mount --bind "$HOSTDIR" "$CPATH"; unset CPATH HOSTDIR; exec "$@"')
    cenv = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CPATH": CONTAINER_PATH,
            "HOSTDIR": k8s.seg_dir_of(alloc)}
    cenv.update(k8s.envs_of(alloc))
    cenv.update(extra_env or {})
    log = open(os.path.join(env.tmp, name + ".log"), "w")
    p = env.spawn(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"] +
                  argv, env=cenv, stdout=log, stderr=log)
    log.close()
    return p


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(body):
    out = []
    for line in body.splitlines():
        m = SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def value(ss, name, **labels):
    for n, ls, v in ss:
        if n == name and all(ls.get(k) == w for k, w in labels.items()):
            return v
    return None


GO_ID = {"namespace": "team-a", "pod": "go-0", "container": "api", "app": "shop"}
PY_ID = {"namespace": "team-b", "pod": "py-0", "container": "worker", "app": "search"}
# What each service wrote (tests/writers/goservice/main.go, tests/writers/pyservice.py).
EXPECT = (("Go", GO_ID, {"req": 42, "inflight": 7.5, "count": 6, "sum": 6.15,
                         "b01": 3, "b1": 5, "inf": 6}),
          ("Python", PY_ID, {"req": 51, "inflight": 2.25, "count": 2, "sum": 0.55,
                             "b01": 1, "b1": 2, "inf": 2}))
SERIES = {"req": ("svc_requests_total", {"route": "/cart"}),
          "inflight": ("svc_inflight", {}),
          "count": ("svc_latency_seconds_count", {}),
          "sum": ("svc_latency_seconds_sum", {}),
          "b01": ("svc_latency_seconds_bucket", {"le": "0.1"}),
          "b1": ("svc_latency_seconds_bucket", {"le": "1"}),
          "inf": ("svc_latency_seconds_bucket", {"le": "+Inf"})}


def matches(got, want):
    return all(got[k] is not None and abs(got[k] - want[k]) < 1e-9 for k in want)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    build, gobin, pysite = (os.path.abspath(a) for a in sys.argv[1:])
    if os.geteuid() != 0:
        print("SKIPPED: needs root for unshare --mount and bind mounts")
        return 77
    if not shutil.which("unshare"):
        print("SKIPPED: unshare (util-linux) not installed")
        return 77
    env = k8s.Env(build)
    try:
        env.start_agent()
        k8s.check("agent registered with the stand-in kubelet", env.ready())
        env.put_pod("team-a", "go-0", annotations={"microview.io/labels": "app=shop"})
        env.put_pod("team-b", "py-0", annotations={"microview.io/labels": "app=search"})
        a_go = env.kubelet.allocate("team-a", "go-0", "api", 4)
        a_py = env.kubelet.allocate("team-b", "py-0", "worker", 4)
        k8s.check("Allocate gave MICROVIEW_SEGMENT at the container path",
                  k8s.envs_of(a_go).get("MICROVIEW_SEGMENT", "").startswith(CONTAINER_PATH), a_go)
        port = k8s.free_port()
        clog = open(os.path.join(env.tmp, "collector.log"), "w")
        env.spawn([os.path.join(env.bin, "microview-collector"), "--agent",
                   "unix:" + env.agent_sock, "--listen", "127.0.0.1:%d" % port, "--tick-ms", "20"],
                  stdout=clog, stderr=clog)
        clog.close()
        ready_go = os.path.join(env.tmp, "go.ready")
        ready_py = os.path.join(env.tmp, "py.ready")
        pg = start_container(env, a_go, "goservice", [gobin, ready_go])
        pp = start_container(env, a_py, "pyservice",
                             ["/usr/bin/python3", os.path.join(HERE, "pyservice.py"), ready_py],
                             {"PYTHONPATH": pysite})
        up = k8s.wait_until(lambda: os.path.exists(ready_go) and os.path.exists(ready_py), 30)
        logs = "".join(open(os.path.join(env.tmp, n + ".log")).read()[-1500:]
                       for n in ("goservice", "pyservice"))
        k8s.check("both services wrote their values and are running",
                  up and pg.poll() is None and pp.poll() is None, logs)
        url = "http://127.0.0.1:%d/metrics" % port

        def snapshot():
            ss = samples(k8s.fetch(url))
            got = {}
            for who, ident, want in EXPECT:
                got[who] = {k: value(ss, name, **dict(ident, **extra))
                            for k, (name, extra) in SERIES.items()}
            return ss, got

        def all_match():
            ss, got = snapshot()
            return all(matches(got[who], want) for who, _, want in EXPECT)

        k8s.wait_until(all_match, timeout=20)
        ss, got = snapshot()
        body = k8s.fetch(url)
        for who, ident, want in EXPECT:
            k8s.check("%s service: collector serves its counter, gauge and histogram with "
                      "namespace/pod/container/app labels and the values it wrote" % who,
                      matches(got[who], want), "got %s want %s\n%s" % (got[who], want, body[-3000:]))
        cross = [s for s in ss if s[0].startswith("svc_") and s[1].get("pod") == "go-0" and
                 s[1].get("namespace") != "team-a"]
        k8s.check("no series carries another pod's identity", not cross, cross)
    finally:
        env.close()
    print("%d passed, %d failed" % (k8s.R.passed, k8s.R.failed))
    return 1 if k8s.R.failed else 0


if __name__ == "__main__":
    sys.exit(main())
