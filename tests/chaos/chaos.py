#!/usr/bin/python3
"""Chaos test: the agent, the collector and writers are SIGKILLed and restarted at random for a
bounded time while every scrape of /metrics is checked against what the writers wrote.

Usage: chaos.py BUILD_DIR [--duration S] [--seed N] [--writers N] ... (see --help)

Everything runs in a fresh temp dir: a standalone agent (unix socket), a collector on a loopback
port, and writer slots, each running tests/chaos/chaos_writer (libmicroview only) on a segment
that `microviewctl create --owner-pid` leased for it, so the agent reaps it when the writer dies.
Each writer incarnation gets the agent labels writer=wS, inc=K and writes wid=wS.K itself.

Every scrape is parsed strictly; `promtool check metrics` checks some; and for each incarnation:
  identity   wid (written by the writer) matches writer/inc (attached by the agent), K is known
  values     counter n, gauge 0.5 + 3 n, histogram count n with every bucket and the sum the
             exact function of n the writer's step sequence gives; n never above what the writer
             had announced (its progress file), never below what it had done --fresh seconds
             before, never below a value served earlier for the same incarnation
  lost       a live writer is served once agent, collector and writer have all been up for
             --appear seconds, and a collector keeps serving a live writer it has served
  ghost      a dead writer's series are gone --vanish seconds after agent and collector were
             both up after its death
  crashes    agent, collector and writers only exit when killed (SIGTERM at the end: exit 0)
`/api/v1/value` is checked on some scrapes the same way (counter bounds). Exit 0 iff no
violation. The seed is printed so a failure can be replayed (timing still differs).
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

VALUES = (0.0625, 0.25, 0.75, 8.0)  # chaos_writer.c: step i observes VALUES[(i - 1) % 4]
BOUNDS = (0.125, 0.5, 1.0, 4.0, math.inf)
FAMILIES = ("chaos_ops_total", "chaos_last_op", "chaos_op_value")
SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?[0-9]+))?')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')
# The collector's own figures (summed over reasons and segments) at each instance's last scrape.
COLLECTOR_FIGURES = {"microview_segment_errors_total": "quarantines",
                     "microview_segment_torn_reads_total": "torn_reads",
                     "microview_collector_ticks_missed_total": "ticks_missed"}
REFUSED = 75  # the launcher could not lease a segment (agent down or killed mid-call)


def hist_expect(n):
    """Cumulative bucket counts and sum after n steps of chaos_writer."""
    per = [(n + 3 - j) // 4 for j in range(4)]  # observations of VALUES[j]
    cum, buckets = 0, []
    for b in BOUNDS:
        cum = sum(per[j] for j in range(4) if VALUES[j] <= b)
        buckets.append(cum)
    return buckets, sum(VALUES[j] * per[j] for j in range(4))


def parse_exposition(body):
    """Strict Prometheus text 0.0.4: returns [(name, labels, value)] or raises ValueError."""
    out, seen = [], set()
    for no, line in enumerate(body.split("\n"), 1):
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        if line.startswith("#"):
            raise ValueError(f"line {no}: unexpected comment {line[:80]!r}")
        m = SAMPLE.fullmatch(line)
        if not m:
            raise ValueError(f"line {no}: not a sample {line[:120]!r}")
        labels, rest = {}, m.group(2) or ""
        while rest:
            lm = LABEL.match(rest)
            if not lm or lm.group(1) in labels:
                raise ValueError(f"line {no}: bad labels {line[:120]!r}")
            labels[lm.group(1)] = lm.group(2)
            rest = rest[lm.end():]
        value = float(m.group(3))  # also +Inf, -Inf, NaN
        key = (m.group(1), tuple(sorted(labels.items())))
        if key in seen:
            raise ValueError(f"line {no}: duplicate series {line[:120]!r}")
        seen.add(key)
        out.append((m.group(1), labels, value))
    return out


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(p / 100.0 * len(xs))) - 1)]


class Proc:
    def __init__(self, argv, log, env=None):
        self.started = time.time()
        self.killed = None
        self.log = log
        # Children die with the driver, even when it is SIGKILLed (e.g. a ctest timeout);
        # setpriv (util-linux) rather than a preexec_fn, which makes every spawn slow.
        with open(log, "ab") as f:
            self.p = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--"] + argv,
                                      stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env)
        self.pid = self.p.pid

    def kill(self):
        self.killed = time.time()
        try:
            self.p.kill()
        except ProcessLookupError:
            pass
        self.p.wait()  # reaped at once: the agent must not see a zombie as a live owner

    def poll(self):
        return self.p.poll()


class Inc:
    """One writer incarnation."""

    def __init__(self, slot, k):
        self.slot, self.k = slot, k
        self.wid = f"w{slot}.{k}"
        self.proc = None
        self.t0 = None            # registered (writer's clock), from its progress file
        self.done = self.reserved = 0
        self.died = None          # time the process was reaped (killed or exited)
        self.final = False        # progress can no longer change
        self.history = []         # (time, done) samples for the freshness bound
        self.last = {}            # family -> highest n served
        self.seen_by = set()      # collector instances that served it
        self.lost_on = set()      # collector instances it was reported lost on
        self.linger = 0.0         # longest it was served after its writer died (s)


class Chaos:
    def __init__(self, a):
        self.a = a
        self.bin = os.path.join(a.build, "bin")
        self.tmp = tempfile.mkdtemp(prefix="mv-chaos-")
        self.segs = os.path.join(self.tmp, "segs")
        self.prog = os.path.join(self.tmp, "progress")
        os.makedirs(self.prog)
        self.sock = os.path.join(self.segs, "agent.sock")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.rng = random.Random(a.seed)
        self.promtool = shutil.which("promtool")
        self.agent = self.collector = None
        self.agent_ready = None       # when the current agent accepted connections
        self.coll_no = 0              # collector instance number
        self.pending = {}             # what -> time to (re)start it
        self.slots = [None] * a.writers
        self.slot_next = [0.0] * a.writers
        self.incs = {}
        self.active = set()           # incarnations whose series may still be served
        self.last_groups = None       # the writers' series of the last good scrape
        self.next_k = 0
        self.stats = {k: 0 for k in (
            "scrapes", "scrapes_failed", "series_checked", "promtool_checked", "api_checked",
            "kill_agent", "kill_collector", "kill_writer", "kill_all", "writers_started",
            "writer_leases_refused")}
        self.appear = []              # time-to-appear samples (s)
        self.scrape_max = 0.0
        self.violations = []
        self.coll_figures = {}        # collector instance -> figures of its last scrape
        self.usage = {}               # pid -> (cpu ticks, time) for the CPU figures
        self.t_begin = time.time()

    # ---- processes -------------------------------------------------------------------------

    def violation(self, what):
        t = time.time() - self.t_begin
        self.violations.append(f"t={t:.2f}s {what}")
        if len(self.violations) <= 50:
            print(f"VIOLATION t={t:.2f}s {what}", flush=True)

    def start_agent(self):
        self.agent = Proc([os.path.join(self.bin, "microview-agent"), "--standalone", "--dir",
                           self.segs, "--log-level", self.a.log_level],
                          os.path.join(self.tmp, "agent.log"))
        self.agent_ready = None

    def start_collector(self):
        self.coll_no += 1
        self.collector = Proc([os.path.join(self.bin, "microview-collector"), "--agent",
                               "unix:" + self.sock, "--listen", f"127.0.0.1:{self.port}",
                               "--tick-ms", str(self.a.tick_ms), "--log-level",
                               self.a.log_level], os.path.join(self.tmp, "collector.log"))

    def start_writer(self, slot):
        inc = Inc(slot, self.next_k)
        self.next_k += 1
        script = ('out=$("$1" create --agent "unix:$2" --size 16384 --owner-pid $$ '
                  '--label writer="$3" --label inc="$4") || exit %d\n'
                  'path=$(printf "%%s\\n" "$out" | sed -n "s/^path=//p")\n'
                  'exec "$5" --segment "$path" --id "$3.$4" --progress "$6" --rate "$7" '
                  '--max-seconds "$8"' % REFUSED)
        inc.proc = Proc(["/bin/sh", "-c", script, "chaos-writer",
                         os.path.join(self.bin, "microviewctl"), self.sock, f"w{slot}",
                         str(inc.k), os.path.join(self.bin, "chaos_writer"),
                         os.path.join(self.prog, inc.wid), str(self.a.rate),
                         str(self.a.duration + 120)], os.path.join(self.tmp, "writers.log"))
        self.incs[inc.wid] = inc
        self.active.add(inc.wid)
        self.slots[slot] = inc
        self.stats["writers_started"] += 1

    def writer_died(self, inc):
        inc.died = time.time()
        self.read_progress(inc)
        inc.final = True
        self.slots[inc.slot] = None

    def kill_agent(self):
        if self.agent:
            self.agent.kill()
            self.agent = None
            self.agent_ready = None
            self.stats["kill_agent"] += 1
            self.pending["agent"] = time.time() + self.rng.uniform(0, self.a.max_down)

    def kill_collector(self):
        if self.collector:
            self.collector.kill()
            self.collector = None
            self.stats["kill_collector"] += 1
            self.pending["collector"] = time.time() + self.rng.uniform(0, self.a.max_down)

    def kill_writer(self, slot):
        inc = self.slots[slot]
        if inc:
            inc.proc.kill()
            self.writer_died(inc)
            self.stats["kill_writer"] += 1
            self.slot_next[slot] = time.time() + self.rng.uniform(0, self.a.max_down)

    def chaos_event(self):
        r = self.rng.random()
        live = [s for s, inc in enumerate(self.slots) if inc]
        if r < 0.22:
            self.kill_agent()
        elif r < 0.44:
            self.kill_collector()
        elif r < 0.84:
            if live:
                self.kill_writer(self.rng.choice(live))
        elif r < 0.92:
            self.kill_agent()
            self.kill_collector()
        else:
            self.stats["kill_all"] += 1
            self.kill_agent()
            self.kill_collector()
            for s in live:
                self.kill_writer(s)

    def agent_accepts(self):
        c = socket.socket(socket.AF_UNIX)
        try:
            c.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            c.close()

    def supervise(self):
        """Restarts what is due, notices exits nobody asked for, tracks readiness."""
        now = time.time()
        for what, when in list(self.pending.items()):
            if now >= when:
                del self.pending[what]
                (self.start_agent if what == "agent" else self.start_collector)()
        for name in ("agent", "collector"):
            p = getattr(self, name)
            if p and p.poll() is not None:
                self.violation(f"{name} exited by itself with {p.poll()} (see {p.log})")
                setattr(self, name, None)
                self.pending[name] = now
        if self.agent and self.agent_ready is None and self.agent_accepts():
            self.agent_ready = time.time()
        for slot, inc in enumerate(self.slots):
            if inc is None:
                if self.agent_ready and now >= self.slot_next[slot]:
                    self.start_writer(slot)
                continue
            rc = inc.proc.poll()
            if rc is None:
                if inc.t0 is None:
                    self.read_progress(inc)
                continue
            self.writer_died(inc)
            self.slot_next[slot] = now + 0.2
            if rc == REFUSED:
                self.stats["writer_leases_refused"] += 1
            else:
                self.violation(f"writer {inc.wid} exited by itself with {rc}")

    # ---- progress ----------------------------------------------------------------------------

    def read_progress(self, inc):
        if inc.final:
            return
        try:
            with open(os.path.join(self.prog, inc.wid)) as f:
                t0, done, reserved = f.read().split()
        except (OSError, ValueError):
            return
        inc.t0, inc.done, inc.reserved = float(t0), int(done), int(reserved)

    # ---- checks ------------------------------------------------------------------------------

    def scrape(self):
        self.last_groups = None
        live = [inc for inc in self.incs.values() if not inc.final]
        t_start = time.time()
        for inc in live:
            self.read_progress(inc)
            inc.history.append((t_start, inc.done))
        had_progress = {i.wid for i in live if i.t0 is not None and i.t0 < t_start - 1}
        coll_no, coll = self.coll_no, self.collector
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=5) as r:
                body = r.read().decode()
        except (OSError, urllib.error.URLError) as e:
            self.stats["scrapes_failed"] += 1
            if coll and time.time() - coll.started > self.a.http_bound:
                self.violation(f"collector #{coll_no} up {time.time() - coll.started:.1f}s "
                               f"but /metrics failed: {e}")
            return
        t_end = time.time()
        self.scrape_max = max(self.scrape_max, t_end - t_start)
        for inc in live:
            self.read_progress(inc)
        self.stats["scrapes"] += 1
        try:
            samples = parse_exposition(body)
        except ValueError as e:
            self.violation(f"scrape does not parse: {e}")
            return
        if self.promtool and self.stats["scrapes"] % self.a.promtool_every == 1:
            self.check_promtool(body)
        groups, own = {}, {}
        self.coll_figures[coll_no] = own
        for name, labels, value in samples:
            if name in COLLECTOR_FIGURES:
                key = COLLECTOR_FIGURES[name]
                own[key] = own.get(key, 0) + value
            fam = name[:-len("_bucket")] if name.endswith("_bucket") else name
            fam = fam[:-len("_sum")] if fam.endswith("_sum") else fam
            fam = fam[:-len("_count")] if fam.endswith("_count") else fam
            if fam not in FAMILIES:
                continue
            wid = labels.get("wid")
            if wid is None or wid != f"{labels.get('writer')}.{labels.get('inc')}":
                self.violation(f"identity mix-up: {name}{labels} (wid is written by the "
                               "writer, writer/inc attached by the agent)")
                continue
            groups.setdefault(wid, {}).setdefault(fam, []).append((name, labels, value))
        for wid, fams in groups.items():
            inc = self.incs.get(wid)
            if inc is None:
                self.violation(f"series of an incarnation never started: {wid}")
                continue
            self.check_inc(inc, fams, t_start)
        self.check_presence(groups, coll_no, t_start, t_end, had_progress)
        self.last_groups = groups
        if self.stats["scrapes"] % self.a.api_every == 0 and groups:
            self.check_api(self.incs[self.rng.choice(sorted(groups))], t_start)

    def check_promtool(self, body):
        r = subprocess.run([self.promtool, "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=30)
        self.stats["promtool_checked"] += 1
        if r.returncode != 0:
            self.violation("promtool check metrics: " + (r.stdout + r.stderr).decode()[:400])

    def lower_bound(self, inc, t_start):
        """What the writer had done --fresh seconds before this scrape began."""
        lo, keep = 0, 0
        for i, (t, done) in enumerate(inc.history):
            if t <= t_start - self.a.fresh:
                lo, keep = done, i
        del inc.history[:keep]
        return lo

    def check_n(self, inc, fam, n, lo, what):
        self.stats["series_checked"] += 1
        hi = inc.reserved if inc.t0 is not None else 0
        if n > hi:
            self.violation(f"{inc.wid} {what}: {n} steps, but the writer had announced "
                           f"at most {hi}")
        if n < lo:
            self.violation(f"{inc.wid} {what}: {n} steps, but the writer had done {lo} "
                           f"{self.a.fresh}s before the scrape (stale)")
        if n < inc.last.get(fam, 0):
            self.violation(f"{inc.wid} {what}: {n} steps after {inc.last[fam]} was served "
                           "(went backwards)")
        inc.last[fam] = max(n, inc.last.get(fam, 0))

    def check_inc(self, inc, fams, t_start):
        lo = self.lower_bound(inc, t_start)
        for fam, rows in fams.items():
            if fam == "chaos_ops_total":
                v = rows[0][2]
                if len(rows) != 1 or v != int(v) or v < 0:
                    self.violation(f"{inc.wid} counter: {rows}")
                    continue
                self.check_n(inc, fam, int(v), lo, "chaos_ops_total")
            elif fam == "chaos_last_op":
                g = rows[0][2]
                n = (g - 0.5) / 3
                if g == 0:
                    n = 0  # not set yet
                elif len(rows) != 1 or n != int(n) or n < 1:
                    self.violation(f"{inc.wid} gauge {g} is no value the writer sets")
                    continue
                self.check_n(inc, fam, int(n), lo, "chaos_last_op")
            else:
                self.check_hist(inc, rows, lo)

    def check_hist(self, inc, rows, lo):
        count = [v for name, _, v in rows if name.endswith("_count")]
        total = [v for name, _, v in rows if name.endswith("_sum")]
        buckets = sorted((float(l["le"]), v) for name, l, v in rows if name.endswith("_bucket"))
        if (len(count) != 1 or len(total) != 1 or [b for b, _ in buckets] != list(BOUNDS)
                or count[0] != int(count[0])):
            self.violation(f"{inc.wid} histogram has the wrong shape: {rows}")
            return
        n = int(count[0])
        want_b, want_sum = hist_expect(n)
        if [v for _, v in buckets] != want_b or total[0] != want_sum:
            self.violation(f"{inc.wid} histogram count {n}: buckets {[v for _, v in buckets]} "
                           f"sum {total[0]!r}, the writer's steps give {want_b} {want_sum!r}")
        self.check_n(inc, "chaos_op_value", n, lo, "chaos_op_value_count")

    def check_presence(self, groups, coll_no, t_start, t_end, had_progress):
        coll_since = self.collector.started if self.collector else None
        up = coll_since is not None and self.agent_ready is not None
        for wid in list(self.active):
            inc = self.incs[wid]
            alive = inc.died is None and inc.proc.poll() is None
            if wid in groups:
                fams = groups[wid]
                if inc.died is not None:
                    inc.linger = max(inc.linger, t_end - inc.died)
                    since = max(inc.died, coll_since, self.agent_ready) if up else None
                    if since and t_start - since > self.a.vanish:
                        self.violation(f"{wid} still served {t_start - inc.died:.1f}s after "
                                       f"the writer died (agent and collector up "
                                       f"{t_start - since:.1f}s since)")
                elif wid in had_progress and not all(f in fams for f in FAMILIES[:2]):
                    self.violation(f"{wid} served without its counter or gauge, though it had "
                                   "registered them over a second before the scrape")
                if coll_no not in inc.seen_by and up and inc.t0 is not None:
                    self.appear.append(max(0.0, t_end - max(inc.t0, coll_since,
                                                            self.agent_ready)))
                inc.seen_by.add(coll_no)
                continue
            if alive and coll_no not in inc.lost_on:
                if coll_no in inc.seen_by:
                    inc.lost_on.add(coll_no)
                    self.violation(f"{wid} lost: collector #{coll_no} served it before, the "
                                   "writer is alive, and it is no longer served")
                elif (inc.t0 is not None and up and
                      t_start - max(inc.t0, coll_since, self.agent_ready) > self.a.appear):
                    inc.lost_on.add(coll_no)
                    self.violation(
                        f"{wid} lost: not served {t_start - inc.t0:.1f}s after it started "
                        f"writing (agent ready {t_start - self.agent_ready:.1f}s, collector "
                        f"#{coll_no} up {t_start - coll_since:.1f}s)")
            elif inc.died is not None and up and (
                    t_start - max(inc.died, coll_since, self.agent_ready) > self.a.vanish):
                self.active.discard(wid)  # from now on, being served is a violation
                inc.history = []
        for wid in groups:
            if wid in self.incs and wid not in self.active:
                self.violation(f"{wid} served again after it was gone, its writer dead")

    def check_api(self, inc, t_start):
        q = urllib.parse.urlencode({"metric": "chaos_ops_total", "label": "wid=" + inc.wid})
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/value?{q}",
                                        timeout=5) as r:
                doc = json.load(r)
        except (OSError, urllib.error.URLError, ValueError):
            return  # collector killed meanwhile, or the segment dropped: /metrics judges that
        self.read_progress(inc)
        self.stats["api_checked"] += 1
        v = doc.get("value")
        if doc.get("count") != 1 or not isinstance(v, int):
            self.violation(f"/api/v1/value for {inc.wid}: {doc}")
            return
        self.check_n(inc, "chaos_ops_total", v, self.lower_bound(inc, t_start),
                     "/api/v1/value chaos_ops_total")

    # ---- figures -----------------------------------------------------------------------------

    def usage_of(self, name, p):
        """RSS (kB) and CPU % since the last call for the same process."""
        try:
            with open(f"/proc/{p.pid}/status") as f:
                rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])
        except (OSError, AttributeError, IndexError):
            return f"{name}=down"
        now = time.time()
        t_prev, when = self.usage.get(p.pid, (0, p.started))
        self.usage[p.pid] = (ticks, now)
        cpu = 100.0 * (ticks - t_prev) / os.sysconf("SC_CLK_TCK") / max(now - when, 1e-3)
        return f"{name}_rss_kb={rss} {name}_cpu_pct={cpu:.1f} {name}_age_s={now - p.started:.0f}"

    def figures(self):
        s = self.stats
        a = self.appear
        linger = max((i.linger for i in self.incs.values()), default=0.0)
        line = " ".join(f"{k}={s[k]}" for k in s)
        for key in ("quarantines", "torn_reads", "ticks_missed"):
            line += f" coll_{key}={sum(f.get(key, 0) for f in self.coll_figures.values()):.0f}"
        line += (f" incarnations={len(self.incs)} violations={len(self.violations)}"
                 f" appear_p50_s={percentile(a, 50):.3f} appear_p90_s={percentile(a, 90):.3f}"
                 f" appear_p99_s={percentile(a, 99):.3f}"
                 f" appear_max_s={max(a, default=float('nan')):.3f}"
                 f" dead_served_max_s={linger:.3f} scrape_max_s={self.scrape_max:.3f}")
        return line

    def report(self):
        t = time.time() - self.t_begin
        usage = [self.usage_of(n, p) for n, p in (("agent", self.agent),
                                                  ("collector", self.collector)) if p]
        print(f"t={t:.0f}s {self.figures()} {' '.join(usage)}", flush=True)

    # ---- run ---------------------------------------------------------------------------------

    def settle(self):
        """After the chaos: everything up; every live writer served, every dead one gone."""
        for what in list(self.pending):
            self.pending[what] = 0
        self.slot_next = [0.0] * len(self.slots)
        deadline = time.time() + self.a.appear + self.a.vanish + 5
        missing = ["nothing scraped"]
        while time.time() < deadline:
            self.supervise()
            if self.collector and self.agent_ready and not self.pending:
                self.scrape()
                g = self.last_groups
                if g is None:
                    time.sleep(0.1)
                    continue
                missing = [f"slot {s} empty" for s, i in enumerate(self.slots) if not i]
                missing += [f"{i.wid} not served" for i in self.slots if i and i.wid not in g]
                missing += [f"{w} (dead) still served" for w in g if self.incs[w].died]
                if not missing:
                    return
            time.sleep(0.1)
        self.violation("did not settle after the chaos: " + ", ".join(missing))

    def stop(self):
        """SIGTERM: the agent and collector shut down cleanly (exit 0, no sanitizer report)."""
        for name in ("collector", "agent"):
            p = getattr(self, name)
            if not p:
                continue
            p.p.terminate()
            try:
                rc = p.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.stacks(p)
                p.kill()
                rc = "timeout"
            setattr(self, name, None)
            if rc != 0:
                self.violation(f"{name} exited with {rc} on SIGTERM (see {p.log})")

    def stacks(self, p):
        """Where a process that does not stop is stuck, into its log (when gdb is here)."""
        gdb = shutil.which("gdb")
        if gdb:
            with open(p.log, "ab") as f:
                subprocess.run([gdb, "-p", str(p.pid), "-batch", "-ex", "thread apply all bt"],
                               stdout=f, stderr=f, timeout=60, check=False)

    def cleanup(self):
        for p in [self.agent, self.collector] + [i.proc for i in self.slots if i]:
            if p:
                p.kill()
        if self.violations or self.a.keep:
            print(f"logs kept in {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self):
        a = self.a
        print(f"chaos: seed={a.seed} duration={a.duration}s writers={a.writers} rate={a.rate} "
              f"appear={a.appear}s vanish={a.vanish}s fresh={a.fresh}s dir={self.tmp}",
              flush=True)
        self.start_agent()
        self.start_collector()
        end = self.t_begin + a.duration
        next_event = time.time() + self.rng.uniform(*a.event_every)
        next_report = time.time() + a.report_every
        while time.time() < end:
            self.supervise()
            if time.time() >= next_event:
                self.chaos_event()
                next_event = time.time() + self.rng.uniform(*a.event_every)
            if self.collector:
                self.scrape()
            if time.time() >= next_report:
                self.report()
                next_report += a.report_every
            time.sleep(a.scrape_gap)
        self.settle()
        self.stop()
        print(f"chaos: seed={a.seed} {self.figures()}")
        if self.violations:
            print(f"{len(self.violations)} violations; first ones:")
            for v in self.violations[:20]:
                print("  " + v)
        return 1 if self.violations else 0


def main():
    sanitized = os.environ.get("MV_SANITIZED") == "1"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--duration", type=float, default=40 if sanitized else 60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--writers", type=int, default=6)
    ap.add_argument("--rate", type=int, default=1000, help="steps per second per writer")
    ap.add_argument("--tick-ms", type=int, default=10)
    ap.add_argument("--event-every", type=lambda s: tuple(float(x) for x in s.split(",")),
                    default=(0.3, 1.5), help="LO,HI seconds between chaos events")
    ap.add_argument("--max-down", type=float, default=1.5,
                    help="a killed process is restarted within this many seconds")
    ap.add_argument("--appear", type=float, default=6 if sanitized else 3,
                    help="a live writer is served this long after all were up")
    ap.add_argument("--vanish", type=float, default=8 if sanitized else 5,
                    help="a dead writer is gone this long after agent and collector were up")
    ap.add_argument("--fresh", type=float, default=4 if sanitized else 2,
                    help="served values are at most this many seconds old")
    ap.add_argument("--http-bound", type=float, default=10 if sanitized else 5,
                    help="a collector serves /metrics this long after it was started")
    ap.add_argument("--scrape-gap", type=float, default=0.05)
    ap.add_argument("--promtool-every", type=int, default=25)
    ap.add_argument("--api-every", type=int, default=10)
    ap.add_argument("--report-every", type=float, default=15)
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir and logs")
    a = ap.parse_args()
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    c = Chaos(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    try:
        return c.run()
    finally:
        c.cleanup()


if __name__ == "__main__":
    sys.exit(main())
