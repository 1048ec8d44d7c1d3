#!/usr/bin/env bash
# Durable write throughput of iotest's storage path against fio on the same
# disk, side by side: what the writers reach against what the disk does.
#
# For each transfer size (64 KiB and 1 MiB) and writer count (1 and 2):
# - fio: sequential writes, fsync at the end, the same total volume:
#   O_DIRECT in one file per job (the disk's ceiling, what the ratio is
#   judged against), and through the page cache in one file per job and in
#   one shared file (the ceilings of the buffered back-ends: a shared file
#   takes ext4's inode lock for every buffered write);
# - iotest `--synthetic-vis` (no producers, no degridding: the streamer
#   walks its parts and cuts its tasks as the real run does and writes a
#   pattern in the same chunks) with forked writer processes, through
#   `posix --posix.direct`, `posix` (page cache, fsync at close) and `hdf5`
#   (page cache, fsync at close); and `phdf5` (one shared file through
#   parallel HDF5, independent and collective transfers, synced at close),
#   whose writers are one thread per streamer rank, so it runs one rank per
#   writer. T05_ + vlaa over three times vlaa's
#   default hours: 4.4 GB, more than the page cache (~2.4 GB) holds. The
#   chunk is the transfer: 64 dumps x 64 channels (64 KiB) or 64 x 1024
#   (1 MiB). Every iotest output is verified (the synthetic pattern).
#
# This VM's disk and page cache vary by 2-3x from one minute to the next
# (bench/README.md), so every configuration runs REPEATS times (default 3),
# the configurations interleaved within each repeat, and the table gives
# medians with the range.
#
# iotest's figure is the durable volume (distinct chunks in the files) over
# timing.stream_s, from the start barrier to the last writer's fsync and
# close, as fio's is bytes over its run including the final fsync.
#
# The last line: ratio=<best iotest / best fio O_DIRECT at 64 KiB>, medians.
#
# Usage: [REPEATS=N] bench/write_throughput.sh [DIR]   (DIR on the disk to
# measure; default bench/out/write)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/out/write}
command -v fio > /dev/null || { echo "fio is needed (apt-get install fio)"; exit 1; }
# Open MPI binds a job of one or two ranks to one core each: unbound, the
# writer processes get the other core.
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mkdir -p "$dir"
volume=$((351 * 384 * 2048 * 16))  # baselines x dumps x channels x 16 B: every chunk whole
results="$dir/results.txt"
repeats=${REPEATS:-3}
: > "$results"

# Deleting a big file just before a timed write stalls it (discard,
# DESIGN.md section 9): delete, sync and let it settle before each write.
settle() {
  rm -rf "$dir"/vis* "$dir"/fio
  sync
  sleep 5
}

# One fio run: LABEL KIB WRITERS [fio options...]; appends its rate.
fio_write() {
  local label=$1 kib=$2 writers=$3
  shift 3
  settle
  mkdir -p "$dir/fio"
  fio --name=write --rw=write --bs=${kib}k --size=$((volume / writers)) --numjobs=$writers \
    --ioengine=psync --end_fsync=1 --group_reporting --output-format=json "$@" > "$dir/fio.json"
  python3 - "$dir/fio.json" "$label" $kib $writers >> "$results" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["write"]
print(f"fio {sys.argv[2]} {sys.argv[3]} {sys.argv[4]} {job['io_bytes'] / (job['runtime'] / 1e3)}")
PY
}

for ((repeat = 1; repeat <= repeats; repeat++)); do
  for kib in 64 1024; do
    freq_chunk=$((kib * 1024 / (64 * 16)))
    for writers in 1 2; do
      fio_write "O_DIRECT" $kib $writers --directory="$dir/fio" --direct=1
      fio_write "page cache" $kib $writers --directory="$dir/fio"
      if ((writers > 1)); then  # the shared file phdf5 writes, through the page cache
        fio_write "page cache, one file" $kib $writers --filename="$dir/fio/one" \
          --offset_increment=$((volume / writers))
      fi
      for storage in "posix --posix.direct" "posix" "hdf5" "phdf5 --phdf5.transfer=independent" \
        "phdf5 --phdf5.transfer=collective"; do
        settle
        name=${storage%% *}
        ext=$([ "$name" = posix ] && echo bin || echo h5)
        if [ "$name" = phdf5 ]; then  # one rank per writer, one file
          ranks=$writers writing="" out="$dir/vis.h5"
        else
          ranks=1 writing="--writer-count=$writers --fork-writer" out="$dir/vis%d.$ext"
        fi
        # shellcheck disable=SC2086 # $storage is a back-end and its options
        $mpirun -np $ranks build/bin/iotest --synthetic-vis --rec-set=T05_ --vis-set=vlaa \
          --time=-5400:5400/384/64 --freq=260e6:300e6/2048/$freq_chunk --dec=10 \
          $writing --visibility-queue=4096 --bls-per-task=16 \
          --no-progress --storage=$storage "$out" --report="$dir/run.json" \
          > "$dir/run.txt"
        build/bin/iotest verify "$dir"/vis*."$ext" > "$dir/verify.txt" ||
          { cat "$dir/verify.txt"; exit 1; }
        python3 - "$dir/run.json" "$volume" "$storage" $kib $writers >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c, t = r["counts"], r["timing"]
# Every visibility written: the output holds every chunk of the observation
# once (a chunk split between streamers counts in each writer's tally).
chunk = c["bytes_written"] // (c["chunks_written"] + c["chunks_rewritten"])
volume = int(sys.argv[2])
assert c["chunks_written"] * chunk >= volume and c["visibilities_written"] == c["visibilities"]
label = "iotest " + sys.argv[3].replace(" --posix.direct", " O_DIRECT").replace(
    " --phdf5.transfer=", " ")
print(f"{label} {sys.argv[4]} {sys.argv[5]} {volume / t['stream_s']}")
PY
      done
    done
  done
done
settle

python3 - "$results" "$volume" "$repeats" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]).read().splitlines():
    what, kib, writers, rate = line.rsplit(" ", 3)
    runs.setdefault((what, kib, writers), []).append(float(rate))
rows = [(what, kib, writers, statistics.median(r), min(r), max(r))
        for (what, kib, writers), r in runs.items()]
rows.sort(key=lambda r: (int(r[1]), int(r[2])))  # stable: run order within a size
print(f"Durable sequential writes of {int(sys.argv[2]) / 1e9:.2f} GB, "
      f"median of {sys.argv[3]} (range), GB/s")
print("| what | transfer | writers | GB/s | range |")
print("|---|---|---|---|---|")
for what, kib, writers, rate, low, high in rows:
    size = "64 KiB" if kib == "64" else "1 MiB"
    print(f"| {what} | {size} | {writers} | {rate / 1e9:.3f} | "
          f"{low / 1e9:.2f}-{high / 1e9:.2f} |")
at64 = [r for r in rows if r[1] == "64"]
best_fio = max(r[3] for r in at64 if r[0] == "fio O_DIRECT")
ours = [r for r in at64 if r[0].startswith("iotest")]
best = max(ours, key=lambda r: r[3])
for backend in ("posix", "hdf5", "phdf5"):
    b = max((r for r in ours if r[0].split()[1] == backend), key=lambda r: r[3])
    print(f"{backend}: best at 64 KiB {b[0]} x {b[2]} writer(s): "
          f"{b[3] / best_fio:.2f} of fio O_DIRECT's best")
print(f"ratio={best[3] / best_fio:.2f} (best iotest at 64 KiB: {best[0]} x {best[2]} "
      f"writer(s) {best[3] / 1e9:.3f} GB/s / best fio O_DIRECT at 64 KiB "
      f"{best_fio / 1e9:.3f} GB/s, medians)")
PY
