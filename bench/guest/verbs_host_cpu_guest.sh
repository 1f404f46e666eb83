#!/usr/bin/env bash
# Guest script, two VMs (bench/verbs_host_cpu.sh): what the verbs collector's reads cost the
# host whose segments it reads. a ("host") runs the agent and the writers; b ("DPU") the
# verbs collector. a measures two equal windows, first with b's collector connected but not
# reading (it reads once a minute), then with b reading every segment every tick: the CPU
# time of the agent's process and of the writers' (utime + stime from /proc/PID/stat, in clock
# ticks; and, for the agent and the writers, every thread's on-CPU time in nanoseconds from
# /proc/PID/task/TID/schedstat, the figure the goal uses), how
# often the agent's threads woke up (voluntary context switches), and the kernel's CPU (the
# VM's system + irq + softirq time from /proc/stat: with Soft-RoCE the responder side of
# every READ runs in this kernel's rxe driver, the work a hardware RNIC does without the
# host's CPU). b counts the READs of the window (microview_rdma_reads_total). The VMs take
# turns through flag files.
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
# proc_ns PID...: on-CPU time of every thread of the processes so far, in nanoseconds (the
# first field of /proc/PID/task/TID/schedstat: the scheduler's own count, not clock ticks).
proc_ns() {
  local p
  for p in "$@"; do
    cat /proc/"$p"/task/*/schedstat 2>/dev/null
  done | awk '{s += $1} END {printf "%.0f\n", s}'
}
# wakeups PID: the times the process's threads gave up the CPU so far (voluntary context
# switches, all threads): a count of its events, whatever the emulation's speed. One awk:
# a process started in an emulated VM costs tens of milliseconds.
wakeups() {
  awk '/^voluntary_ctxt_switches:/ {s += $2} END {print s + 0}' /proc/"$1"/task/*/status 2>/dev/null
}
# threads PID: one line per thread of the process, "TID NAME CPU_TICKS WAKEUPS".
threads() {
  awk 'FNR == 1 { n = split(FILENAME, p, "/"); tid = p[n - 1] }
    FILENAME ~ /\/stat$/ { s = $0; sub(/^.*\) /, "", s); split(s, f, " "); cpu[tid] = f[12] + f[13]; next }
    /^Name:/ { v = $0; sub(/^Name:[ \t]*/, "", v); gsub(/[ \t]/, "_", v); name[tid] = v }
    /^voluntary_ctxt_switches:/ { w[tid] = $2 }
    END { for (t in cpu) print t, name[t], cpu[t], w[t] + 0 }' \
    /proc/"$1"/task/*/stat /proc/"$1"/task/*/status 2>/dev/null
}
# thread_delta BEFORE AFTER: per thread name, the CPU (ms) and wakeups between two `threads`
# listings, as "name:ms:wakeups,...", the busiest first.
thread_delta() {
  awk -v hz="$hz" 'NR == FNR { c[$1] = $3; w[$1] = $4; next }
    { n = $2; dc[n] += ($3 - c[$1]) * 1000 / hz; dw[n] += $4 - w[$1] }
    END { for (n in dc) printf "%d %s:%d:%d\n", dc[n], n, dc[n], dw[n] }' "$1" "$2" |
    sort -rn | awk '{printf "%s%s", sep, $2; sep = ","} END {print ""}'
}
# kernel_ms: the VM's system + irq + softirq time so far, in ms.
kernel_ms() { awk -v hz="$hz" '$1 == "cpu" {printf "%d\n", ($4 + $7 + $8) * 1000 / hz}' /proc/stat; }
# reads: the collector's successful RDMA READs so far.
reads() { wire_metrics | awk '/^microview_rdma_reads_total[{ ]/ {s += $NF} END {printf "%d\n", s}'; }
served() { [ "$(wire_metrics | grep -c '^gen_requests_total{')" -ge "$nseg" ]; }

case "$E2E_ROLE" in
a)
  # The agent as deployed: the default reap interval (the wire tests reap 10 times as often).
  WIRE_REAP_MS=2000 wire_agent || { wire_dump_logs; exit 1; }
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
  # Window 1: b's collector is connected (its catalog watch, its RDMA connection) but reads
  # only once a minute, i.e. not in the window: what differs in window 2 is the READs.
  wire_flag a.up
  wire_await b.connected 600
  sleep 2
  threads "$WIRE_AGENT_PID" >/tmp/agent-t0
  s0=$(wakeups "$WIRE_AGENT_PID") a0=$(proc_ms "$WIRE_AGENT_PID") w0=$(proc_ms "${gens[@]}") k0=$(kernel_ms)
  n0=$(proc_ns "$WIRE_AGENT_PID") g0=$(proc_ns "${gens[@]}")
  sleep "$secs"
  n1=$(proc_ns "$WIRE_AGENT_PID") g1=$(proc_ns "${gens[@]}")
  a1=$(proc_ms "$WIRE_AGENT_PID") w1=$(proc_ms "${gens[@]}") k1=$(kernel_ms) s1=$(wakeups "$WIRE_AGENT_PID")
  threads "$WIRE_AGENT_PID" >/tmp/agent-t1
  wire_flag a.ready
  # Window 2: b reads every segment every tick.
  wire_await b.reading 120
  threads "$WIRE_AGENT_PID" >/tmp/agent-t2
  s2=$(wakeups "$WIRE_AGENT_PID") a2=$(proc_ms "$WIRE_AGENT_PID") w2=$(proc_ms "${gens[@]}") k2=$(kernel_ms)
  n2=$(proc_ns "$WIRE_AGENT_PID") g2=$(proc_ns "${gens[@]}")
  sleep "$secs"
  n3=$(proc_ns "$WIRE_AGENT_PID") g3=$(proc_ns "${gens[@]}")
  a3=$(proc_ms "$WIRE_AGENT_PID") w3=$(proc_ms "${gens[@]}") k3=$(kernel_ms) s3=$(wakeups "$WIRE_AGENT_PID")
  threads "$WIRE_AGENT_PID" >/tmp/agent-t3
  # Where the agent's CPU went, by thread (the goal line's diagnosis when it grew).
  e2e_result "role=host_threads idle=$(thread_delta /tmp/agent-t0 /tmp/agent-t1)" \
    "reading=$(thread_delta /tmp/agent-t2 /tmp/agent-t3)"
  wire_flag a.measured
  wire_await b.done 60
  e2e_result "role=host seconds=$secs segments=$nseg agent_ms_idle=$((a1 - a0))" \
    "agent_ms_reading=$((a3 - a2)) writers_ms_idle=$((w1 - w0)) writers_ms_reading=$((w3 - w2))" \
    "kernel_ms_idle=$((k1 - k0)) kernel_ms_reading=$((k3 - k2))" \
    "agent_wakeups_idle=$((s1 - s0)) agent_wakeups_reading=$((s3 - s2))" \
    "agent_ns_idle=$((n1 - n0)) agent_ns_reading=$((n3 - n2))" \
    "writers_ns_idle=$((g1 - g0)) writers_ns_reading=$((g3 - g2))"
  ;;
b)
  # collector TICK_MS: the verbs collector, reading every segment every TICK_MS (no backing
  # off); sets coll and waits until it serves every segment.
  collector() {
    "$B/microview-collector" --transport verbs --agent "$E2E_PEER_IP:$WIRE_CTL_PORT" \
      --rdma-port "$WIRE_RDMA_PORT" --rdma-token-file "$(wire_token)" \
      --listen "127.0.0.1:$WIRE_HTTP_PORT" --tick-ms "$1" --max-interval-ms "$1" \
      2>>"$WIRE_DIR/collector.log" &
    coll=$!
    e2e_wait_tcp "$WIRE_HTTP_PORT" 30 || { wire_dump_logs; exit 1; }
    wait_for --what "the collector serving $nseg segments" 60 served || { wire_dump_logs; exit 1; }
  }
  wire_await a.up 600
  collector 60000 # connected, one read at start, the next a minute later
  wire_flag b.connected
  wire_await a.ready 120
  kill "$coll"
  wait "$coll"
  collector "$tick_ms"
  r0=$(reads) c0=$(proc_ms "$coll")
  wire_flag b.reading
  wire_await a.measured 120
  r1=$(reads) c1=$(proc_ms "$coll")
  wire_flag b.done
  e2e_result "role=dpu reads=$((r1 - r0)) collector_ms=$((c1 - c0)) tick_ms=$tick_ms"
  ;;
*) e2e_log "unknown role $E2E_ROLE"; exit 2 ;;
esac
