#!/usr/bin/python3
"""Compares the values a collector served (Prometheus text) with a segment's own dump.

Usage: wire_compare.py METRICS.txt DUMP.json SELECTOR
SELECTOR is LABEL=VALUE (e.g. pod=web-0), or a bare VALUE meaning instance=VALUE.
Every counter and gauge of the dump must appear with the same value, and every histogram
with the same _count and _sum, on the series carrying that label. Exit 0 if all match.
"""
import json
import re
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = tuple(sorted(LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def main():
    metrics = parse(open(sys.argv[1]).read())
    dump = json.load(open(sys.argv[2]))
    sel_key, _, sel_val = sys.argv[3].rpartition("=")
    sel_key = sel_key or "instance"
    checked, bad = 0, []
    for m in dump["metrics"]:
        own = dict(m.get("labels", {}))
        series = [(sel_val, own)]
        for inst, own in series:
            key_labels = {k: v for (k, v) in own.items()}
            # the served series carries the identity labels; match on instance + own labels
            cands = {k: v for k, v in metrics.items() if dict(k[1]).get(sel_key) == inst and
                     all(dict(k[1]).get(a) == b for a, b in key_labels.items())}
            wanted = []
            if m["type"] in ("counter", "gauge"):
                wanted.append((m["name"], m["value"]))
            elif m["type"] == "histogram":
                wanted.append((m["name"] + "_count", m["count"]))
                wanted.append((m["name"] + "_sum", m["sum"]))
            for name, val in wanted:
                got = [v for (n, _), v in cands.items() if n == name]
                if len(got) != 1:
                    bad.append(f"{name}: {len(got)} served series")
                    continue
                if abs(got[0] - float(val)) > 1e-9 * max(1.0, abs(float(val))):
                    bad.append(f"{name}: served {got[0]!r}, segment has {val!r}")
                checked += 1
    print(f"compared {checked} values, {len(bad)} mismatches")
    for b in bad:
        print("  " + b)
    return 0 if checked > 0 and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
