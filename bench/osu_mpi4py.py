"""osu_latency and osu_bw (OSU micro-benchmarks, OMB 5.x) with mpi4py.

The reference bench/net_osu.sh compares `iotest net` with, as OSU is not
installed here. It follows OMB's two tests step by step:

- osu_latency: per size, both buffers touched (memset), a barrier, then
  SKIP + LOOP ping-pongs (rank 0: MPI_Send then MPI_Recv, rank 1 the
  reverse), timed on rank 0 from the first non-warm-up iteration; the
  latency is half the mean round trip. LOOP/SKIP: 10000/100 up to 8 KiB,
  1000/10 above (LAT_LOOP_SMALL, LAT_SKIP_SMALL, LAT_LOOP_LARGE,
  LAT_SKIP_LARGE of osu_util.h; "large" is size > LARGE_MESSAGE_SIZE, 8192).
- osu_bw: per size, buffers touched, a barrier, then SKIP + LOOP windows:
  rank 0 posts WINDOW (64) MPI_Isend of one send buffer, rank 1 as many
  MPI_Irecv into ONE receive buffer, both MPI_Waitall, then rank 1 sends a
  4-byte acknowledgement that rank 0 receives. The bandwidth is
  size x WINDOW x LOOP / time on rank 0, in 10^6 B/s. LOOP/SKIP: 100/10 up
  to 8 KiB, 20/2 above (BW_LOOP_SMALL ... BW_SKIP_LARGE).

MPI is initialised with MPI_Init (mpi4py.rc.threads = False), as OSU's C
programs do, not mpi4py's default MPI_THREAD_MULTIPLE, whose locks would
slow small messages. Buffers are page-aligned (anonymous mmap), as OMB's
posix_memalign ones. What Python adds: the interpreter's cost per MPI call
(a few hundred ns), which shows at small sizes only.

Usage: mpirun -np 2 python3 bench/osu_mpi4py.py [--min-size=1]
       [--max-size=4194304] [--window=64] [--json=FILE]
Rank 0 prints OSU's two tables, and with --json writes
{"sizes": [...], "latency_us": [...], "bandwidth_mb_per_s": [...]}.
"""

import argparse
import json
import mmap
import sys

import mpi4py

mpi4py.rc.threads = False  # MPI_Init, as OSU (no MPI_THREAD_MULTIPLE)
from mpi4py import MPI  # noqa: E402

LARGE_MESSAGE_SIZE = 8192
LAT_LOOP_SMALL, LAT_SKIP_SMALL = 10000, 100
LAT_LOOP_LARGE, LAT_SKIP_LARGE = 1000, 10
BW_LOOP_SMALL, BW_SKIP_SMALL = 100, 10
BW_LOOP_LARGE, BW_SKIP_LARGE = 20, 2


def touch(buf, size, value):
    """OMB's touch_data / set_buffer_pt2pt: memset the first size bytes."""
    buf[:size] = bytes([value]) * size


def latency(comm, rank, s_buf, r_buf, size):
    if size > LARGE_MESSAGE_SIZE:
        loop, skip = LAT_LOOP_LARGE, LAT_SKIP_LARGE
    else:
        loop, skip = LAT_LOOP_SMALL, LAT_SKIP_SMALL
    touch(s_buf, size, ord("a"))
    touch(r_buf, size, ord("b"))
    s, r = s_buf[:size], r_buf[:size]
    send, recv = comm.Send, comm.Recv
    comm.Barrier()
    t_start = 0.0
    if rank == 0:
        for i in range(loop + skip):
            if i == skip:
                t_start = MPI.Wtime()
            send(s, 1, 1)
            recv(r, 1, 1)
        t_end = MPI.Wtime()
        return (t_end - t_start) * 1e6 / (2.0 * loop)
    for i in range(loop + skip):
        recv(r, 0, 1)
        send(s, 0, 1)
    return None


def bandwidth(comm, rank, s_buf, r_buf, size, window):
    if size > LARGE_MESSAGE_SIZE:
        loop, skip = BW_LOOP_LARGE, BW_SKIP_LARGE
    else:
        loop, skip = BW_LOOP_SMALL, BW_SKIP_SMALL
    touch(s_buf, size, ord("a"))
    touch(r_buf, size, ord("b"))
    s, r = s_buf[:size], r_buf[:size]
    s4, r4 = s_buf[:4], r_buf[:4]  # the acknowledgement, as OSU's
    requests = [MPI.REQUEST_NULL] * window
    waitall = MPI.Request.Waitall
    comm.Barrier()
    t_start = 0.0
    if rank == 0:
        isend, recv = comm.Isend, comm.Recv
        for i in range(loop + skip):
            if i == skip:
                t_start = MPI.Wtime()
            for j in range(window):
                requests[j] = isend(s, 1, 100)
            waitall(requests)
            recv(r4, 1, 101)
        t_end = MPI.Wtime()
        return size / 1e6 * loop * window / (t_end - t_start)
    irecv, send = comm.Irecv, comm.Send
    for i in range(loop + skip):
        for j in range(window):
            requests[j] = irecv(r, 0, 100)  # one receive buffer for the window
        waitall(requests)
        send(s4, 0, 101)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-size", type=int, default=1)
    parser.add_argument("--max-size", type=int, default=4 << 20)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--json", help="write the figures to this file (rank 0)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        if rank == 0:
            print("This test requires exactly two processes", file=sys.stderr)
        sys.exit(1)
    if args.min_size < 1 or args.max_size < args.min_size:
        if rank == 0:
            print("expected 1 <= --min-size <= --max-size", file=sys.stderr)
        sys.exit(2)
    sizes = []
    size = args.min_size
    while size <= args.max_size:
        sizes.append(size)
        size *= 2
    # Page-aligned, as OMB's posix_memalign(sysconf(_SC_PAGESIZE)) buffers.
    s_buf = memoryview(mmap.mmap(-1, args.max_size))
    r_buf = memoryview(mmap.mmap(-1, args.max_size))

    # osu_latency, then osu_bw: two programs in OMB, two sweeps here.
    lat = [latency(comm, rank, s_buf, r_buf, z) for z in sizes]
    bw = [bandwidth(comm, rank, s_buf, r_buf, z, args.window) for z in sizes]
    if rank == 0:
        library = MPI.Get_library_version().strip("\x00 \n").split(",")[0]
        print("# OSU MPI Latency Test (mpi4py, %s)" % library)
        print("%-10s%20s" % ("# Size", "Latency (us)"))
        for z, v in zip(sizes, lat):
            print("%-10d%20.2f" % (z, v))
        print("# OSU MPI Bandwidth Test (mpi4py), window %d" % args.window)
        print("%-10s%20s" % ("# Size", "Bandwidth (MB/s)"))
        for z, v in zip(sizes, bw):
            print("%-10d%20.2f" % (z, v))
        sys.stdout.flush()
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"sizes": sizes, "latency_us": lat, "bandwidth_mb_per_s": bw,
                           "window": args.window}, f)


if __name__ == "__main__":
    main()
