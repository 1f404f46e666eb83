#!/usr/bin/python3
"""Stand-in kubelet for tests: device-plugin registration, plugin calls, PodResources List."""

import argparse
import json
import os
import re
import signal
import socketserver
import stat
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import json_format

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protogen  # noqa: E402

dp, dp_grpc, pr, pr_grpc = protogen.load()

VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT = "kubelet_internal_checkpoint"
PRESTART_TIMEOUT_S = 30.0  # the kubelet's deadline for PreStartContainer
MAX_CONTROL_LINE = 1 << 20  # longest control request accepted
MAX_RECORDS = 10000  # cap on each recorded history list

_QNAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class KubeletError(Exception):
    """A control request the stand-in could not carry out."""


def log(component, msg, **kv):
    """Writes one logfmt line to stderr."""
    parts = ["ts=%.3f" % time.time(), "component=" + component, "msg=" + json.dumps(msg)]
    for k, v in kv.items():
        s = str(v)
        parts.append("%s=%s" % (k, json.dumps(s) if (not s or re.search(r'[\s"=]', s)) else s))
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()


def validate_resource_name(name):
    """Returns None if name is an extended resource name the kubelet accepts, else why not."""
    if name.count("/") != 1:
        return "resource name %r is not of the form <domain>/<name>" % name
    domain, short = name.split("/")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "resource name %r is in the reserved kubernetes.io domain" % name
    if domain.startswith("requests."):
        return "resource name %r must not start with 'requests.'" % name
    if not short or len(short) > 63 or not _QNAME.match(short):
        return "resource name %r: %r is not a valid qualified name" % (name, short)
    if len(domain) > 253 or not all(_DNS1123_LABEL.match(p) for p in domain.split(".")):
        return "resource name %r: %r is not a DNS subdomain" % (name, domain)
    return None


def _msg_dict(m):
    return json_format.MessageToDict(m, preserving_proto_field_name=True)


class _Plugin:
    """The kubelet's view of one registered device plugin endpoint."""

    def __init__(self, resource, endpoint, socket_path, channel, options):
        self.resource = resource
        self.endpoint = endpoint
        self.socket_path = socket_path
        self.channel = channel
        self.stub = dp_grpc.DevicePluginStub(channel)
        self.options = options  # DevicePluginOptions from GetDevicePluginOptions
        self.call = None  # the ListAndWatch stream
        self.closing = False
        self.connected = True
        self.updates = 0
        self.lw_error = None


class FakeKubelet:
    """A kubelet device manager and PodResources server reduced to what a device plugin sees.

    Python API for tests in the same process; serve() in this file adds a JSON-lines control
    socket for tests in other processes. All methods are thread-safe.
    """

    def __init__(self, plugin_dir, podres_dir=None, dial_timeout=10.0, rpc_timeout=60.0):
        self.plugin_dir = os.path.abspath(plugin_dir)
        self.podres_dir = os.path.abspath(podres_dir) if podres_dir else None
        self.dial_timeout = dial_timeout
        self.rpc_timeout = rpc_timeout  # the real kubelet sets none on Allocate; tests need one
        self._cond = threading.Condition()
        self._alloc_lock = threading.Lock()  # admission is serialised, as in the kubelet
        self._resources = {}  # name -> {"plugin": _Plugin|None, "devices": {id: {...}}}
        self._registrations = []  # every Register call, accepted or not
        self._allocations = []  # dicts, in admission order
        self._calls = []  # RPCs this kubelet made to plugins
        self._podres_calls = {"List": 0, "Get": 0, "GetAllocatableResources": 0}
        self._restarts = []
        self._reg_server = None
        self._podres_server = None

    # ---- lifecycle ----------------------------------------------------------------------

    @property
    def kubelet_socket(self):
        return os.path.join(self.plugin_dir, KUBELET_SOCKET)

    @property
    def podres_socket(self):
        return os.path.join(self.podres_dir, KUBELET_SOCKET) if self.podres_dir else None

    def start(self):
        os.makedirs(self.plugin_dir, exist_ok=True)
        ckpt = os.path.join(self.plugin_dir, CHECKPOINT)
        if not os.path.exists(ckpt):
            with open(ckpt, "w") as f:
                f.write("{}\n")  # placeholder only: its content is not the kubelet's format
        if self.podres_dir:
            os.makedirs(self.podres_dir, exist_ok=True)
        self._start_servers()
        return self

    def stop(self):
        self._stop_servers()
        with self._cond:
            plugins = [r["plugin"] for r in self._resources.values() if r["plugin"]]
        for p in plugins:
            self._close_plugin(p)

    def _start_servers(self):
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), srv)
        if srv.add_insecure_port("unix:" + self.kubelet_socket) == 0:
            raise KubeletError("cannot listen on " + self.kubelet_socket)
        srv.start()
        self._reg_server = srv
        if self.podres_dir:
            psrv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), psrv)
            if psrv.add_insecure_port("unix:" + self.podres_socket) == 0:
                raise KubeletError("cannot listen on " + self.podres_socket)
            psrv.start()
            self._podres_server = psrv
        log("fake-kubelet", "serving", socket=self.kubelet_socket,
            podresources=self.podres_socket or "")

    def _stop_servers(self):
        for srv in (self._reg_server, self._podres_server):
            if srv is not None:
                srv.stop(grace=None).wait(5)
        self._reg_server = self._podres_server = None

    # ---- registration and plugin connections --------------------------------------------

    def _register(self, request, context):
        rec = {
            "resource": request.resource_name,
            "version": request.version,
            "endpoint": request.endpoint,
            "request_options": _msg_dict(request.options),
            "accepted": False,
            "error": None,
            "t": time.time(),
        }
        err = None
        if request.version != VERSION:
            err = "unsupported device plugin API version %r (supported: %s)" % (
                request.version, VERSION)
        if err is None:
            err = validate_resource_name(request.resource_name)
        plugin = None
        if err is None:
            try:
                plugin = self._connect(request)
            except Exception as e:  # noqa: BLE001 - reported to the plugin as the kubelet does
                err = "failed to connect to device plugin %r: %s" % (request.endpoint, e)
        if plugin is not None:
            rec["accepted"] = True
            rec["plugin_options"] = _msg_dict(plugin.options)
            self._install(plugin)
        rec["error"] = err
        with self._cond:
            self._registrations.append(rec)
            del self._registrations[:-MAX_RECORDS]
            self._cond.notify_all()
        log("fake-kubelet", "register", resource=request.resource_name,
            endpoint=request.endpoint, accepted=rec["accepted"], error=err or "")
        if err is not None:
            context.abort(grpc.StatusCode.UNKNOWN, err)
        return dp.Empty()

    def _connect(self, request):
        """Dials the plugin and calls GetDevicePluginOptions, all before Register answers."""
        path = os.path.join(self.plugin_dir, request.endpoint)
        channel = grpc.insecure_channel("unix:" + path,
                                        options=[("grpc.default_authority", "localhost")])
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout)
            stub = dp_grpc.DevicePluginStub(channel)
            opts = stub.GetDevicePluginOptions(dp.Empty(), timeout=self.dial_timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise KubeletError("dial %s timed out after %.0fs" % (path, self.dial_timeout))
        except grpc.RpcError as e:
            channel.close()
            raise KubeletError("GetDevicePluginOptions: %s %s" % (e.code().name, e.details()))
        with self._cond:
            self._calls.append({"rpc": "GetDevicePluginOptions", "resource": request.resource_name,
                                "t": time.time()})
        return _Plugin(request.resource_name, request.endpoint, path, channel, opts)

    def _install(self, plugin):
        with self._cond:
            res = self._resources.setdefault(plugin.resource, {"plugin": None, "devices": {}})
            old = res["plugin"]
            res["plugin"] = plugin
            self._cond.notify_all()
        if old is not None:
            self._close_plugin(old)
        threading.Thread(target=self._list_and_watch, args=(plugin,), daemon=True,
                         name="lw-" + plugin.resource).start()

    def _list_and_watch(self, plugin):
        err = None
        try:
            call = plugin.stub.ListAndWatch(dp.Empty())
            with self._cond:
                plugin.call = call
                if plugin.closing:
                    call.cancel()
            for resp in call:
                devs = {}
                for d in resp.devices:
                    devs[d.ID] = {"health": d.health,
                                  "numa": [n.ID for n in d.topology.nodes]}
                with self._cond:
                    if self._resources[plugin.resource]["plugin"] is plugin:
                        self._resources[plugin.resource]["devices"] = devs
                    plugin.updates += 1
                    self._cond.notify_all()
                log("fake-kubelet", "devices", resource=plugin.resource, count=len(devs),
                    healthy=sum(1 for v in devs.values() if v["health"] == HEALTHY))
        except grpc.RpcError as e:
            err = "%s %s" % (e.code().name, e.details())
        with self._cond:
            plugin.connected = False
            plugin.lw_error = err or "stream ended"
            if not plugin.closing:
                # As the kubelet does when ListAndWatch ends: devices stay known but unhealthy.
                res = self._resources.get(plugin.resource)
                if res and res["plugin"] is plugin:
                    for d in res["devices"].values():
                        d["health"] = UNHEALTHY
            self._cond.notify_all()
        if not plugin.closing:
            log("fake-kubelet", "ListAndWatch ended unexpectedly", resource=plugin.resource,
                error=plugin.lw_error)

    def _close_plugin(self, plugin):
        with self._cond:
            plugin.closing = True
            call = plugin.call
        if call is not None:
            call.cancel()
        plugin.channel.close()

    # ---- the test-facing API -------------------------------------------------------------

    def _resolve(self, resource):
        if resource is None:
            names = [n for n, r in self._resources.items() if r["plugin"] is not None]
            if len(names) != 1:
                raise KubeletError("name the resource: %d are registered" % len(names))
            resource = names[0]
        res = self._resources.get(resource)
        if res is None or res["plugin"] is None:
            raise KubeletError("resource %r has no registered plugin" % resource)
        return resource, res

    def _find_alloc(self, namespace, pod, container, resource=None):
        for a in self._allocations:
            if (a["namespace"], a["pod"], a["container"]) == (namespace, pod, container) and \
                    (resource is None or a["resource"] == resource):
                return a
        return None

    def allocate(self, namespace, pod, container, count, uid="", resource=None):
        """Admits one container asking for `count` devices, the way the kubelet does.

        Picks healthy unassigned devices (asking GetPreferredAllocation first if the plugin
        offers it), calls Allocate with one ContainerAllocateRequest, records the assignment
        (so PodResources List shows it), then calls PreStartContainer if the plugin asked for
        it. Returns {"resource", "devices", "response", "prestart"}. Raises KubeletError.
        """
        if int(count) < 1:
            raise KubeletError("count must be at least 1")
        count = int(count)
        with self._alloc_lock:
            with self._cond:
                resource, res = self._resolve(resource)
                if self._find_alloc(namespace, pod, container, resource):
                    raise KubeletError("%s/%s container %s already holds %s devices" % (
                        namespace, pod, container, resource))
                plugin = res["plugin"]
                if not plugin.connected:
                    raise KubeletError("plugin for %s is not connected" % resource)
                used = {d for a in self._allocations if a["resource"] == resource
                        for d in a["devices"]}
                free = sorted((i for i, d in res["devices"].items()
                               if d["health"] == HEALTHY and i not in used), key=_natural)
                if len(free) < count:
                    raise KubeletError("%s: %d devices requested, %d healthy and free" % (
                        resource, count, len(free)))
                opts = plugin.options
            chosen = free[:count]
            if opts.get_preferred_allocation_available:
                chosen = self._preferred(plugin, free, count) or chosen
            try:
                resp = plugin.stub.Allocate(dp.AllocateRequest(container_requests=[
                    dp.ContainerAllocateRequest(devices_ids=chosen)]), timeout=self.rpc_timeout)
            except grpc.RpcError as e:
                self._note_call("Allocate", resource, chosen, e)
                raise KubeletError("Allocate failed: %s %s" % (e.code().name, e.details()))
            self._note_call("Allocate", resource, chosen, None)
            if len(resp.container_responses) != 1:
                raise KubeletError("AllocateResponse has %d container responses, want 1" %
                                   len(resp.container_responses))
            rec = {"namespace": namespace, "pod": pod, "uid": uid, "container": container,
                   "resource": resource, "devices": list(chosen),
                   "response": _msg_dict(resp.container_responses[0]), "prestart_calls": 0}
            with self._cond:
                self._allocations.append(rec)
                self._cond.notify_all()
        log("fake-kubelet", "allocated", resource=resource, pod="%s/%s" % (namespace, pod),
            container=container, devices=",".join(chosen))
        prestart = self._prestart(rec, opts)
        return {"resource": resource, "devices": list(chosen), "response": rec["response"],
                "prestart": prestart}

    def restart_container(self, namespace, pod, container, resource=None):
        """A container restart: no new Allocate, PreStartContainer again with the same IDs."""
        with self._cond:
            rec = self._find_alloc(namespace, pod, container, resource)
            if rec is None:
                raise KubeletError("%s/%s container %s holds no devices" % (
                    namespace, pod, container))
            res = self._resources.get(rec["resource"])
            plugin = res["plugin"] if res else None
            if plugin is None:
                raise KubeletError("resource %r has no registered plugin" % rec["resource"])
            opts = plugin.options
        return {"devices": list(rec["devices"]), "prestart": self._prestart(rec, opts)}

    def _prestart(self, rec, opts):
        if not opts.pre_start_required:
            return False
        with self._cond:
            plugin = self._resources[rec["resource"]]["plugin"]
        try:
            plugin.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=rec["devices"]),
                                          timeout=PRESTART_TIMEOUT_S)
        except grpc.RpcError as e:
            self._note_call("PreStartContainer", rec["resource"], rec["devices"], e)
            raise KubeletError("PreStartContainer failed: %s %s" % (e.code().name, e.details()))
        self._note_call("PreStartContainer", rec["resource"], rec["devices"], None)
        with self._cond:
            rec["prestart_calls"] += 1
        return True

    def _preferred(self, plugin, free, count):
        req = dp.PreferredAllocationRequest(container_requests=[
            dp.ContainerPreferredAllocationRequest(available_deviceIDs=free,
                                                   must_include_deviceIDs=[],
                                                   allocation_size=count)])
        try:
            resp = plugin.stub.GetPreferredAllocation(req, timeout=self.rpc_timeout)
        except grpc.RpcError as e:
            self._note_call("GetPreferredAllocation", plugin.resource, free, e)
            return None
        self._note_call("GetPreferredAllocation", plugin.resource, free, None)
        if len(resp.container_responses) != 1:
            return None
        ids = list(resp.container_responses[0].deviceIDs)
        if len(ids) != count or len(set(ids)) != count or not set(ids) <= set(free):
            log("fake-kubelet", "ignoring invalid preferred allocation", ids=",".join(ids))
            return None
        return ids

    def _note_call(self, rpc, resource, devices, err):
        with self._cond:
            self._calls.append({"rpc": rpc, "resource": resource, "devices": list(devices),
                                "error": None if err is None else
                                "%s %s" % (err.code().name, err.details()), "t": time.time()})
            del self._calls[:-MAX_RECORDS]
            self._cond.notify_all()

    def remove_pod(self, namespace, pod):
        """Forgets a pod's assignments (the kubelet has no Deallocate). Returns devices freed."""
        with self._cond:
            keep, freed = [], 0
            for a in self._allocations:
                if (a["namespace"], a["pod"]) == (namespace, pod):
                    freed += len(a["devices"])
                else:
                    keep.append(a)
            self._allocations = keep
            self._cond.notify_all()
        log("fake-kubelet", "pod removed", pod="%s/%s" % (namespace, pod), freed=freed)
        return freed

    def restart(self, timeout=30.0, touch_socket=False):
        """Simulates a kubelet restart and waits for every registered plugin to come back.
        touch_socket: change kubelet.sock's metadata right after listening, as a kubelet that
        labels its socket does.

        Stops serving, drops plugin connections, deletes every socket in the device-plugin dir
        (other files such as the checkpoint stay), re-creates kubelet.sock (and the
        PodResources socket). Assignments are kept, as the kubelet restores its checkpoint;
        devices read as unhealthy until their plugin registers again.
        Returns {"seconds", "resources", "reregistered", "missing"}; seconds is None on timeout.
        """
        self._stop_servers()
        with self._cond:
            expected = sorted(n for n, r in self._resources.items() if r["plugin"] is not None)
            plugins = [r["plugin"] for r in self._resources.values() if r["plugin"] is not None]
            for r in self._resources.values():
                r["plugin"] = None
                for d in r["devices"].values():
                    d["health"] = UNHEALTHY
            base = len(self._registrations)
        for p in plugins:
            self._close_plugin(p)
        removed = _remove_sockets(self.plugin_dir)
        if self.podres_socket and os.path.exists(self.podres_socket):
            os.unlink(self.podres_socket)
        t0 = time.monotonic()
        self._start_servers()
        if touch_socket:
            # What a real kubelet does after listening (SELinux label, mode): the socket's
            # ctime moves although it is the same kubelet instance.
            os.chmod(self.kubelet_socket, 0o660)
        log("fake-kubelet", "restarted", removed=",".join(removed), waiting=",".join(expected))

        def back():
            got = {r["resource"] for r in self._registrations[base:] if r["accepted"]}
            return set(expected) <= got

        with self._cond:
            ok = self._cond.wait_for(back, timeout)
            got = sorted({r["resource"] for r in self._registrations[base:] if r["accepted"]})
        secs = time.monotonic() - t0
        out = {"seconds": round(secs, 3) if ok else None, "resources": expected,
               "reregistered": got, "missing": sorted(set(expected) - set(got)),
               "removed": removed}
        with self._cond:
            self._restarts.append(out)
        log("fake-kubelet", "re-registration", seconds=out["seconds"],
            missing=",".join(out["missing"]))
        return out

    def state(self):
        """A JSON-serialisable snapshot of everything the stand-in saw and holds."""
        with self._cond:
            resources = {}
            for name, r in self._resources.items():
                p = r["plugin"]
                resources[name] = {
                    "connected": bool(p and p.connected),
                    "endpoint": p.endpoint if p else None,
                    "options": _msg_dict(p.options) if p else None,
                    "list_and_watch_updates": p.updates if p else 0,
                    "list_and_watch_error": p.lw_error if p else None,
                    "devices": {i: dict(d) for i, d in r["devices"].items()},
                    "healthy": sorted((i for i, d in r["devices"].items()
                                       if d["health"] == HEALTHY), key=_natural),
                }
            return json.loads(json.dumps({
                "registrations": self._registrations,
                "resources": resources,
                "allocations": self._allocations,
                "calls": self._calls,
                "podresources_calls": self._podres_calls,
                "restarts": self._restarts,
            }))

    def wait_for(self, predicate, timeout=10.0):
        """Waits until predicate(state()) is true; returns whether it became true in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if predicate(self.state()):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))

    def wait_registered(self, resource, count=1, timeout=10.0):
        return self.wait_for(lambda s: sum(1 for r in s["registrations"] if r["accepted"] and
                                           r["resource"] == resource) >= count, timeout)

    def wait_devices(self, resource, healthy, timeout=10.0):
        """Waits until the resource reports exactly `healthy` healthy devices."""
        return self.wait_for(lambda s: resource in s["resources"] and
                             len(s["resources"][resource]["healthy"]) == healthy, timeout)

    # ---- PodResources --------------------------------------------------------------------

    def _count_podres(self, rpc):
        with self._cond:
            self._podres_calls[rpc] += 1

    def _pod_resources(self, only=None):
        with self._cond:
            pods, order = {}, []
            for a in self._allocations:
                key = (a["namespace"], a["pod"])
                if only is not None and key != only:
                    continue
                if key not in pods:
                    pods[key] = {}
                    order.append(key)
                cont = pods[key].setdefault(a["container"], [])
                devs = self._resources.get(a["resource"], {}).get("devices", {})
                numa = sorted({n for d in a["devices"] for n in devs.get(d, {}).get("numa", [])})
                cd = pr.ContainerDevices(resource_name=a["resource"], device_ids=a["devices"])
                if numa:
                    cd.topology.nodes.extend(pr.NUMANode(ID=n) for n in numa)
                cont.append(cd)
        return [pr.PodResources(namespace=ns, name=name, containers=[
            pr.ContainerResources(name=c, devices=d) for c, d in pods[(ns, name)].items()])
            for ns, name in order]

    def _allocatable(self):
        out = []
        with self._cond:
            for name, r in sorted(self._resources.items()):
                for i, d in sorted(r["devices"].items(), key=lambda x: _natural(x[0])):
                    cd = pr.ContainerDevices(resource_name=name, device_ids=[i])
                    if d["numa"]:
                        cd.topology.nodes.extend(pr.NUMANode(ID=n) for n in d["numa"])
                    out.append(cd)
        return out


def _natural(s):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _remove_sockets(directory):
    removed = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
                removed.append(name)
        except FileNotFoundError:
            pass
    return removed


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet):
        self._k = kubelet

    def Register(self, request, context):
        return self._k._register(request, context)


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet):
        self._k = kubelet

    def List(self, request, context):
        self._k._count_podres("List")
        return pr.ListPodResourcesResponse(pod_resources=self._k._pod_resources())

    def Get(self, request, context):
        self._k._count_podres("Get")
        found = self._k._pod_resources((request.pod_namespace, request.pod_name))
        if not found:
            context.abort(grpc.StatusCode.UNKNOWN, "pod %s in namespace %s not found" % (
                request.pod_name, request.pod_namespace))
        return pr.GetPodResourcesResponse(pod_resources=found[0])

    def GetAllocatableResources(self, request, context):
        self._k._count_podres("GetAllocatableResources")
        return pr.AllocatableResourcesResponse(devices=self._k._allocatable())


# ---- JSON-lines control socket ---------------------------------------------------------------

def _dispatch(kubelet, req, stop_event):
    op = req.get("op")
    a = {k: v for k, v in req.items() if k != "op"}
    if op == "allocate":
        return kubelet.allocate(a["namespace"], a["pod"], a["container"], a.get("count", 1),
                                uid=a.get("uid", ""), resource=a.get("resource"))
    if op == "restart_container":
        return kubelet.restart_container(a["namespace"], a["pod"], a["container"],
                                         a.get("resource"))
    if op == "remove_pod":
        return {"freed": kubelet.remove_pod(a["namespace"], a["pod"])}
    if op == "restart":
        return kubelet.restart(float(a.get("timeout", 30)))
    if op == "state":
        return kubelet.state()
    if op == "wait_registered":
        return {"ok": kubelet.wait_registered(a["resource"], int(a.get("count", 1)),
                                              float(a.get("timeout", 10)))}
    if op == "wait_devices":
        return {"ok": kubelet.wait_devices(a["resource"], int(a["healthy"]),
                                           float(a.get("timeout", 10)))}
    if op == "shutdown":
        stop_event.set()
        return {}
    raise KubeletError("unknown op %r" % op)


class _ControlHandler(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            line = self.rfile.readline(MAX_CONTROL_LINE + 1)
            if not line:
                return
            if len(line) > MAX_CONTROL_LINE:
                self._reply({"ok": False, "error": "request line too long"})
                return
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("request must be a JSON object")
                res = _dispatch(self.server.kubelet, req, self.server.stop_event)
                self._reply({"ok": True, "result": res})
            except (KubeletError, KeyError, ValueError, TypeError) as e:
                self._reply({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})

    def _reply(self, obj):
        self.wfile.write((json.dumps(obj) + "\n").encode())
        self.wfile.flush()


class _ControlServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def call(control_path, op, timeout=120.0, **args):
    """Client side of the control socket: sends one request, returns result or raises."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(control_path)
        s.sendall((json.dumps(dict(args, op=op)) + "\n").encode())
        f = s.makefile("rb")
        line = f.readline(1 << 24)
    finally:
        s.close()
    if not line:
        raise KubeletError("control socket closed without an answer")
    resp = json.loads(line)
    if not resp.get("ok"):
        raise KubeletError(resp.get("error"))
    return resp.get("result")


def serve(args):
    if os.path.dirname(os.path.abspath(args.control)) == os.path.abspath(args.dir):
        sys.exit("fake_kubelet: --control must not be inside --dir (restart deletes its sockets)")
    kubelet = FakeKubelet(args.dir, args.podres_dir, dial_timeout=args.dial_timeout).start()
    stop_event = threading.Event()
    if os.path.exists(args.control):
        os.unlink(args.control)
    ctl = _ControlServer(args.control, _ControlHandler)
    ctl.kubelet, ctl.stop_event = kubelet, stop_event
    threading.Thread(target=ctl.serve_forever, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_event.set())
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "kubelet_socket": kubelet.kubelet_socket,
                       "podresources_socket": kubelet.podres_socket,
                       "control": os.path.abspath(args.control)}, f)
        os.rename(tmp, args.ready_file)
    log("fake-kubelet", "control ready", control=args.control)
    while not stop_event.wait(0.5):
        pass
    ctl.shutdown()
    ctl.server_close()
    os.unlink(args.control)
    kubelet.stop()
    log("fake-kubelet", "stopped")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the stand-in kubelet")
    s.add_argument("--dir", required=True, help="device-plugin dir (kubelet.sock is served here)")
    s.add_argument("--podres-dir", help="pod-resources dir (its kubelet.sock serves List)")
    s.add_argument("--control", required=True, help="JSON-lines control socket path")
    s.add_argument("--ready-file", help="written (atomically) once everything is serving")
    s.add_argument("--dial-timeout", type=float, default=10.0)
    c = sub.add_parser("call", help="send one control request and print the result")
    c.add_argument("control")
    c.add_argument("op")
    c.add_argument("args", nargs="?", default="{}", help="JSON object of arguments")
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args)
        return 0
    try:
        print(json.dumps(call(args.control, args.op, **json.loads(args.args)), indent=2))
    except KubeletError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
