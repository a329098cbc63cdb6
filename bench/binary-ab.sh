#!/usr/bin/env bash
# Two `moonbridge` binaries against each other, interleaved: for each of ROUNDS rounds (default 8), every cell
# (transport tcp and ws, window 1 and 8; modded profile, client coalescing on, so ws runs carriage v2 + zstd)
# runs once on each binary, the order of the two flipping every round so drift over the run hits both alike.
# Both are driven by this tree's session-bench. Writes one JSON object per run, with "binary" set to
# `before` or `after`, to OUT (default bench-binary-ab.jsonl), and prints the medians [min–max] per cell.
#
#   bench/binary-ab.sh BEFORE_BIN AFTER_BIN [OUT] [ROUNDS]
#
# BEFORE_BIN is usually an older commit's proxy, built from a worktree into the same target directory:
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=$PWD/target cargo build --release -p moonbridge-proxy)
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE="${1:?usage: bench/binary-ab.sh BEFORE_BIN AFTER_BIN [OUT] [ROUNDS]}"
AFTER="${2:?usage: bench/binary-ab.sh BEFORE_BIN AFTER_BIN [OUT] [ROUNDS]}"
OUT="${3:-bench-binary-ab.jsonl}"
ROUNDS="${4:-8}"
cargo build --release --quiet -p moonbridge-bench
: > "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for transport in tcp ws; do
    for window in 1 8; do
      for label in $order; do
        if [ "$label" = before ]; then bin="$BEFORE"; else bin="$AFTER"; fi
        echo "binary-ab: round $round/$ROUNDS $transport window $window $label" >&2
        target/release/session-bench --profile modded --transport "$transport" --window "$window" \
          --client-coalesce 1 --messages 40000 --repeats 1 --json --proxy-bin "$bin" \
          | grep '"variant":"moonbridge"' | sed "s/^{/{\"binary\":\"$label\",/" >> "$OUT"
      done
    done
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| transport | window | proxy | proxy CPU ns/frame | p50 ms | p99 ms | frames/s |")
print("|---|---:|---|---:|---:|---:|---:|")
for t in ("tcp", "ws"):
    for w in (1, 8):
        for b in ("before", "after"):
            cell = [r for r in rows if r["transport"] == t and r["window"] == w and r["binary"] == b]
            if not cell:
                continue
            def m(k, fmt):
                v = [r[k] for r in cell]
                return f"{fmt(statistics.median(v))} [{fmt(min(v))}–{fmt(max(v))}]"
            print(f"| {t} | {w} | {b} | {m('proxy_cpu_ns_per_frame', lambda x: f'{x:.0f}')} | "
                  f"{statistics.median(r['p50_ms'] for r in cell):.3f} | {statistics.median(r['p99_ms'] for r in cell):.3f} | "
                  f"{statistics.median(r['frames_per_s'] for r in cell):.0f} |")
print(f"({len(rows)} runs)")
PY
echo "binary-ab: wrote $OUT" >&2
