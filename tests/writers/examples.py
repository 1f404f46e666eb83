#!/usr/bin/python3
"""client_golang's examples/ programs on the MicroView drop-in (test_examples.sh builds them).

For each example: the published build and the drop-in build (only import paths changed)
run side by side; the drop-in build writes into a segment of a standalone agent, which the
shm collector serves on loopback.
  1. Both builds' own promhttp /metrics have the same families, types and label names.
  2. Every series of the drop-in build's /metrics that lives in the segment is served by
     MicroView's /metrics with the same value: the program's output is scraped (A), then
     MicroView's after three collector ticks (B), then the program's again (C); a series
     whose value did not move between A and C must read exactly that value in B. Attempts
     repeat until every such series has been seen still (the programs observe at random).
  3. Families served only in process (collectors that compute values when gathered:
     go_*, process_*, go_build_info) are listed with that reason and must be absent from
     MicroView; the Summary's quantiles are listed as differing (MicroView serves
     NAME_window{quantile} from its own sketch instead).

Usage: examples.py BUILD_DIR WORK_DIR EXAMPLE...   (WORK_DIR/EXAMPLE-orig, -mv binaries)
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import mvtest  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
TYPE = re.compile(r'^# TYPE (\S+) (\S+)$')
IN_PROCESS = re.compile(r'^(go_|process_)')  # go_build_info included
IN_PROCESS_WHY = ("computed by a client_golang collector when gathered (Go runtime, process, "
                  "build info): served in process by promhttp, not through the segment")


def norm(labels):
    """Labels as a comparable tuple; le and quantile compared as numbers."""
    out = []
    for k, v in labels.items():
        if k in ("le", "quantile"):
            v = float(v.replace("Inf", "inf"))
        out.append((k, v))
    return tuple(sorted(out))


def parse(body):
    """Text format: ({(name, labels) : value}, {family: type})."""
    samples, types = {}, {}
    for line in body.splitlines():
        m = TYPE.match(line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        if line.startswith("#") or not line.strip():
            continue
        m = SAMPLE.match(line)
        if m:
            ls = dict(LABEL.findall(m.group(2) or ""))
            samples[(m.group(1), norm(ls))] = float(m.group(3).replace("Inf", "inf"))
    return samples, types


def family_of(name, types):
    for suf in ("_bucket", "_sum", "_count", ""):
        if name.endswith(suf) and name[:len(name) - len(suf)] in types:
            return name[:len(name) - len(suf)]
    return name


def scrape(url):
    status, _, body = mvtest.http_get(url)
    if status != 200:
        return None
    return parse(body.decode("utf-8", "replace"))


def served(mv, name, labels):
    """MicroView's value for a series: same name, labels a superset (identity labels added)."""
    want = set(labels)
    for (n, ls), v in mv.items():
        if n == name and want <= set(ls):
            return v
    return None


def same(a, b):
    return a == b or (a != a and b != b)


def run_example(r, build, work, ex, agent_sock, coll_url):
    bins = build + "/bin/"
    out = subprocess.run([bins + "microviewctl", "create", "--agent", "unix:" + agent_sock,
                          "--size", "1Mi", "--label", "example=" + ex],
                         capture_output=True, text=True, timeout=30)
    seg = dict(l.split("=", 1) for l in out.stdout.split() if "=" in l).get("path")
    if not r.check("%s: agent created a segment" % ex, out.returncode == 0 and seg, out.stderr):
        return
    procs = mvtest.Procs(work)
    try:
        port_o, port_m = mvtest.free_port(), mvtest.free_port()
        procs.spawn(ex + "-orig", [os.path.join(work, ex + "-orig"),
                                   "-listen-address", "127.0.0.1:%d" % port_o])
        env = dict(os.environ, MICROVIEW_SEGMENT=seg)
        with open(os.path.join(work, ex + "-mv.log"), "w") as err:
            procs.procs.append(subprocess.Popen(
                [os.path.join(work, ex + "-mv"), "-listen-address", "127.0.0.1:%d" % port_m],
                env=env, stdout=subprocess.DEVNULL, stderr=err))
        procs.logs[ex + "-mv"] = os.path.join(work, ex + "-mv.log")
        url_o = "http://127.0.0.1:%d/metrics" % port_o
        url_m = "http://127.0.0.1:%d/metrics" % port_m
        if not r.check("%s: both builds serve /metrics" % ex,
                       mvtest.wait_until(lambda: scrape(url_o) and scrape(url_m), 20)):
            procs.dump_logs()
            return
        time.sleep(1.5)  # let the programs observe something
        (so, to), (sm, tm) = scrape(url_o), scrape(url_m)
        r.check("%s: same families and types in both builds' promhttp output (%d families)" %
                (ex, len(to)), to == tm, "published %s vs drop-in %s" % (
                    sorted(set(to.items()) ^ set(tm.items())), ""))
        keys_o = {(n, tuple(k for k, _ in ls if k != "le")) for n, ls in so}
        keys_m = {(n, tuple(k for k, _ in ls if k != "le")) for n, ls in sm}
        r.check("%s: same series names and label names in both builds" % ex, keys_o == keys_m,
                sorted(keys_o ^ keys_m)[:8])
        # 2. values through MicroView
        in_proc = sorted(f for f in tm if IN_PROCESS.match(f))
        seg_fams = sorted(f for f in tm if not IN_PROCESS.match(f))
        for f in in_proc:
            print("  %s: family %s: in process only -- %s" % (ex, f, IN_PROCESS_WHY))
        still, checked, wrong = {}, set(), []
        series = [k for k in sm if family_of(k[0], tm) in seg_fams and
                  not (tm.get(family_of(k[0], tm)) == "summary" and k[0] == family_of(k[0], tm))]
        for _ in range(60):
            a, _t = scrape(url_m)
            time.sleep(0.04)
            b = scrape(coll_url)
            c, _t = scrape(url_m)
            if a is None or b is None or c is None:
                continue
            b = b[0]
            for k in series:
                if k in checked or k not in a or k not in c or not same(a[k], c[k]):
                    continue
                checked.add(k)
                v = served(b, k[0], k[1])
                if v is None or not same(v, a[k]):
                    wrong.append((k, a[k], v))
            if len(checked) == len(series):
                break
        r.check("%s: %d of %d segment series seen still and equal on MicroView's /metrics" %
                (ex, len(checked) - len(wrong), len(series)),
                not wrong and len(checked) == len(series),
                "unequal %s; never still %s" % (wrong[:5], sorted(set(series) - checked)[:5]))
        mv_now = scrape(coll_url)[0]
        leaked = [f for f in in_proc if any(n.startswith(f) for n, _ in mv_now)]
        r.check("%s: %d in-process families absent from MicroView" % (ex, len(in_proc)),
                not leaked, leaked)
        for f in seg_fams:
            if tm[f] != "summary":
                continue

            def window(f=f):
                now = scrape(coll_url)
                return now and [(dict(ls)["quantile"], v) for (n, ls), v in now[0].items()
                                if n == f + "_window"]
            qs = mvtest.wait_until(window, 10)
            r.check("%s: summary %s: MicroView serves %s_window{quantile} from its sketch" %
                    (ex, f, f), qs)
            print("  %s: summary %s: quantiles differ by design (program: lifetime, from the "
                  "drop-in's buckets; MicroView: each 1 s export window) -- program: %s; "
                  "MicroView: %s" % (ex, f, sorted((dict(ls)["quantile"], v) for (n, ls), v
                                                   in sm.items() if n == f), sorted(qs or [])))
    finally:
        procs.stop()
        if r.failed:
            procs.dump_logs()


def main():
    build, work, examples = sys.argv[1], sys.argv[2], sys.argv[3:]
    r = mvtest.Report()
    procs = mvtest.Procs(work)
    try:
        segs = os.path.join(work, "segs")
        procs.spawn("agent", [build + "/bin/microview-agent", "--standalone", "--dir", segs])
        sock = os.path.join(segs, "agent.sock")
        if not r.check("agent up", mvtest.wait_until(lambda: os.path.exists(sock), 10)):
            procs.dump_logs()
            return 1
        port = mvtest.free_port()
        procs.spawn("collector", [build + "/bin/microview-collector", "--agent", "unix:" + sock,
                                  "--listen", "127.0.0.1:%d" % port, "--tick-ms", "10",
                                  "--window-ms", "1000"])
        coll = "http://127.0.0.1:%d/metrics" % port
        if not r.check("collector up", mvtest.wait_until(lambda: scrape(coll), 15)):
            procs.dump_logs()
            return 1
        for ex in examples:
            run_example(r, build, work, ex, sock, coll)
    finally:
        procs.stop()
        if r.failed:
            procs.dump_logs()
    print(r.summary("writers_examples"))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
