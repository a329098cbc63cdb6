#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time, starting from the committed seeds (fuzz/seeds/).
#
#   scripts/fuzz.sh                 # each target for $MOONBRIDGE_FUZZ_SECONDS seconds (default 15)
#   scripts/fuzz.sh run 10000000    # the long run: each target for 10 million executions (docs/reliability.md)
#   scripts/fuzz.sh ws_frame        # one target, bounded
#
# Installs what it needs first: the nightly toolchain (rustup) and cargo-fuzz. New inputs libFuzzer finds go to
# target/fuzz-corpus/<target> (not to the committed seeds); a crash stops the script with the input's path
# in fuzz/artifacts/<target>/ and a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! rustup toolchain list | grep -q '^nightly'; then
  step "installing the nightly toolchain (cargo-fuzz needs it)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  step "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --version 0.13.1
fi

runs=""
seconds="${MOONBRIDGE_FUZZ_SECONDS:-15}"
targets=()
if [ "${1:-}" = run ]; then
  runs="${2:?usage: scripts/fuzz.sh run <executions per target>}"
else
  targets=("$@")
fi
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi

# No sanitizer for the bounded run: the targets are safe Rust, and it builds and runs several times faster.
# Panics and failed assertions abort either way.
sanitizer="${MOONBRIDGE_FUZZ_SANITIZER:-none}"
step "building ${#targets[@]} fuzz targets (sanitizer: $sanitizer)"
(cd fuzz && cargo +nightly fuzz build --sanitizer "$sanitizer")

for t in "${targets[@]}"; do
  work="target/fuzz-corpus/$t"
  mkdir -p "$work"
  if [ -n "$runs" ]; then
    limit=(-runs="$runs")
    step "fuzzing $t for $runs executions"
  else
    limit=(-max_total_time="$seconds")
    step "fuzzing $t for $seconds s"
  fi
  log="target/fuzz-corpus/$t.log"
  if ! (cd fuzz && cargo +nightly fuzz run --sanitizer "$sanitizer" "$t" "../$work" "seeds/$t" -- \
       "${limit[@]}" -max_len=65536 -print_final_stats=1) >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz target $t failed; the input is in fuzz/artifacts/$t/ (log: $log)" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | tr '\n' ' '
  echo
done
step "fuzzing done: no crash"
