#!/usr/bin/env bash
# Compatibility test: tests/compat/pywriter.py (written from the spec alone) formats a zeroed
# 64 KiB segment and registers metrics; the C reader must decode exactly what it wrote.
# Decoders: $BUILD/bin/microviewctl dump --json and $BUILD/bin/mv_seg_decode (each one that is
# built is checked; at least one must be). Then a corrupted copy must be rejected with exit 2.
# Usage: tests/compat/test_compat.sh <build-dir>
set -euo pipefail

build=${1:?usage: test_compat.sh <build-dir>}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mv-compat.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

seg=$tmp/segment
head -c 65536 /dev/zero >"$seg"
"$py" "$here/pywriter.py" "$seg" >"$tmp/expected.json"

decoders=()
[ -x "$build/bin/microviewctl" ] && decoders+=("microviewctl")
[ -x "$build/bin/mv_seg_decode" ] && decoders+=("mv_seg_decode")
[ ${#decoders[@]} -gt 0 ] || { echo "compat: no decoder built in $build/bin" >&2; exit 1; }

decode() { # decode <decoder> <file>
  if [ "$1" = microviewctl ]; then "$build/bin/microviewctl" dump --json "$2"
  else "$build/bin/mv_seg_decode" "$2"; fi
}

for d in "${decoders[@]}"; do
  decode "$d" "$seg" >"$tmp/$d.json"
  "$py" - "$tmp/expected.json" "$tmp/$d.json" "$d" "$seg" <<'PYEOF'
import json, math, os, sys
want = json.load(open(sys.argv[1]))
got = json.load(open(sys.argv[2]))
who, path = sys.argv[3], sys.argv[4]
errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)
def close(a, b):
    return isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
check(got.get("size") == os.path.getsize(path), f"size {got.get('size')}")
check(str(got.get("instance", "")).startswith("0x") and int(got["instance"], 16) != 0, "instance")
check(got.get("generation", 1) % 2 == 0 and got.get("generation", 0) >= 6, f"generation {got.get('generation')}")
check(got.get("writer_pid", 0) > 0 and got.get("heartbeat_ns", 0) > 0, "writer_pid/heartbeat_ns")
gm = {(m["name"], tuple(sorted(m["labels"].items()))): m for m in got.get("metrics", [])}
check(len(gm) == len(want["metrics"]), f"{len(gm)} metrics decoded, {len(want['metrics'])} written")
for w in want["metrics"]:
    key = (w["name"], tuple(sorted(w["labels"].items())))
    g = gm.get(key)
    if g is None:
        errors.append(f"missing {key}")
        continue
    for f in ("type", "help", "unit", "labels"):
        check(g.get(f) == w[f], f"{w['name']}.{f}: {g.get(f)!r} != {w[f]!r}")
    if w["type"] == "histogram":
        check(g.get("count") == w["count"], f"{w['name']}.count {g.get('count')} != {w['count']}")
        check(close(w["sum"], g.get("sum")), f"{w['name']}.sum {g.get('sum')} != {w['sum']}")
        check(len(g.get("bounds", [])) == len(w["bounds"]) and
              all(close(a, b) for a, b in zip(w["bounds"], g["bounds"])), f"{w['name']}.bounds {g.get('bounds')}")
        check(g.get("buckets") == w["buckets"], f"{w['name']}.buckets {g.get('buckets')} != {w['buckets']}")
    else:
        check(close(w["value"], g.get("value")), f"{w['name']}.value {g.get('value')} != {w['value']}")
if errors:
    print(f"compat: {who} disagrees with pywriter:", file=sys.stderr)
    for e in errors:
        print("  " + e, file=sys.stderr)
    sys.exit(1)
print(f"compat: {who}: {len(want['metrics'])} metrics match pywriter")
PYEOF
done

# A flipped byte in the first catalog record: every decoder must reject it with exit 2.
cp "$seg" "$tmp/bad"
catalog_offset=$("$py" -c 'import struct,sys; print(struct.unpack_from("<I", open(sys.argv[1],"rb").read(), 32)[0])' "$seg")
printf '\x01' | dd of="$tmp/bad" bs=1 seek=$((catalog_offset + 30)) conv=notrunc status=none
for d in "${decoders[@]}"; do
  set +e
  decode "$d" "$tmp/bad" >/dev/null 2>"$tmp/err"
  rc=$?
  set -e
  if [ $rc -ne 2 ] || ! grep -q "rejected: bad_checksum: " "$tmp/err"; then
    echo "compat: $d on a corrupted segment: exit $rc, stderr: $(cat "$tmp/err")" >&2
    exit 1
  fi
  echo "compat: $d rejects a corrupted segment: $(cat "$tmp/err")"
done
