#!/usr/bin/env bash
# Durable write throughput of iotest's storage path on its own against the
# raw sequential write of the same bytes to the same disk.
#
# iotest: `--synthetic-vis` (no producers, no degridding: the streamer walks
# its parts and cuts its tasks as the real run does and writes a pattern in
# the same chunks), T05_ + vlaa with vlaa's chunks (64 dumps x 64 channels =
# 64 KiB) over three times vlaa's default hours: 4.4 GB of UVH5, so the page
# cache (~2.4 GB) cannot hold it. The HDF5 back-end fsyncs each file at close.
# Raw: dd of the same bytes in chunk-sized blocks with conv=fdatasync, once
# before and once after the run (the disk drifts); the ratio is against
# their mean.
#
# iotest's figure is the durable volume (distinct chunks in the files) over
# timing.stream_s, the streaming phase from the start barrier to the last
# writer's fsync and close: what the disk took from the run, as dd's figure
# is bytes over its write plus fdatasync. Not rates.write_bytes_per_s
# (bytes over the writers' seconds in the back-end): that leaves out the
# time writers waited, and counts a rewritten chunk twice though a rewrite
# in the page cache may reach the disk once.
#
# Usage: bench/write_throughput.sh [DIR]   (DIR on the disk to measure;
# default bench/out/write)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/out/write}
# Open MPI binds a job of one or two ranks to one core each: unbound, the
# writer processes get the other core.
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mkdir -p "$dir"
chunk=$((64 * 64 * 16))                # bytes: 64 dumps x 64 channels of complex doubles
volume=$((351 * 384 * 2048 * 16))      # baselines x dumps x channels: every chunk whole
obs=(--rec-set=T05_ --vis-set=vlaa --time=-5400:5400/384/64 --freq=260e6:300e6/2048/64 --dec=10)

# Deleting a big file just before a timed write stalls it (discard,
# DESIGN.md section 9): delete, sync and let it settle before each write.
settle() {
  rm -f "$dir"/vis*.h5 "$dir"/vis*.h5.partial "$dir/raw.bin"
  sync
  sleep 5
}
raw() {
  settle
  { dd if=/dev/zero of="$dir/raw.bin" bs=$chunk count=$((volume / chunk)) conv=fdatasync \
    2>&1 >/dev/null; } | tail -1
}

raw_before=$(raw)
# One streamer rank (nothing to produce) with two writer processes: a
# buffered write costs a core (the copy into the page cache), and dd has a
# core of its own besides. --visibility-queue=4096 holds the parts of
# chunks split over subgrids until whole (no rewrites); tasks of 16 row
# chunks (34 MB of visibilities rather than the 64 MiB cap of a task)
# spare the writers' cores the first touch of the task buffers.
settle
$mpirun -np 1 build/bin/iotest --synthetic-vis "${obs[@]}" --writer-count=2 --fork-writer \
  --visibility-queue=4096 --bls-per-task=16 --no-progress \
  "$dir/vis%d.h5" --report="$dir/run.json" > "$dir/run.txt"
build/bin/iotest verify "$dir"/vis*.h5 > "$dir/verify.txt" || { cat "$dir/verify.txt"; exit 1; }
raw_after=$(raw)
# Context, not the ratio: on this VM one buffered stream is bound by its
# copy into the page cache on one core, and iotest's two writers use both
# cores; two dd streams side by side show what two cores can push.
settle
start=$(date +%s.%N)
for i in 0 1; do
  dd if=/dev/zero of="$dir/raw$i.bin" bs=$chunk count=$((volume / chunk / 2)) conv=fdatasync \
    2>/dev/null &
done
wait
raw_two=$(python3 -c "import sys; print($volume / ($(date +%s.%N) - $start))")
rm -f "$dir"/raw0.bin "$dir"/raw1.bin
settle

python3 - "$dir/run.json" "$volume" "$(cat "$dir/verify.txt")" "$raw_before" "$raw_after" "$raw_two" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
c, t, pl = r["counts"], r["timing"], r["pipeline"]
chunk = c["bytes_written"] // (c["chunks_written"] + c["chunks_rewritten"])
volume = c["chunks_written"] * chunk
assert pl["synthetic_vis"] and c["visibilities_written"] == c["visibilities"]
assert volume == int(sys.argv[2]), (volume, sys.argv[2])  # the bytes dd wrote
ours = volume / t["stream_s"]
raws = []
for text in sys.argv[4:6]:
    m = re.match(r"(\d+) bytes .* copied, ([\d.]+) s", text)
    raws.append(int(m.group(1)) / float(m.group(2)))
raw = sum(raws) / len(raws)
print(f"iotest --synthetic-vis: {volume} bytes in {c['chunks_written']} chunks "
      f"(+{c['chunks_rewritten']} rewritten), {pl['streamers']} streamer(s) x "
      f"{pl['writers_per_streamer']} writer(s), stream {t['stream_s']:.2f} s "
      f"= {ours / 1e9:.3f} GB/s durable; bound by {pl['bound']}")
print(f"  {sys.argv[3]}")
print(f"raw dd bs={chunk} conv=fdatasync: before {raws[0] / 1e9:.3f} GB/s, "
      f"after {raws[1] / 1e9:.3f} GB/s, mean {raw / 1e9:.3f} GB/s")
two = float(sys.argv[6])
print(f"raw, two dd streams side by side: {two / 1e9:.3f} GB/s (iotest / that {ours / two:.2f})")
print(f"ratio={ours / raw:.2f} (iotest {ours / 1e9:.3f} GB/s / raw {raw / 1e9:.3f} GB/s)")
PY
