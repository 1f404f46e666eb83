#!/usr/bin/env bash
# test_chart.sh: checks deploy/helm/microview with the real helm and the Kubernetes Go API types.
#
#  - helm lint --strict, with the defaults and every ci/*-values.yaml;
#  - helm template of each scenario decoded strictly by tests/tools/k8scheck (unknown or
#    duplicate field = error), its object list equal to tests/chart/expect/<scenario>.txt, and
#    the scenario's key fields asserted by check_render.py;
#  - every values key has a comment above it and a schema entry, every schema object is
#    closed (additionalProperties: false, or a schema for map values);
#  - with BUILD_DIR (ctest passes it), each scenario's agent, collector and webhook commands,
#    arguments and config run with the real binaries (run_components.py): the probes pass, the
#    webhook serves the chart-generated certificate (verified with the caBundle) and turns 64Ki
#    into pages at the chart's page size;
#  - the schema refuses unknown keys and mistyped values; the validation template refuses
#    contradictions (each with the message it must print);
#  - NOTES.txt renders the port-forward and query commands and the Pod Security label command,
#    and warns when plaintext is chosen for the agents' control plane;
#  - the agents' TCP control plane: TLS keys and mounts (check_render.py), the real agent and
#    DPU collector over TLS with throwaway certificates (run_components.py), and plaintext run
#    only when chosen on both ends (agent.remote.insecure, collector.dpu.tls.insecure);
#  - NetworkPolicies and the non-root collector in the renders (check_render.py); the Pod
#    Security level in deploy/manifests/00-namespace.yaml and docs/install.md;
#  - k8scheck itself refuses the broken objects in tests/chart/bad/;
#  - names stay within 63 characters for a long release name;
#  - yamllint on the values, scenarios and manifests; deploy/manifests equals the default
#    render; the chart's prometheus-adapter rules equal deploy/autoscaling's.
# Usage: tests/chart/test_chart.sh [BUILD_DIR]
# Prints PASS/FAIL per check and "chart: N passed, M failed"; exit 1 on any failure, 77 when a
# needed tool is absent.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CHART=$ROOT/deploy/helm/microview
HERE=$ROOT/tests/chart
BUILD=${1:-}

# shellcheck source=SCRIPTDIR/../lib/testlib.sh
. "$ROOT/tests/lib/testlib.sh"
[ -x /usr/local/go/bin/go ] || command -v go >/dev/null || skip "no Go toolchain to build helm and k8scheck"
command -v yamllint >/dev/null || skip "yamllint not installed (scripts/deps.sh test)"
command -v python3 >/dev/null && python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml not installed"

HELM=$("$ROOT/scripts/go-tools.sh" helm) || {
  echo "FAIL: building helm (scripts/go-tools.sh helm)"
  exit 1
}
K8SCHECK=$("$ROOT/scripts/go-tools.sh" k8scheck) || {
  echo "FAIL: building k8scheck (scripts/go-tools.sh k8scheck)"
  exit 1
}
echo "helm: $("$HELM" version --short)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export HELM_CACHE_HOME=$TMP/helm/cache HELM_CONFIG_HOME=$TMP/helm/config HELM_DATA_HOME=$TMP/helm/data

# ok / ko: testlib's pass / fail (counted in $passes / $fails).
ok() { pass "$@"; }
ko() { fail "$@"; }

# expect_fail NAME PATTERN CMD...: CMD must exit non-zero and print PATTERN (ERE).
expect_fail() {
  local name=$1 pattern=$2
  shift 2
  if "$@" >"$TMP/out" 2>&1; then
    ko "$name: accepted, should have been refused"
  elif grep -Eq -- "$pattern" "$TMP/out"; then
    ok "$name (refused: $(grep -Em1 -- "$pattern" "$TMP/out" | sed 's/^[[:space:]]*//' | cut -c1-150))"
  else
    ko "$name: refused without /$pattern/:"
    sed 's/^/    /' "$TMP/out" | head -20
  fi
}

# ---- lint ---------------------------------------------------------------------------------
if "$HELM" lint --strict "$CHART" >"$TMP/out" 2>&1; then ok "helm lint --strict (defaults)"; else
  ko "helm lint --strict (defaults)"
  cat "$TMP/out"
fi
for f in "$CHART"/ci/*-values.yaml; do
  if "$HELM" lint --strict "$CHART" -f "$f" >"$TMP/out" 2>&1; then ok "helm lint --strict -f ci/$(basename "$f")"; else
    ko "helm lint --strict -f ci/$(basename "$f")"
    cat "$TMP/out"
  fi
done

# ---- render every scenario, decode strictly, compare object lists ---------------------------
for f in "$CHART"/ci/*-values.yaml; do
  sc=$(basename "$f" -values.yaml)
  out=$TMP/$sc.yaml
  if ! "$HELM" template microview "$CHART" --namespace microview -f "$f" >"$out" 2>"$TMP/err"; then
    ko "helm template $sc"
    cat "$TMP/err"
    continue
  fi
  ok "helm template $sc ($(grep -c '^kind:' "$out") objects)"
  if "$K8SCHECK" -list "$out" >"$TMP/$sc.list" 2>"$TMP/err"; then
    ok "k8scheck $sc: $(tail -1 "$TMP/err")"
  else
    ko "k8scheck $sc"
    cat "$TMP/err"
  fi
  if sort "$TMP/$sc.list" | diff -u "$HERE/expect/$sc.txt" - >"$TMP/diff"; then
    ok "objects of $sc equal expect/$sc.txt"
  else
    ko "objects of $sc differ from expect/$sc.txt"
    cat "$TMP/diff"
  fi
  if python3 "$HERE/check_render.py" "$sc" "$out" >"$TMP/out" 2>&1; then
    ok "fields of $sc: $(tail -1 "$TMP/out")"
  else
    ko "fields of $sc"
    cat "$TMP/out"
  fi
  if [ -n "$BUILD" ]; then
    if python3 "$HERE/run_components.py" "$BUILD" "$out" >"$TMP/out" 2>&1; then
      ok "real binaries with the $sc render: $(tail -1 "$TMP/out")"
    else
      ko "real binaries with the $sc render"
      cat "$TMP/out"
    fi
  fi
done
[ -n "$BUILD" ] || echo "NOTE: no BUILD_DIR argument: the rendered commands and configs were not run with the real binaries"

# ---- every values key commented, schema closed, values and schema in step --------------------
if python3 "$HERE/check_values_doc.py" "$CHART" >"$TMP/out" 2>&1; then
  ok "values.yaml commented and in step with values.schema.json (closed objects): $(tail -1 "$TMP/out")"
else
  ko "values.yaml / values.schema.json"
  cat "$TMP/out"
fi

# ---- schema: unknown keys and wrong types are refused ----------------------------------------
expect_fail "schema: unknown top-level key" "additional properties 'agnet' not allowed|agnet" \
  "$HELM" template microview "$CHART" --set agnet.enabled=false
expect_fail "schema: unknown nested key" "additional properties 'issuerRefName' not allowed" \
  "$HELM" template microview "$CHART" --set webhook.tls.certManager.issuerRefName=x
expect_fail "schema: unknown key in a list item" "additional properties 'opertor' not allowed" \
  "$HELM" template microview "$CHART" --set 'agent.tolerations[0].opertor=Exists'
expect_fail "schema: string for an integer" "collector.port.*(expected integer|got string)|got string, want integer" \
  "$HELM" template microview "$CHART" --set-string collector.port=9469
expect_fail "schema: integer for a boolean" "agent.enabled.*(boolean|got number)" \
  "$HELM" template microview "$CHART" --set agent.enabled=1
expect_fail "schema: value outside the enum" "collector.mode" \
  "$HELM" template microview "$CHART" --set collector.mode=dpuu
expect_fail "schema: malformed size" "global.pageSize" \
  "$HELM" template microview "$CHART" --set global.pageSize=4KB
expect_fail "schema: a root collector (collector.runAsUser 0)" "collector.runAsUser|runAsUser" \
  "$HELM" template microview "$CHART" --set collector.runAsUser=0
expect_fail "schema: segment group 0 (root's group)" "global.segmentGroup|segmentGroup" \
  "$HELM" template microview "$CHART" --set global.segmentGroup=0
expect_fail "schema: unknown key in a NetworkPolicy peer" "additional properties 'podSelecter' not allowed" \
  "$HELM" template microview "$CHART" --set 'networkPolicy.collector.from[0].podSelecter.matchLabels.a=b'

# ---- validation template: contradictions -----------------------------------------------------
expect_fail "validate: dpu mode without agents" "collector.mode dpu needs collector.dpu.agents" \
  "$HELM" template microview "$CHART" --set collector.mode=dpu
expect_fail "validate: dpu mode without the agents' listener and RDMA" \
  "needs agent.remote.enabled" \
  "$HELM" template microview "$CHART" --set collector.mode=dpu --set 'collector.dpu.agents={10.0.0.5:7000}'
expect_fail "validate: require_rdma without RDMA" "agent.rdma.required needs agent.rdma.enabled" \
  "$HELM" template microview "$CHART" --set agent.rdma.required=true
expect_fail "validate: RDMA without host networking" "need agent.hostNetwork: true" \
  "$HELM" template microview "$CHART" --set agent.rdma.enabled=true
expect_fail "validate: page size not a multiple of 4Ki" "global.pageSize 6Ki: must be a positive multiple of 4Ki" \
  "$HELM" template microview "$CHART" --set global.pageSize=6Ki
expect_fail "validate: pool smaller than a page" "agent.poolSize 4Ki: must hold 1 to 1000000 pages" \
  "$HELM" template microview "$CHART" --set global.pageSize=8Ki --set agent.poolSize=4Ki
expect_fail "validate: host collector without agent" "collector.mode host needs agent.enabled" \
  "$HELM" template microview "$CHART" --set agent.enabled=false
expect_fail "validate: scaler without collectors" "scaler.enabled needs collector.enabled" \
  "$HELM" template microview "$CHART" --set scaler.enabled=true --set collector.enabled=false
expect_fail "validate: ServiceMonitor and PodMonitor" "both enabled" \
  "$HELM" template microview "$CHART" --set collector.serviceMonitor.enabled=true \
  --set collector.podMonitor.enabled=true
expect_fail "validate: secret TLS without a Secret" "webhook.tls.mode secret needs" \
  "$HELM" template microview "$CHART" --set webhook.tls.mode=secret
expect_fail "validate: PodMonitor with auth but no token Secret" \
  "collector.podMonitor with collector.auth.mode kubernetes needs collector.auth.scrapeSecret.name" \
  "$HELM" template microview "$CHART" --set collector.podMonitor.enabled=true
expect_fail "schema: collector.auth.mode outside the enum" "collector.auth.mode" \
  "$HELM" template microview "$CHART" --set collector.auth.mode=off
expect_fail "schema: collector.auth.maxInflight over the HTTP threads" "collector.auth.maxInflight" \
  "$HELM" template microview "$CHART" --set collector.auth.maxInflight=8
# The agents' TCP control plane: TLS or an explicit plaintext choice, on both ends.
dpu_tls=(-f "$CHART/ci/dpu-values.yaml")
expect_fail "validate: agent.remote without TLS or insecure" \
  "agent.remote.enabled needs agent.remote.tls.secretName .* or agent.remote.insecure: true" \
  "$HELM" template microview "$CHART" --set agent.hostNetwork=true --set agent.remote.enabled=true
expect_fail "validate: agent.remote TLS and insecure both" \
  "agent.remote.tls.secretName and agent.remote.insecure both set" \
  "$HELM" template microview "$CHART" "${dpu_tls[@]}" --set agent.remote.insecure=true
expect_fail "validate: requireClientCert without the agents' Secret" \
  "agent.remote.tls.requireClientCert needs agent.remote.tls.secretName" \
  "$HELM" template microview "$CHART" "${dpu_tls[@]}" --set agent.remote.tls.secretName= \
  --set agent.remote.insecure=true --set agent.remote.tls.requireClientCert=true \
  --set collector.dpu.tls.insecure=true
expect_fail "validate: requireClientCert without the DPU collector's client pair" \
  "agent.remote.tls.requireClientCert with collector.mode dpu needs collector.dpu.tls.clientSecretName" \
  "$HELM" template microview "$CHART" "${dpu_tls[@]}" --set agent.remote.tls.requireClientCert=true
expect_fail "validate: DPU collector without the agents' CA" \
  "collector.mode dpu needs the agents' CA: collector.dpu.tls.caSecretName .* or collector.dpu.tls.insecure: true" \
  "$HELM" template microview "$CHART" --set agent.enabled=false --set collector.mode=dpu \
  --set 'collector.dpu.agents={10.0.0.5:7000}'
expect_fail "validate: DPU collector plaintext to TLS agents" \
  "collector.dpu.tls.insecure but this release's agents serve TLS \\(agent.remote.tls.secretName\\)" \
  "$HELM" template microview "$CHART" "${dpu_tls[@]}" --set collector.dpu.tls.insecure=true
expect_fail "validate: DPU collector plaintext with a CA" \
  "collector.dpu.tls.insecure with collector.dpu.tls.caSecretName/clientSecretName/serverName" \
  "$HELM" template microview "$CHART" --set agent.enabled=false --set collector.mode=dpu \
  --set 'collector.dpu.agents={10.0.0.5:7000}' --set collector.dpu.tls.insecure=true \
  --set collector.dpu.tls.caSecretName=ca
expect_fail "schema: agent.remote.tls.requireClientCert not a boolean" "requireClientCert" \
  "$HELM" template microview "$CHART" --set-string agent.remote.tls.requireClientCert=yes

# Plaintext chosen on both ends: the agent starts with insecure_listen, the DPU collector syncs
# with it without TLS flags.
insecure=(--set agent.remote.tls.secretName= --set agent.remote.insecure=true --set collector.dpu.tls.insecure=true)
if "$HELM" template microview "$CHART" --namespace microview "${dpu_tls[@]}" "${insecure[@]}" >"$TMP/insecure.yaml" 2>"$TMP/err" &&
  python3 - "$TMP/insecure.yaml" <<'PY'; then
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o]
conf = yaml.safe_load([o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-agent")][0]["data"]["agent.yaml"])
col = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-collector")][0]
spec = col["spec"]["template"]["spec"]
a = spec["containers"][0]["args"]
names = {v["name"] for v in spec["volumes"]}
sys.exit(0 if conf.get("insecure_listen") is True and "tls_cert_file" not in conf
         and not {"--agent-ca", "--agent-cert"} & set(a) and "agent-ca" not in names else 1)
PY
  ok "insecure on both ends: insecure_listen: true, no TLS flags or mounts on the DPU collector"
else
  ko "insecure on both ends"
  cat "$TMP/err"
fi
if [ -n "$BUILD" ]; then
  if python3 "$HERE/run_components.py" "$BUILD" "$TMP/insecure.yaml" >"$TMP/out" 2>&1; then
    ok "real binaries with plaintext chosen on both ends: $(tail -1 "$TMP/out")"
  else
    ko "real binaries with plaintext chosen on both ends"
    cat "$TMP/out"
  fi
fi

# ---- k8scheck refuses what the API server would ----------------------------------------------
for f in "$HERE"/bad/*.yaml; do
  want=$(sed -n 's/^# expect: //p' "$f")
  expect_fail "k8scheck refuses bad/$(basename "$f")" "$want" "$K8SCHECK" "$f"
done

# ---- names within 63 characters for a long release name ---------------------------------------
long=a-release-name-that-is-as-long-as-helm-allows-53-char # helm refuses release names over 53
[ ${#long} -eq 53 ] || ko "test bug: the long release name has ${#long} characters"
: >"$TMP/out"
if "$HELM" template "$long" "$CHART" --namespace microview -f "$CHART/ci/dpu-values.yaml" \
  --set webhook.tls.mode=cert-manager --set prometheusAdapter.enabled=true >"$TMP/long.yaml" 2>"$TMP/err" &&
  "$K8SCHECK" "$TMP/long.yaml" 2>"$TMP/err" &&
  python3 "$HERE/check_render.py" long-names "$TMP/long.yaml" >"$TMP/out" 2>&1; then
  ok "long release name: $(tail -1 "$TMP/out")"
else
  ko "long release name"
  cat "$TMP/err" "$TMP/out" 2>/dev/null
fi

# ---- NOTES.txt renders (helm template skips it: render a copy through tpl) ----------------------
cp -r "$CHART" "$TMP/notes-chart"
cp "$CHART/templates/NOTES.txt" "$TMP/notes-chart/notes.copy"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n    {{- tpl (.Files.Get "notes.copy") . | nindent 4 }}\n' \
  >"$TMP/notes-chart/templates/notes-render.yaml"
if "$HELM" template microview "$TMP/notes-chart" -n microview --show-only templates/notes-render.yaml \
  >"$TMP/notes.yaml" 2>"$TMP/err" &&
  grep -q 'kubectl -n microview port-forward svc/microview-collector 9469:9469' "$TMP/notes.yaml" &&
  grep -q 'curl -s -H "Authorization: Bearer $TOKEN" http://127.0.0.1:9469/metrics' "$TMP/notes.yaml" &&
  grep -q 'credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token' "$TMP/notes.yaml" &&
  grep -q 'bound now: ServiceAccount monitoring/prometheus-k8s' "$TMP/notes.yaml" &&
  ! grep -q 'WARNING' "$TMP/notes.yaml" &&
  grep -q 'honor_labels: true' "$TMP/notes.yaml" &&
  grep -q 'kubectl label namespace microview pod-security.kubernetes.io/enforce=privileged --overwrite' "$TMP/notes.yaml"; then
  ok "NOTES.txt: port-forward, query with a reader's token, the scrape token, honor_labels and Pod Security (enforce=privileged)"
else
  ko "NOTES.txt"
  cat "$TMP/err" "$TMP/notes.yaml"
fi
if "$HELM" template microview "$TMP/notes-chart" -n microview --show-only templates/notes-render.yaml \
  --set collector.auth.mode=none >"$TMP/notes.yaml" 2>"$TMP/err" &&
  grep -q 'curl -s http://127.0.0.1:9469/metrics' "$TMP/notes.yaml" &&
  grep -q 'WARNING: collector.auth.mode is none' "$TMP/notes.yaml"; then
  ok "NOTES.txt with collector.auth.mode none: plain query and the warning"
else
  ko "NOTES.txt with collector.auth.mode none"
  cat "$TMP/err" "$TMP/notes.yaml"
fi
if "$HELM" template microview "$TMP/notes-chart" -n microview --show-only templates/notes-render.yaml \
  "${dpu_tls[@]}" "${insecure[@]}" >"$TMP/notes.yaml" 2>"$TMP/err" &&
  grep -q 'WARNING: agent.remote.insecure is true' "$TMP/notes.yaml" &&
  grep -q 'WARNING: collector.dpu.tls.insecure is true' "$TMP/notes.yaml" &&
  ! "$HELM" template microview "$TMP/notes-chart" -n microview --show-only templates/notes-render.yaml \
    "${dpu_tls[@]}" 2>&1 | grep -q 'WARNING: .*insecure'; then
  ok "NOTES.txt: warns about agent.remote.insecure and collector.dpu.tls.insecure, only when chosen"
else
  ko "NOTES.txt: insecure warnings"
  cat "$TMP/err" "$TMP/notes.yaml"
fi

# ---- plain manifests and the DPU static pod ---------------------------------------------------
if "$ROOT/scripts/render-manifests.sh" "$TMP/microview.yaml" 2>"$TMP/err" &&
  diff -u "$ROOT/deploy/manifests/microview.yaml" "$TMP/microview.yaml" >"$TMP/diff"; then
  ok "deploy/manifests/microview.yaml equals the default render (scripts/render-manifests.sh)"
else
  ko "deploy/manifests/microview.yaml differs from the default render: run scripts/render-manifests.sh"
  head -40 "$TMP/diff"
  cat "$TMP/err"
fi
if "$K8SCHECK" "$ROOT"/deploy/manifests/*.yaml "$ROOT"/deploy/manifests/dpu-static-pod/*.yaml 2>"$TMP/err"; then
  ok "k8scheck deploy/manifests (+ DPU static pod): $(tail -1 "$TMP/err")"
else
  ko "k8scheck deploy/manifests"
  cat "$TMP/err"
fi
if python3 "$HERE/check_render.py" static-pod "$ROOT/deploy/manifests/dpu-static-pod/microview-collector.yaml" >"$TMP/out" 2>&1; then
  ok "DPU static pod: $(tail -1 "$TMP/out")"
else
  ko "DPU static pod"
  cat "$TMP/out"
fi

# ---- Pod Security: the plain manifests' namespace and the install guide carry the level --------
if grep -q '^    pod-security.kubernetes.io/enforce: privileged$' "$ROOT/deploy/manifests/00-namespace.yaml" &&
  grep -q 'kubectl label namespace $NS pod-security.kubernetes.io/enforce=privileged' "$ROOT/docs/install.md"; then
  ok "Pod Security: 00-namespace.yaml and docs/install.md carry enforce=privileged"
else
  ko "Pod Security: enforce=privileged missing from deploy/manifests/00-namespace.yaml or docs/install.md"
fi

# ---- prometheus-adapter rules: one source of truth ---------------------------------------------
if python3 - "$ROOT/deploy/autoscaling/prometheus-adapter-rules.yaml" "$CHART/files/prometheus-adapter-config.yaml" <<'PY'; then
import sys, yaml
cm = yaml.safe_load(open(sys.argv[1]))
sys.exit(0 if cm["data"]["config.yaml"] == open(sys.argv[2]).read() else 1)
PY
  ok "chart files/prometheus-adapter-config.yaml equals deploy/autoscaling's config.yaml"
else
  ko "chart files/prometheus-adapter-config.yaml differs from deploy/autoscaling/prometheus-adapter-rules.yaml"
fi

# ---- yamllint -----------------------------------------------------------------------------------
if yamllint -s -c "$ROOT/deploy/.yamllint.yaml" "$CHART/Chart.yaml" "$CHART/values.yaml" "$CHART"/ci/*.yaml \
  "$CHART"/files/*.yaml "$ROOT"/deploy/manifests/*.yaml "$ROOT"/deploy/manifests/dpu-static-pod/*.yaml \
  "$ROOT"/deploy/autoscaling/*.yaml \
  >"$TMP/out" 2>&1; then
  ok "yamllint (chart values, scenarios, files, manifests, autoscaling examples)"
else
  ko "yamllint"
  cat "$TMP/out"
fi

echo "chart: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
