#!/usr/bin/env bash
# The imaging direction's reads against a raw sequential read of the same
# files (issue 11): what `iotest run --direction=image` reaches when it
# reads a run's output in walk order, against what the disk gives fio.
#
# A synthetic run (as in bench/write_throughput.sh: T05_ + vlaa over three
# times vlaa's default hours, 4.4 GB, more than the page cache holds; 64 KiB
# chunks, two writers) writes the set through `posix`. Then, REPEATS times
# (default 3), interleaved, each after the page cache is dropped (root
# only):
# - fio: a sequential read of the set's two files, 64 KiB transfers, one
#   job per file: O_DIRECT (the raw ceiling the ratio is judged against)
#   and through the page cache;
# - iotest: `run --direction=image --synthetic-vis` on two streamer ranks
#   (storage only: each walks its parts and reads their chunks through the
#   posix back-end, no producers, no gridding; every value checked against
#   the pattern, as OSU's -c; two threads a rank, the default there), with
#   `--posix.direct` (O_DIRECT) and through the page cache.
#
# iotest's rate is the bytes its reads returned over timing.stream_s. A
# chunk spans several subgrids and every visit reads it again
# (read.chunks_reread), so it also shows the distinct bytes of the set
# over the same time: what the imaging walk gets from the disk.
#
# The last line: ratio=<median iotest O_DIRECT / median fio O_DIRECT>.
#
# Usage: [REPEATS=N] bench/image_read.sh [DIR]   (default bench/out/image_read)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dir=${1:-bench/out/image_read}
command -v fio > /dev/null || { echo "fio is needed (apt-get install fio)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "dropping the page cache needs root"; exit 1; }
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
repeats=${REPEATS:-3}
mkdir -p "$dir"
results="$dir/results.txt"
: > "$results"

drop() {
  sync
  echo 3 > /proc/sys/vm/drop_caches
  sleep 2
}

rm -rf "$dir"/vis*
$mpirun -np 1 build/bin/iotest --synthetic-vis --rec-set=T05_ --vis-set=vlaa \
  --time=-5400:5400/384/64 --freq=260e6:300e6/2048/64 --dec=10 --writer-count=2 --fork-writer \
  --visibility-queue=4096 --bls-per-task=16 --no-progress --storage=posix "$dir/vis%d.bin" \
  > /dev/null
files=("$dir"/vis0.bin "$dir"/vis1.bin)

for ((repeat = 1; repeat <= repeats; repeat++)); do
  for direct in 1 0; do
    drop
    # Global options first: fio applies those after a --name to that job only.
    fio --rw=read --bs=64k --direct=$direct --ioengine=psync --readonly --group_reporting \
      --output-format=json --name=raw0 --filename="${files[0]}" --name=raw1 \
      --filename="${files[1]}" > "$dir/fio.json"
    python3 - "$dir/fio.json" $direct >> "$results" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["read"]
rate = job["io_bytes"] / (job["runtime"] / 1e3)
label = "O_DIRECT" if sys.argv[2] == "1" else "page cache (dropped)"
print(f"fio|{label}|{rate}|{rate}")
PY
  done
  for direct in --posix.direct ""; do
    drop
    # shellcheck disable=SC2086
    $mpirun -np 2 build/bin/iotest run --direction=image --synthetic-vis --rec-set=T05_ \
      --no-progress $direct --report="$dir/read.json" "${files[@]}" > "$dir/read.txt"
    python3 - "$dir/read.json" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["read"]
assert d["passed"] and d["values_right"] == r["counts"]["visibilities"], "values wrong"
distinct = d["bytes"] * d["chunks_stored"] / d["chunks"]
label = "O_DIRECT" if d["direct"] else "page cache (dropped)"
print(f"iotest|{label}|{d['bytes_per_s']}|{distinct / r['timing']['stream_s']}")
PY
  done
done
rm -rf "$dir"/vis*

python3 - "$results" <<'PY'
import statistics, sys
rows = [line.split("|") for line in open(sys.argv[1]).read().splitlines()]
groups = {}
for who, how, rate, distinct in rows:
    groups.setdefault((who, how), []).append((float(rate), float(distinct)))
print("Reading the 4.4 GB set back, 64 KiB transfers, 2 readers (GB/s, medians with range)")
print("| what | reads | read rate | distinct bytes / time |")
print("|---|---|---|---|")
for (who, how), runs in groups.items():
    rates = [r for r, _ in runs]
    print(f"| {who} | {how} | {statistics.median(rates) / 1e9:.3f} "
          f"({min(rates) / 1e9:.3f}-{max(rates) / 1e9:.3f}) | "
          f"{statistics.median(d for _, d in runs) / 1e9:.3f} |")
ours = statistics.median(r for r, _ in groups[("iotest", "O_DIRECT")])
raw = statistics.median(r for r, _ in groups[("fio", "O_DIRECT")])
print(f"ratio={ours / raw:.2f} (iotest --direction=image O_DIRECT {ours / 1e9:.3f} GB/s / fio "
      f"O_DIRECT sequential read of the same files {raw / 1e9:.3f} GB/s, medians of "
      f"{len(groups[('fio', 'O_DIRECT')])})")
PY
