#!/usr/bin/env bash
# Builds the MoonBridge Forge mod jar. Leaves java-shim/target/moonbridge-forge-<version>.jar.
#
#   java-shim/build.sh                  # the host's native library only, then mvn package (unit tests included)
#   java-shim/build.sh verify -D...     # the same with any Maven goals and flags instead of "package"
#   java-shim/build.sh release [goals]  # the release jar: native libraries for all five platforms
#
# The default build compiles the native library for this machine with cargo (release profile) and stages it as
# natives/<os>-<arch>/. Directories named in MOONBRIDGE_EXTRA_NATIVES (colon-separated, each holding
# <platform>/<library> subdirectories) and
# java-shim/natives/ are copied into the jar too.
#
# "release" cross-builds the library for linux-x86_64, linux-aarch64 (glibc 2.17 and later), macos-x86_64,
# macos-aarch64 (cargo-zigbuild with zig) and windows-x86_64 (mingw-w64), installing what it needs first
# (rustup targets; Debian's gcc-mingw-w64-x86-64; cargo-zigbuild and ziglang from PyPI into
# target/natives-tools/py), checks every library's format, architecture and exported symbols
# (examples/inspect_natives.rs in tests/), then runs Maven ("package" unless goals are given) with
# -Dmoonbridge.release=true, under which ReleaseJarIT (in "verify") requires all five libraries in the jar.
# scripts/test-all.sh runs "release verify", so every CI run builds and tests the jar players get.
#
# Environment: CARGO (default cargo), MVN (default mvn).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cargo="${CARGO:-cargo}"
mvn="${MVN:-mvn}"
# Versions of the cross tools from PyPI, pinned for repeatable release builds.
CARGO_ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.15.2

step() { printf '\n==> %s\n' "$*"; }

staging="$here/target/natives-staging/natives"
# Maven copies the staged natives into target/classes; a library staged by an earlier build must not stay there.
rm -rf "$staging" "$here/target/classes/natives"
mkdir -p "$staging"

library_name() {
  case "$1" in
    windows-*) echo moonbridge_client.dll ;;
    macos-*) echo libmoonbridge_client.dylib ;;
    *) echo libmoonbridge_client.so ;;
  esac
}

case "$(uname -s)" in
  Linux) host_os=linux ;;
  Darwin) host_os=macos ;;
  MINGW*|MSYS*|CYGWIN*) host_os=windows ;;
  *) echo "build.sh: unsupported build OS $(uname -s)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64|amd64) host_arch=x86_64 ;;
  aarch64|arm64) host_arch=aarch64 ;;
  *) echo "build.sh: unsupported build CPU $(uname -m)" >&2; exit 1 ;;
esac
host_platform="$host_os-$host_arch"

release=0
if [ "${1:-}" = release ]; then
  release=1
  shift
fi

if [ "$release" = 0 ]; then
  lib="$(library_name "$host_platform")"
  step "cargo build --release -p moonbridge-client ($host_platform)"
  "$cargo" build --release --locked -p moonbridge-client --manifest-path "$root/Cargo.toml"
  mkdir -p "$staging/$host_platform"
  cp "$root/target/release/$lib" "$staging/$host_platform/$lib"
  # Line tables stay in target/ for profiling; the jar gets the library without debug sections.
  if command -v strip >/dev/null 2>&1 && [ "$host_os" = linux ]; then strip --strip-debug "$staging/$host_platform/$lib"; fi
else
  if [ "$host_platform" != linux-x86_64 ]; then
    echo "build.sh release: cross-builds run on Linux x86-64 (this is $host_platform)" >&2
    exit 1
  fi
  # platform:rust target (a zigbuild target may carry the minimum glibc after a dot)
  targets=(
    "linux-x86_64:x86_64-unknown-linux-gnu"
    "linux-aarch64:aarch64-unknown-linux-gnu"
    "macos-x86_64:x86_64-apple-darwin"
    "macos-aarch64:aarch64-apple-darwin"
    "windows-x86_64:x86_64-pc-windows-gnu"
  )
  installed="$(rustup target list --installed)"
  for t in "${targets[@]}"; do
    triple="${t#*:}"
    if ! grep -qx "$triple" <<<"$installed"; then
      step "rustup target add $triple"
      rustup target add "$triple"
    fi
  done
  if ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
    step "installing Debian's gcc-mingw-w64-x86-64 (the Windows linker)"
    SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends gcc-mingw-w64-x86-64
  fi
  tools="$root/target/natives-tools"
  # pip --target rather than a venv: Debian's python3 has no venv module without an extra package.
  export PYTHONPATH="$tools/py${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$tools/py/bin:$PATH"
  if ! cargo-zigbuild --version 2>/dev/null | grep -q "$CARGO_ZIGBUILD_VERSION" \
      || ! python3 -m ziglang version 2>/dev/null | grep -qx "$ZIGLANG_VERSION"; then
    step "installing cargo-zigbuild $CARGO_ZIGBUILD_VERSION and ziglang $ZIGLANG_VERSION into $tools/py"
    rm -rf "$tools"
    python3 -m pip install --quiet --target "$tools/py" "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" "ziglang==$ZIGLANG_VERSION"
  fi
  for t in "${targets[@]}"; do
    platform="${t%%:*}"
    triple="${t#*:}"
    lib="$(library_name "$platform")"
    mkdir -p "$staging/$platform"
    case "$platform" in
      windows-*)
        step "cargo build --profile natives --target $triple -p moonbridge-client"
        "$cargo" build --profile natives --locked --target "$triple" -p moonbridge-client --manifest-path "$root/Cargo.toml"
        ;;
      linux-*)
        # The oldest glibc the library links against: 2.17 (CentOS 7 era), so it loads on any current distribution.
        step "cargo zigbuild --profile natives --target $triple.2.17 -p moonbridge-client"
        "$cargo" zigbuild --profile natives --locked --target "$triple.2.17" -p moonbridge-client --manifest-path "$root/Cargo.toml"
        ;;
      macos-*)
        # The oldest macOS the library loads on: Rust's minimum for the target (zig would otherwise write its own
        # default, macOS 13, into the library). examples/inspect_natives.rs checks it.
        case "$platform" in macos-x86_64) macos_min=10.12 ;; *) macos_min=11.0 ;; esac
        step "MACOSX_DEPLOYMENT_TARGET=$macos_min cargo zigbuild --profile natives --target $triple -p moonbridge-client"
        MACOSX_DEPLOYMENT_TARGET="$macos_min" "$cargo" zigbuild --profile natives --locked --target "$triple" \
          -p moonbridge-client --manifest-path "$root/Cargo.toml"
        ;;
    esac
    cp "$root/target/$triple/natives/$lib" "$staging/$platform/$lib"
  done
  step "checking the five native libraries (format, architecture, exported symbols, imports)"
  # Release, as the other builds of this script: the debug tree may be gone (scripts/test-all.sh prunes it in CI).
  "$cargo" run --release --locked --quiet -p moonbridge-tests --example inspect_natives --manifest-path "$root/Cargo.toml" -- \
    "$staging" "${targets[@]%%:*}"
fi

# Natives built elsewhere (see docs/java-shim.md) may be dropped into java-shim/natives/<platform>/. A release jar
# holds exactly the five libraries built and checked above, nothing else.
extra="${MOONBRIDGE_EXTRA_NATIVES:-}"
if [ -d "$here/natives" ]; then extra="$here/natives${extra:+:$extra}"; fi
if [ "$release" = 1 ] && [ -n "$extra" ]; then
  echo "build.sh release: ignoring extra natives ($extra); the release jar carries only its checked libraries" >&2
  extra=""
fi
IFS=: read -r -a extra_dirs <<<"$extra"
for d in "${extra_dirs[@]}"; do
  if [ -n "$d" ] && [ -d "$d" ]; then cp -R "$d/." "$staging/"; fi
done
(cd "$staging" && find . -mindepth 2 -type f | sed 's|^\./||' | sort) > "$staging/platforms.txt"

host_lib="$staging/$host_platform/$(library_name "$host_platform")"
if [ "$#" -eq 0 ]; then set -- package; fi
step "mvn $*"
cd "$here"
release_flag=()
if [ "$release" = 1 ]; then release_flag=(-Dmoonbridge.release=true); fi
"$mvn" -B -ntp "-Dmoonbridge.test.lib=$host_lib" "${release_flag[@]}" "$@"
ls -l "$here"/target/moonbridge-forge-*.jar
if [ "$release" = 1 ]; then
  step "natives in the jar"
  unzip -l "$here"/target/moonbridge-forge-*.jar 'natives/*'
fi
