#!/usr/bin/env bash
# End to end (issues 9 and 13): small + vlaa, 92 M visibilities, 3 ranks
# (1 producer, 2 streamers), one thread each, a dry run, REPEAT interleaved
# runs of each case, a fresh mpirun every time; medians of the wall time
# (mpirun start to exit), the setup and the stream.
#   like-for-like  vlaa@pole (w = 0 exactly, as the 2019 code's arrays at
#                  the pole), with the queue lengths the 2019 code needed
#                  (--send-queue=256 --subgrid-queue=64); goal <= 12 s.
#   dec34          the earlier speed target's command as issues 9 and 13
#                  state it, default queues, w handled; goals <= 32.4 s
#                  cold (issue 9) and <= 20 s (issue 13).
# IDLE_S=SECONDS waits that long before each run, so the VM's host has
# reclaimed the memory the last run freed and the producer's first touch
# is a user's first run's (issue 9's "cold"); 0 (default) measures fresh
# processes back to back (issue 13's "cold": nothing reused in-process).
# Open MPI's shared memory runs at its default (single copy by cross-memory
# attach) unless OMPI_MCA_btl_vader_single_copy_mechanism is set.
# Against the 2019 code's figures on this machine as DESIGN.md section 4
# states them (19-26 s for the like-for-like job; not installed here).
# Usage: bench/end_to_end.sh [REPEAT]   (reports in bench/out/)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
repeat=${1:-3}
idle=${IDLE_S:-0}
out=bench/out
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE
common=(--rec-set=small --time=-230:230/128/64 --freq=260e6:300e6/2048/64 --threads=1)
declare -A cases=(
  [like-for-like]="--vis-set=vlaa@pole --send-queue=256 --subgrid-queue=64"
  [dec34]="--vis-set=vlaa --dec=34"
)
echo "end to end: $repeat runs a case, idle ${idle} s before each," \
  "single copy ${OMPI_MCA_btl_vader_single_copy_mechanism:-default}"
for i in $(seq "$repeat"); do
  for c in like-for-like dec34; do
    sleep "$idle"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086  # the case's options split on purpose
    mpirun --allow-run-as-root --oversubscribe -np 3 build/bin/iotest "${common[@]}" ${cases[$c]} \
      --report="$out/e2e-$c-$i.json" >/dev/null
    awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }' >"$out/e2e-$c-$i.wall"
  done
done
python3 - "$out" "$repeat" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
goal = {"like-for-like": 12.0, "dec34": 20.0}
median = {}
for c in ("like-for-like", "dec34"):
    walls = [float(open(f"{out}/e2e-{c}-{i}.wall").read()) for i in range(1, n + 1)]
    rs = [json.load(open(f"{out}/e2e-{c}-{i}.json")) for i in range(1, n + 1)]
    setup = [r["timing"]["planning_s"] for r in rs]
    stream = [r["timing"]["stream_s"] for r in rs]
    err = max(r["accuracy"]["vis_rmse"] for r in rs)
    stages = {k: statistics.median(r["timing"]["stages"][k] for r in rs)
              for k in rs[0]["timing"]["stages"]}
    median[c] = statistics.median(walls)
    print(f"{c}: wall median {median[c]:.1f} s (runs {', '.join(f'{w:.1f}' for w in walls)}), "
          f"setup {statistics.median(setup):.1f} s, stream {statistics.median(stream):.1f} s, "
          f"vis_rmse {err:.2e}, w_free {rs[0]['config']['w_free']}, goal <= {goal[c]:.0f} s")
    print("  thread-seconds per stage: " +
          ", ".join(f"{k[:-2]} {v:.2f}" for k, v in stages.items()))
predecessor = 22.5  # the middle of its 19-26 s (DESIGN.md section 4)
print(f"like-for-like against the 2019 code (19-26 s stated, not re-run): "
      f"ratio={median['like-for-like'] / predecessor:.2f}")
PY
