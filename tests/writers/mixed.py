#!/usr/bin/python3
"""Go writer and libmicroview processes (through the Python package) format, register and
update one segment at the same time: the formatting flock, the registration lock and the
generation protocol must interlock across the two implementations. The C reader
(mv_seg_decode) must then accept the segment and see every series with its value.

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


def main():
    decode, gomix, site = sys.argv[1:4]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="mv-mixed-") as tmp:
        seg = os.path.join(tmp, "segment")
        with open(seg, "wb") as f:
            f.write(bytes(1 << 20))  # all zero: the first process of either kind formats it
        env = dict(os.environ, PYTHONPATH=site)
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
        out = subprocess.run([decode, seg], capture_output=True, text=True)
        if out.returncode != 0:
            print("FAIL the C reader rejected the segment: %s" % out.stderr.strip())
            return 1
        doc = json.loads(out.stdout)
        series = {}
        for m in doc["metrics"]:
            series[(m["name"], m["labels"].get("writer"), m["labels"].get("i"))] = m["value"]
        want = {("mix_total", "%s%d" % (lang, k), str(i)): i + 1
                for lang in ("go", "py") for k in range(PROCS) for i in range(N)}
        want[("mix_shared_total", None, None)] = 2 * PROCS
        checks = [
            ("the C reader accepts the segment written by Go and libmicroview at once", True),
            ("%d records, one per series (shared series registered once)" % len(want),
             len(doc["metrics"]) == len(want)),
            ("every series has the value its writer added", series == want),
            ("generation is 2 per record", doc["generation"] == 2 * len(want)),
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
