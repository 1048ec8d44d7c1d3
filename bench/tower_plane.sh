#!/bin/bash
# One w-tower plane's parts timed alone (bench/tower_plane.cpp, built
# against the library in build/): where a plane's 2-3 ms go on small
# (xM 512, xA 472). Usage: bench/tower_plane.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
cmake --build build --target tower_plane > /dev/null
for _ in $(seq "${1:-3}"); do build/bin/tower_plane; done
