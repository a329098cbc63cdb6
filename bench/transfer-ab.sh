#!/usr/bin/env bash
# Server transfer's cost, two `moonbridge` binaries side by side: for each binary, transport (tcp, ws) and
# window (1, 8), one `session-bench --mode post-transfer` run (modded profile, 4 players, 3 repeats of the
# variants `moonbridge`, `moonbridge-transfer` (never switched) and `moonbridge-switched` (switched 13 times
# before the timed phase)). Writes one JSON object per phase, with "binary" set to `before` or `after`, to
# OUT (default bench-transfer-ab.jsonl), and prints per cell the median proxy CPU per frame of each variant
# and the switched / never-switched ratio.
#
#   bench/transfer-ab.sh BEFORE_BIN AFTER_BIN [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE="${1:?usage: bench/transfer-ab.sh BEFORE_BIN AFTER_BIN [OUT]}"
AFTER="${2:?usage: bench/transfer-ab.sh BEFORE_BIN AFTER_BIN [OUT]}"
OUT="${3:-bench-transfer-ab.jsonl}"
cargo build --release --quiet -p moonbridge-bench
: > "$OUT"
for label in before after; do
  if [ "$label" = before ]; then bin="$BEFORE"; else bin="$AFTER"; fi
  for transport in tcp ws; do
    for window in 1 8; do
      if [ "$window" = 1 ]; then messages=20000; else messages=100000; fi
      echo "transfer-ab: $label $transport window $window" >&2
      target/release/session-bench --mode post-transfer --profile modded --transport "$transport" --window "$window" \
        --connections 4 --messages "$messages" --warmup 2000 --repeats 3 --json --proxy-bin "$bin" \
        | grep '"variant":"moonbridge' | sed "s/^{/{\"binary\":\"$label\",/" >> "$OUT"
    done
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| transport | window | binary | moonbridge | never switched | switched | switched / never switched |")
print("|---|---:|---|---:|---:|---:|---:|")
for t in ("tcp", "ws"):
    for w in (1, 8):
        for b in ("before", "after"):
            def med(v):
                xs = [r["proxy_cpu_ns_per_frame"] for r in rows
                      if r["binary"] == b and r["transport"] == t and r["window"] == w and r["variant"] == v]
                return statistics.median(xs) if xs else float("nan")
            m, n, s = med("moonbridge"), med("moonbridge-transfer"), med("moonbridge-switched")
            print(f"| {t} | {w} | {b} | {m:.0f} | {n:.0f} | {s:.0f} | {s / n:.2f} |")
print(f"({len(rows)} phases)")
PY
