#!/usr/bin/env bash
# Runs every MoonBridge test, installing what the tests need first:
#   1. Debian packages the tests use (apt-get update + install, only when one is missing),
#   2. the pinned node-minecraft-protocol peers (npm ci in tests/peers),
#   3. the Windows test environment under Wine (scripts/wine-env.sh: Windows builds of the client scenarios and
#      library, a Wine prefix, a Windows JDK),
#   4. formatting and lint checks, every Rust test in the workspace (with the C header drift check, and the
#      client scenarios as a Windows program under Wine),
#   5. every fuzz target for a bounded time from its committed seeds (scripts/fuzz.sh: nightly and cargo-fuzz),
#   6. a 60-second soak: players over ws, wss and tcp with injected faults (session-bench soak, release build),
#      a 40-second soak of three instances on Redis whose players' connections are cut every 5 s and resume on
#      another instance (session-bench soak --instances 3), a short capacity run: idle and active wss players as async tasks (session-bench capacity),
#      and the same players on tcp and ws through moonbridge and then through HAProxy and the floor relay (--peer),
#   7. the Java shim's release jar (java-shim/build.sh release: the native library cross-built for all five
#      platforms and checked as built, which fails when one is missing or does not link), its JUnit tests in a
#      real JVM on the release Linux library, and the release DLL in a Windows JVM under Wine.
# Usage: scripts/test-all.sh        (from anywhere; needs root or sudo only when packages are missing)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
# A full run needs about 10 GB of free disk (target/ with the five release targets, fuzz/target and the
# toolchains); say what there is, so that a run that stops on "No space left on device" is explained at the top
# of its log.
disk() { df -h --output=avail,target . 2>/dev/null | tail -n 1 | awk '{print "disk: " $1 " free on " $2}'; }
disk
# MOONBRIDGE_PRUNE=1 (set by .ci/run, for a clone that is thrown away) deletes each stage's build artifacts once
# no later stage needs them, so the run's peak is one stage's artifacts rather than the sum of all of them.
# Without it nothing is deleted and the next run reuses target/.
prune() {
  if [ "${MOONBRIDGE_PRUNE:-0}" = 1 ]; then
    rm -rf "$@"
    disk
  fi
}

APT_PACKAGES=(ca-certificates openssl iproute2 wine wine64 gcc-mingw-w64-x86-64 dnsmasq-base prometheus systemd redis-server redis-tools redis-sentinel haproxy nginx)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

for tool in cargo node npm cc java mvn; do
  command -v "$tool" >/dev/null || { echo "error: '$tool' is not installed (see README.md, Requirements)" >&2; exit 1; }
done

step "installing the pinned test peers (npm ci in tests/peers)"
npm ci --prefix tests/peers --no-audit --no-fund --loglevel=error

step "Windows test environment (scripts/wine-env.sh)"
scripts/wine-env.sh
# The Windows tests fail, rather than skip, when a piece of that environment is missing.
export MOONBRIDGE_WINE=required

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (the binaries and the C library the tests run)"
cargo build --workspace --locked

step "cargo test (includes the C header drift check and the C program)"
cargo test --workspace --locked --exclude moonbridge-tests
# The cross-tests (one binary) run one at a time: several start floods, soaks or rolling restarts of their own,
# and their time bounds (a probe answered within 1 s) are about the proxy, not about a machine busy with another
# test's flood.
cargo test -p moonbridge-tests --locked -- --test-threads=1
# Later stages run target/debug/moonbridge and target/debug/test-certs (the Java shim's tests, which build what
# else they run in release) and nothing else of the debug build.
prune target/debug/deps target/debug/build target/debug/examples target/debug/.fingerprint target/debug/incremental

step "fuzzing: every target for ${MOONBRIDGE_FUZZ_SECONDS:=15} s from its seeds (scripts/fuzz.sh)"
MOONBRIDGE_FUZZ_SECONDS="$MOONBRIDGE_FUZZ_SECONDS" scripts/fuzz.sh
prune fuzz/target

step "soak: 500 players for 60 s with injected faults (release build; session-bench soak)"
cargo build --release --locked -p moonbridge-proxy -p moonbridge-bench
target/release/session-bench soak --seconds 60 --players 500 --fault-every 8 --proxy-bin target/release/moonbridge

step "network soak: 3 instances on Redis, 60 client-library players (ws, wss) behind a round-robin balancer, every connection cut every 5 s (session-bench soak --instances 3)"
target/release/session-bench soak --instances 3 --players 60 --seconds 40 --fault-every 5 \
  --proxy-bin target/release/moonbridge

step "capacity: 300 idle and 60 active wss players on the client library's carriage (v2 + zstd), p99 tick round trip under 50 ms (session-bench capacity)"
target/release/session-bench capacity --idle 300 --active 60 --seconds 5 --connect-rate 300 \
  --proxy-bin target/release/moonbridge

step "capacity beside peers: 200 idle and 40 active players through moonbridge, then HAProxy (tcp), then the floor relay (ws) (session-bench capacity --peer)"
target/release/session-bench capacity --idle 200 --active 40 --seconds 5 --connect-rate 300 --transport tcp \
  --peer haproxy --proxy-bin target/release/moonbridge
target/release/session-bench capacity --idle 200 --active 40 --seconds 5 --connect-rate 300 --transport ws \
  --carriage v1 --peer floor --proxy-bin target/release/moonbridge

step "Java shim: the release jar (five natives), JUnit tests (Surefire) and jar tests (Failsafe, Wine included)"
java-shim/build.sh release verify \
  "-Dmoonbridge.bin=$PWD/target/debug/moonbridge" "-Dmoonbridge.peers=$PWD/tests/peers" \
  "-Dmoonbridge.wine.dir=$PWD/target/wine" -Dmoonbridge.wine=required

disk
step "all tests passed"
