#!/usr/bin/env bash
# The scaling study (issue 12; SDP Memo 56): `iotest scale` runs the same
# job at 2, 3, 4 ranks (one producer, so 1, 2, 3 streamers, one thread a
# rank), one run after another, then tools/usl.py fits the Universal
# Scalability Law to every stage's throughput and draws the plots. On this
# 2-core machine a second streamer already shares a core, which the fit
# shows as contention.
#
# Usage: [RANKS=2,3,4] bench/scaling.sh [DIR] [iotest run options...]
#   default job: small + vlaa, a dry run (no output), 92 M visibilities
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dir=${1:-bench/out/scaling}
shift || true
job="$*"
[ -n "$job" ] || job="--rec-set=small --vis-set=vlaa"
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
build/bin/iotest scale --ranks="${RANKS:-2,3,4}" --job="$job --facet-workers=1 --threads=1" \
  --launcher="${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}" \
  --out="$dir" --report="$dir.json"
