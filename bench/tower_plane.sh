#!/bin/bash
# One w-tower plane's parts timed alone (bench/tower_plane.cpp): where a
# plane's 2-3 ms go on small (xM 512, xA 472). Needs g++ and FFTW3's
# headers (tools/install-deps.sh installs both). Usage: bench/tower_plane.sh [RUNS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O3 -march=native -std=c++20 -o "$out/tower_plane" "$here/tower_plane.cpp" -lfftw3
for _ in $(seq "${1:-3}"); do "$out/tower_plane"; done
