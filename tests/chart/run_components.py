#!/usr/bin/env python3
"""run_components.py: the real binaries accept the chart's configuration and arguments.

Usage: run_components.py BUILD_DIR RENDERED.yaml
 - agent: runs BUILD_DIR/bin/microview-agent with exactly the DaemonSet's command, arguments
   and ConfigMap ($(NODE_IP) -> 127.0.0.1, a free port for TCP listeners), only the host paths
   moved into a temporary directory (device-plugin dir, state dir, pod-resources socket, token
   file, the listener's TLS files: a throwaway CA and pairs made with openssl for 127.0.0.1);
   waits (bounded) for event=agent.started, checks its tls= field against the render, then
   runs the DaemonSet's readiness probe command with BUILD_DIR's microviewctl;
 - collector: runs the collector DaemonSet's command and arguments against that agent (host
   mode: its unix socket; DPU mode: its TCP listener with the token and the render's TLS flags
   pointing at the throwaway CA and client pair), listening on a free loopback port, polls its
   readiness probe path and, in DPU mode, waits for event=agent.synced from that agent;
 - scaler (when BUILD_DIR has microview-scaler): runs the Deployment's command and arguments
   on free loopback ports (an unreachable API server: no trigger is evaluated), polls its
   readiness probe on the metrics port, connects to the gRPC port and reads /metrics;
 - webhook (when BUILD_DIR has microview-webhook): runs the Deployment's command and arguments
   with the render's own generated certificate and key, and polls /healthz over HTTPS,
   checking the server certificate against the render's caBundle and service DNS name, then
   sends one AdmissionReview (64Ki) and expects the pages at the chart's --page-size.
Exit 0 on success, 1 with the component's output otherwise.
"""

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

build, render = sys.argv[1], sys.argv[2]
objs = [o for o in yaml.safe_load_all(open(render)) if o]


def find(kind, suffix):
    got = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return got[0] if got else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(path):
    return os.path.join(build, "bin", os.path.basename(path))


tmp = tempfile.mkdtemp(prefix="mv-chart-run-")
procs = []  # (name, Popen, log path)


def start(name, argv, env=None):
    log = open(f"{tmp}/{name}.log", "w")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    procs.append((name, p, f"{tmp}/{name}.log", argv))
    return p


def fail(name, why):
    for n, p, log, argv in procs:
        if n == name:
            print(f"{name}: {why}\n  command: {' '.join(argv)}\n{open(log).read()}", file=sys.stderr)
            break
    else:
        print(f"{name}: {why}", file=sys.stderr)
    sys.exit(1)


def poll(name, proc, check, what, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(name, f"exited with {proc.returncode} before {what}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    fail(name, f"no {what} within {seconds} s")


_pki = []


def pki():
    """A throwaway CA, a server pair for 127.0.0.1 (and the render's --agent-server-name) and a
    client pair, made with openssl once; returns their directory."""
    if _pki:
        return _pki[0]
    d = f"{tmp}/pki"
    os.makedirs(d)
    names = [a for o in objs if o["kind"] == "DaemonSet"
             for c in o["spec"]["template"]["spec"]["containers"]
             for i, a in enumerate(c.get("args", [])) if i and c["args"][i - 1] == "--agent-server-name"]
    san = ",".join(["IP:127.0.0.1"] + [f"DNS:{n}" for n in names])

    def ossl(*argv):
        r = subprocess.run(["openssl", *argv], capture_output=True, text=True, timeout=60)
        if r.returncode:
            fail("openssl", f"openssl {' '.join(argv)}: {r.stderr}")

    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-days", "1", "-subj", "/CN=chart-test-ca", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    for who, ext in (("server", f"subjectAltName={san}\nextendedKeyUsage=serverAuth"),
                     ("client", "extendedKeyUsage=clientAuth")):
        ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", f"/CN=chart-test-{who}", "-keyout", f"{d}/{who}.key", "-out", f"{d}/{who}.csr")
        open(f"{d}/{who}.ext", "w").write(ext + "\n")
        ossl("x509", "-req", "-in", f"{d}/{who}.csr", "-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", f"{d}/{who}.ext", "-out", f"{d}/{who}.crt")
    for f in os.listdir(d):
        os.chmod(f"{d}/{f}", 0o400)
    _pki.append(d)
    return d


def run():
    done = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["NODE_NAME"] = "chart-test-node"
    token = f"{tmp}/token"
    open(token, "w").write("chart-test-token\n")
    os.chmod(token, 0o600)

    # ---- agent
    cm, ds = find("ConfigMap", "-agent"), find("DaemonSet", "-agent")
    agent_tcp = None
    state = f"{tmp}/state"
    if ds:
        conf = yaml.safe_load(cm["data"]["agent.yaml"])
        ctr = ds["spec"]["template"]["spec"]["containers"][0]
        os.makedirs(f"{tmp}/device-plugins")
        cfg = cm["data"]["agent.yaml"]
        cfg = cfg.replace(f'"{conf["device_plugin_dir"]}"', f'"{tmp}/device-plugins"')
        cfg = cfg.replace(f'"{conf["state_dir"]}"', f'"{state}"')
        cfg = cfg.replace(f'"{conf["pod_resources_socket"]}"', f'"{tmp}/pod-resources.sock"')
        if "collector_token_file" in conf:
            cfg = cfg.replace(f'"{conf["collector_token_file"]}"', f'"{token}"')
        # The listener's TLS files (agent.remote.tls.secretName, mounted): the throwaway pair.
        for key, name in (("tls_cert_file", "server.crt"), ("tls_key_file", "server.key"),
                          ("tls_client_ca_file", "ca.crt")):
            if key in conf:
                cfg = cfg.replace(f'"{conf[key]}"', f'"{pki()}/{name}"')
        open(f"{tmp}/agent.yaml", "w").write(cfg)
        args = list(ctr["args"])
        for i, a in enumerate(args):
            if i and args[i - 1] == "--config":
                args[i] = f"{tmp}/agent.yaml"
            elif "$(NODE_IP)" in a:
                host, _, port = a.replace("$(NODE_IP)", "127.0.0.1").rpartition(":")
                if args[i - 1] == "--listen":
                    port = str(free_port())
                    agent_tcp = f"{host}:{port}"
                args[i] = f"{host}:{port}"
        agent = start("agent", [binary(ctr["command"][0])] + args, env)

        def started():
            return ("event=agent.started" in open(f"{tmp}/agent.log").read()
                    and os.path.exists(f"{state}/agent.sock"))

        poll("agent", agent, started, "event=agent.started and its socket")
        if agent_tcp:
            line = [ln for ln in open(f"{tmp}/agent.log") if "event=agent.started" in ln][0]
            want = "tls=off_insecure_listen" if conf.get("insecure_listen") else "tls=on"
            if want not in line.split():
                fail("agent", f"TCP listener without {want}: {line}")
            done.append(f"agent listener {want}"
                        + (" with client certificates" if conf.get("tls_require_client_cert") else ""))
        probe = [p.replace(conf["state_dir"], state) for p in ctr["readinessProbe"]["exec"]["command"]]
        probe[0] = binary(probe[0])
        r = subprocess.run(probe, capture_output=True, text=True, timeout=20)
        if r.returncode != 0 or "catalog revision" not in r.stdout:
            fail("agent", f"probe {' '.join(probe)} failed ({r.returncode}): {r.stdout}{r.stderr}")
        done.append(f"agent ({len(args)} args, probe ok)")

    # ---- collector
    ds = find("DaemonSet", "-collector")
    if ds:
        ctr = ds["spec"]["template"]["spec"]["containers"][0]
        args = list(ctr["args"])
        port = free_port()
        dpu = "verbs" in args
        cm = find("ConfigMap", "-agent")
        node_state = yaml.safe_load(cm["data"]["agent.yaml"])["state_dir"] if cm else "/run/microview"
        out = []
        i = 0
        while i < len(args):
            a = args[i]
            v = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
            if a == "--agent":
                if not dpu:
                    out += [a, v.replace(node_state, state)]
                elif agent_tcp and agent_tcp not in out:
                    out += [a, agent_tcp]  # every listed host becomes the local agent, once
            elif a == "--rdma-token-file":
                out += [a, token]
            elif a in ("--agent-ca", "--agent-cert", "--agent-key"):
                out += [a, f"{pki()}/" + {"--agent-ca": "ca.crt", "--agent-cert": "client.crt",
                                          "--agent-key": "client.key"}[a]]
            elif a == "--rdma-src-ip":
                out += [a, "127.0.0.1"]
            elif a == "--listen":
                out += [a, f"127.0.0.1:{port}"]
            else:
                out += [a] + ([v] if v is not None else [])
            i += 2 if v is not None else 1
        if out[out.index("--auth") + 1] == "kubernetes" and "--kube-api-server" not in out:
            # In a pod: KUBERNETES_SERVICE_HOST and the mounted token; here a closed port (the
            # probe path is open, no review is asked) and the test token.
            out += ["--kube-api-server", "https://127.0.0.1:9", "--kube-token-file", token]
        if dpu and not agent_tcp:
            out += ["--agent", "127.0.0.1:9"]  # no agent in this render: a closed port
        coll = start("collector", [binary(ctr["command"][0])] + out, env)
        path = ctr["readinessProbe"]["httpGet"]["path"]

        def healthy():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status == 200

        poll("collector", coll, healthy, f"200 on {path}")
        what = f"{path} ok"
        if dpu and agent_tcp:
            # The DPU collector follows the agent's catalog over its TCP listener: with the
            # render's TLS flags and the token it must get through the handshake and sync.
            def synced():
                return f"event=agent.synced target={agent_tcp}" in open(f"{tmp}/collector.log").read()

            poll("collector", coll, synced, f"event=agent.synced from the agent at {agent_tcp}")
            tls = [f for f in ("--agent-ca", "--agent-cert", "--agent-server-name") if f in out]
            what += f", synced with the agent over {'TLS (' + ' '.join(tls) + ')' if tls else 'plaintext'}"
        auth = out[out.index("--auth") + 1] if "--auth" in out else "none"
        if auth == "kubernetes":
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
                fail("collector", "--auth kubernetes served /metrics without a token")
            except urllib.error.HTTPError as e:
                if e.code != 401:
                    fail("collector", f"/metrics without a token: {e.code}, want 401")
            what += ", /metrics 401 without a token"
        done.append(f"collector {'dpu' if dpu else 'host'} ({len(out)} args, {what}, auth {auth})")

    # ---- webhook
    dep, sec = find("Deployment", "-webhook"), find("Secret", "-webhook-tls")
    mwc = find("MutatingWebhookConfiguration", "-webhook")
    if dep and not os.path.exists(binary(dep["spec"]["template"]["spec"]["containers"][0]["command"][0])):
        done.append("webhook not built: not run")
    elif dep:
        if not sec or not sec["data"].get("tls.key"):
            done.append("webhook skipped (no generated key pair in this render)")
        else:
            ctr = dep["spec"]["template"]["spec"]["containers"][0]
            for k in ("tls.crt", "tls.key", "ca.crt"):
                open(f"{tmp}/{k}", "wb").write(base64.b64decode(sec["data"][k]))
            port = free_port()
            args = list(ctr["args"])
            for i, a in enumerate(args):
                if args[i - 1] == "--listen":
                    args[i] = f"127.0.0.1:{port}"
                elif args[i - 1] == "--tls-cert-file":
                    args[i] = f"{tmp}/tls.crt"
                elif args[i - 1] == "--tls-key-file":
                    args[i] = f"{tmp}/tls.key"
            wh = start("webhook", [binary(ctr["command"][0])] + args, env)
            ca = base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]).decode()
            svc = mwc["webhooks"][0]["clientConfig"]["service"]
            ctx = ssl.create_default_context(cadata=ca)
            name = f"{svc['name']}.{svc['namespace']}.svc"

            def healthy():
                with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                    with ctx.wrap_socket(raw, server_hostname=name) as t:
                        t.sendall(f"GET /healthz HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
                        return t.recv(64).startswith(b"HTTP/1.1 200")

            poll("webhook", wh, healthy, f"200 on https://{name}/healthz verified by the caBundle")
            # One AdmissionReview as the API server sends it: 64Ki at the chart's page size.
            page = int(args[args.index("--page-size") + 1])
            res = args[args.index("--resource-name") + 1]
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": "chart-test-uid", "operation": "CREATE",
                                  "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                  "resource": {"group": "", "version": "v1", "resource": "pods"},
                                  "namespace": "shop",
                                  "object": {"apiVersion": "v1", "kind": "Pod",
                                             "metadata": {"name": "p", "namespace": "shop",
                                                          "annotations": {"microview.io/metrics-memory": "64Ki"}},
                                             "spec": {"containers": [{"name": "app", "image": "x"}]}}}}
            req = urllib.request.Request(f"https://127.0.0.1:{port}{svc['path']}",
                                         data=json.dumps(review).encode(),
                                         headers={"Content-Type": "application/json"})
            ctx.check_hostname = False  # the name was checked above; urllib dials the IP
            with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
                resp = json.load(r)["response"]
            patch = json.loads(base64.b64decode(resp.get("patch", "")) or "[]")
            want = str(-(-65536 // page))
            pod = review["request"]["object"]
            for op in patch:  # add/replace only, as the webhook emits (RFC 6901 pointers)
                keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
                node = pod
                for k in keys[:-1]:
                    node = node[int(k)] if isinstance(node, list) else node[k]
                node[keys[-1]] = op["value"]
            got = pod["spec"]["containers"][0].get("resources", {})
            if not (resp.get("uid") == "chart-test-uid" and resp.get("allowed") is True
                    and got.get("requests", {}).get(res) == want
                    and got.get("limits", {}).get(res) == want):
                fail("webhook", f"AdmissionReview for 64Ki: want {res}={want} pages, got {resp}, patch {patch}")
            done.append(f"webhook (TLS verified against caBundle, /healthz ok, 64Ki -> {want} pages of {res})")

    # ---- scaler
    dep = find("Deployment", "-scaler")
    if dep and not os.path.exists(binary(dep["spec"]["template"]["spec"]["containers"][0]["command"][0])):
        done.append("scaler not built: not run")
    elif dep:
        ctr = dep["spec"]["template"]["spec"]["containers"][0]
        gport, mport = free_port(), free_port()
        args, i = [], 0
        while i < len(ctr["args"]):
            a = ctr["args"][i]
            if a == "--listen":
                args += [a, f"127.0.0.1:{gport}"]
            elif a == "--metrics-listen":
                args += [a, f"127.0.0.1:{mport}"]
            else:
                args += [a, ctr["args"][i + 1]]
            i += 2
        # In a pod: KUBERNETES_SERVICE_HOST and the mounted token; here a closed port and the
        # test token (no trigger is evaluated, so the API server is never asked).
        sc_token = f"{tmp}/scaler-token"
        with open(sc_token, "w") as f:
            f.write("test-token\n")
        args += ["--api-server", "https://127.0.0.1:9", "--api-token-file", sc_token]
        sc = start("scaler", [binary(ctr["command"][0])] + args)
        probe = ctr["readinessProbe"]["httpGet"]
        ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
        if ports.get(probe["port"]) != int(ctr["args"][ctr["args"].index("--metrics-listen") + 1][1:]):
            fail("scaler", f"readiness probe port {probe['port']} is not --metrics-listen's ({ports})")

        def sc_healthy():
            with urllib.request.urlopen(f"http://127.0.0.1:{mport}{probe['path']}", timeout=2) as r:
                return r.status == 200

        poll("scaler", sc, sc_healthy, f"200 on {probe['path']}")
        with socket.create_connection(("127.0.0.1", gport), timeout=2):
            pass
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=2) as r:
            body = r.read().decode()
        if "microview_scaler_" not in body:
            fail("scaler", "/metrics has no microview_scaler_ family")
        done.append(f"scaler ({len(args)} args, {probe['path']} ok, gRPC port open, /metrics)")
    return done


try:
    print("; ".join(run()))
finally:
    for _, p, _, _ in procs:
        p.terminate()
    for _, p, _, _ in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    subprocess.run(["rm", "-rf", tmp])
