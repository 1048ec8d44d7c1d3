#!/usr/bin/env bash
# SwiFTly cold, each direction in its own process (issue 13): 8k-8k-256,
# all 1225 subgrids, one thread, REPEAT interleaved runs (predict, image,
# predict, ...), medians in subgrids/s, the worst accuracy of any run.
# Nothing is reused between directions: a fresh process each, so every
# buffer is allocated and first touched by the run itself (before its
# clock starts; recombine.cpp).
# Against ska-sdp-func's figures on this machine as issue 13 states them
# (127 predict, 118 image subgrids/s; the library is not installed here).
# Usage: bench/recombine_cold.sh [REPEAT]   (reports in bench/out/)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
repeat=${1:-5}
out=bench/out
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq "$repeat"); do
  for d in predict image; do
    build/bin/iotest recombine --rec-set=8k-8k-256 --direction=$d --subgrids=all --threads=1 \
      --report="$out/recombine-cold-$d-$i.json" >/dev/null
  done
done
python3 - "$out" "$repeat" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
sdp = {"predict": 127.0, "image": 118.0}
worst = []
for d in ("predict", "image"):
    rs = [json.load(open(f"{out}/recombine-cold-{d}-{i}.json")) for i in range(1, n + 1)]
    rates = [r["rates"][f"{d}_subgrids_per_s"] for r in rs]
    key = "subgrid_rmse_max" if d == "predict" else "facet_rmse_max"
    err = max(r["accuracy"][key] for r in rs)
    med = statistics.median(rates)
    worst.append(med / sdp[d])
    print(f"{d}: median {med:.1f} subgrids/s (runs {', '.join(f'{x:.0f}' for x in rates)}), "
          f"{key} {err:.2e}, ska-sdp-func {sdp[d]:.0f}/s (stated, not re-run)")
print(f"ratio={min(worst):.2f}")
PY
