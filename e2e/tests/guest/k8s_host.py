#!/usr/bin/python3
"""Guest side of the Kubernetes-mode RDMA scenario, VM a ("host"): the agent as a kubelet
device plugin (against the stand-in kubelet and API server) exporting pod segments by RDMA
to the collector in VM b ("DPU").

Usage: k8s_host.py TOKEN_FILE CTL_PORT RDMA_PORT    (run by rdma_wire_k8s.sh, role a)

Steps, with the peer VM synchronised through flag files in $E2E_RUN:
  1. rxe0 removed, agent started with require_rdma: devices Unhealthy, Allocate refused;
  2. rxe0 created again: the agent's retry brings the RDMA target up, devices turn Healthy;
  3. two pods allocated, their containers write; PreStartContainer labels them without
     revoking their rkeys; b reads them by RDMA and compares values (freeze/compare);
  4. pod web-1 removed: GC releases its segment and revokes the rkey (b sees it go);
  5. agent killed with SIGKILL and restarted: it re-registers, devices Healthy again, b
     resyncs. Ends with "N passed, N failed".
"""
import json
import os
import signal
import subprocess
import sys
import time
import traceback

REPO = os.environ["REPO"]
BUILD = os.environ["BUILD"]
RUN = os.environ["E2E_RUN"]
IP = os.environ["E2E_SELF_IP"]
sys.path.insert(0, os.path.join(REPO, "e2e", "k8s"))
import test_k8s_agent as T  # noqa: E402

PAGES = T.PAGES


class Abort(Exception):
    pass


def log(msg):
    print("[a] %s" % msg, flush=True)


def flag(name):
    open(os.path.join(RUN, name), "w").close()


def await_flag(name, timeout=120):
    if not T.wait_until(lambda: os.path.exists(os.path.join(RUN, name)), timeout, 0.1):
        raise Abort("no %s from the DPU VM after %ds" % (name, timeout))


def rdma_link(*args):
    r = subprocess.run(["rdma", "link"] + list(args), capture_output=True, text=True)
    log("rdma link %s -> %d %s" % (" ".join(args), r.returncode, r.stderr.strip()))
    return r.returncode == 0


def count(env, event):
    return sum(1 for ln in env.log().splitlines() if "event=%s " % event in ln + " ")


def catalog_tcp(env, token_file, port):
    """The catalog as a remote operator sees it: microviewctl over TCP with the token."""
    r = subprocess.run([os.path.join(env.bin, "microviewctl"), "list", "--agent",
                        "%s:%d" % (IP, port), "--token-file", token_file, "--json"],
                       capture_output=True, text=True, timeout=20)
    return json.loads(r.stdout) if r.returncode == 0 else None


def scenario(env, token_file, ctl_port, rdma_port):
    check = T.check
    env.cfg.update({"listen": "%s:%d" % (IP, ctl_port), "insecure_listen": "true",
                    "rdma_listen": "%s:%d" % (IP, rdma_port),
                    "collector_token_file": token_file, "require_rdma": "true",
                    "rdma_retry_ms": "300"})
    # 1. No RDMA device yet.
    check("rxe0 removed before the agent starts", rdma_link("delete", "rxe0"))
    env.start_agent()
    check("agent registers with the kubelet", env.registered(timeout=30))
    check("require_rdma, no device: all devices Unhealthy",
          T.wait_until(lambda: T.devices_health(env) == (0, PAGES), 30), T.devices_health(env))
    refused = False
    try:
        env.kubelet.allocate("team-a", "web-9", "app", 1)
    except T.KubeletError as e:
        refused = True
        log("kubelet refused as expected: %s" % e)
    check("no pod is admitted while RDMA is down", refused)

    # 2. The device appears: the background retry brings the target up.
    check("rxe0 created again", rdma_link("add", "rxe0", "type", "rxe", "netdev", "eth0"))
    t0 = time.monotonic()
    ok = T.wait_until(lambda: T.devices_health(env) == (PAGES, 0), 30)
    check("devices turn Healthy once RDMA is up (%.1fs)" % (time.monotonic() - t0), ok,
          T.devices_health(env))
    check("rdma.ready logged", T.wait_until(lambda: env.log_has("rdma.ready"), 5))

    # 3. Two pods, their containers writing.
    env.put_pod("team-a", "web-0", annotations={"microview.io/labels": "app=checkout"})
    env.put_pod("team-a", "web-1", annotations={"microview.io/labels": "app=search"})
    a0 = env.kubelet.allocate("team-a", "web-0", "app", 4)
    a1 = env.kubelet.allocate("team-a", "web-1", "app", 2)
    gen = "--rate 200 --counters 2 --gauges 1 --histograms 1"
    w0 = T.start_container_writer(env, a0, gen, "writer-web-0")
    T.start_container_writer(env, a1, gen, "writer-web-1")

    def both_readable():
        cat = catalog_tcp(env, token_file, ctl_port)
        segs = [T.by_pod(cat, "team-a", p, "app") for p in ("web-0", "web-1")]
        return all(s and s["rdma"]["readable"] and s["rdma"]["rkey"] for s in segs)

    check("catalog over TCP (token): both pod segments RDMA-readable",
          T.wait_until(both_readable, 20), catalog_tcp(env, token_file, ctl_port))
    check("PreStartContainer labelled the segments without revoking their rkeys "
          "(registered=%d revoked=%d)" % (count(env, "segment.rdma_registered"),
                                          count(env, "segment.rdma_revoked")),
          count(env, "segment.rdma_registered") == 2 and
          count(env, "segment.rdma_revoked") == 0)
    flag("a.ready")

    # Freeze web-0's writer so that b compares a stable state.
    await_flag("b.freeze", 180)
    os.kill(w0.pid, signal.SIGSTOP)  # unshare execs sh, which execs gen: same pid
    time.sleep(0.5)
    seg0 = os.path.join(T.seg_dir_of(a0), "segment")
    with open(os.path.join(RUN, "dump-a.json"), "w") as f:
        r = subprocess.run([os.path.join(env.bin, "microviewctl"), "dump", "--json", seg0],
                           stdout=f, timeout=20)
    check("dumped web-0's segment", r.returncode == 0)
    flag("a.frozen")
    await_flag("b.compared")
    os.kill(w0.pid, signal.SIGCONT)

    # 4. Pod web-1 goes away: the kubelet forgets it, GC releases and revokes.
    env.kubelet.remove_pod("team-a", "web-1")
    check("GC collects web-1's segment",
          T.wait_until(lambda: env.log_has("segment.collected"), 15))
    check("its rkey is revoked", T.wait_until(lambda: count(env, "segment.rdma_revoked") == 1, 5))
    flag("a.released")

    # 5. Agent killed hard and restarted on the same state.
    await_flag("b.release_checked")
    rc = env.stop_agent(signal.SIGKILL)
    log("agent killed (rc=%s)" % rc)
    flag("a.killed")
    await_flag("b.killed_seen")
    env.start_agent()
    check("restarted agent registers again", env.registered(count=2, timeout=30))
    check("restarted agent: devices Healthy (RDMA up at start)",
          T.wait_until(lambda: T.devices_health(env) == (PAGES, 0), 20), T.devices_health(env))
    check("restarted agent re-registered web-0's segment for RDMA",
          T.wait_until(lambda: count(env, "segment.rdma_registered") >= 3, 10))
    flag("a.restarted")
    await_flag("b.done", 150)


def main():
    token_file, ctl_port, rdma_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = T.Env(BUILD)
    try:
        scenario(env, token_file, ctl_port, rdma_port)
    except Abort as e:
        T.check("scenario completed", False, str(e))
    except Exception:
        T.check("scenario ran without an exception", False, traceback.format_exc())
    finally:
        # Stops the agent with SIGTERM and checks a clean exit (and no sanitizer report).
        env.close()
    print("k8s_host: %d passed, %d failed" % (T.R.passed, T.R.failed))
    return 1 if T.R.failed else 0


if __name__ == "__main__":
    sys.exit(main())
