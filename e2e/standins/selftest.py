#!/usr/bin/python3
"""Self-test of the kubelet and API server stand-ins, driven by a minimal Python device plugin."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "lib"))
import protogen  # noqa: E402
from mvtest import Report, wait_until  # noqa: E402
import fake_kubelet  # noqa: E402
from fake_kubelet import FakeKubelet, KubeletError  # noqa: E402

dp, dp_grpc, pr, pr_grpc = protogen.load()

RESOURCE = "microview.io/metrics-page"
R = Report()
check = R.check


class TestPlugin(dp_grpc.DevicePluginServicer):
    """A minimal device plugin: N virtual devices, records every call it receives.

    It re-registers when its socket disappears (the kubelet-restart signal), polling lstat.
    """

    def __init__(self, plugin_dir, endpoint, n_devices, podres_socket=None, preferred=False):
        self.dir = plugin_dir
        self.endpoint = endpoint
        self.path = os.path.join(plugin_dir, endpoint)
        self.podres_socket = podres_socket
        self.preferred = preferred
        self.cond = threading.Condition()
        self.devices = {str(i): fake_kubelet.HEALTHY for i in range(n_devices)}
        self.version = 0
        self.register_in_flight = False
        self.options_calls = []  # True for each call that arrived while Register was in flight
        self.register_results = []
        self.allocate_calls = []  # lists of container requests (each a list of IDs)
        self.prestart_calls = []
        self.prestart_seen_in_list = []  # did PodResources List show the IDs at PreStart time?
        self.preferred_calls = []
        self.server = None
        self.stopping = False
        self.watcher = None

    # DevicePlugin service
    def GetDevicePluginOptions(self, request, context):
        with self.cond:
            self.options_calls.append(self.register_in_flight)
        return dp.DevicePluginOptions(pre_start_required=True,
                                      get_preferred_allocation_available=self.preferred)

    def ListAndWatch(self, request, context):
        sent = -1
        while context.is_active() and not self.stopping:
            with self.cond:
                if sent == self.version:
                    self.cond.wait(0.1)
                    continue
                sent = self.version
                devs = [dp.Device(ID=i, health=h, topology=dp.TopologyInfo(
                    nodes=[dp.NUMANode(ID=0)])) for i, h in sorted(self.devices.items())]
            yield dp.ListAndWatchResponse(devices=devs)

    def GetPreferredAllocation(self, request, context):
        out = []
        for cr in request.container_requests:
            with self.cond:
                self.preferred_calls.append(list(cr.available_deviceIDs))
            ids = list(cr.available_deviceIDs)[-cr.allocation_size:]  # prefer the last ones
            out.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request, context):
        reqs = [list(c.devices_ids) for c in request.container_requests]
        with self.cond:
            self.allocate_calls.append(reqs)
        resps = []
        for ids in reqs:
            r = dp.ContainerAllocateResponse()
            r.envs["METRICS_SHM_ID"] = ",".join(ids)
            r.mounts.append(dp.Mount(container_path="/var/run/microview",
                                     host_path="/run/microview/slots/" + ids[0]))
            resps.append(r)
        return dp.AllocateResponse(container_responses=resps)

    def PreStartContainer(self, request, context):
        ids = list(request.devices_ids)
        seen = None
        if self.podres_socket:  # what the real agent does here: find the owner of these IDs
            with grpc.insecure_channel("unix:" + self.podres_socket) as ch:
                resp = pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest(),
                                                                timeout=5)
            seen = any(set(ids) <= set(d.device_ids) for p in resp.pod_resources
                       for c in p.containers for d in c.devices if d.resource_name == RESOURCE)
        with self.cond:
            self.prestart_calls.append(ids)
            self.prestart_seen_in_list.append(seen)
        return dp.PreStartContainerResponse()

    # plugin lifecycle
    def set_health(self, dev, health):
        with self.cond:
            self.devices[dev] = health
            self.version += 1
            self.cond.notify_all()

    def serve(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dp_grpc.add_DevicePluginServicer_to_server(self, srv)
        srv.add_insecure_port("unix:" + self.path)
        srv.start()
        self.server = srv

    def register(self, version="v1beta1", resource=RESOURCE, timeout=15):
        with self.cond:
            self.register_in_flight = True
        try:
            with grpc.insecure_channel("unix:" + os.path.join(self.dir, "kubelet.sock")) as ch:
                dp_grpc.RegistrationStub(ch).Register(dp.RegisterRequest(
                    version=version, endpoint=self.endpoint, resource_name=resource,
                    options=dp.DevicePluginOptions(pre_start_required=True,
                                                   get_preferred_allocation_available=
                                                   self.preferred)), timeout=timeout)
            err = None
        except grpc.RpcError as e:
            err = "%s: %s" % (e.code().name, e.details())
        with self.cond:
            self.register_in_flight = False
            self.register_results.append(err)
        return err

    def start(self):
        self.serve()
        err = self.register()
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()
        return err

    def _watch(self):
        while not self.stopping:
            if not os.path.exists(self.path):
                self.server.stop(None)
                self.serve()
                deadline = time.monotonic() + 15
                while not self.stopping and time.monotonic() < deadline:
                    if self.register(timeout=5) is None:
                        break
                    time.sleep(0.05)
            time.sleep(0.02)

    def stop(self):
        self.stopping = True
        with self.cond:
            self.cond.notify_all()
        if self.watcher:
            self.watcher.join(5)
        if self.server:
            self.server.stop(None).wait(5)


def scenario_in_process(tmp):
    plugin_dir = os.path.join(tmp, "device-plugins")
    podres_dir = os.path.join(tmp, "pod-resources")
    kl = FakeKubelet(plugin_dir, podres_dir, dial_timeout=5).start()
    plugin = None
    try:
        check("kubelet.sock served", os.path.exists(kl.kubelet_socket))
        check("checkpoint file present",
              os.path.exists(os.path.join(plugin_dir, fake_kubelet.CHECKPOINT)))

        bad = TestPlugin(plugin_dir, "bad.sock", 1)
        bad.serve()
        err = bad.register(version="v1alpha1")
        check("wrong version rejected", err is not None and "version" in err, err)
        err = bad.register(resource="kubernetes.io/metrics")
        check("kubernetes.io resource rejected", err is not None and "reserved" in err, err)
        err = bad.register(resource="no-domain")
        check("resource without domain rejected", err is not None, err)
        check("no dial-back for rejected registrations", bad.options_calls == [],
              bad.options_calls)
        bad.stop()

        # A plugin that registers before its own server listens cannot be dialled back.
        kl.dial_timeout = 1.0
        early = TestPlugin(plugin_dir, "not-serving.sock", 1)
        t0 = time.monotonic()
        err = early.register()
        check("register fails when the plugin is not serving",
              err is not None and "failed to connect" in err and time.monotonic() - t0 < 10, err)
        kl.dial_timeout = 5.0

        plugin = TestPlugin(plugin_dir, "microview.sock", 4, kl.podres_socket, preferred=True)
        err = plugin.start()
        check("register accepted", err is None, err)
        check("GetDevicePluginOptions called before Register returned",
              plugin.options_calls[:1] == [True], plugin.options_calls)
        st = kl.state()
        reg = [r for r in st["registrations"] if r["accepted"]]
        check("registration recorded with options",
              len(reg) == 1 and reg[0]["resource"] == RESOURCE and
              reg[0]["plugin_options"].get("pre_start_required") is True, reg)

        check("ListAndWatch devices seen", kl.wait_devices(RESOURCE, 4, 10),
              kl.state()["resources"])
        st = kl.state()["resources"][RESOURCE]
        check("device topology kept", st["devices"]["0"]["numa"] == [0], st["devices"])

        plugin.set_health("3", fake_kubelet.UNHEALTHY)
        check("health update seen", kl.wait_devices(RESOURCE, 3, 10),
              kl.state()["resources"][RESOURCE]["devices"])

        res = kl.allocate("team-a", "web-0", "app", 2, uid="uid-web-0")
        ids = res["devices"]
        check("allocate picked 2 healthy devices",
              len(ids) == 2 and "3" not in ids and len(set(ids)) == 2, res)
        check("GetPreferredAllocation asked with healthy free devices",
              plugin.preferred_calls == [["0", "1", "2"]], plugin.preferred_calls)
        check("preferred allocation honoured", sorted(ids) == ["1", "2"], ids)
        check("Allocate called once with one container request",
              plugin.allocate_calls == [[ids]], plugin.allocate_calls)
        check("PreStartContainer called with the same IDs", plugin.prestart_calls == [ids],
              plugin.prestart_calls)
        check("assignment visible in List during PreStartContainer",
              plugin.prestart_seen_in_list == [True], plugin.prestart_seen_in_list)
        check("Allocate response returned", res["response"].get("envs", {}).get(
            "METRICS_SHM_ID") == ",".join(ids) and res["prestart"] is True, res)

        with grpc.insecure_channel("unix:" + kl.podres_socket) as ch:
            stub = pr_grpc.PodResourcesListerStub(ch)
            lst = stub.List(pr.ListPodResourcesRequest(), timeout=5)
            pods = [(p.namespace, p.name, c.name, d.resource_name, list(d.device_ids))
                    for p in lst.pod_resources for c in p.containers for d in c.devices]
            check("PodResources List shows the assignment",
                  pods == [("team-a", "web-0", "app", RESOURCE, ids)], pods)
            got = stub.Get(pr.GetPodResourcesRequest(pod_name="web-0", pod_namespace="team-a"),
                           timeout=5)
            check("PodResources Get finds the pod", got.pod_resources.name == "web-0" and
                  list(got.pod_resources.containers[0].devices[0].device_ids) == ids)
            try:
                stub.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="team-a"),
                         timeout=5)
                check("PodResources Get unknown pod fails", False)
            except grpc.RpcError as e:
                check("PodResources Get unknown pod fails", "not found" in (e.details() or ""))
            alloc = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
            check("GetAllocatableResources lists every device",
                  sorted(i for d in alloc.devices for i in d.device_ids) == ["0", "1", "2", "3"])

        try:
            kl.allocate("team-b", "db-0", "main", 2)
            check("over-allocation refused", False)
        except KubeletError as e:
            check("over-allocation refused", "1 healthy and free" in str(e), str(e))
        check("refused allocation made no Allocate call", len(plugin.allocate_calls) == 1)
        res2 = kl.allocate("team-b", "db-0", "main", 1)
        check("last free device allocated", res2["devices"] == ["0"], res2)

        rc = kl.restart_container("team-a", "web-0", "app")
        check("container restart: PreStartContainer again, no Allocate",
              plugin.prestart_calls[-1] == ids and len(plugin.allocate_calls) == 2, rc)

        check("remove_pod frees devices", kl.remove_pod("team-a", "web-0") == 2)
        with grpc.insecure_channel("unix:" + kl.podres_socket) as ch:
            lst = pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest(), timeout=5)
        check("List no longer shows the removed pod",
              [(p.namespace, p.name) for p in lst.pod_resources] == [("team-b", "db-0")])

        out = kl.restart(timeout=20)
        check("restart: plugin re-registered", out["seconds"] is not None and
              out["missing"] == [], out)
        print("info: re-registration after kubelet restart took %ss" % out["seconds"])
        check("restart deleted the plugin socket but kept the checkpoint",
              "microview.sock" in out["removed"] and os.path.exists(kl.kubelet_socket) and
              os.path.exists(os.path.join(plugin_dir, fake_kubelet.CHECKPOINT)), out)
        check("re-registration dialled back during Register",
              len(plugin.options_calls) == 2 and plugin.options_calls[1] is True,
              plugin.options_calls)
        check("devices healthy again after re-registration", kl.wait_devices(RESOURCE, 3, 10),
              kl.state()["resources"][RESOURCE])
        with grpc.insecure_channel("unix:" + kl.podres_socket) as ch:
            lst = pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest(), timeout=5)
        check("assignments survive the restart",
              [(p.name, list(p.containers[0].devices[0].device_ids))
               for p in lst.pod_resources] == [("db-0", ["0"])])

        plugin.stop()
        check("ListAndWatch end marks devices unhealthy", kl.wait_devices(RESOURCE, 0, 10),
              kl.state()["resources"][RESOURCE])
        try:
            kl.allocate("team-c", "x", "c", 1)
            check("no allocation from a disconnected plugin", False)
        except KubeletError:
            check("no allocation from a disconnected plugin", True)
    finally:
        if plugin:
            plugin.stop()
        kl.stop()


def scenario_cli_kubelet(tmp):
    plugin_dir = os.path.join(tmp, "dp2")
    podres_dir = os.path.join(tmp, "pr2")
    control = os.path.join(tmp, "kubelet-control.sock")
    ready = os.path.join(tmp, "kubelet.ready")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_kubelet.py"), "serve",
                             "--dir", plugin_dir, "--podres-dir", podres_dir,
                             "--control", control, "--ready-file", ready])
    plugin = None
    try:
        if not check("CLI kubelet became ready", wait_until(lambda: os.path.exists(ready), 30)):
            return
        plugin = TestPlugin(plugin_dir, "p.sock", 2, os.path.join(podres_dir, "kubelet.sock"))
        check("CLI: register accepted", plugin.start() is None, plugin.register_results)
        call = fake_kubelet.call
        check("CLI: wait_devices", call(control, "wait_devices", resource=RESOURCE, healthy=2,
                                        timeout=10)["ok"])
        res = call(control, "allocate", namespace="ns", pod="p", container="c", count=1)
        check("CLI: allocate → Allocate + PreStartContainer",
              plugin.allocate_calls == [[res["devices"]]] and
              plugin.prestart_calls == [res["devices"]], (res, plugin.allocate_calls))
        st = call(control, "state")
        check("CLI: state shows the allocation",
              [a["pod"] for a in st["allocations"]] == ["p"], st["allocations"])
        try:
            call(control, "allocate", namespace="ns", pod="p", container="c", count=1)
            check("CLI: errors come back as errors", False)
        except KubeletError as e:
            check("CLI: errors come back as errors", "already holds" in str(e), str(e))
        out = call(control, "restart", timeout=20)
        check("CLI: restart re-registration", out["seconds"] is not None, out)
        call(control, "shutdown")
        check("CLI kubelet exits cleanly", proc.wait(15) == 0)
    finally:
        if plugin:
            plugin.stop()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def http(url, token=None, method="GET", body=None):
    req = urllib.request.Request(url, method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def scenario_apiserver(tmp):
    token_file = os.path.join(tmp, "token")
    state_file = os.path.join(tmp, "pods.json")
    port_file = os.path.join(tmp, "apiserver.port")
    with open(token_file, "w") as f:
        f.write("s3cret-token\n")
    with open(state_file, "w") as f:
        json.dump({"pods": [{"namespace": "team-a", "name": "web-0", "uid": "uid-web-0",
                             "labels": {"app": "web"},
                             "annotations": {"microview.io/metrics-memory": "64Ki"},
                             "nodeName": "node-1"}]}, f)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_apiserver.py"),
                             "--token-file", token_file, "--state", state_file,
                             "--port-file", port_file], stdout=subprocess.DEVNULL)
    try:
        if not check("API server wrote its port", wait_until(lambda: os.path.exists(port_file),
                                                             30)):
            return
        with open(port_file) as f:
            base = "http://127.0.0.1:%d" % int(f.read())
        pod_url = base + "/api/v1/namespaces/team-a/pods/web-0"
        code, pod = http(pod_url, "s3cret-token")
        md = (pod or {}).get("metadata", {})
        check("GET pod with token", code == 200 and md.get("uid") == "uid-web-0" and
              md.get("labels") == {"app": "web"} and
              md.get("annotations", {}).get("microview.io/metrics-memory") == "64Ki" and
              pod.get("spec", {}).get("nodeName") == "node-1" and pod.get("kind") == "Pod",
              (code, pod))
        code, body = http(pod_url)
        check("401 without a token", code == 401 and body.get("reason") == "Unauthorized",
              (code, body))
        code, _ = http(pod_url, "wrong")
        check("401 with a wrong token", code == 401)
        code, body = http(base + "/api/v1/namespaces/team-a/pods/nope", "s3cret-token")
        check("404 for an unknown pod", code == 404 and body.get("reason") == "NotFound",
              (code, body))
        code, _ = http(base + "/_control/unavailable", method="POST",
                       body={"enabled": True, "status": 503})
        code2, body = http(pod_url, "s3cret-token")
        check("503 switch on", code == 200 and code2 == 503, (code, code2, body))
        http(base + "/_control/unavailable", method="POST", body={"enabled": False})
        check("503 switch off", http(pod_url, "s3cret-token")[0] == 200)
        code, _ = http(base + "/_control/pods", method="POST",
                       body={"namespace": "team-b", "name": "db-0", "nodeName": "node-2"})
        code2, pod = http(base + "/api/v1/namespaces/team-b/pods/db-0", "s3cret-token")
        check("control call adds a pod", code == 201 and code2 == 200 and
              pod["metadata"]["uid"], (code, code2))
        code, lst = http(base + "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1",
                         "s3cret-token")
        check("node-filtered pod list", code == 200 and
              [p["metadata"]["name"] for p in lst["items"]] == ["web-0"], lst)
        with open(token_file, "w") as f:
            f.write("rotated\n")
        check("token file re-read (rotation)", http(pod_url, "s3cret-token")[0] == 401 and
              http(pod_url, "rotated")[0] == 200)
        with open(state_file, "w") as f:
            json.dump({"pods": []}, f)
        os.utime(state_file, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        check("state file reload drops its pods", http(pod_url, "rotated")[0] == 404 and
              http(base + "/api/v1/namespaces/team-b/pods/db-0", "rotated")[0] == 200)
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    tmp = tempfile.mkdtemp(prefix="mv-standins-")
    try:
        for scenario in (scenario_in_process, scenario_cli_kubelet, scenario_apiserver):
            try:
                scenario(tmp)
            except Exception:  # noqa: BLE001 - a crash is a failed check, then carry on
                traceback.print_exc()
                check(scenario.__name__ + " ran to the end", False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (R.passed, R.failed))
    return 1 if R.failed else 0


if __name__ == "__main__":
    sys.exit(main())
