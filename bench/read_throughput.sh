#!/usr/bin/env bash
# Read-back throughput of `iotest read` against fio on the same disk, side
# by side: what the imaging direction's reads reach against what the disk
# does.
#
# For each transfer size (64 KiB and 1 MiB): a synthetic run (as in
# bench/write_throughput.sh: T05_ + vlaa, 4.4 GB, two writers) writes the
# set through `posix` and through `hdf5`; then, with 1 and 2 reading
# ranks:
# - fio: sequential reads, O_DIRECT, of two files of the same total size
#   (fio's own, laid out by fio beforehand), as many jobs as ranks;
# - iotest read: posix with --posix.direct; hdf5 (through the page cache,
#   so the cache is dropped first: root only).
# The timed reads do not check values (--check compares every value, CPU
# time the disk does not need); one untimed `iotest read --check` per set
# checks that every visibility is there, exactly once.
#
# The last line: ratio=<best iotest / best fio at 64 KiB>.
#
# Usage: bench/read_throughput.sh [DIR]   (default bench/out/read)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dir=${1:-bench/out/read}
command -v fio > /dev/null || { echo "fio is needed (apt-get install fio)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "dropping the page cache needs root"; exit 1; }
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mkdir -p "$dir"
volume=$((351 * 384 * 2048 * 16))
results="$dir/results.txt"
: > "$results"

drop() {
  sync
  echo 3 > /proc/sys/vm/drop_caches
  sleep 2
}

for kib in 64 1024; do
  freq_chunk=$((kib * 1024 / (64 * 16)))
  rm -rf "$dir"/vis* "$dir"/fio
  mkdir -p "$dir/fio"
  # fio lays its files out first (not timed), then reads them.
  fio --name=layout --directory="$dir/fio" --rw=write --bs=1m --size=$((volume / 2)) \
    --numjobs=2 --direct=1 --end_fsync=1 > /dev/null
  for storage in "posix --posix.direct" "hdf5"; do
    name=${storage%% *}
    ext=$([ "$name" = hdf5 ] && echo h5 || echo bin)
    # shellcheck disable=SC2086
    $mpirun -np 1 build/bin/iotest --synthetic-vis --rec-set=T05_ --vis-set=vlaa \
      --time=-5400:5400/384/64 --freq=260e6:300e6/2048/$freq_chunk --dec=10 \
      --writer-count=2 --fork-writer --visibility-queue=4096 --bls-per-task=16 --no-progress \
      --storage=$storage "$dir/vis%d.$ext" > /dev/null
    $mpirun -np 2 build/bin/iotest read --check "$dir"/vis*."$ext" > "$dir/check.txt" ||
      { cat "$dir/check.txt"; exit 1; }
  done
  for ranks in 1 2; do
    drop
    # The layout's files (layout.0.0, layout.1.0): one job each, or one
    # job reading both in turn.
    if [ $ranks = 2 ]; then
      jobs=(--name=layout --directory="$dir/fio" --numjobs=2 --size=$((volume / 2)))
    else
      jobs=(--name=one --filename="$dir/fio/layout.0.0:$dir/fio/layout.1.0" --size=$volume
            --file_service_type=sequential)
    fi
    fio "${jobs[@]}" --rw=read --bs=${kib}k --direct=1 --ioengine=psync --group_reporting \
      --output-format=json > "$dir/fio.json"
    python3 - "$dir/fio.json" $kib $ranks >> "$results" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(f"fio O_DIRECT {sys.argv[2]} {sys.argv[3]} {job['io_bytes'] / (job['runtime'] / 1e3)}")
PY
    for storage in "posix --posix.direct" "hdf5"; do
      name=${storage%% *}
      ext=$([ "$name" = hdf5 ] && echo h5 || echo bin)
      direct=$([ "$name" = posix ] && echo --posix.direct || true)
      drop
      # shellcheck disable=SC2086
      $mpirun -np $ranks build/bin/iotest read $direct "$dir"/vis*."$ext" \
        --report="$dir/read.json" > "$dir/read.txt"
      python3 - "$dir/read.json" "$name" $kib $ranks >> "$results" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["read"]
label = "iotest " + sys.argv[2] + (" O_DIRECT" if d["direct"] else " (page cache dropped)")
print(f"{label} {sys.argv[3]} {sys.argv[4]} {d['bytes_per_s']}")
PY
    done
  done
done
rm -rf "$dir"/vis* "$dir"/fio

python3 - "$results" "$volume" <<'PY'
import sys
rows = [line.rsplit(" ", 3) for line in open(sys.argv[1]).read().splitlines()]
print(f"Reading {int(sys.argv[2]) / 1e9:.2f} GB back (GB/s)")
print("| what | transfer | readers | GB/s |")
print("|---|---|---|---|")
for what, kib, ranks, rate in rows:
    size = "64 KiB" if kib == "64" else "1 MiB"
    print(f"| {what} | {size} | {ranks} | {float(rate) / 1e9:.3f} |")
at64 = [r for r in rows if r[1] == "64"]
best_fio = max(float(r[3]) for r in at64 if r[0].startswith("fio"))
best = max((r for r in at64 if r[0].startswith("iotest")), key=lambda r: float(r[3]))
print(f"ratio={float(best[3]) / best_fio:.2f} (best iotest at 64 KiB: {best[0]} on {best[2]} "
      f"rank(s) {float(best[3]) / 1e9:.3f} GB/s / best fio O_DIRECT read at 64 KiB "
      f"{best_fio / 1e9:.3f} GB/s)")
PY
