#!/usr/bin/env bash
# iotest on a real parallel file system, against limits set in advance
# (issue 44): a CephFS of its own in the virtual cluster (tools/cluster up 3
# --storage=cephfs), two storage hosts with an OSD each, their links shaped
# to LINK_RATE (tc tbf, as the network calibration shapes hosts' links),
# the data pool kept REPLICATION times, a ceph-fuse client on each of the
# three compute hosts. Side by side, interleaved, REPEATS times:
# - iotest: `--synthetic-vis` (storage only: no degridding, which two cores
#   could not feed at the links' rate beside Ceph's daemons) from the three
#   hosts under srun, one streamer a host with WRITERS forked writers each,
#   `posix` through the page cache with fsync at close, TRANSFER KiB
#   chunks; its figure is the bytes it wrote over timing.stream_s (start
#   barrier to the last writer's fsync and close), what the file system
#   took, as fio's is (a chunk that two streamers share is written in part
#   by each, into each one's file: the report's "x the visibilities'
#   bytes"); the visibilities' own bytes over the same time are a row apart;
#   and the same with `--synthetic-vis=sequential` (every chunk whole, in
#   file order, no walk: IOR's pattern, iotest's storage ceiling);
# - fio on the same mount from the same three hosts at once, the same
#   files per host, transfer size and volume, fsync at the end; its figure
#   is every host's bytes over the longest host's run;
# - `rados bench` on the data pool from the login side (Ceph's own
#   benchmark of the object store underneath: no file system, no FUSE),
#   16 writes of TRANSFER KiB objects in flight.
# The links allow STORAGE_HOSTS x T / REPLICATION, where T is what a TCP
# stream carries through one storage link (measured first: 0.956 of
# LINK_RATE, which counts Ethernet frames): every byte a client writes
# enters its primary OSD's host and, REPLICATION - 1 times, another storage
# host (tbf on both ends of each storage host's link; the compute hosts'
# links are not shaped). The table gives each median with its range and
# its fraction of that limit; the last line is ratio=<iotest/fio>, medians.
#
# Usage: [LINK_RATE=200mbit] [REPLICATION=2] [REPEATS=3] [TRANSFER=1024]
#        [WRITERS=4] [IOTEST=build/bin/iotest] bench/cephfs.sh
# Needs root and what tools/install-deps.sh --cluster installs. Its cluster
# has a root, subnet and port of its own, and goes down at the end, whatever
# happens.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${IOTEST:-}" ]; then
  source bench/common.sh
  IOTEST=build/bin/iotest
fi
IOTEST=$(realpath "$IOTEST")
rate=${LINK_RATE:-200mbit} replication=${REPLICATION:-2} repeats=${REPEATS:-3}
kib=${TRANSFER:-1024} writers=${WRITERS:-4}
storage_hosts=2 hosts=3
export IOTEST_CLUSTER_ROOT=${BENCH_CLUSTER_ROOT:-/var/tmp/iotest-bench-cephfs}
cluster="tools/cluster"
out=bench/out/cephfs
mkdir -p "$out"
results="$out/results.txt"
: > "$results"
trap '$cluster down > /dev/null 2>&1 || true' EXIT
$cluster up $hosts --storage=cephfs --storage-hosts=$storage_hosts \
  --replication="$replication" --storage-link-rate="$rate" --subnet=10.81.0 --port=16857 \
  --lifetime=5400 > "$out/up.txt" 2>&1 || { cat "$out/up.txt"; exit 1; }
shared=$IOTEST_CLUSTER_ROOT/shared
# Ranks that wait sleep, as plan --slurm's scripts have them (srun passes
# the environment on): spinning ranks would take the cores the clients and
# OSDs need (bench/README.md, Calibration).
export OMP_WAIT_POLICY=PASSIVE OMPI_MCA_mpi_yield_when_idle=1
dir=$shared/bench

# 351 baselines x 192 dumps x 1024 channels x 16 B: 1.1 GB (a minute at
# 20 MB/s: the pipeline's start and end, seconds, weigh little), chunks of
# 64 dumps x TRANSFER/1 KiB channels (1 MiB: 64 x 1024).
dumps=192 channels=1024
volume=$((351 * dumps * channels * 16))
freq_chunk=$((kib * 1024 / (64 * 16)))
files=$((hosts * writers))

settle() {
  rm -rf "$dir"
  mkdir -p "$dir"
  sync
  sleep 3
}

# iotest_write LABEL SYNTHETIC: the pipeline's walk (--synthetic-vis), or
# every chunk whole in file order (--synthetic-vis=sequential, IOR's
# pattern: no chunk split between streamers, none rewritten).
iotest_write() {
  local label=$1 synthetic=$2
  settle
  $cluster exec srun --nodes=$hosts --ntasks=$hosts --kill-on-bad-exit=1 \
    "$IOTEST" "$synthetic" --rec-set=T05_ --vis-set=vlaa \
    --time=-5400:5400/$dumps/64 --freq=260e6:300e6/$channels/$freq_chunk --dec=10 \
    --writer-count="$writers" --fork-writer --bls-per-task=16 --no-progress \
    --storage=posix "$dir/vis%d" --report="$dir/run.json" > "$out/run.txt" 2>&1 ||
    { cat "$out/run.txt"; exit 1; }
  $cluster exec "$IOTEST" verify "$dir"/vis[0-9]* > "$out/verify.txt" 2>&1 ||
    { cat "$out/verify.txt"; exit 1; }
  python3 - "$dir/run.json" "$volume" "$label" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
label = sys.argv[3]
c, t = r["counts"], r["timing"]
assert c["visibilities_written"] == c["visibilities"]
hosts = sorted({k["host"] for k in r["pipeline"]["per_rank"]})
assert len(hosts) == 3, hosts
# What the file system took (fio's measure too): every byte written, the
# chunks that two streamers share written in part by each, in each one's
# file (the report's "x the visibilities' bytes"); and, apart, the
# visibilities' own bytes.
print(f"{label} {c['bytes_written'] / t['stream_s']}")
print(f"{label}-visibilities {int(sys.argv[2]) / t['stream_s']}")
PY
}

# fio on every host at once: each host's share in WRITERS files.
fio_write() {
  settle
  local pids=() k
  for ((k = 1; k <= hosts; k++)); do
    mkdir -p "$dir/fio-node$k"
    $cluster on node$k fio --name=write --rw=write --bs=${kib}k --size=$((volume / files)) \
      --numjobs="$writers" --ioengine=psync --end_fsync=1 --group_reporting \
      --directory="$dir/fio-node$k" --output-format=json > "$out/fio-node$k.json" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k"; done
  python3 - "$out"/fio-node*.json >> "$results" <<'PY'
import json, sys
jobs = [json.load(open(p))["jobs"][0]["write"] for p in sys.argv[1:]]
print(f"fio {sum(j['io_bytes'] for j in jobs) / (max(j['runtime'] for j in jobs) / 1e3)}")
PY
}

rados_write() {
  settle
  rados_bench cephfs_data $((kib * 1024)) "$out" >> "$results"
}

source bench/storage_ceilings.sh

tcp_stream store1 >> "$results"
for ((repeat = 1; repeat <= repeats; repeat++)); do
  iotest_write iotest --synthetic-vis
  iotest_write sequential --synthetic-vis=sequential
  fio_write
  rados_write
done
rm -rf "$dir"

python3 - "$results" "$rate" "$storage_hosts" "$replication" "$repeats" "$volume" "$kib" \
  "$files" <<'PY'
import re, statistics, sys
path, rate, stores, repl, repeats, volume, kib, files = sys.argv[1:]
m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate, re.I)
link = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()] / 8
runs = {}
for line in open(path):
    what, value = line.split()
    runs.setdefault(what, []).append(float(value))
tcp = runs.pop("tcp")[0]
limit = int(stores) * tcp / int(repl)
print(f"CephFS through ceph-fuse: 3 client hosts, {stores} storage hosts with an OSD each, "
      f"links {rate}, replication {repl}; {int(volume) / 1e6:.0f} MB in {files} files, "
      f"{kib} KiB transfers; median of {repeats} (range), MB/s")
print(f"A TCP stream through one storage link: {tcp / 1e6:.1f} MB/s ({tcp / link:.3f} of "
      f"{link / 1e6:.1f} MB/s in frames); the links allow {stores} x {tcp / 1e6:.1f} / {repl} = "
      f"{limit / 1e6:.1f} MB/s of payload")
print("| what | MB/s | range | of the links' limit |")
print("|---|---|---|---|")
label = {"iotest": "iotest posix, 3 hosts, the pipeline's walk (bytes written)",
         "iotest-visibilities": "iotest, the walk: the visibilities' bytes",
         "sequential": "iotest posix, 3 hosts, sequential (bytes written)",
         "sequential-visibilities": "iotest, sequential: the visibilities' bytes",
         "fio": "fio, 3 hosts, same files", "rados": "rados bench, data pool"}
med = {}
for what in label:
    r = runs[what]
    med[what] = statistics.median(r)
    print(f"| {label[what]} | {med[what] / 1e6:.1f} | {min(r) / 1e6:.1f}-{max(r) / 1e6:.1f} | "
          f"{med[what] / limit:.2f} |")
print(f"The file system and FUSE path: fio at {med['fio'] / med['rados']:.2f} of rados bench")
print(f"ratio={med['iotest'] / med['fio']:.2f}")
PY
