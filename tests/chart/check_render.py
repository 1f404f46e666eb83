#!/usr/bin/env python3
"""check_render.py: asserts the fields that make each chart scenario work.

Usage: check_render.py SCENARIO RENDERED.yaml
SCENARIO is default, dpu, dpu-mtls, cert-manager, rdma-required, keda (the ci/*-values.yaml files),
long-names (any release, names only) or static-pod (the DPU static-pod manifest).
Exits 1 naming the first failed expectation; prints "N checks" on success.
"""
import re
import sys

import yaml

checks = 0


def expect(cond, what):
    global checks
    checks += 1
    if not cond:
        print(f"check_render: {SCENARIO}: {what}", file=sys.stderr)
        sys.exit(1)


def find(kind, suffix=""):
    got = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    expect(len(got) == 1, f"exactly one {kind} named *{suffix}, found {len(got)}")
    return got[0]


def container(obj):
    return obj["spec"]["template"]["spec"]["containers"][0]


def args(obj):
    return container(obj).get("args", [])


def flag(obj, name):
    a = args(obj)
    expect(name in a, f"{obj['metadata']['name']} has {name} (args {a})")
    return a[a.index(name) + 1]


def mounts(obj):
    return {m["name"]: m for m in container(obj).get("volumeMounts", [])}


def volumes(obj):
    return {v["name"]: v for v in obj["spec"]["template"]["spec"].get("volumes", [])}


def common():
    for o in objs:
        md = o["metadata"]
        expect(len(md["name"]) <= 63, f"{o['kind']} {md['name']} longer than 63")
        labels = md.get("labels", {})
        for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                  "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
                  "app.kubernetes.io/component", "helm.sh/chart"):
            expect(k in labels, f"{o['kind']} {md['name']} lacks label {k}")
    for o in objs:
        if o["kind"] in ("DaemonSet", "Deployment"):
            spec = o["spec"]["template"]["spec"]
            for c in spec["containers"]:
                expect("securityContext" in c, f"{o['metadata']['name']}: explicit securityContext")
                expect(c.get("imagePullPolicy") == "IfNotPresent",
                       f"{o['metadata']['name']}: imagePullPolicy IfNotPresent")
                expect(c["command"][0].startswith("/usr/bin/microview"),
                       f"{o['metadata']['name']}: runs a /usr/bin/microview-* binary")
                expect("livenessProbe" in c and "readinessProbe" in c,
                       f"{o['metadata']['name']}: liveness and readiness probes")


def agent_checks():
    ds = find("DaemonSet", "-agent")
    spec = ds["spec"]["template"]["spec"]
    expect(spec["priorityClassName"] == "system-node-critical", "agent is system-node-critical")
    expect(spec.get("tolerations"), "agent has tolerations")
    env = {e["name"]: e for e in container(ds)["env"]}
    expect(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName",
           "NODE_NAME from the downward API")
    m, v = mounts(ds), volumes(ds)
    expect(m["pod-resources"].get("readOnly") is True, "pod-resources mounted read-only")
    expect(v["device-plugins"]["hostPath"]["path"] == m["device-plugins"]["mountPath"]
           == "/var/lib/kubelet/device-plugins", "device-plugin dir at the same path")
    expect(v["state"]["hostPath"]["path"] == m["state"]["mountPath"] == "/run/microview",
           "state dir at the same path inside and out")
    expect(re.fullmatch(r"[0-9a-f]{64}",
                        ds["spec"]["template"]["metadata"]["annotations"]["checksum/config"]),
           "checksum/config annotation")
    cm = find("ConfigMap", "-agent")
    conf = yaml.safe_load(cm["data"]["agent.yaml"])
    expect(conf["resource_name"] == "microview.io/metrics", "agent config resource_name")
    expect(conf["state_dir"] == "/run/microview", "agent config state_dir")
    expect(conf["pod_resources_socket"] == "/var/lib/kubelet/pod-resources/kubelet.sock",
           "agent config pod_resources_socket")
    probe = container(ds)["livenessProbe"]["exec"]["command"]
    expect(probe[:3] == ["/usr/bin/microviewctl", "list", "--agent"]
           and probe[3] == "unix:/run/microview/agent.sock", "agent probe lists over its socket")
    role = find("ClusterRole", "-agent")
    expect(role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
           "agent ClusterRole is get pods only")
    return ds, conf


def webhook_checks(mode):
    mwc = find("MutatingWebhookConfiguration", "-webhook")
    w = mwc["webhooks"][0]
    expect(w["sideEffects"] == "None", "sideEffects None")
    expect(w["admissionReviewVersions"] == ["v1"], "admissionReviewVersions [v1]")
    expect(w["rules"][0]["operations"] == ["CREATE"] and w["rules"][0]["resources"] == ["pods"],
           "pods CREATE only")
    excl = w["namespaceSelector"]["matchExpressions"][0]
    expect(excl["key"] == "kubernetes.io/metadata.name" and excl["operator"] == "NotIn"
           and "kube-system" in excl["values"] and "microview" in excl["values"],
           "namespaceSelector excludes kube-system and the release namespace")
    expect("has(object.metadata.annotations)" in w["matchConditions"][0]["expression"],
           "matchCondition guards pods without annotations")
    svc = find("Service", "-webhook")
    expect(w["clientConfig"]["service"]["name"] == svc["metadata"]["name"]
           and w["clientConfig"]["service"]["path"] == "/mutate", "clientConfig names the Service")
    dep = find("Deployment", "-webhook")
    sc = container(dep)["securityContext"]
    expect(sc["runAsUser"] == 65532 and sc["runAsNonRoot"] is True
           and sc["readOnlyRootFilesystem"] is True, "webhook non-root, read-only root")
    psc = dep["spec"]["template"]["spec"]["securityContext"]
    mode = volumes(dep)["tls"]["secret"]["defaultMode"]
    expect(psc.get("fsGroup") == sc["runAsUser"] and mode & 0o040 or mode & 0o004,
           "the non-root webhook can read its key pair (fsGroup or a world-readable mode)")
    expect(flag(dep, "--page-size") == "4096", "webhook --page-size in bytes")
    expect(flag(dep, "--resource-name") == "microview.io/metrics", "webhook --resource-name")
    secret_name = volumes(dep)["tls"]["secret"]["secretName"]
    if mode == "auto":
        import base64
        sec = find("Secret", "-webhook-tls")
        expect(sec["metadata"]["name"] == secret_name, "webhook mounts the generated Secret")
        ca = base64.b64decode(w["clientConfig"]["caBundle"])
        expect(ca.startswith(b"-----BEGIN CERTIFICATE-----"), "caBundle is a PEM certificate")
        expect(sec["data"]["ca.crt"] == w["clientConfig"]["caBundle"], "caBundle = Secret ca.crt")
        expect(base64.b64decode(sec["data"]["tls.key"]).startswith(b"-----BEGIN"), "tls.key PEM")
    return mwc, w, secret_name


def collector_checks():
    ds = find("DaemonSet", "-collector")
    svc = find("Service", "-collector")
    expect(svc["spec"]["ports"][0]["port"] == 9469, "collector Service on 9469")
    ctr = container(ds)
    for probe in ("readinessProbe", "livenessProbe"):
        expect(ctr[probe]["httpGet"]["path"] == "/healthz", f"{probe} on /healthz (open)")
    return ds


def host_collector_nonroot(col, conf, gid=9469):
    """The host-mode collector runs non-root, in the agent's segment group, without capabilities."""
    psc = col["spec"]["template"]["spec"]["securityContext"]
    sc = container(col)["securityContext"]
    expect(psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is True,
           "host collector: runAsNonRoot (pod and container)")
    expect(isinstance(psc.get("runAsUser"), int) and psc["runAsUser"] > 0
           and psc.get("runAsGroup", 0) > 0, f"host collector: non-zero uid and gid ({psc})")
    expect("runAsUser" not in sc or sc["runAsUser"] > 0, "container does not put uid 0 back")
    expect(psc.get("supplementalGroups") == [gid] and conf.get("segment_group") == gid,
           f"collector's supplementary group = the agent's segment_group ({gid})")
    expect(sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"],
           "host collector holds no capability")
    expect(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True,
           "host collector: no privilege escalation, read-only root")


def peers_of(pol):
    """The (from, ports) of each ingress rule."""
    return [(r.get("from"), [p["port"] for p in r.get("ports", [])])
            for r in pol["spec"].get("ingress", [])]


def network_policies(agent_port=None):
    """Every component pod is selected by a NetworkPolicy restricting ingress."""
    by = {}
    for o in objs:
        if o["kind"] == "NetworkPolicy":
            by[o["metadata"]["labels"]["app.kubernetes.io/component"]] = o
    for comp, obj in by.items():
        expect(obj["spec"]["policyTypes"] == ["Ingress"], f"{comp} NetworkPolicy: Ingress")
        ds = [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")
              and o["metadata"]["labels"]["app.kubernetes.io/component"] == comp]
        expect(len(ds) == 1, f"{comp} NetworkPolicy selects a workload")
        sel = obj["spec"]["podSelector"]["matchLabels"]
        labels = ds[0]["spec"]["template"]["metadata"]["labels"]
        expect(all(labels.get(k) == v for k, v in sel.items()) and
               "app.kubernetes.io/component" in sel, f"{comp} NetworkPolicy selects its pods only")
    return by


def scaler_checks(sc, col, pols):
    """scaler.enabled: its flags name the collectors the chart runs, its RBAC reads only what
    the scaler reads, KEDA's operator alone reaches its gRPC port."""
    col_labels = col["spec"]["template"]["metadata"]["labels"]
    sel = dict(kv.split("=", 1) for kv in flag(sc, "--collector-selector").split(","))
    expect(sel.get("app.kubernetes.io/component") == "collector" and
           all(col_labels.get(k) == v for k, v in sel.items()),
           f"scaler: --collector-selector selects the collector pods ({sel})")
    expect(flag(sc, "--collector-namespace") == col["metadata"]["namespace"],
           "scaler: --collector-namespace is the collectors'")
    expect(flag(sc, "--collector-port") == "9469", "scaler: --collector-port is collector.port")
    expect(flag(sc, "--listen") == ":9090" and flag(sc, "--metrics-listen") == ":9091",
           "scaler: gRPC and metrics ports from values")
    spec = sc["spec"]["template"]["spec"]
    expect(spec["serviceAccountName"] == sc["metadata"]["name"] and
           spec.get("automountServiceAccountToken", True) is True,
           "scaler: its own ServiceAccount, token mounted (it calls the API server)")
    probe = container(sc)["readinessProbe"]["httpGet"]
    expect(probe == {"path": "/healthz", "port": "http-metrics"}, "scaler: readiness on /healthz")
    role = find("ClusterRole", "-scaler")
    rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"]))
                   for r in role["rules"])
    expect(rules == [(("",), ("pods",), ("list",)),
                     (("apps",), ("deployments/scale", "statefulsets/scale", "replicasets/scale"),
                      ("get",)),
                     (("keda.sh",), ("scaledobjects",), ("get",))],
           f"scaler: RBAC limited to what it reads ({rules})")
    rb = find("ClusterRoleBinding", "-scaler-reader")
    expect(rb["roleRef"]["name"] == "microview-metrics-reader",
           "scaler: bound to the metrics-reader role for the collectors' auth")
    pdb = find("PodDisruptionBudget", "-scaler")
    expect(pdb["spec"]["minAvailable"] == 1, "scaler: PDB keeps one replica")
    svc = find("Service", "-scaler")
    expect(sorted(p["port"] for p in svc["spec"]["ports"]) == [9090, 9091], "scaler: Service ports")
    sfrom = peers_of(pols["scaler"])
    keda_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}},
                 "podSelector": {"matchLabels": {"app": "keda-operator"}}}
    expect(sfrom[0] == ([keda_peer], [9090]), f"scaler: KEDA's operator alone on gRPC ({sfrom})")
    expect(len(sfrom) == 2 and sfrom[1][1] == [9091],
           f"scaler: the collector's readers reach its metrics port ({sfrom})")


def collector_auth_checks(ds, readers):
    """collector.auth.mode kubernetes: flags, the token mounted, the two ClusterRoles and their
    bindings (the collector: create token and access reviews; readers: get on the paths)."""
    spec = ds["spec"]["template"]["spec"]
    expect(flag(ds, "--auth") == "kubernetes", "--auth kubernetes by default")
    expect(flag(ds, "--listen") == "0.0.0.0:9469", "--listen beyond loopback with auth on")
    expect(spec["automountServiceAccountToken"] is True, "collector token mounted for reviews")
    sa = spec["serviceAccountName"]
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    binds = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRoleBinding"}
    role = roles.get(sa)
    expect(role is not None and sorted((r["apiGroups"][0], r["resources"][0], tuple(r["verbs"]))
                                       for r in role["rules"])
           == [("authentication.k8s.io", "tokenreviews", ("create",)),
               ("authorization.k8s.io", "subjectaccessreviews", ("create",))],
           "collector ClusterRole: create tokenreviews and subjectaccessreviews, nothing else")
    b = binds.get(sa)
    expect(b is not None and b["roleRef"]["name"] == sa
           and b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "microview"}],
           "collector ClusterRole bound to the collector's ServiceAccount")
    reader = [n for n in roles if n.endswith("-metrics-reader")]
    expect(len(reader) == 1 and roles[reader[0]]["rules"]
           == [{"nonResourceURLs": ["/metrics", "/api/v1/value", "/api/v1/stream",
                                    "/api/v1/live/*", "/debug/*"], "verbs": ["get"]}],
           "reader ClusterRole: get on /metrics, /api/v1/value, the live view, /debug/*")
    rb = binds.get(reader[0])
    expect((rb["subjects"] if rb else []) == readers, f"reader binding subjects {readers}")


def collector_no_auth_checks(ds):
    spec = ds["spec"]["template"]["spec"]
    expect(flag(ds, "--auth") == "none", "--auth none as chosen")
    expect(spec["automountServiceAccountToken"] is False, "no token without auth")
    expect(not [o for o in objs if o["kind"].startswith("ClusterRole")
                and "collector" in o["metadata"]["name"] + o["metadata"]["labels"].get(
                    "app.kubernetes.io/component", "")],
           "no collector RBAC with auth none")


def tls_checks(ds_agent, conf, col, ca_secret, client):
    """TLS of the agents' TCP listener and of the DPU collector's connections to it."""
    d = "/etc/microview/agent-tls"
    expect(conf["tls_cert_file"] == f"{d}/tls.crt" and conf["tls_key_file"] == f"{d}/tls.key",
           "agent: tls_cert_file and tls_key_file in the mounted Secret")
    expect("insecure_listen" not in conf, "agent: no insecure_listen with TLS")
    if client:
        expect(conf.get("tls_client_ca_file") == f"{d}/ca.crt"
               and conf.get("tls_require_client_cert") is True,
               "agent.remote.tls.requireClientCert: tls_client_ca_file (ca.crt) and "
               "tls_require_client_cert")
    else:
        expect("tls_client_ca_file" not in conf and "tls_require_client_cert" not in conf,
               "no client certificates asked for by default")
    want = [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]
    if client:
        want.append({"key": "ca.crt", "path": "ca.crt"})
    v = volumes(ds_agent)["agent-tls"]["secret"]
    expect(v == {"secretName": "microview-agent-tls", "defaultMode": 0o400, "items": want},
           f"agent mounts agent.remote.tls.secretName read-only, mode 0400 ({v})")
    m = mounts(ds_agent)["agent-tls"]
    expect(m["mountPath"] == d and m["readOnly"] is True, "agent's TLS mount read-only")
    expect(flag(col, "--agent-ca") == "/etc/microview/agent-ca/ca.crt", "collector --agent-ca")
    v = volumes(col)["agent-ca"]["secret"]
    expect(v == {"secretName": ca_secret, "defaultMode": 0o400,
                 "items": [{"key": "ca.crt", "path": "ca.crt"}]},
           f"collector mounts ca.crt alone of {ca_secret}, mode 0400 ({v})")
    m = mounts(col)["agent-ca"]
    expect(m["mountPath"] == "/etc/microview/agent-ca" and m["readOnly"] is True,
           "collector's CA mount read-only")
    if client:
        expect(flag(col, "--agent-cert") == "/etc/microview/agent-client/tls.crt"
               and flag(col, "--agent-key") == "/etc/microview/agent-client/tls.key",
               "collector.dpu.tls.clientSecretName: --agent-cert and --agent-key")
        v = volumes(col)["agent-client-tls"]["secret"]
        expect(v["secretName"] == "microview-dpu-client" and v["defaultMode"] == 0o400,
               f"collector mounts its client pair, mode 0400 ({v})")
        expect(mounts(col)["agent-client-tls"]["readOnly"] is True, "client pair read-only")
    else:
        expect("--agent-cert" not in args(col) and "--agent-server-name" not in args(col)
               and "agent-client-tls" not in volumes(col),
               "no client certificate or server name by default")


SCENARIO, path = sys.argv[1], sys.argv[2]
objs = [d for d in yaml.safe_load_all(open(path)) if d]

if SCENARIO == "static-pod":
    expect(len(objs) == 1 and objs[0]["kind"] == "Pod", "one Pod")
    c = objs[0]["spec"]["containers"][0]
    a = c["args"]
    expect(objs[0]["spec"]["hostNetwork"] is True, "host network on the DPU")
    expect(a[a.index("--transport") + 1] == "verbs", "verbs transport")
    expect(re.fullmatch(r"[0-9.]+:[0-9]+", a[a.index("--agent") + 1]), "--agent IP:PORT")
    expect(a[a.index("--rdma-token-file") + 1].startswith("/etc/microview/token/"), "token file")
    ca = a[a.index("--agent-ca") + 1] if "--agent-ca" in a else ""
    mounted = [m["mountPath"] for m in c.get("volumeMounts", []) if m.get("readOnly")]
    expect(ca.startswith("/etc/microview/agent-ca/") and "/etc/microview/agent-ca" in mounted,
           "--agent-ca from a read-only host directory (the agents serve TLS)")
    expect(c["imagePullPolicy"] == "IfNotPresent", "IfNotPresent")
elif SCENARIO == "long-names":
    for o in objs:
        expect(len(o["metadata"]["name"]) <= 63, f"{o['kind']} name {o['metadata']['name']} > 63")
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "DaemonSet"]
    expect(all(n.endswith(("-agent", "-collector")) for n in names), f"suffixes kept: {names}")
else:
    common()
    ds_agent, conf = agent_checks()
    if SCENARIO == "default":
        col = collector_checks()
        expect(flag(col, "--transport") == "shm", "host collector uses shm")
        expect(flag(col, "--agent") == "unix:/run/microview/agent.sock", "host collector's agent")
        expect(mounts(col)["state"]["readOnly"] is True, "host collector mounts segments read-only")
        expect("--no-probe" not in args(col) and "--expo-cache-max-bytes" not in args(col),
               "probe on and the cache's default bound by default")
        expect("--tick-poll" not in args(col), "tick workers sleep between ticks by default")
        collector_auth_checks(col, [{"kind": "ServiceAccount", "name": "prometheus-k8s",
                                     "namespace": "monitoring"}])
        expect(flag(col, "--detect-ms") == "10", "change detection at most every 10 ms by default")
        expect({e["name"]: e.get("value") for e in container(col).get("env", [])}
               .get("GLIBC_TUNABLES") == "glibc.malloc.hugetlb=1",
               "collector heap on transparent huge pages by default")
        asc = container(ds_agent)["securityContext"]
        expect(asc["capabilities"]["drop"] == ["ALL"] and
               sorted(asc["capabilities"]["add"]) == ["CHOWN", "FOWNER"],
               "agent: CHOWN and FOWNER only (hands segments to non-root containers)")
        host_collector_nonroot(col, conf)
        pols = network_policies()
        expect(sorted(pols) == ["agent", "collector", "webhook"], f"NetworkPolicies {sorted(pols)}")
        cfrom = peers_of(pols["collector"])
        want = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": n}}}
                for n in ("prometheus", "prometheus-adapter")]
        expect(cfrom == [(want, [9469])],
               f"collector: port 9469 from Prometheus and prometheus-adapter in monitoring ({cfrom})")
        expect(peers_of(pols["webhook"]) == [(None, [8443])],
               "webhook: its port only, from anywhere (the API server is not a pod)")
        expect(peers_of(pols["agent"]) == [], "agent: no ingress (it serves no TCP port)")
        expect(container(ds_agent)["securityContext"].get("privileged") is not True,
               "agent not privileged by default")
        expect("rdma_listen" not in conf and "listen" not in conf, "no remote listeners by default")
        webhook_checks("auto")
        expect(not [o for o in objs if o["kind"] == "Secret" and "token" in o["metadata"]["name"]],
               "no collector token without remote collectors")
    elif SCENARIO == "dpu":
        col = collector_checks()
        spec = col["spec"]["template"]["spec"]
        expect(flag(col, "--transport") == "verbs", "DPU collector uses verbs")
        expect([a for a in args(col) if ":7000" in a] == ["10.0.0.5:7000", "10.0.0.6:7000"],
               "one --agent per host")
        expect(flag(col, "--rdma-src-ip") == "10.0.1.9", "--rdma-src-ip")
        expect(flag(col, "--tick-workers") == "2" and "--tick-poll" in args(col),
               "DPU collector: 2 tick workers polling on the DPU's own cores")
        expect(flag(col, "--detect-ms") == "5", "collector.detectMs=5: --detect-ms 5")
        expect(spec["nodeSelector"].get("kubernetes.io/arch") == "arm64", "DPU collector on arm64")
        expect("env" not in container(col), "collector.mallocHugePages=false: no GLIBC_TUNABLES")
        expect(spec["hostNetwork"] is True, "DPU collector on the host network")
        csc = container(col)["securityContext"]
        expect(csc["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
               and "runAsNonRoot" not in spec["securityContext"],
               "DPU collector: uid 0 with IPC_LOCK alone (pinned staging buffer)")
        pols = network_policies()
        expect(sorted(pols) == ["agent", "collector", "webhook"], f"NetworkPolicies {sorted(pols)}")
        expect(peers_of(pols["agent"]) == [([{"ipBlock": {"cidr": "10.0.1.0/24"}}], [7000])],
               f"agent: the control plane's port from networkPolicy.agent.from only "
               f"({peers_of(pols['agent'])})")
        expect(peers_of(pols["webhook"]) == [([{"ipBlock": {"cidr": "192.0.2.10/32"}}], [8443])],
               "webhook: its port from the control plane's addresses (networkPolicy.webhook.from)")
        tok = find("Secret", "-collector-token")
        expect(volumes(col)["collector-token"]["secret"]["secretName"] == tok["metadata"]["name"],
               "collector mounts the token Secret")
        expect(volumes(ds_agent)["collector-token"]["secret"]["secretName"]
               == tok["metadata"]["name"], "agent mounts the same token Secret")
        expect(conf["collector_token_file"] == "/etc/microview/token/token", "agent token file")
        expect(flag(ds_agent, "--rdma-listen") == "$(NODE_IP):7471", "agent --rdma-listen")
        expect(flag(ds_agent, "--listen") == "$(NODE_IP):7000", "agent --listen")
        expect(ds_agent["spec"]["template"]["spec"]["hostNetwork"] is True, "agent host network")
        expect("IPC_LOCK" in container(ds_agent)["securityContext"]["capabilities"]["add"],
               "agent IPC_LOCK with RDMA")
        expect("dev-infiniband" in mounts(ds_agent), "agent mounts /dev/infiniband")
        tls_checks(ds_agent, conf, col, "microview-agent-tls", client=False)
        sm = find("ServiceMonitor")
        expect(sm["spec"]["endpoints"][0]["honorLabels"] is True, "ServiceMonitor honorLabels")
        expect(sm["metadata"]["labels"]["release"] == "prometheus", "ServiceMonitor extra label")
        expect(sm["spec"]["endpoints"][0].get("bearerTokenFile")
               == "/var/run/secrets/kubernetes.io/serviceaccount/token",
               "ServiceMonitor sends Prometheus' own token")
        webhook_checks("auto")
    elif SCENARIO == "dpu-mtls":
        col = collector_checks()
        tls_checks(ds_agent, conf, col, "microview-agent-ca", client=True)
        expect(flag(col, "--agent-server-name") == "microview-agent",
               "collector.dpu.tls.serverName: --agent-server-name")
    elif SCENARIO == "cert-manager":
        mwc, w, secret_name = webhook_checks("cert-manager")
        cert = find("Certificate", "-webhook")
        expect(mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
               == "microview/" + cert["metadata"]["name"], "inject-ca-from names the Certificate")
        expect("caBundle" not in w["clientConfig"], "caBundle left to cainjector")
        expect(cert["spec"]["secretName"] == secret_name, "webhook mounts the Certificate's Secret")
        expect("microview-webhook.microview.svc" in cert["spec"]["dnsNames"], "service DNS name")
        expect(cert["spec"]["issuerRef"]["name"] == find("Issuer", "-webhook")["metadata"]["name"],
               "Certificate uses the chart's Issuer")
        expect(w["failurePolicy"] == "Ignore", "failurePolicy from values")
        expect("monitoring" in w["namespaceSelector"]["matchExpressions"][0]["values"],
               "extra excluded namespace")
        col = collector_checks()
        host_collector_nonroot(col, conf, gid=5000)
        expect(col["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 1001,
               "collector.runAsUser from values")
        expect(not [o for o in objs if o["kind"] == "NetworkPolicy"],
               "networkPolicy.enabled false: no NetworkPolicy")
        expect("--no-probe" in args(col), "collector.probe false: --no-probe")
        expect(flag(col, "--expo-cache-max-bytes") == "64Mi", "--expo-cache-max-bytes from values")
        pm = find("PodMonitor")
        expect(pm["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True, "PodMonitor honorLabels")
        expect(pm["spec"]["podMetricsEndpoints"][0].get("authorization")
               == {"type": "Bearer", "credentials": {"name": "prometheus-reader-token",
                                                     "key": "token"}},
               "PodMonitor sends the reader token from collector.auth.scrapeSecret")
        collector_auth_checks(col, [{"kind": "ServiceAccount", "name": "prometheus",
                                     "namespace": "monitoring"},
                                    {"kind": "Group", "name": "keda-readers",
                                     "apiGroup": "rbac.authorization.k8s.io"}])
        ad = find("ConfigMap", "-adapter-config")
        expect(ad["metadata"]["namespace"] == "monitoring", "adapter rules in monitoring")
        rules = yaml.safe_load(ad["data"]["config.yaml"])["rules"]
        expect(len(rules) == 4 and all("metricsQuery" in r for r in rules), "4 adapter rules")
    elif SCENARIO == "keda":
        col = collector_checks()
        svc = find("Service", "-collector-keda")
        sel = svc["spec"]["selector"]
        labels = col["spec"]["template"]["metadata"]["labels"]
        expect(svc["spec"].get("clusterIP") == "None", "the KEDA Service is headless")
        expect(all(labels.get(k) == v for k, v in sel.items()) and
               sel.get("app.kubernetes.io/component") == "collector",
               "the KEDA Service selects the collector pods")
        expect([(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(9469, "metrics")],
               "the KEDA Service's port is the pod port (metrics-api needs the pod port in its url)")
        sa = find("ServiceAccount", "-keda-reader")
        tok = find("Secret", "-keda-reader")
        expect(sa["metadata"]["namespace"] == "keda" and tok["metadata"]["namespace"] == "keda",
               "reader identity in KEDA's namespace (ClusterTriggerAuthentication reads it there)")
        expect(tok["type"] == "kubernetes.io/service-account-token" and
               tok["metadata"]["annotations"]["kubernetes.io/service-account.name"] ==
               sa["metadata"]["name"], "token Secret of the reader ServiceAccount")
        rb = find("ClusterRoleBinding", "-keda-reader")
        expect(rb["roleRef"]["name"] == "microview-metrics-reader" and
               rb["subjects"] == [{"kind": "ServiceAccount", "name": "microview-keda-reader",
                                   "namespace": "keda"}],
               "the reader is bound to the metrics-reader role (get /api/v1/value) and nothing else")
        pols = network_policies()
        cfrom = peers_of(pols["collector"])
        keda_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}},
                     "podSelector": {"matchLabels": {"app": "keda-operator"}}}
        sc = find("Deployment", "-scaler")
        scaler_peer = {"podSelector": {"matchLabels": sc["spec"]["selector"]["matchLabels"]}}
        expect(len(cfrom) == 1 and cfrom[0][1] == [9469] and keda_peer in cfrom[0][0] and
               scaler_peer in cfrom[0][0] and len(cfrom[0][0]) == 4,
               f"collector: KEDA's operator and the scaler added to its peers ({cfrom})")
        collector_auth_checks(col, [{"kind": "ServiceAccount", "name": "prometheus-k8s",
                                     "namespace": "monitoring"}])
        scaler_checks(sc, col, pols)
    elif SCENARIO == "rdma-required":
        expect(conf["require_rdma"] is True and conf["rdma_retry_ms"] == 5000, "require_rdma")
        expect(container(ds_agent)["securityContext"]["privileged"] is True, "agent privileged")
        img = container(ds_agent)["image"]
        expect(img == "registry.example.com:5000/microview/microview:0.1.0@sha256:"
               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
               f"image registry/repository:tag@digest ({img})")
        expect(volumes(ds_agent)["collector-token"]["secret"]["secretName"] == "microview-token",
               "existing token Secret")
        expect(not [o for o in objs if o["kind"] == "Secret" and "token" in o["metadata"]["name"]],
               "no token Secret created when one exists")
        col = collector_checks()
        host_collector_nonroot(col, conf)
        pols = network_policies()
        expect("agent" in pols and peers_of(pols["agent"]) == [],
               "agent.remote off: the agent's NetworkPolicy admits nothing")
        expect(flag(col, "--transport") == "shm", "host collector next to an RDMA agent")
        collector_no_auth_checks(col)
        webhook_checks("auto")
    else:
        expect(False, "unknown scenario")

print(f"{checks} checks")
