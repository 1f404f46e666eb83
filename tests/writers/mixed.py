#!/usr/bin/python3
"""Go writer and libmicroview processes (through the Python package) format, register and
update one segment at the same time: the formatting flock, the registration lock and the
generation protocol must interlock across the two implementations. The libmicroview
processes shard what they register (MICROVIEW_SHARDS=4, spec section 5.2), and one of them
registers a sharded counter and gauge before the Go processes start, which then update them
(Go adds to shard 0); a last Go process sets the gauge, which must zero the other shards. The C reader
(mv_seg_decode) must then accept the segment and see every series with its value, the sum of
its shards.

Usage: mixed.py MV_SEG_DECODE GO_MIX_BIN PYTHON_SITE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

N = 60          # series per process
PROCS = 3       # processes per language

PY_MIX = r"""
import sys
from microview import _microview
seg = _microview.Segment(sys.argv[1])
n, tag = int(sys.argv[2]), sys.argv[3]
for i in range(n):
    seg.register("counter", "mix_total", "Mixed writers.", None,
                 (("writer", tag), ("i", str(i)))).inc(i + 1)
seg.register("counter", "mix_shared_total", "Shared.", None, ()).inc()
"""

PY_FIRST = r"""
import sys
from microview import _microview
seg = _microview.Segment(sys.argv[1])
seg.register("counter", "mix_sharded_total", "Sharded first.", None, ()).inc(100)
g = seg.register("gauge", "mix_level", "Sharded gauge.", None, ())
g.inc(7.0)
assert g.get() == 7.0, g.get()
"""


def main():
    decode, gomix, site = sys.argv[1:4]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="mv-mixed-") as tmp:
        seg = os.path.join(tmp, "segment")
        with open(seg, "wb") as f:
            f.write(bytes(1 << 20))  # all zero: the first process of either kind formats it
        env = dict(os.environ, PYTHONPATH=site, MICROVIEW_SHARDS="4")
        first = subprocess.run(["/usr/bin/python3", "-c", PY_FIRST, seg], env=env)
        if first.returncode != 0:
            print("FAIL the first libmicroview writer exited %d" % first.returncode)
            failed += 1
        procs = []
        for k in range(PROCS):
            procs.append(("go%d" % k, subprocess.Popen([gomix, seg, str(N), "go%d" % k])))
            procs.append(("py%d" % k, subprocess.Popen(
                ["/usr/bin/python3", "-c", PY_MIX, seg, str(N), "py%d" % k], env=env)))
        for tag, p in procs:
            rc = p.wait(timeout=120)
            if rc != 0:
                print("FAIL writer %s exited %d" % (tag, rc))
                failed += 1
        if subprocess.run([gomix, seg, "0", "set"]).returncode != 0:
            print("FAIL the Go writer's set of the sharded gauge")
            failed += 1
        out = subprocess.run([decode, seg], capture_output=True, text=True)
        if out.returncode != 0:
            print("FAIL the C reader rejected the segment: %s" % out.stderr.strip())
            return 1
        doc = json.loads(out.stdout)
        series, shards = {}, {}
        for m in doc["metrics"]:
            key = (m["name"], m["labels"].get("writer"), m["labels"].get("i"))
            series[key] = m["value"]
            shards[key] = m.get("shards", 1)
        want = {("mix_total", "%s%d" % (lang, k), str(i)): i + 1
                for lang in ("go", "py") for k in range(PROCS) for i in range(N)}
        want[("mix_shared_total", None, None)] = 2 * PROCS
        want[("mix_sharded_total", None, None)] = 100 + PROCS
        want[("mix_level", None, None)] = 3.0
        checks = [
            ("the C reader accepts the segment written by Go and libmicroview at once", True),
            ("%d records, one per series (shared series registered once)" % len(want),
             len(doc["metrics"]) == len(want)),
            ("every series has the value its writer added", series == want),
            ("generation is 2 per record", doc["generation"] == 2 * len(want)),
            ("libmicroview's series are sharded (4), the Go writer's are not",
             all(shards[k] == (4 if k[1] and k[1].startswith("py") else 1)
                 for k in shards if k[0] == "mix_total")
             and shards.get(("mix_sharded_total", None, None)) == 4
             and shards.get(("mix_level", None, None)) == 4),
        ]
        for name, ok in checks:
            print("%s %s" % ("PASS" if ok else "FAIL", name))
            failed += not ok
        if series != want:
            diff = {k: (series.get(k), v) for k, v in want.items() if series.get(k) != v}
            print("  differences (got, want): %s" % dict(list(diff.items())[:10]))
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
