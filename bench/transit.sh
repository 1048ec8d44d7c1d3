#!/usr/bin/env bash
# In situ vs in transit (issue 12; the Nyx/BoxLib question): the same
# write-heavy runs with the writers as threads of each streamer, as forked
# processes of each streamer, and as a writer group of their own ranks
# (--writer-ranks). Two jobs: storage only (--synthetic-vis: 2 streamers
# writing vlaa's default observation's pattern) and a degridding run
# (small + vlaa, 1 producer, 2 streamers). The writer group takes one rank
# more, on the same 2 cores. Each run --repetitions=3 in one job (medians);
# the files are UVH5 through the hdf5 back-end, fsynced at close.
#
# Usage: bench/transit.sh [DIR]   (DIR: where the files go, default bench/out/transit)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dir=${1:-bench/out/transit}
mkdir -p "$dir"
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mpirun=(${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none})

one() {  # NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  rm -f "$dir"/vis*.h5 "$dir"/vis*.partial
  "${mpirun[@]}" -np "$ranks" build/bin/iotest --vis-set=vlaa --threads=1 --no-progress \
    --repetitions="${REPETITIONS:-3}" "$@" "$dir/vis%d.h5" --report="$dir/$name.json" >/dev/null
  .venv/bin/python - "$dir/$name.json" "$name" "$ranks" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
f = r["repetitions"]["figures"] if "repetitions" in r else {}
med = lambda k, v: f[k]["median"] if k in f else v
t, pl = r["transit"], r["pipeline"]
print(f"{sys.argv[2]:<26} {sys.argv[3]:>5} {med('timing.stream_s', r['timing']['stream_s']):>8.2f} "
      f"{med('rates.vis_per_s', r['rates']['vis_per_s']) / 1e6:>8.2f} "
      f"{r['counts']['bytes_written'] / med('timing.stream_s', r['timing']['stream_s']) / 1e6:>8.0f} "
      f"{t['streamer_queue_wait_s']:>7.2f} {t['send_wait_s']:>7.2f} {t['writer_idle_s']:>7.2f} "
      f"{t['bound']:>10} {t['suggested_writer_ranks']:>3}")
EOF
  rm -f "$dir"/vis*.h5
}

printf "%-26s %5s %8s %8s %8s %7s %7s %7s %10s %3s\n" run ranks stream_s Mvis/s MB/s \
  q_wait send_w w_idle bound K
for job in synthetic degrid; do
  if [ "$job" = synthetic ]; then
    args=(--rec-set=small --synthetic-vis)
    base=2
  else
    args=(--rec-set=small --facet-workers=1)
    base=3
  fi
  one "$job-threads" "$base" "${args[@]}"
  one "$job-forked" "$base" "${args[@]}" --fork-writer
  one "$job-writer-rank" $((base + 1)) "${args[@]}" --writer-ranks=1
done
