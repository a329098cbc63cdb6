#!/usr/bin/env bash
# Installs the third-party peers session-bench compares MoonBridge with, by package name:
#   - HAProxy (Debian package `haproxy`), the TCP-mode peer for `--transport tcp`;
#   - websocat (crates.io `websocat`, `cargo install` into a cache folder outside the repo), the
#     WebSocket-to-TCP peer for `--transport ws`.
# With `run`, it then builds the release binaries and runs each peer side by side with moonbridge (same
# workload, same machine, phases interleaved), at window 1 and 8, printing the per-pair ratios.
#
#   bench/peers.sh          # install only
#   bench/peers.sh run      # install, then run (about 10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${MOONBRIDGE_BENCH_CACHE:-$HOME/.cache/moonbridge-bench}"

if ! command -v haproxy >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "peers.sh: installing haproxy with apt-get" >&2
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
fi
if [ ! -x "$CACHE/bin/websocat" ]; then
  # websocat's default features link OpenSSL.
  if ! dpkg-query -W -f='${Status}' libssl-dev 2>/dev/null | grep -q "install ok installed"; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev pkg-config >/dev/null
  fi
  echo "peers.sh: installing websocat into $CACHE (cargo install, a few minutes)" >&2
  cargo install --quiet --locked --root "$CACHE" websocat
fi
echo "haproxy:  $(command -v haproxy) ($(haproxy -v | head -1))"
echo "websocat: $CACHE/bin/websocat ($("$CACHE/bin/websocat" --version))"

[ "${1:-}" = "run" ] || exit 0
cargo build --release --quiet -p moonbridge-proxy -p moonbridge-bench
BENCH=(target/release/session-bench --profile modded --connections 4 --messages 4000 --warmup 300 --repeats 3)
for window in 1 8; do
  echo "## haproxy, tcp, window $window"
  "${BENCH[@]}" --transport tcp --window "$window" --client-coalesce 1 --peer haproxy
  echo "## websocat, ws, window $window"
  "${BENCH[@]}" --transport ws --window "$window" --client-coalesce 1 --peer websocat --peer-bin "$CACHE/bin/websocat"
done
