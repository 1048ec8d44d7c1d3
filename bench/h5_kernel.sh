#!/usr/bin/env bash
# The storage kernel (`iotest h5`, seism-core's checkpoint) against fio on
# the same disk: 2 ranks write a 4-D dataset through parallel HDF5, each its
# block of every 3-D slice, with collective and with independent transfers,
# at 64 KiB and 1 MiB per rank and step; fio writes the same volume with 2
# jobs at the same transfer size, fsync at the end: through the page cache
# as MPI-IO does (like for like: the ratio), and with O_DIRECT (what the
# disk takes without the page cache's writeback).
#
# iotest's figure is the aggregate rate: bytes over create + every step's
# write + flush (MPI_File_sync) and close, the slowest rank's, as fio's is
# bytes over its run including the final fsync. The raw rate (bytes over
# the writes alone) is beside it: the page cache absorbs writes until the
# flush, so only the aggregate is durable.
#
# The last line: ratio=<best iotest aggregate / fio buffered at 1 MiB>.
#
# Usage: bench/h5_kernel.sh [DIR]   (default bench/out/h5)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dir=${1:-bench/out/h5}
command -v fio > /dev/null || { echo "fio is needed (apt-get install fio)"; exit 1; }
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mkdir -p "$dir"
volume=$((4 << 30))  # bytes in all
results="$dir/results.txt"
: > "$results"

settle() {
  rm -rf "$dir"/ck.h5 "$dir"/fio
  sync
  sleep 5
}

# Per-rank blocks of 64 KiB (16 x 16 x 32 doubles) and 1 MiB (32 x 64 x 64).
for kib in 64 1024; do
  domain=$([ $kib = 64 ] && echo 16,16,32 || echo 32,64,64)
  steps=$((volume / (2 * kib * 1024)))
  for direct in 0 1; do
    settle
    mkdir -p "$dir/fio"
    fio --name=write --directory="$dir/fio" --rw=write --bs=${kib}k --size=$((volume / 2)) \
      --numjobs=2 --direct=$direct --ioengine=psync --end_fsync=1 --group_reporting \
      --output-format=json > "$dir/fio.json"
    python3 - "$dir/fio.json" $kib $direct >> "$results" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["write"]
rate = job["io_bytes"] / (job["runtime"] / 1e3)
how = "O_DIRECT" if sys.argv[3] == "1" else "page cache"
print(f"fio|{how}, 2 jobs|{sys.argv[2]}|{rate}|")
PY
  done
  for transfer in collective independent; do
    settle
    $mpirun -np 2 build/bin/iotest h5 "$dir/ck.h5" --domain=$domain --steps=$steps \
      --transfer=$transfer --report="$dir/h5.json" > "$dir/h5.txt"
    python3 - "$dir/h5.json" $kib >> "$results" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["h5"]
what = f"{c['transfer']} ({c['io_mode']}), {c['steps']} steps"
print(f"iotest h5|{what}|{sys.argv[2]}|{c['aggregate_bytes_per_s']}|{c['raw_bytes_per_s']}")
PY
  done
done
settle

python3 - "$results" "$volume" <<'PY'
import sys
rows = [line.split("|") for line in open(sys.argv[1]).read().splitlines()]
print(f"Checkpoint kernel, 2 ranks, {int(sys.argv[2]) / 2**30:.0f} GiB (GB/s)")
print("| what | how | per rank and step | durable (aggregate) | raw writes |")
print("|---|---|---|---|---|")
for tool, how, kib, rate, raw in rows:
    size = "64 KiB" if kib == "64" else "1 MiB"
    raw_text = f"{float(raw) / 1e9:.3f}" if raw else ""
    print(f"| {tool} | {how} | {size} | {float(rate) / 1e9:.3f} | {raw_text} |")
for kib in ("64", "1024"):
    fio = {r[1]: float(r[3]) for r in rows if r[0] == "fio" and r[2] == kib}
    best = max(float(r[3]) for r in rows if r[0] != "fio" and r[2] == kib)
    label = "64 KiB" if kib == "64" else "1 MiB"
    buffered, direct = fio["page cache, 2 jobs"], fio["O_DIRECT, 2 jobs"]
    line = (f"best iotest h5 at {label}: {best / buffered:.2f} of fio through the page cache, "
            f"{best / direct:.2f} of fio O_DIRECT")
    print(line if kib == "64" else f"ratio={best / buffered:.2f} ({line})")
PY
