#!/usr/bin/env bash
# tests/chart/test_chart_upgrade.sh against the e2e cluster: up.sh, the chart installed, upgraded
# and uninstalled through the real API server (helm's lookup of the chart's own Secrets), down.sh.
# With MV_KUBECONFIG set, the test runs against that cluster instead and no cluster is started.
# Usage: chart_upgrade.sh [LOG_DIR]. Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${MV_KUBECONFIG:-}" ]; then
  exec "$here/../../../tests/chart/test_chart_upgrade.sh"
fi
. "$here/../lib.sh"
cluster_exclusive "$@"
need_host_tools
private_kubelet_dir "$0" "$@"
keep=${1:-$MV_CACHE/e2e-cluster-logs/chart-upgrade}
rm -rf "$keep"
trap 'MV_KEEP_LOGS="$keep" "$MV_CLUSTER_SRC/down.sh"' EXIT
"$MV_CLUSTER_SRC/up.sh" >/dev/null || {
  echo "FAIL: cluster did not come up (logs: $keep)"
  exit 1
}
MV_KUBECONFIG=$ADMIN_KUBECONFIG "$here/../../../tests/chart/test_chart_upgrade.sh"
