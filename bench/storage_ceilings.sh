# Sourced by the benchmarks on the virtual cluster's Ceph (bench/cephfs.sh,
# bench/s3.sh): the ceilings their figures are held against. Each prints
# one line, "NAME BYTES_PER_S". Needs $cluster (tools/cluster) and
# IOTEST_CLUSTER_ROOT.

# What one storage link carries of a TCP stream, node1 to storage host
# HOST, 200 MiB ("tcp"): the links' limit in payload (a link's rate counts
# Ethernet frames: 1448/1514 of it at most).
tcp_stream() {
  local host=$1 listener pid
  listener=$(mktemp)
  cat > "$listener" <<'PY'
import socket, time
s = socket.create_server(("0.0.0.0", 5999))
c, _ = s.accept()
n, start = 0, None
while (b := c.recv(1 << 20)):
    start = start or time.perf_counter()
    n += len(b)
print(f"tcp {n / (time.perf_counter() - start)}")
PY
  timeout 120 $cluster on "$host" python3 "$listener" &
  pid=$!
  sleep 1
  timeout 120 $cluster on node1 python3 -c '
import socket, sys
s = socket.create_connection((sys.argv[1], 5999))
block = bytes(1 << 20)
for _ in range(200):
    s.sendall(block)' "$(awk -v h="$host" '$2 == h { print $1 }' "$IOTEST_CLUSTER_ROOT/etc/hosts")"
  wait $pid
  rm -f "$listener"
}

# `rados bench` on POOL from the login side ("rados"): Ceph's own object
# store, no file system or gateway above it; 20 s of writes of BYTES-byte
# objects, 16 in flight. Its JSON (in OUT/rados.json) gives numbers as
# strings.
rados_bench() {
  local pool=$1 bytes=$2 out=$3
  $cluster exec rados -p "$pool" bench 20 write -b "$bytes" -t 16 --no-cleanup \
    --format=json > "$out/rados.json" 2> "$out/rados.err" || { cat "$out/rados.err" >&2; exit 1; }
  $cluster exec rados -p "$pool" cleanup > /dev/null 2>&1
  python3 - "$out/rados.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
r = json.loads(text[text.index("{"):])
print(f"rados {float(r['total_writes_made']) * float(r['write_size']) / float(r['total_time_run'])}")
PY
}
