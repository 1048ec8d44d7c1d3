#!/usr/bin/env bash
# Recombination speed in one process: 8k-8k-256 (4 facets, all 1225
# subgrids), both directions, one and two threads, median of REPEAT runs;
# then the peak memory of `small` predict with 64 subgrids.
# Usage: bench/recombine.sh [REPEAT]   (results in bench/out/)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
repeat=${1:-3}
bin=build/bin/iotest
out=bench/out
mkdir -p "$out"
# Passive OpenMP waits: idle threads sleep instead of spinning (2 cores).
export OMP_WAIT_POLICY=PASSIVE

published=57.5  # subgrids/s per core per direction, modern C++ reference (DESIGN.md 7)

summarise() {  # median over the JSON reports given
  python3 - "$@" <<'PY'
import json, statistics, sys
rs = [json.load(open(p)) for p in sys.argv[1:]]
med = lambda key, sec="rates": statistics.median(r[sec][key] for r in rs)
t = rs[0]["config"]["threads"]
print(f"threads={t} predict={med('predict_subgrids_per_s'):.1f}/s image={med('image_subgrids_per_s'):.1f}/s "
      f"per-core predict={med('predict_subgrids_per_s')/t:.1f}/s image={med('image_subgrids_per_s')/t:.1f}/s "
      f"gflops={med('gflops'):.2f} subgrid_rmse_max={max(r['accuracy']['subgrid_rmse_max'] for r in rs):.2e} "
      f"facet_rmse_max={max(r['accuracy']['facet_rmse_max'] for r in rs):.2e}")
PY
}

for threads in 1 2; do
  reports=()
  for i in $(seq "$repeat"); do
    r="$out/recombine-8k-8k-256-t$threads-$i.json"
    "$bin" recombine --rec-set=8k-8k-256 --direction=both --subgrids=all --threads="$threads" \
      --report="$r" > /dev/null
    reports+=("$r")
  done
  summarise "${reports[@]}"
  [[ $threads == 1 ]] && one_thread=("${reports[@]}")
done

r="$out/recombine-small-predict-64.json"
"$bin" recombine --rec-set=small --direction=predict --subgrids=64 --report="$r" > /dev/null
python3 - "$r" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["memory"]
print(f"small predict 64 subgrids: peak_rss={m['peak_rss_bytes']/2**30:.2f} GiB "
      f"image={m['image_bytes']/2**30:.2f} GiB limit(image+50%)={1.5*m['image_bytes']/2**30:.2f} GiB")
PY

python3 - "$published" "${one_thread[@]}" <<'PY'
import json, statistics, sys
pub = float(sys.argv[1])
rs = [json.load(open(p)) for p in sys.argv[2:]]
ours = min(statistics.median(r["rates"][k] for r in rs)
           for k in ("predict_subgrids_per_s", "image_subgrids_per_s"))
print(f"slower direction, one thread: {ours:.1f} subgrids/s vs published modern C++ {pub}/s per core "
      f"(published figure, not re-run here)")
print(f"ratio={ours / pub:.2f}")
PY
