#!/usr/bin/env bash
# Guest script, two VMs (bench/verbs_host_cpu.sh): what the verbs collector's reads cost the
# host whose segments it reads. a ("host") runs the agent and the writers; b ("DPU") the
# verbs collector reading every segment every tick. a measures two equal windows, first with
# no collector, then with b reading: the CPU time of the agent's process and of the writers'
# (utime + stime from /proc/PID/stat), and of the kernel (the VM's system + irq + softirq
# time from /proc/stat: with Soft-RoCE the responder side of every READ runs in this
# kernel's rxe driver, the work a hardware RNIC does without the host's CPU). b counts the
# READs of the window (microview_rdma_reads_total). The VMs take turns through flag files.
set -uo pipefail
# shellcheck source=/dev/null
. "$REPO/e2e/tests/guest/lib.sh"
# shellcheck source=/dev/null
. "$REPO/e2e/tests/guest/wire_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT
secs=${VERBS_CPU_SECONDS:-10}
nseg=${VERBS_CPU_SEGMENTS:-16}
tick_ms=${VERBS_CPU_TICK_MS:-1}
hz=$(getconf CLK_TCK)

# proc_ms PID...: CPU (user + system) of the processes so far, in ms.
proc_ms() {
  local t=0 p v
  for p in "$@"; do
    # Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    v=$(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}') || v=0
    t=$((t + v))
  done
  echo $((t * 1000 / hz))
}
# kernel_ms: the VM's system + irq + softirq time so far, in ms.
kernel_ms() { awk -v hz="$hz" '$1 == "cpu" {printf "%d\n", ($4 + $7 + $8) * 1000 / hz}' /proc/stat; }
# reads: the collector's successful RDMA READs so far.
reads() { wire_metrics | awk '/^microview_rdma_reads_total[{ ]/ {s += $NF} END {printf "%d\n", s}'; }
served() { [ "$(wire_metrics | grep -c '^gen_requests_total{')" -ge "$nseg" ]; }

case "$E2E_ROLE" in
a)
  wire_agent || { wire_dump_logs; exit 1; }
  gens=()
  # One writer at a time: many starting together overwhelm a small emulated VM.
  for i in $(seq 1 "$nseg"); do
    wire_gen "i$i" 20
    gens+=("$WIRE_GEN_PID")
    wait_for --what "writer $i" 60 grep -q event=gen.started "$WIRE_DIR/gen-i$i.log" ||
      { wire_dump_logs; exit 1; }
  done
  listed() { [ "$("$B/microviewctl" list --agent "unix:$WIRE_DIR/segs/agent.sock" | grep -c seg-)" -ge "$nseg" ]; }
  wait_for --what "$nseg segments" 60 listed || { wire_dump_logs; exit 1; }
  sleep 2
  # Window 1: nobody reads.
  a0=$(proc_ms "$WIRE_AGENT_PID") w0=$(proc_ms "${gens[@]}") k0=$(kernel_ms)
  sleep "$secs"
  a1=$(proc_ms "$WIRE_AGENT_PID") w1=$(proc_ms "${gens[@]}") k1=$(kernel_ms)
  wire_flag a.ready
  # Window 2: b reads every segment every tick.
  wire_await b.reading 120
  a2=$(proc_ms "$WIRE_AGENT_PID") w2=$(proc_ms "${gens[@]}") k2=$(kernel_ms)
  sleep "$secs"
  a3=$(proc_ms "$WIRE_AGENT_PID") w3=$(proc_ms "${gens[@]}") k3=$(kernel_ms)
  wire_flag a.measured
  wire_await b.done 60
  e2e_result "role=host seconds=$secs segments=$nseg agent_ms_idle=$((a1 - a0))" \
    "agent_ms_reading=$((a3 - a2)) writers_ms_idle=$((w1 - w0)) writers_ms_reading=$((w3 - w2))" \
    "kernel_ms_idle=$((k1 - k0)) kernel_ms_reading=$((k3 - k2))"
  ;;
b)
  wire_await a.ready 180
  "$B/microview-collector" --transport verbs --agent "$E2E_PEER_IP:$WIRE_CTL_PORT" \
    --rdma-port "$WIRE_RDMA_PORT" --rdma-token-file "$(wire_token)" \
    --listen "127.0.0.1:$WIRE_HTTP_PORT" --tick-ms "$tick_ms" --max-interval-ms "$tick_ms" \
    2>>"$WIRE_DIR/collector.log" &
  coll=$!
  e2e_wait_tcp "$WIRE_HTTP_PORT" 30 || { wire_dump_logs; exit 1; }
  wait_for --what "the collector serving $nseg segments" 60 served || { wire_dump_logs; exit 1; }
  r0=$(reads) c0=$(proc_ms "$coll")
  wire_flag b.reading
  wire_await a.measured 120
  r1=$(reads) c1=$(proc_ms "$coll")
  wire_flag b.done
  e2e_result "role=dpu reads=$((r1 - r0)) collector_ms=$((c1 - c0)) tick_ms=$tick_ms"
  ;;
*) e2e_log "unknown role $E2E_ROLE"; exit 2 ;;
esac
