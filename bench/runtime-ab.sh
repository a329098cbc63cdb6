#!/usr/bin/env bash
# Thread-per-core against multi-thread on every cell of bench/matrix.sh (modded profile, 4 connections; tcp, ws,
# wss; window 1 and 8; client coalescing off and on), interleaved: in each cell one session-bench run starts both
# proxies ([runtime] mode = "thread-per-core" as variant `moonbridge`, "multi-thread" as
# `moonbridge-multi-thread`) and rotates the phases (direct, one, the other) every repeat. Writes one JSON object
# per phase to OUT (default bench-runtime-ab.jsonl) for bench/plot; about 25 minutes on 2 cores.
#
#   bench/runtime-ab.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench-runtime-ab.jsonl}"
cargo build --release --quiet -p moonbridge-proxy -p moonbridge-bench
BENCH=(target/release/session-bench --profile modded --connections 4 --messages 4000 --warmup 300 --repeats 3 --json
  --proxy-runtime thread-per-core --also-runtime multi-thread)
: > "$OUT"
for transport in tcp ws wss; do
  for window in 1 8; do
    for coalesce in 0 1; do
      echo "runtime-ab: $transport window $window coalesce $coalesce" >&2
      "${BENCH[@]}" --transport "$transport" --window "$window" --client-coalesce "$coalesce" >> "$OUT"
    done
  done
done
echo "runtime-ab: wrote $OUT" >&2
