#!/usr/bin/env bash
# Where the ms back-end's write time goes (issue 36): casacore alone
# writing the same tiles, beside iotest's ms writer and fio O_DIRECT, in
# one script. At 1 MiB chunks the MS is write_throughput.sh's: T05_ +
# vlaa, 351 baselines x 384 dumps x 2048 channels (2.21 GB of DATA in
# single precision), DATA and FLAG in TiledColumnStMan with one tile a
# chunk, [1 correlation, 1024 channels, 64 rows].
#
# - casacore alone: python-casacore (the C++ library does the work; one
#   call a tile) makes the table, adds each row chunk's 64 rows and puts
#   its two tiles of DATA and of FLAG, in file order, then fsyncs every
#   file of the table: the ceiling of casacore's tiled storage manager
#   here, with nothing of iotest's (no pipeline, no conversion, no
#   checksums, no subtables).
# - iotest ms: `iotest --synthetic-vis --storage=ms --writer-count=1`, as
#   bench/write_throughput.sh runs it (the back-end fsyncs every file).
# - iotest null: the same run with `--storage=null` (the chunks reach the
#   forked writer's queue and go no further): the synthetic pipeline's own
#   rate on these cores, the ceiling of any back-end in that run.
# - fio O_DIRECT: 1 MiB sequential writes of the same bytes.
#
# Each REPEATS times (default 3), interleaved, after a settle (delete,
# sync, 5 s). Rates are of DATA's bytes (8 a visibility) over the time
# from the first put to the end of the fsync (iotest: its report's stream
# time, which ends after the fsync at close).
#
# The last lines: null=<iotest null / fio O_DIRECT> and ratio=<iotest ms /
# casacore alone>, medians.
#
# Usage: [REPEATS=3] [IOTEST=build/bin/iotest] bench/ms_casacore.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${IOTEST:-}" ]; then
  source bench/common.sh
  IOTEST=build/bin/iotest
fi
dir=${1:-bench/out/ms_casacore}
python=${PYTHON:-.venv/bin/python}
"$python" -c "import casacore.tables, numpy" 2> /dev/null ||
  { echo "python-casacore and numpy are needed in $python (make deps)"; exit 1; }
command -v fio > /dev/null || { echo "fio is needed (apt-get install fio)"; exit 1; }
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_WAIT_POLICY=PASSIVE
repeats=${REPEATS:-3}
baselines=351 dumps=384 channels=2048 time_chunk=64 freq_chunk=1024
data_bytes=$((baselines * dumps * channels * 8))

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
results="$dir/results.txt"
cleanup() { rm -rf "$dir"/alone.ms "$dir"/vis* "$dir"/fio "$dir"/run.json "$dir"/run.txt; }
trap cleanup EXIT
: > "$results"
settle() {
  cleanup
  sync
  sleep 5
}

casacore_alone() {
  "$python" - "$dir/alone.ms" $baselines $dumps $channels $time_chunk $freq_chunk >> "$results" <<'PY'
import os, sys, time
import numpy as np
from casacore import tables as pt
path = sys.argv[1]
baselines, dumps, channels, time_chunk, freq_chunk = map(int, sys.argv[2:])
columns = [pt.makearrcoldesc("DATA", 0j, ndim=2, shape=[channels, 1], valuetype="complex"),
           pt.makearrcoldesc("FLAG", False, ndim=2, shape=[channels, 1])]
tile = np.array([1, freq_chunk, time_chunk], dtype=np.int32)
dminfo = {f"*{i + 1}": {"TYPE": "TiledColumnStMan", "NAME": f"Tiled{name}",
                        "SPEC": {"DEFAULTTILESHAPE": tile}, "COLUMNS": [name]}
          for i, name in enumerate(("DATA", "FLAG"))}
table = pt.table(path, pt.maketabdesc(columns), nrow=0, dminfo=dminfo, ack=False)
data = (np.arange(time_chunk * freq_chunk, dtype=np.float32).reshape(time_chunk, freq_chunk, 1)
        * (1 + 1j)).astype(np.complex64)
flags = np.zeros((time_chunk, freq_chunk, 1), dtype=bool)
start = time.perf_counter()
row = 0
for _ in range(baselines * dumps // time_chunk):  # row chunks, in file order
    table.addrows(time_chunk)
    for c0 in range(0, channels, freq_chunk):
        corner, end = [c0, 0], [c0 + freq_chunk - 1, 0]
        table.putcolslice("DATA", data, blc=corner, trc=end, startrow=row, nrow=time_chunk)
        table.putcolslice("FLAG", flags, blc=corner, trc=end, startrow=row, nrow=time_chunk)
    row += time_chunk
table.flush()
puts = time.perf_counter() - start
table.close()
for folder, _, files in os.walk(path):  # casacore's flush syncs none of the data files
    for name in files:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
print(f"casacore {time.perf_counter() - start} {puts}")
PY
}

# iotest_run NAME STORAGE OUTPUT
iotest_run() {
  $mpirun -np 1 "$IOTEST" --synthetic-vis --rec-set=T05_ --vis-set=vlaa \
    --time=-5400:5400/$dumps/$time_chunk --freq=260e6:300e6/$channels/$freq_chunk --dec=10 \
    --writer-count=1 --fork-writer --visibility-queue=256 --bls-per-task=16 --no-progress \
    --storage="$2" "$3" --report="$dir/run.json" > "$dir/run.txt"
  "$python" - "$dir/run.json" "$1" >> "$results" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["timing"]
print(f"{sys.argv[2]} {t['stream_s']} {t['write_s']}")
PY
}
iotest_ms() { iotest_run iotest ms "$dir/vis%d.ms"; }
iotest_null() { iotest_run null null "$dir/vis%d.bin"; }

fio_direct() {
  mkdir -p "$dir/fio"
  fio --name=write --rw=write --bs=1m --size=$data_bytes --numjobs=1 --ioengine=psync \
    --end_fsync=1 --direct=1 --directory="$dir/fio" --output-format=json > "$dir/fio.json"
  "$python" - "$dir/fio.json" >> "$results" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["write"]
print(f"fio {job['runtime'] / 1e3} {job['runtime'] / 1e3}")
PY
}

echo "DATA: $((data_bytes / 1000000)) MB at 1 MiB chunks (tiles [1, $freq_chunk, $time_chunk]);" \
  "$repeats repeat(s) in $dir"
for ((repeat = 1; repeat <= repeats; repeat++)); do
  for run in fio_direct casacore_alone iotest_ms iotest_null; do
    settle
    $run
  done
  tail -n 4 "$results" | sed "s/^/  repeat $repeat: /"
done

"$python" - "$results" $data_bytes <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]).read().splitlines():
    what, seconds, inside = line.split()
    runs.setdefault(what, []).append((float(seconds), float(inside)))
volume = int(sys.argv[2])
names = {"fio": "fio O_DIRECT", "casacore": "casacore alone (python-casacore)", "iotest": "iotest ms",
         "null": "iotest null (the pipeline alone)"}
print("| what | GB/s | range | of fio O_DIRECT | seconds | in puts/writes s |")
print("|---|---|---|---|---|---|")
rate = {w: statistics.median(volume / s for s, _ in r) for w, r in runs.items()}
for what, r in runs.items():
    rates = [volume / s / 1e9 for s, _ in r]
    print(f"| {names[what]} | {rate[what] / 1e9:.3f} | {min(rates):.2f}-{max(rates):.2f} | "
          f"{rate[what] / rate['fio']:.2f} | {statistics.median(s for s, _ in r):.2f} | "
          f"{statistics.median(i for _, i in r):.2f} |")
print(f"iotest ms reaches {rate['iotest'] / rate['null']:.2f} of the pipeline alone")
# Issue 46's mark for the generator: the pipeline alone at least twice the
# disk, both counted in DATA's 8 bytes a visibility.
print(f"null={rate['null'] / rate['fio']:.2f} (iotest null / fio O_DIRECT, medians)")
print(f"ratio={rate['iotest'] / rate['casacore']:.2f} (iotest ms / casacore alone, medians)")
PY
