#!/usr/bin/env bash
# Helpers for the RDMA wiring scenarios (sourced after lib.sh): start the agent, writers and
# the verbs collector, fetch /metrics, compare RDMA-read values with the writer's own segment.
# shellcheck disable=SC2034  # WIRE_*_PID are read by the scenario scripts that source this

WIRE_CTL_PORT=7000   # agent's TCP control plane
WIRE_RDMA_PORT=7471  # agent's rdma_cm listener
WIRE_HTTP_PORT=9469  # collector's /metrics
WIRE_DIR=${WIRE_DIR:-/tmp/wire}
mkdir -p "$WIRE_DIR"
B=$BUILD/bin

# wire_token: the shared token file (same content on both VMs).
wire_token() { echo "e2e-shared-token-7c1f" >"$WIRE_DIR/token"; echo "$WIRE_DIR/token"; }

# wire_agent: starts the agent on $E2E_SELF_IP (TCP + rdma_cm), logs to $WIRE_DIR/agent.log.
# It reaps every 200 ms (tests see a dead writer's segment go quickly) unless
# WIRE_REAP_MS says otherwise (a benchmark measuring the agent as deployed: 2000).
wire_agent() {
  "$B/microview-agent" --standalone --dir "$WIRE_DIR/segs" --reap-interval-ms "${WIRE_REAP_MS:-200}" \
    --listen "$E2E_SELF_IP:$WIRE_CTL_PORT" --insecure-listen \
    --rdma-listen "$E2E_SELF_IP:$WIRE_RDMA_PORT" \
    --token-file "$(wire_token)" 2>>"$WIRE_DIR/agent.log" &
  WIRE_AGENT_PID=$!
  e2e_wait_tcp "$WIRE_CTL_PORT" 30
}

# wire_gen INSTANCE RATE: a writer leasing a segment with instance=INSTANCE; sets WIRE_GEN_PID.
wire_gen() {
  "$B/microviewctl" gen --agent "unix:$WIRE_DIR/segs/agent.sock" --label service=e2e \
    --label instance="$1" --rate "$2" --counters 2 --gauges 1 --histograms 1 \
    2>>"$WIRE_DIR/gen-$1.log" &
  WIRE_GEN_PID=$!
}

# wire_seg INSTANCE: prints "ID PATH" of the segment with that instance label.
wire_seg() {
  "$B/microviewctl" list --agent "unix:$WIRE_DIR/segs/agent.sock" --json |
    /usr/bin/python3 -c '
import json, sys
want = sys.argv[1]
doc = json.load(sys.stdin)
segs = doc["segments"] if isinstance(doc, dict) else doc
for s in segs:
    labels = s.get("labels", {})
    if isinstance(labels, list):
        labels = {l["name"]: l["value"] for l in labels}
    if labels.get("instance") == want:
        print(s["id"], s["path"])
        break
' "$1"
}

# wire_collector AGENT_IP: the verbs collector reading from the agent at AGENT_IP.
wire_collector() {
  "$B/microview-collector" --transport verbs --agent "$1:$WIRE_CTL_PORT" \
    --rdma-port "$WIRE_RDMA_PORT" --rdma-token-file "$(wire_token)" \
    --listen "127.0.0.1:$WIRE_HTTP_PORT" --tick-ms 50 --quarantine-after-ms 1000 \
    2>>"$WIRE_DIR/collector.log" &
  WIRE_COLL_PID=$!
  e2e_wait_tcp "$WIRE_HTTP_PORT" 30
}

wire_metrics() { curl -sf "http://127.0.0.1:$WIRE_HTTP_PORT/metrics"; }

# wire_has INSTANCE: the collector serves gen_requests_total for that instance.
wire_has() { wire_metrics | grep -q "^gen_requests_total{.*instance=\"$1\""; }

# wire_value INSTANCE: the collector's gen_requests_total{worker="0"} for that instance.
wire_value() {
  wire_metrics | grep "^gen_requests_total{" | grep "instance=\"$1\"" | grep 'worker="0"' |
    awk '{print $2}' | head -n 1
}

# wire_compare METRICS_FILE DUMP_JSON INSTANCE: every value of the segment equals the served one.
wire_compare() { /usr/bin/python3 "$REPO/e2e/tests/guest/wire_compare.py" "$@"; }

# wire_stopped PID: the process is stopped (SIGSTOP has taken effect: state T in /proc).
wire_stopped() { [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" = T ]; }

# wire_freeze PID: SIGSTOP to a writer, and wait (10 s at most) until it is stopped, so that
# its segment holds still.
wire_freeze() {
  kill -STOP "$1"
  wait_for --what "writer $1 to stop" 10 wire_stopped "$1"
}

# wire_served_as METRICS_FILE DUMP_JSON INSTANCE: fetches /metrics into METRICS_FILE and
# compares it with the (frozen) segment's dump, quietly: the condition to wait for before the
# comparison is asserted on METRICS_FILE.
wire_served_as() { wire_metrics >"$1" && wire_compare "$@" >/dev/null 2>&1; }

# wire_agent_down: the collector's RDMA queue pair to the agent is no longer usable.
wire_agent_down() { wire_metrics | grep -Eq '^microview_rdma_agent_connected\{[^}]*\} 0$'; }

# wire_flag NAME / wire_await NAME [SECONDS]: flag files in $E2E_RUN, shared by both VMs, by
# which two-VM scenarios take turns; a missing flag dumps the logs and exits.
wire_flag() { touch "$E2E_RUN/$1"; }
wire_await() { e2e_wait_file "$E2E_RUN/$1" "${2:-90}" || { wire_dump_logs; exit 1; }; }

# wire_dump_logs: the component logs, for the run's log file.
wire_dump_logs() {
  for f in "$WIRE_DIR"/*.log; do echo "--- $f"; tail -n 60 "$f"; done
}

# wire_stop_clean PID...: SIGTERM, wait, and assert no sanitizer report in the component logs
# (meaningful with a -DMV_SANITIZE=ON build; always true otherwise).
wire_stop_clean() {
  kill -TERM "$@" 2>/dev/null
  for p in "$@"; do wait "$p" 2>/dev/null; done
  ! grep -lE 'Sanitizer|runtime error' "$WIRE_DIR"/*.log
}
