#!/usr/bin/env bash
# Integration: microviewctl dump of a segment whose metrics are sharded (spec section 5.2):
# each metric shows its shard count and the sum of its shards, in text and in JSON. The
# segment is the committed fuzz seed tests/fuzz/corpus/segment/valid_sharded (libmicroview
# with MICROVIEW_SHARDS=2: req_total 5, temp -1.5, lat_seconds one observation of 0.5).
set -uo pipefail
. "$(dirname "$0")/lib.sh"

seg="$(dirname "$0")/../fuzz/corpus/segment/valid_sharded"
"$bin/microviewctl" dump "$seg" >"$tmp/dump.txt" 2>&1
check "dump shows the counter's sum and its shards" \
  grep -qE '^counter +req_total\{code="200"\} 5  shards=2' "$tmp/dump.txt"
check "dump shows the gauge's sum and its shards" grep -qE '^gauge +temp\{\} -1.5 .*shards=2' "$tmp/dump.txt"
check "dump shows the histogram's sums" \
  grep -qE '^histogram +lat_seconds.* count=1 sum=0.5 le=0.1:0 le=1:1 le=\+Inf:1 .*shards=2' "$tmp/dump.txt"
"$bin/microviewctl" dump --json "$seg" >"$tmp/dump.json" 2>&1
check "dump --json gives shards and summed values" /usr/bin/python3 - "$tmp/dump.json" <<'PY'
import json, sys
m = {x["name"]: x for x in json.load(open(sys.argv[1]))["metrics"]}
ok = (m["req_total"]["shards"] == 2 and m["req_total"]["value"] == 5 and
      m["temp"]["value"] == -1.5 and m["lat_seconds"]["count"] == 1 and
      m["lat_seconds"]["buckets"] == [0, 1, 0])
sys.exit(0 if ok else 1)
PY
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
