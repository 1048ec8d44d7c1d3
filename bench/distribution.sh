#!/usr/bin/env bash
# The cost of distribution: the same predict (T05_ + vlaa defaults, 92 M
# visibilities, dry) in one process with both cores (`iotest degrid
# --threads=2`) and over 3 MPI ranks of one thread each on the same 2
# cores (`mpirun -np 3 iotest`: 1 producer, 2 streamers). Median of REPEAT.
# Then the speed target of issue 4: small + vlaa, 92 M visibilities, dec
# 34, one thread per rank, default queues (the 2019 code: 64.8 s), REPEAT
# runs: each is listed, since on this VM a run that follows a quiet spell
# pays far more for first-touching its memory (bench/README.md).
# Usage: bench/distribution.sh [REPEAT]   (results in bench/out/)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
repeat=${1:-3}
out=bench/out
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq "$repeat"); do
  build/bin/iotest degrid --rec-set=T05_ --vis-set=vlaa --threads=2 \
    --report="$out/distribution-degrid-$i.json" > /dev/null
  $mpirun -np 3 build/bin/iotest --rec-set=T05_ --vis-set=vlaa --threads=1 --no-progress \
    --report="$out/distribution-run-$i.json" > /dev/null
done
for i in $(seq "$repeat"); do
  $mpirun -np 3 build/bin/iotest --rec-set=small --vis-set=vlaa --time=-230:230/128/64 \
    --freq=260e6:300e6/2048/64 --dec=34 --threads=1 --no-progress \
    --report="$out/small-vlaa-run-$i.json" > /dev/null
done
python3 - "$out" "$repeat" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
load = lambda p: json.load(open(p))
one = [load(f"{out}/distribution-degrid-{i}.json") for i in range(1, n + 1)]
mpi = [load(f"{out}/distribution-run-{i}.json") for i in range(1, n + 1)]
t1 = statistics.median(r["timing"]["wall_s"] for r in one)
t3 = statistics.median(r["timing"]["wall_s"] for r in mpi)
v1 = statistics.median(r["rates"]["vis_per_s"] for r in one)
v3 = statistics.median(r["rates"]["vis_per_s"] for r in mpi)
print(f"one process, 2 threads: wall {t1:.1f} s, {v1:.3g} vis/s, vis_rmse {one[0]['accuracy']['vis_rmse']:.1e}")
print(f"mpirun -np 3, 1 thread each: wall {t3:.1f} s, {v3:.3g} vis/s (stream), "
      f"vis_rmse {mpi[0]['accuracy']['vis_rmse']:.1e}")
for i in range(1, n + 1):
    s = load(f"{out}/small-vlaa-run-{i}.json")
    ranks = ", ".join(f"{k['role']} {k['busy_s']:.0f}/{k['cpu_s']:.0f} s"
                      for k in s["pipeline"]["per_rank"])
    print(f"small + vlaa run {i}, 3 ranks: wall {s['timing']['wall_s']:.1f} s "
          f"(stream {s['timing']['stream_s']:.1f} s), {s['rates']['vis_per_s']:.3g} vis/s, "
          f"busy/cpu: {ranks}; the 2019 code 64.8 s without w")
print(f"ratio={t3 / t1:.2f}")
PY
