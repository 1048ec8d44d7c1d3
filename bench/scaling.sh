#!/usr/bin/env bash
# The scaling study (issue 12; SDP Memo 56): the same job at 1, 2, 3, ...
# streamers, one producer, one thread a rank, then the Universal
# Scalability Law fitted to every stage's throughput with its plots
# (tools/usl.py). On this 2-core machine a third streamer shares a core,
# which the fit shows as contention.
#
# Usage: [STREAMERS="1 2 3"] bench/scaling.sh [DIR] [iotest options...]
#   default job: small + vlaa, a dry run (no output), 92 M visibilities
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/out/scaling}
shift || true
job=("$@")
[ ${#job[@]} -gt 0 ] || job=(--rec-set=small --vis-set=vlaa)
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mkdir -p "$dir"
rm -f "$dir"/report*.json
for s in ${STREAMERS:-1 2 3}; do
  $mpirun -np $((s + 1)) build/bin/iotest "${job[@]}" --facet-workers=1 --threads=1 \
    --no-progress --report="$dir/report$s.json" > "$dir/run$s.txt"
  grep -E "^  stream " "$dir/run$s.txt" | sed "s/^/$s streamer(s):/"
done
.venv/bin/python tools/usl.py "$dir"/report*.json --plots="$dir/plots" --json="$dir/fits.json"
