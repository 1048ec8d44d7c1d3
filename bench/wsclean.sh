#!/usr/bin/env bash
# iotest's dirty image of a MeasurementSet against WSClean's (issue 36):
# the same visibilities, written once as one MeasurementSet per writer by
# `iotest --storage=ms` (a predict run: 1 producer, 2 streamers), imaged
# by each, reading included.
#
# - iotest: `iotest grid --threads=T --pixel-samples=0 --image=DIR/iotest.fits
#   DIR/vis*.ms` (its w-towers, subgrids and facets; no check against the
#   direct adjoint transform, which WSClean does not do either, and which
#   costs 64 pixels x every visibility);
# - WSClean: `wsclean -size N N -scale CDELT -niter 0 -weight natural
#   -use-wgridder -wgridder-accuracy 1e-6 -pol xx -j T`, with N (NAXIS1)
#   and the pixel (|CDELT1|, degrees) read from iotest's FITS header.
#
# Each is timed as a whole command (start to exit: opening and reading the
# MeasurementSets, gridding, the FFTs, writing the FITS image), REPEATS
# times (default 3), interleaved, cold (page cache dropped before the run;
# root only, otherwise skipped) and warm (right after the cold run of the
# same tool, the MeasurementSets in the page cache). The table gives the
# medians with their range; then the relative RMS of iotest's image
# against WSClean's over the pixels both define (finite in both: iotest's
# image spans l in [-used/2, used/2), so its column 0, l = used/2, is NaN,
# docs/imaging.md; builds before that wrote 0 there, so all-zero rows and
# columns of iotest's are left out too).
#
# The last line: ratio=<WSClean time / iotest time>, medians, the worse of
# cold and warm (issue 36 asks >= 2: iotest at least twice as fast).
#
# Usage: [REC_SET=small] [VIS_SET=vlaa] [DEC=34] [OBS="--time=... --freq=..."]
#        [THREADS=2] [REPEATS=3] [IOTEST=build/bin/iotest] bench/wsclean.sh [DIR]
# (DIR: where the MeasurementSets and images go, all removed at the end
# but the timings, results.txt; default bench/out/wsclean). OBS overrides
# the vis-set's default observation (92 M visibilities for vlaa) for a
# quick look, e.g. OBS="--time=-230:230/16/16 --freq=260e6:300e6/64/32" (two
# frequency chunks: a MeasurementSet per streamer, each its own channels).
# Most of WSClean's time goes into the FFTs of its w-planes, which grow
# with the image (REC_SET) more than with the visibilities: small's
# 12288^2 pixels took it 6 min a run on 2 cores for 0.36 M visibilities,
# so small + vlaa (92 M visibilities) took 1 h 45 min here: ratio=4.20
# (bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${IOTEST:-}" ]; then
  source bench/common.sh
  IOTEST=build/bin/iotest
fi
dir=${1:-bench/out/wsclean}
command -v wsclean > /dev/null || { echo "wsclean is needed (apt-get install wsclean)"; exit 1; }
python=${PYTHON:-.venv/bin/python}
"$python" -c "import numpy, astropy" 2> /dev/null ||
  { echo "numpy and astropy are needed in $python (make deps)"; exit 1; }
mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
export OMP_WAIT_POLICY=PASSIVE
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
rec_set=${REC_SET:-small} vis_set=${VIS_SET:-vlaa} dec=${DEC:-34} obs=${OBS:-}
threads=${THREADS:-2} repeats=${REPEATS:-3}
cold=0
[ "$(id -u)" = 0 ] && cold=1

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
results="$dir/results.txt"
# What is left: the timings (results.txt).
cleanup() {
  rm -rf "$dir"/vis*.ms "$dir"/*.fits "$dir"/*.json "$dir"/*.log "$dir"/write.txt "$dir"/grid.txt
}
trap cleanup EXIT
cleanup
: > "$results"

drop() {
  sync
  echo 3 > /proc/sys/vm/drop_caches
  sleep 2
}

# Seconds a command took, appended to $results as "TOOL STATE SECONDS".
timed() {
  local tool=$1 state=$2
  shift 2
  local start end
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  echo "$tool $state $(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" >> "$results"
}

echo "writing: $rec_set + $vis_set, dec $dec ${obs:+($obs) }-> $dir/vis%d.ms"
# shellcheck disable=SC2086 # $obs is options
$mpirun -np 3 "$IOTEST" --rec-set="$rec_set" --vis-set="$vis_set" --dec="$dec" $obs \
  --storage=ms --no-progress "$dir/vis%d.ms" --report="$dir/write.json" > "$dir/write.txt"
grep -E "^  (wrote|wall) " "$dir/write.txt" || true
ms=("$dir"/vis*.ms)

iotest_grid() {
  rm -f "$dir/iotest.fits"
  "$IOTEST" grid --threads="$threads" --pixel-samples=0 --image="$dir/iotest.fits" \
    --report="$dir/grid.json" "${ms[@]}" > "$dir/grid.txt"
}
wsclean_image() {
  rm -f "$dir"/wsclean-*.fits
  (cd "$dir" && wsclean -size "$size" "$size" -scale "$scale" -niter 0 -weight natural \
    -use-wgridder -wgridder-accuracy 1e-6 -pol xx -j "$threads" -temp-dir "$dir" \
    -name "$dir/wsclean" "${ms[@]}" > "$dir/wsclean.log")
}

# N and the pixel from iotest's image (an untimed first run).
iotest_grid
read -r size scale < <("$python" - "$dir/iotest.fits" <<'PY'
import sys
from astropy.io import fits
h = fits.getheader(sys.argv[1])
print(h["NAXIS1"], repr(abs(h["CDELT1"])))
PY
)
echo "image: $size x $size pixels of $scale deg; $threads thread(s); $repeats repeat(s)" \
  "$([ $cold = 1 ] && echo "cold and warm" || echo "warm only (not root: no cold runs)")"

for ((repeat = 1; repeat <= repeats; repeat++)); do
  for tool in iotest wsclean; do
    run=iotest_grid
    [ $tool = wsclean ] && run=wsclean_image
    if [ $cold = 1 ]; then
      drop
      timed $tool cold $run
    fi
    timed $tool warm $run
  done
  tail -n $((2 * (1 + cold))) "$results" | sed "s/^/  repeat $repeat: /"
done

"$python" - "$results" "$dir/iotest.fits" "$dir/wsclean-dirty.fits" "$dir/grid.json" \
  "$dir/write.json" "${ms[@]}" <<'PY'
import json, os, statistics, sys
import numpy as np
from astropy.io import fits
results, ours, theirs, grid, write = sys.argv[1:6]
ms_bytes = sum(os.path.getsize(os.path.join(d, f)) for m in sys.argv[6:]
               for d, _, files in os.walk(m) for f in files)
runs = {}
for line in open(results).read().splitlines():
    tool, state, seconds = line.split()
    runs.setdefault((tool, state), []).append(float(seconds))
r, w = json.load(open(grid)), json.load(open(write))
t = r["timing"]
print(f"{w['counts']['visibilities']:,} visibilities in {len(sys.argv) - 6} MeasurementSets of "
      f"{ms_bytes / 2**20:.0f} MiB; iotest grid's last run: "
      f"wall {t['wall_s']:.1f} s, planning {t['planning_s']:.1f} s, image {t['image_s']:.1f} s")
print("| tool | state | median s | range s |")
print("|---|---|---|---|")
median = {}
for (tool, state), s in runs.items():
    median[(tool, state)] = statistics.median(s)
    print(f"| {tool} | {state} | {median[(tool, state)]:.2f} | {min(s):.2f}-{max(s):.2f} |")

# Relative RMS of iotest's image against WSClean's, row blocks at a time.
with fits.open(ours, memmap=True) as a, fits.open(theirs, memmap=True) as b:
    x, y = a[0].data[0, 0], b[0].data[0, 0]
    assert x.shape == y.shape, (x.shape, y.shape)
    rows, columns = x.shape
    # iotest's edge that no facet reaches: all-zero rows or columns.
    zero_columns = np.ones(columns, bool)
    zero_rows = np.zeros(rows, bool)
    for r0 in range(0, rows, 512):
        block = np.asarray(x[r0:r0 + 512], dtype=np.float64)
        zero_columns &= ~(block != 0).any(axis=0)
        zero_rows[r0:r0 + 512] = ~(block != 0).any(axis=1)
    diff2 = ref2 = 0.0
    used = undefined = 0
    for r0 in range(0, rows, 512):
        p = np.asarray(x[r0:r0 + 512], dtype=np.float64)
        q = np.asarray(y[r0:r0 + 512], dtype=np.float64)
        undefined += int((~np.isfinite(p)).sum())
        keep = np.isfinite(p) & np.isfinite(q) & ~zero_columns[None, :]
        keep &= ~zero_rows[r0:r0 + 512, None]
        diff2 += float(np.sum((p[keep] - q[keep]) ** 2))
        ref2 += float(np.sum(q[keep] ** 2))
        used += int(keep.sum())
print(f"images: relative RMS (iotest - WSClean) / WSClean = {np.sqrt(diff2 / ref2):.2e} over "
      f"{used:,} of {rows * columns:,} pixels (left out: iotest's {undefined:,} undefined (NaN) "
      f"pixels, {int(zero_columns.sum())} all-zero column(s) and {int(zero_rows.sum())} row(s), "
      "and any WSClean leaves undefined)")
ratios = {}
for state in ("cold", "warm"):
    if ("iotest", state) in median:
        ratios[state] = median[("wsclean", state)] / median[("iotest", state)]
        print(f"{state}: WSClean {median[('wsclean', state)]:.2f} s / iotest "
              f"{median[('iotest', state)]:.2f} s = {ratios[state]:.2f}")
state = min(ratios, key=ratios.get)
print(f"ratio={ratios[state]:.2f} (WSClean / iotest, {state}, medians of {len(runs[('iotest', state)])}; "
      "the worse of cold and warm)")
PY
