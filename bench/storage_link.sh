# Sourced by the benchmarks on the virtual cluster's storage (bench/cephfs.sh,
# bench/s3.sh): what one storage link carries of a TCP stream, node1 to
# storage host HOST, 200 MiB, printed as "tcp BYTES_PER_S": the links'
# limit in payload, against which the storage's rates are judged (a link's
# rate counts Ethernet frames: 1448/1514 of it at most). Needs $cluster
# (tools/cluster) and IOTEST_CLUSTER_ROOT.
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
