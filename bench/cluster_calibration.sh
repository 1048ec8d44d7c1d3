#!/usr/bin/env bash
# The instrument against limits we set (issue 25): on the virtual cluster
# (tools/cluster, as root), links shaped to a known rate, one host's disk
# and CPU throttled, and what iotest reports against each.
#   sudo bench/cluster_calibration.sh [RATE...]   (default: 1gbit 200mbit)
# Prints one line per figure:
#   calibration: LIMIT configured=X measured=Y ratio=Y/X bound=...
# A ratio within 0.9-1.1 is a figure iotest measures correctly. The link
# rate counts Ethernet frames: TCP payload is at most 1448/1514 = 0.956 of it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rates=("${@:-1gbit}")
(($#)) || rates=(1gbit 200mbit)
IOTEST=$PWD/build/bin/iotest
TOOL=$PWD/tools/cluster
PY=$PWD/.venv/bin/python
[[ -x $PY ]] || PY=python3
export IOTEST_CLUSTER_ROOT=/var/tmp/iotest-cluster-bench
UP=(--subnet=10.81.0 --port=16857 --lifetime=3600)
DISK_BPS=${DISK_BPS:-150000000}  # one host's O_DIRECT writes and reads
OBS=(--rec-set=T05_ --vis-set=vlaa --dec=-40 --no-progress)
# As plan --slurm's job scripts: waiting threads and ranks sleep.
export OMP_WAIT_POLICY=PASSIVE OMPI_MCA_mpi_yield_when_idle=1
trap '"$TOOL" down >/dev/null 2>&1 || true' EXIT

cluster() { timeout -k 10 600 "$TOOL" "$@"; }
field() {  # field FILE EXPR: a value of a JSON report
  "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}
line() {  # line LIMIT CONFIGURED MEASURED BOUND
  "$PY" -c "import sys; c, m = float(sys.argv[2]), float(sys.argv[3]); \
print(f'calibration: {sys.argv[1]} configured={c:.4g} measured={m:.4g} ratio={m / c:.3f} bound={sys.argv[4]}')" "$@"
}
steady_sent_rate() {  # the median interval's bytes sent per second, ends left out
  "$PY" -c "import json, statistics, sys; t = json.load(open(sys.argv[1]))['timeline']; \
per = [sum(s) / t['interval_s'] for s in zip(*(r['bytes_sent'] for r in t['ranks']))]; \
print(statistics.median(per[1:-1]))" "$1"
}
bits_per_s() {  # tc's rate in bytes per second
  "$PY" -c "import re,sys; m = re.fullmatch(r'([\d.]+)([kmg]?)bit', sys.argv[1]); \
print(float(m[1]) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m[2]] / 8)" "$1"
}

for rate in "${rates[@]}"; do
  "$TOOL" down >/dev/null 2>&1 || true
  cluster up 3 --link-rate="$rate" "${UP[@]}" >/dev/null
  dir=$IOTEST_CLUSTER_ROOT/shared/net-$rate
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
  link=$(bits_per_s "$rate")
  # iotest net between two hosts, large messages, both transports.
  cluster exec srun -N2 -n2 "$IOTEST" net --min-size=4194304 --max-size=4194304 \
    --iterations=300 --window=16 --report=net.json >/dev/null
  for t in mpi tcp; do
    line "link $rate, iotest net $t 4 MiB" "$link" \
      "$(field net.json "r['net']['pairs'][0]['$t'][-1]['bandwidth_mb_per_s'] * 1e6")" -
  done
  # A predict run whose contributions cross the shaped links: one producer
  # on node1 sending 2.3 GB to the streamers on node2 and node3. At the pole
  # (no w) and with few visibilities a subgrid the streamers keep up, so the
  # producer's link is the limit. The rate is the time line's steady state:
  # the median second of bytes sent, the first and last seconds (the first
  # facets prepared, the last subgrids degridded) left out.
  cluster exec srun -N3 -n3 "$IOTEST" run --rec-set=tiny --vis-set=vlaa@pole --no-progress \
    --time=-1800:1800/8/8 --freq=260e6:300e6/8/8 --facet-workers=1 --report=predict.json \
    >/dev/null
  line "link $rate, run contributions (steady)" "$link" \
    "$(steady_sent_rate predict.json)" \
    "$(field predict.json "r['pipeline']['bound']")"
  line "link $rate, run contributions (whole stream)" "$link" \
    "$(field predict.json "r['rates']['net_bytes_per_s']")" -
  cd - >/dev/null
done

# Storage: node1's O_DIRECT writes and reads through the block I/O
# controller, unshaped links.
"$TOOL" down >/dev/null 2>&1 || true
cluster up 3 "${UP[@]}" >/dev/null
dir=$IOTEST_CLUSTER_ROOT/hosts/node1/local
local=$IOTEST_CLUSTER_ROOT/local
rm -f "$dir"/vis*
cluster limit node1 --write-bps="$DISK_BPS" --read-bps="$DISK_BPS"
cluster exec srun -N1 -n1 -w node1 "$IOTEST" run "${OBS[@]}" --synthetic-vis \
  --storage=posix --posix.direct "$local/vis%d.bin" --report="$dir/write.json" >/dev/null
line "node1 disk, run --synthetic-vis posix O_DIRECT write" "$DISK_BPS" \
  "$(field "$dir/write.json" "r['rates']['write_bytes_per_s']")" \
  "$(field "$dir/write.json" "r['pipeline']['bound'] + '/' + r['transit']['bound']")"
cluster exec srun -N1 -n1 -w node1 "$IOTEST" read --posix.direct "$local/vis0.bin" \
  --report="$dir/read.json" >/dev/null
line "node1 disk, read posix O_DIRECT" "$DISK_BPS" \
  "$(field "$dir/read.json" "r['read']['bytes'] / r['read']['read_s']")" -
cluster limit node1 --clear

# CPU: a fifth of a core on each host, links and disks free.
for h in node1 node2 node3; do cluster limit "$h" --cpu=0.2; done
dir=$IOTEST_CLUSTER_ROOT/shared/cpu && rm -rf "$dir" && mkdir -p "$dir"
cluster exec srun -N3 -n3 "$IOTEST" run "${OBS[@]}" --time=-1800:1800/32/8 \
  --freq=260e6:300e6/64/16 --facet-workers=1 --report="$dir/cpu.json" >/dev/null
echo "calibration: cpu 0.2 core a host, run bound=$(field "$dir/cpu.json" "r['pipeline']['bound']")"
