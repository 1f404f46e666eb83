#!/usr/bin/env bash
# test_chart_upgrade.sh: on a live cluster, `helm upgrade` keeps the webhook's CA, certificate
# and key, the caBundle that matches them, and the collector token (the chart's lookup of its
# own Secrets), while `helm template` makes new ones every time.
#
# Needs a cluster: MV_KUBECONFIG=path/to/kubeconfig (skips with 77 without it). Installs a
# release "mvupgrade" into namespace "mv-chart-upgrade" with the agent off (no device plugin
# is touched), the webhook on with failurePolicy Ignore and a DPU-mode collector whose node
# selector matches no node (so its CA Secret need not exist), then upgrades it and uninstalls it.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CHART=$ROOT/deploy/helm/microview
[ -n "${MV_KUBECONFIG:-}" ] || {
  echo "SKIPPED: MV_KUBECONFIG is not set (a live cluster is needed)"
  exit 77
}
export KUBECONFIG=$MV_KUBECONFIG
HELM=$("$ROOT/scripts/go-tools.sh" helm) || exit 1
TMP=$(mktemp -d)
export HELM_CACHE_HOME=$TMP/cache HELM_CONFIG_HOME=$TMP/config HELM_DATA_HOME=$TMP/data
rel=mvupgrade
ns=mv-chart-upgrade
cleanup() {
  "$HELM" uninstall "$rel" -n "$ns" --wait --timeout 120s >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT
"$HELM" uninstall "$rel" -n "$ns" --wait >/dev/null 2>&1 # a leftover of an interrupted run

set_args=(--set agent.enabled=false --set webhook.failurePolicy=Ignore --set webhook.replicas=1
  --set collector.mode=dpu --set 'collector.dpu.agents={192.0.2.1:7000}'
  --set collector.dpu.nodeSelector.microview\\.io/role=none --set collector.dpu.tls.caSecretName=mvupgrade-agent-ca)

# secrets FILE: prints ca.crt, tls.crt, tls.key, caBundle and the token of a rendered release.
secrets() {
  python3 - "$1" <<'PY'
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o]
tls = [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-webhook-tls")][0]
tok = [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-collector-token")][0]
mwc = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"][0]
ca = mwc["webhooks"][0]["clientConfig"]["caBundle"]
assert ca == tls["data"]["ca.crt"], "caBundle differs from the Secret's ca.crt"
for v in (tls["data"]["ca.crt"], tls["data"]["tls.crt"], tls["data"]["tls.key"], ca, tok["data"]["token"]):
    print(v)
PY
}

fail=0
if ! "$HELM" upgrade --install "$rel" "$CHART" -n "$ns" --create-namespace "${set_args[@]}" >"$TMP/out" 2>&1; then
  echo "FAIL: helm install"
  cat "$TMP/out"
  exit 1
fi
"$HELM" get manifest "$rel" -n "$ns" >"$TMP/r1.yaml"
secrets "$TMP/r1.yaml" >"$TMP/s1" || fail=1
if ! "$HELM" upgrade "$rel" "$CHART" -n "$ns" --reuse-values --set collector.tickMs=20 >"$TMP/out" 2>&1; then
  echo "FAIL: helm upgrade"
  cat "$TMP/out"
  exit 1
fi
"$HELM" get manifest "$rel" -n "$ns" >"$TMP/r2.yaml"
secrets "$TMP/r2.yaml" >"$TMP/s2" || fail=1
if [ "$fail" -eq 0 ] && cmp -s "$TMP/s1" "$TMP/s2" && [ "$(wc -l <"$TMP/s1")" -eq 5 ]; then
  echo "PASS: helm upgrade kept the CA, certificate, key, caBundle and token"
else
  echo "FAIL: helm upgrade changed the webhook's TLS material or the token"
  fail=1
fi
grep -q -- '--tick-ms' "$TMP/r2.yaml" && grep -A1 -- '- --tick-ms' "$TMP/r2.yaml" | grep -q '"20"' ||
  {
    echo "FAIL: the upgrade did not apply collector.tickMs=20"
    fail=1
  }
"$HELM" template "$rel" "$CHART" -n "$ns" "${set_args[@]}" >"$TMP/t.yaml"
if secrets "$TMP/t.yaml" | cmp -s - "$TMP/s1"; then
  echo "FAIL: helm template reproduced the installed secrets (lookup cannot work there)"
  fail=1
else
  echo "PASS: helm template renders new TLS material (no lookup without a cluster), as documented"
fi
exit "$fail"
