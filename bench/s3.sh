#!/usr/bin/env bash
# iotest on an object store, against limits set in advance (issue 57): Ceph's
# object gateway in the virtual cluster (tools/cluster up 3 --storage=cephfs
# --object-gateway), radosgw on store1 in front of two storage hosts with an
# OSD each, their links shaped to LINK_RATE (tc tbf), the gateway's data
# pool kept REPLICATION times. Side by side, interleaved, REPEATS times:
# - iotest: `--synthetic-vis` (storage only) from the three hosts under
#   srun, one streamer a host with WRITERS writers, `--storage=s3`: each
#   writer one object, in parts of PART MiB, INFLIGHT parts in flight; its
#   figure is the bytes it wrote over timing.stream_s (start barrier to the
#   last upload's last part), as rclone's is;
# - iotest `--storage=msv4` the same way into one MSv4 processing set,
#   s3://BUCKET/bench/vis.ps.zarr (an MSv4 per writer, each iotest chunk
#   one PutObject, INFLIGHT of them in flight a writer: --msv4.in-flight),
#   published by completing its root key's upload; its figure is its
#   VISIBILITY bytes (8 a visibility, half the posix format's 16) over
#   timing.stream_s;
# - rclone (Debian's, the S3 peer) from the same three hosts at once, the
#   same bytes in as many objects of the same size, uploaded in parts of
#   the same size with the same parts in flight (--transfers WRITERS,
#   --s3-chunk-size PART, --s3-upload-concurrency INFLIGHT), from files in
#   each host's page cache; its figure is every host's bytes over the
#   longest host's run;
# - `rados bench` on the gateway's data pool from the login side (Ceph's
#   own object store under the gateway: no HTTP, no gateway), PART MiB
#   objects, 16 in flight.
# The limits, with T what a TCP stream carries through one storage link
# (measured first), as in bench/cephfs.sh: rados bench's writes are held
# to STORAGE_HOSTS x T / REPLICATION (every byte enters its primary OSD's
# host and, REPLICATION - 1 times, another). iotest and rclone send every
# byte to the gateway on store1 first, and store1's link also takes the
# copies other hosts' primaries make there: V (1 + (REPLICATION - 1) /
# STORAGE_HOSTS) enters it for V written, so the gateway's link allows
# T / (1 + (REPLICATION - 1) / STORAGE_HOSTS). The table gives each median
# with its range and its fraction of its limit; the line before the last
# msv4=<iotest msv4 / iotest s3>, medians, in visibilities a second (msv4
# stores 8 bytes a visibility, the s3 back-end 16); the
# last line is ratio=<iotest/rclone>, medians (the s3 back-end's).
#
# Usage: [LINK_RATE=400mbit] [REPLICATION=2] [REPEATS=3] [PART=8]
#        [INFLIGHT=8] [WRITERS=2] [IOTEST=build/bin/iotest] bench/s3.sh
# Needs root and what tools/install-deps.sh installs (radosgw, rclone). Its
# cluster has a root, subnet and port of its own, and goes down at the end,
# whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${IOTEST:-}" ]; then
  source bench/common.sh
  IOTEST=build/bin/iotest
fi
IOTEST=$(realpath "$IOTEST")
rate=${LINK_RATE:-400mbit} replication=${REPLICATION:-2} repeats=${REPEATS:-3}
part=${PART:-8} inflight=${INFLIGHT:-8} writers=${WRITERS:-2}
storage_hosts=2 hosts=3
export IOTEST_CLUSTER_ROOT=${BENCH_CLUSTER_ROOT:-/var/tmp/iotest-bench-s3}
cluster="tools/cluster"
out=bench/out/s3
mkdir -p "$out"
results="$out/results.txt"
: > "$results"
trap '$cluster down > /dev/null 2>&1 || true' EXIT
$cluster up $hosts --storage=cephfs --object-gateway --storage-hosts=$storage_hosts \
  --replication="$replication" --storage-link-rate="$rate" --subnet=10.85.0 --port=16877 \
  --lifetime=5400 > "$out/up.txt" 2>&1 || { cat "$out/up.txt"; exit 1; }
# The gateway's keys and endpoint, as a user of the cluster takes them.
eval "$($cluster env)"
export OMP_WAIT_POLICY=PASSIVE OMPI_MCA_mpi_yield_when_idle=1

# 351 baselines x 192 dumps x 1024 channels x 16 B: 1.1 GB, in chunks of
# 64 dumps x 64 channels (1 MiB).
dumps=192 channels=1024
volume=$((351 * dumps * channels * 16))
objects=$((hosts * writers))
object_bytes=$((volume / objects))

empty_bucket() {
  rclone -q purge "gateway:$IOTEST_S3_BUCKET/bench" 2>/dev/null || true
  sleep 2
}

# One iotest run from the three hosts: LABEL, then the back-end's options
# and the output (the s3 back-end's objects, or msv4's one processing set:
# an object a chunk, INFLIGHT puts in flight a writer, the root key's
# upload completed at the end).
iotest_write() {
  local label=$1
  shift
  empty_bucket
  $cluster exec srun --nodes=$hosts --ntasks=$hosts --kill-on-bad-exit=1 \
    "$IOTEST" run --synthetic-vis --rec-set=T05_ --vis-set=vlaa \
    --time=-5400:5400/$dumps/64 --freq=260e6:300e6/$channels/64 --dec=10 \
    --writer-count="$writers" --bls-per-task=16 --no-progress \
    "$@" --report="$out/run.json" > "$out/run.txt" 2>&1 ||
    { cat "$out/run.txt"; exit 1; }
  python3 - "$out/run.json" "$label" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c, t = r["counts"], r["timing"]
assert c["visibilities_written"] == c["visibilities"]
assert len({k["host"] for k in r["pipeline"]["per_rank"]}) == 3
print(f"{sys.argv[2]} {c['bytes_written'] / t['stream_s']}")
PY
}

# Each host's share, WRITERS files of the objects' size, in its page cache.
make_sources() {
  local k
  for ((k = 1; k <= hosts; k++)); do
    $cluster on node$k sh -c "mkdir -p /dev/shm/s3-bench && for w in \$(seq $writers); do
      head -c $object_bytes /dev/urandom > /dev/shm/s3-bench/part-node$k-\$w; done"
  done
}

rclone_write() {
  empty_bucket
  local pids=() k
  for ((k = 1; k <= hosts; k++)); do
    $cluster on node$k sh -c "start=\$(date +%s.%N); rclone -q copy --transfers=$writers \
      --s3-upload-cutoff=0 --s3-chunk-size=${part}M --s3-upload-concurrency=$inflight \
      /dev/shm/s3-bench gateway:$IOTEST_S3_BUCKET/bench/node$k && \
      echo \$(date +%s.%N) \$start" > "$out/rclone-node$k.txt" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k"; done
  python3 - "$volume" "$out"/rclone-node*.txt >> "$results" <<'PY'
import sys
spans = [float(a) - float(b) for a, b in (open(p).read().split() for p in sys.argv[2:])]
print(f"rclone {int(sys.argv[1]) / max(spans)}")
PY
}

rados_write() {
  rados_bench default.rgw.buckets.data $((part << 20)) "$out" >> "$results"
}

source bench/storage_ceilings.sh

tcp_stream store1 >> "$results"
make_sources
for ((repeat = 1; repeat <= repeats; repeat++)); do
  iotest_write iotest --s3.part-size="$part" --s3.parts-in-flight="$inflight" \
    "s3://$IOTEST_S3_BUCKET/bench/vis%d"
  iotest_write iotest-msv4 --storage=msv4 --msv4.in-flight="$inflight" \
    "s3://$IOTEST_S3_BUCKET/bench/vis.ps.zarr"
  rclone_write
  rados_write
done
empty_bucket

python3 - "$results" "$rate" "$storage_hosts" "$replication" "$repeats" "$volume" "$part" \
  "$inflight" "$objects" <<'PY'
import re, statistics, sys
path, rate, stores, repl, repeats, volume, part, inflight, objects = sys.argv[1:]
m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate, re.I)
link = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()] / 8
runs = {}
for line in open(path):
    what, value = line.split()
    runs.setdefault(what, []).append(float(value))
tcp = runs.pop("tcp")[0]
pool_limit = int(stores) * tcp / int(repl)
gateway_limit = tcp / (1 + (int(repl) - 1) / int(stores))
print(f"Ceph's object gateway (radosgw 16.2): 3 client hosts, {stores} storage hosts with an OSD "
      f"each, links {rate}, replication {repl}; {int(volume) / 1e6:.0f} MB in {objects} objects, "
      f"parts of {part} MiB, {inflight} in flight per object; median of {repeats} (range), MB/s")
print(f"A TCP stream through one storage link: {tcp / 1e6:.1f} MB/s ({tcp / link:.3f} of "
      f"{link / 1e6:.1f} MB/s in frames); the pool's writes are held to {stores} x "
      f"{tcp / 1e6:.1f} / {repl} = {pool_limit / 1e6:.1f} MB/s, writes through the gateway to "
      f"{tcp / 1e6:.1f} / (1 + ({repl} - 1) / {stores}) = {gateway_limit / 1e6:.1f} MB/s")
print("| what | MB/s | range | of its links' limit |")
print("|---|---|---|---|")
label = {"iotest": "iotest s3, 3 hosts (bytes written)",
         "iotest-msv4": "iotest msv4, 3 hosts (VISIBILITY bytes written)",
         "rclone": "rclone, 3 hosts, same objects",
         "rados": "rados bench, the gateway's data pool"}
med = {}
for what in label:
    r = runs[what]
    med[what] = statistics.median(r)
    limit = pool_limit if what == "rados" else gateway_limit
    print(f"| {label[what]} | {med[what] / 1e6:.1f} | {min(r) / 1e6:.1f}-{max(r) / 1e6:.1f} | "
          f"{med[what] / limit:.2f} |")
# msv4 stores 8 bytes a visibility, the s3 back-end 16: the same
# visibilities a second at half the bytes.
vis = (med["iotest-msv4"] / 8) / (med["iotest"] / 16)
print(f"msv4={vis:.2f} (iotest msv4 / iotest s3, visibilities a second, medians; "
      f"{med['iotest-msv4'] / med['iotest']:.2f} of its bytes a second)")
print(f"ratio={med['iotest'] / med['rclone']:.2f}")
PY
