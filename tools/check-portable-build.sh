#!/usr/bin/env bash
# The build a cluster user makes: `cmake --preset release` (portable,
# IOTEST_ARCH=generic) in DIR, with nothing but the libraries (no venv),
# then the binary run once: its report must say generic. A unit a file
# (IOTEST_UNITY_GROUPS=OFF): every file compiles alone, which the default
# groups could hide (a header one file forgets, included by another).
#   tools/check-portable-build.sh [DIR]      (default: build-release)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-release}
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake --preset release -B "$dir" "${generator[@]}" -DIOTEST_BUILD_TESTS=OFF \
  -DIOTEST_UNITY_GROUPS=OFF
cmake --build "$dir" -j "$(nproc)"
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$dir/bin/iotest" recombine --rec-set=T05_ --subgrids=4 --report="$report" > /dev/null
grep -q '"build_arch": *"generic"' "$report" || {
  echo "check-portable-build: $dir/bin/iotest does not report build_arch generic" >&2
  exit 1
}
echo "check-portable-build: $dir/bin/iotest built with IOTEST_ARCH=generic runs"
