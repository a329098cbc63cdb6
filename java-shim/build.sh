#!/usr/bin/env bash
# Builds the MoonBridge Forge mod jar: the native client library in release mode with cargo, staged under
# natives/<os>-<arch>/, then Maven. Leaves java-shim/target/moonbridge-forge-<version>.jar.
#
#   java-shim/build.sh                 # package (unit tests included)
#   java-shim/build.sh verify -D...    # any Maven goals and flags instead of "package"
#
# Environment: CARGO (default cargo), MVN (default mvn).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cargo="${CARGO:-cargo}"
mvn="${MVN:-mvn}"

case "$(uname -s)" in
  Linux) os=linux; lib=libmoonbridge_client.so ;;
  Darwin) os=macos; lib=libmoonbridge_client.dylib ;;
  MINGW*|MSYS*|CYGWIN*) os=windows; lib=moonbridge_client.dll ;;
  *) echo "build.sh: unsupported build OS $(uname -s)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64|amd64) arch=x86_64 ;;
  aarch64|arm64) arch=aarch64 ;;
  *) echo "build.sh: unsupported build CPU $(uname -m)" >&2; exit 1 ;;
esac
platform="$os-$arch"

echo "==> cargo build --release -p moonbridge-client ($platform)"
"$cargo" build --release --locked -p moonbridge-client --manifest-path "$root/Cargo.toml"

staging="$here/target/natives-staging/natives"
rm -rf "$staging"
mkdir -p "$staging/$platform"
cp "$root/target/release/$lib" "$staging/$platform/$lib"
# Line tables stay in target/ for profiling; the jar gets the library without debug sections.
if command -v strip >/dev/null 2>&1 && [ "$os" = linux ]; then strip --strip-debug "$staging/$platform/$lib"; fi
# Natives built elsewhere (see docs/java-shim.md) may be dropped into java-shim/natives/<platform>/.
if [ -d "$here/natives" ]; then cp -R "$here/natives/." "$staging/"; fi
(cd "$staging" && find . -mindepth 2 -type f | sed 's|^\./||' | sort) > "$staging/platforms.txt"

if [ "$#" -eq 0 ]; then set -- package; fi
echo "==> mvn $*"
cd "$here"
"$mvn" -B -ntp "-Dmoonbridge.test.lib=$staging/$platform/$lib" "$@"
ls -l "$here"/target/moonbridge-forge-*.jar
