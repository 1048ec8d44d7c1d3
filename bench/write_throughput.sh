#!/usr/bin/env bash
# Durable write throughput of the default distributed job with output
# (T05_ + vlaa, 3 ranks, 1.5 GiB of UVH5 in 64 KiB chunks, fsync at close)
# against the raw sequential write of the same bytes to the same disk with
# dd at the same block size (conv=fdatasync). Both include the final sync.
# iotest's figure is bytes over the time its writers spent in the back-end
# (the slowest streamer's writers), so the degridding that feeds them is
# not counted against the disk.
# Usage: bench/write_throughput.sh [DIR]   (DIR on the disk to measure;
# default bench/out/write)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/out/write}
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
mkdir -p "$dir"
rm -f "$dir"/vis*.h5 "$dir"/raw.bin
sync
sleep 2  # let the discard of deleted files settle (DESIGN.md section 9)
export OMP_WAIT_POLICY=PASSIVE
chunk=$((64 * 64 * 16))  # vlaa's default chunk: 64 dumps x 64 channels

# The raw disk first, on the volume the run writes (written below).
bytes_expected=$((351 * 128 * 2048 * 16))
count=$((bytes_expected / chunk))
raw=$( { dd if=/dev/zero of="$dir/raw.bin" bs=$chunk count=$count conv=fdatasync 2>&1 >/dev/null; } | tail -1)
echo "raw: $raw"

$mpirun -np 3 build/bin/iotest --rec-set=T05_ --vis-set=vlaa --source-count=10 --no-progress \
  "$dir/vis%d.h5" --report="$dir/run.json" > "$dir/run.txt"
rm -f "$dir"/vis*.h5 "$dir/raw.bin"

python3 - "$dir/run.json" "$raw" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
m = re.match(r"(\d+) bytes .* copied, ([\d.]+) s", sys.argv[2])
raw = int(m.group(1)) / float(m.group(2))
ours = r["rates"]["write_bytes_per_s"]
c = r["counts"]
print(f"iotest: {c['bytes_written']} bytes in {c['chunks_written']} chunks "
      f"(+{c['chunks_rewritten']} rewritten) in {r['timing']['write_s']:.2f} s of writing "
      f"= {ours / 1e9:.3f} GB/s; stream {r['timing']['stream_s']:.1f} s, "
      f"{r['rates']['vis_per_s']:.3g} vis/s")
print(f"raw dd bs=64KiB fdatasync: {raw / 1e9:.3f} GB/s")
print(f"ratio={ours / raw:.2f}")
PY
