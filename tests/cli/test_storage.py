"""Every storage back-end writes, reads back and verifies (issue 10): the
back-end chosen by --storage or by the output's name, `iotest read`
reading through the same back-ends under mpirun, `iotest verify` through
the same interface."""
import os
import socket
import struct

import pytest

from conftest import MPI_TIMEOUT_S, load

DEGRID = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
          "--freq=260e6:300e6/32/16", "--dec=-40"]
OBS = [*DEGRID, "--no-progress"]  # run's
CHUNK_BYTES = 8 * 16 * 16  # time chunk x freq chunk x complex double

# Every back-end that keeps what it writes, by its output's name.
BACKENDS = {"hdf5": "h5", "posix": "bin"}


def outputs(folder, ext):
    return sorted(str(p) for p in folder.glob(f"out*.{ext}"))


@pytest.mark.parametrize("ranks", [2, 3, 5])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_synthetic_run_reads_back_exactly_on_any_ranks(mpirun, tmp_path, backend, ranks):
    # Written by `ranks` streamers (one writer each), read back on 2 ranks
    # with every value checked, and verified.
    ext = BACKENDS[backend]
    mpirun(ranks, "--synthetic-vis", *OBS, str(tmp_path / f"out%d.{ext}"),
           f"--report={tmp_path / 'run.json'}", check=0, timeout=MPI_TIMEOUT_S)
    run = load(tmp_path / "run.json")
    assert run["config"]["backend"] == backend
    files = outputs(tmp_path, ext)
    assert len(files) == ranks
    report = tmp_path / "read.json"
    mpirun(2, "read", "--check", *files, f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    d = load(report)["read"]
    assert d["backend"] == backend and d["ranks"] == 2 and d["checked"]
    # Every chunk each writer wrote (a chunk split over streamers is in
    # each of their files), whole.
    assert d["chunks"] == run["counts"]["chunks_written"]
    assert d["bytes"] == d["chunks"] * CHUNK_BYTES
    assert d["values_checked"] >= run["counts"]["visibilities"]
    assert d["values_wrong"] == 0 and d["passed"]
    assert d["values_right"] == d["values_expected"] == run["counts"]["visibilities"]
    assert sum(k["files"] for k in d["per_rank"]) == ranks
    assert d["wall_s"] > 0 and d["bytes_per_s"] > 0
    proc = mpirun(1, "verify", *files, check=0, timeout=MPI_TIMEOUT_S)
    assert "passed" in proc.stdout


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_sky_run_verifies_with_any_back_end(mpirun, iotest, tmp_path, backend):
    ext = BACKENDS[backend]
    mpirun(3, *OBS, "--source-count=10", "--writer-count=2", f"--storage={backend}",
           str(tmp_path / f"out%d.{ext}"), check=0, timeout=MPI_TIMEOUT_S)
    files = outputs(tmp_path, ext)
    assert len(files) == 4
    report = tmp_path / "v.json"
    iotest("verify", *files, f"--report={report}", check=0)
    v = load(report)["verification"]
    assert v["passed"] and v["chunks_present"] == v["chunks_expected"]
    # One process too: degrid writes one file through the same back-end.
    single = tmp_path / f"one.{ext}"
    iotest("degrid", *DEGRID, "--source-count=10", str(single), check=0)
    iotest("verify", str(single), check=0)


def direct_io_works(folder):
    """Whether the file system under `folder` takes O_DIRECT (tmpfs on older
    kernels does not)."""
    probe = folder / "probe"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644))
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def test_posix_o_direct_writes_and_reads(mpirun, tmp_path):
    if not direct_io_works(tmp_path):
        pytest.skip("the test folder's file system refuses O_DIRECT")
    mpirun(2, "--synthetic-vis", *OBS, "--writer-count=2", "--posix.direct",
           "--posix.fsync=chunk", str(tmp_path / "out%d.bin"), check=0, timeout=MPI_TIMEOUT_S)
    files = outputs(tmp_path, "bin")
    report = tmp_path / "read.json"
    mpirun(3, "read", "--check", "--posix.direct", *files, f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    d = load(report)["read"]
    assert d["direct"] and d["values_wrong"] == 0 and d["values_checked"] > 0


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_read_check_catches_one_flipped_value(mpirun, tmp_path, backend):
    ext = BACKENDS[backend]
    mpirun(1, "--synthetic-vis", *OBS, "--writer-count=2", str(tmp_path / f"out%d.{ext}"),
           check=0, timeout=MPI_TIMEOUT_S)
    files = outputs(tmp_path, ext)
    victim = files[1]
    if backend == "posix":
        # The first chunk's slot starts after the 4 KiB header: its 3rd value.
        with open(victim, "r+b") as f:
            f.seek(4096 + 2 * 16)
            f.write(struct.pack("<d", 12345.5))
    else:
        import h5py
        with h5py.File(victim, "r+") as f:  # h5py reads the {r, i} compound as complex
            vis = f["Data/visdata"]
            data = vis[...]
            at = tuple(int(axis[0]) for axis in data.nonzero())  # the first written value
            data[at] += 1
            vis[...] = data
    report = tmp_path / "read.json"
    proc = mpirun(2, "read", "--check", *files, f"--report={report}", timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    d = load(report)["read"]
    assert d["values_wrong"] == 1 and not d["passed"]
    assert os.path.basename(victim) in d["first_wrong"]
    assert d["values_right"] == d["values_expected"] - 1


@pytest.mark.long
def test_read_refuses_what_it_cannot_do(mpirun, tmp_path):
    mpirun(3, *OBS, "--source-count=10", str(tmp_path / "out%d.h5"), check=0, timeout=MPI_TIMEOUT_S)
    files = outputs(tmp_path, "h5")
    # --check needs the synthetic pattern; posix options do not apply to hdf5.
    for args, option in ((["--check"], "--check"), (["--posix.direct"], "--posix.direct")):
        proc = mpirun(2, "read", *args, *files, timeout=MPI_TIMEOUT_S)
        assert proc.returncode == 2, proc.stderr
        errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
        assert len(errors) == 1 and option in errors[0], proc.stderr
    proc = mpirun(2, "read", str(tmp_path / "none.h5"), timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2 and "none.h5" in proc.stderr


def test_read_can_drop_the_page_cache_first(mpirun, tmp_path):
    mpirun(1, "--synthetic-vis", *OBS, str(tmp_path / "out%d.bin"), check=0, timeout=MPI_TIMEOUT_S)
    report = tmp_path / "read.json"
    proc = mpirun(2, "read", "--drop-caches", *outputs(tmp_path, "bin"), f"--report={report}",
                  timeout=MPI_TIMEOUT_S)
    if os.access("/proc/sys/vm/drop_caches", os.W_OK):
        assert proc.returncode == 0, proc.stderr
        assert load(report)["read"]["caches_dropped"]
    else:  # not root, or /proc/sys read-only: refused up front, on every rank
        assert proc.returncode == 2 and "--drop-caches" in proc.stderr, proc.stderr


def test_unknown_back_ends_and_misplaced_options_are_usage_errors(iotest, tmp_path):
    for args, option in ((["--storage=tape"], "--storage"),
                         (["--storage=hdf5", "--posix.direct"], "--posix.direct"),
                         (["--posix.fsync=sometimes"], "--posix.fsync")):
        proc = iotest("degrid", *DEGRID, *args, str(tmp_path / "x.bin"), check=2)
        assert option in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_stale_file_of_an_earlier_run_fails(mpirun, iotest, tmp_path, backend):
    # Two writers, then one with the same options: out1 is the first run's.
    ext = BACKENDS[backend]
    out = str(tmp_path / f"out%d.{ext}")
    mpirun(1, "--synthetic-vis", *OBS, "--writer-count=2", out, check=0, timeout=MPI_TIMEOUT_S)
    report = tmp_path / "run.json"
    mpirun(1, "--synthetic-vis", *OBS, "--writer-count=1", out, f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    nonce = load(report)["config"]["nonce"]
    assert nonce > 0
    files = outputs(tmp_path, ext)
    assert len(files) == 2
    v = tmp_path / "v.json"
    iotest("verify", *files, f"--report={v}", check=1)
    result = load(v)["verification"]
    assert not result["passed"] and "out1" in result["reason"] and "another run" in result["reason"]
    # Its values carry the other nonce: reading with --check fails in them.
    read = tmp_path / "read.json"
    proc = mpirun(2, "read", "--check", *files, f"--report={read}", timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 1, proc.stderr
    d = load(read)["read"]
    assert "out1" in d["first_wrong"] and d["values_wrong"] > 0
    # The run's own file passes, also against its report's nonce; not another's.
    iotest("verify", files[0], f"--nonce={nonce}", check=0)
    iotest("verify", files[0], f"--nonce={nonce ^ 1}", check=1)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_file_records_its_run_and_verify_says_it(mpirun, iotest, tmp_path, backend):
    # Which run made a file (issue 26): its nonce, command line, start and
    # host, in every file, shown by verify.
    ext = BACKENDS[backend]
    out = str(tmp_path / f"out%d.{ext}")
    report = tmp_path / "run.json"
    mpirun(2, "--synthetic-vis", *OBS, out, f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    run = load(report)
    v = tmp_path / "v.json"
    proc = iotest("verify", *outputs(tmp_path, ext), f"--report={v}", check=0)
    made = load(v)["verification"]
    assert made["nonce"] == run["config"]["nonce"]
    assert made["run"]["command_line"].endswith(f" {out} --report={report}")
    assert made["run"]["started"][:4] == run["environment"]["date"][:4]
    assert made["run"]["started"] <= run["environment"]["date"]
    assert made["run"]["hosts"] == [socket.gethostname()]
    assert f"made by run {made['nonce']} started {made['run']['started']}" in proc.stdout


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_verify_all_catches_one_flipped_value_in_any_chunk(mpirun, iotest, tmp_path, backend):
    ext = BACKENDS[backend]
    mpirun(2, "--synthetic-vis", *OBS, str(tmp_path / f"out%d.{ext}"), check=0,
           timeout=MPI_TIMEOUT_S)
    files = outputs(tmp_path, ext)
    report = tmp_path / "v.json"
    iotest("verify", "--all", *files, f"--report={report}", check=0)
    v = load(report)["verification"]
    assert v["all"] and v["values_checked"] >= 351 * 16 * 32 and v["values_wrong"] == 0
    # One value, in the last chunk written (samples would likely miss it).
    flip_last_chunk(files[-1], backend)
    proc = iotest("verify", "--all", *files, f"--report={report}", check=1)
    v = load(report)["verification"]
    assert v["values_wrong"] == 1 and v["checksums_wrong"] == 1
    assert "differ from what their writers wrote" in v["reason"]
    assert os.path.basename(files[-1]) in v["reason"]


def flip_last_chunk(victim, backend):
    """The last non-zero value of the file changed in its last bits (in the
    last chunk written, for posix), nothing else touched."""
    if backend == "posix":
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            f.seek(size - 64 + 16)
            index_offset = struct.unpack("<q", f.read(8))[0]
            f.seek(index_offset - 4096)  # the last slot
            slot = list(struct.unpack("<512d", f.read(4096)))
            i = max(k for k, x in enumerate(slot) if x != 0)
            f.seek(index_offset - 4096 + 8 * i)
            f.write(struct.pack("<d", slot[i] * (1 + 1e-12)))
    else:
        import h5py
        with h5py.File(victim, "r+") as f:  # one element: only its chunk is rewritten
            vis = f["Data/visdata"]
            at = tuple(int(axis[-1]) for axis in vis[...].nonzero())
            vis[at] = vis[at] * (1 + 1e-12)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_verify_all_checks_every_chunk_of_a_sky_set(mpirun, iotest, tmp_path, backend):
    # Chunks past the edges of the observation too (7 dumps of 16 in chunks
    # of 6 rows, 30 channels in chunks of 16): every chunk against the CRC-32
    # its writer recorded, which samples against the direct transform would
    # not see for a change in the last bit.
    ext = BACKENDS[backend]
    obs = [a for a in OBS if not a.startswith(("--time", "--freq"))]
    mpirun(3, *obs, "--time=-1800:1800/16/6", "--freq=260e6:300e6/30/16", "--source-count=10",
           "--writer-count=2", str(tmp_path / f"out%d.{ext}"), check=0, timeout=MPI_TIMEOUT_S)
    files = outputs(tmp_path, ext)
    report = tmp_path / "v.json"
    iotest("verify", "--all", *files, f"--report={report}", check=0)
    v = load(report)["verification"]
    assert v["all"] and v["checksums_wrong"] == 0
    assert v["chunks_checksummed"] >= v["chunks_expected"]
    flip_last_chunk(files[-1], backend)
    iotest("verify", *files, check=0)  # samples miss a last-bit change
    iotest("verify", "--all", *files, f"--report={report}", check=1)
    v = load(report)["verification"]
    assert v["checksums_wrong"] == 1 and os.path.basename(files[-1]) in v["reason"]


@pytest.mark.parametrize("ranks", [1, 3])
def test_synthetic_sequential_writes_every_chunk_once_in_file_order(mpirun, iotest, tmp_path,
                                                                    ranks):
    # --synthetic-vis=sequential (the storage ceiling): each streamer's
    # share of the chunks, whole, once, in file order; verify --all checks
    # every value and that every visibility is there exactly once. Edges:
    # neither chunk extent divides the observation's.
    obs = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/20/8",
           "--freq=260e6:300e6/40/16", "--dec=-40", "--no-progress"]
    report = tmp_path / "run.json"
    mpirun(ranks, "--synthetic-vis=sequential", *obs, str(tmp_path / "out%d.bin"),
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    assert r["pipeline"]["synthetic_order"] == "sequential"
    row_chunks, freq_chunks = 351 * 20 // 8 + 1, 3  # 877.5 row chunks, 2.5 frequency chunks
    assert r["counts"]["chunks_written"] == row_chunks * freq_chunks
    assert r["counts"]["chunks_rewritten"] == 0
    files = outputs(tmp_path, "bin")
    iotest("verify", "--all", *files, check=0)
    ids = []
    for name in files:  # the posix index: each slot's chunk id, in write order
        size = os.path.getsize(name)
        with open(name, "rb") as f:
            f.seek(size - 64 + 16)
            index_offset = struct.unpack("<q", f.read(8))[0]
            f.seek(index_offset)
            slots = (index_offset - 4096) // 4096
            ids += struct.unpack(f"<{slots}q", f.read(8 * slots))
    assert ids == list(range(row_chunks * freq_chunks))  # file order, streamer after streamer


def test_synthetic_order_is_checked(iotest, tmp_path):
    proc = iotest("--rec-set=T05_", "--vis-set=vlaa", "--synthetic-vis=shuffled",
                  str(tmp_path / "out.h5"), check=2)
    assert "--synthetic-vis" in proc.stderr and "sequential" in proc.stderr
    proc = iotest("--rec-set=T05_", "--vis-set=vlaa", "--synthetic-vis=sequential",
                  "--duration=5", str(tmp_path / "out.h5"), check=2)
    assert "--duration" in proc.stderr
    assert os.listdir(tmp_path) == []
