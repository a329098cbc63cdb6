#!/usr/bin/env bash
# The table runs of docs/benchmarks.md: modded profile, 4 connections, tcp / ws / wss, window 1 and 8, client
# coalescing off and on, then online mode (tcp and wss, window 8, coalescing on). Prints session-bench's
# phase lines and summaries; about 20 minutes on 2 cores.
#
#   bench/matrix.sh | tee matrix.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p moonbridge-proxy -p moonbridge-bench
BENCH=(target/release/session-bench --profile modded --connections 4 --messages 4000 --warmup 300 --repeats 3)
for transport in tcp ws wss; do
  for window in 1 8; do
    for coalesce in 0 1; do
      echo "## $transport window $window coalesce $coalesce"
      "${BENCH[@]}" --transport "$transport" --window "$window" --client-coalesce "$coalesce"
    done
  done
done
for transport in tcp wss; do
  echo "## online mode, $transport window 8 coalesce 1"
  "${BENCH[@]}" --transport "$transport" --window 8 --client-coalesce 1 --online
done
