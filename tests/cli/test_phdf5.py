"""The phdf5 back-end (issue 10): one UVH5 file shared by every streamer,
written through parallel HDF5 with collective or independent transfers,
read back by `iotest read` (its chunks split over the ranks), verified
value by value and by its chunks' checksums, and read by pyuvdata."""
import os
import signal
import subprocess
import time

import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, load, mpi_env, rank_processes

OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--no-progress"]
VISIBILITIES = 351 * 16 * 32  # vlaa's baselines x times x channels
CHUNK_BYTES = 8 * 16 * 16


def phdf5_available(iotest):
    return "phdf5" in iotest("run", "--help").stdout


@pytest.fixture
def phdf5(iotest):
    if not phdf5_available(iotest):
        pytest.skip("iotest was built with the serial HDF5 (no libhdf5-openmpi-dev)")


@pytest.mark.parametrize("transfer", ["collective", "independent"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 5])
def test_one_shared_file_reads_back_exactly(phdf5, mpirun, iotest, tmp_path, ranks, transfer):
    # `ranks` streamers write one file; read back on 3 ranks (its chunks
    # split between them) with every value checked; verified in full.
    out, report = tmp_path / "out.h5", tmp_path / "run.json"
    mpirun(ranks, "--synthetic-vis", *OBS, "--storage=phdf5", f"--phdf5.transfer={transfer}",
           "--phdf5.batch=5", str(out), f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    run = load(report)
    assert run["config"]["backend"] == "phdf5"
    assert run["config"]["durability"] == "MPI_File_sync at close"
    assert sorted(os.listdir(tmp_path)) == ["out.h5", "run.json"]  # one file, published
    read = tmp_path / "read.json"
    mpirun(3, "read", "--check", str(out), f"--report={read}", check=0, timeout=MPI_TIMEOUT_S)
    d = load(read)["read"]
    assert d["passed"] and d["values_wrong"] == 0
    assert d["values_right"] == d["values_expected"] == VISIBILITIES
    assert d["chunks"] == 351 * 2 * 2 and d["bytes"] == d["chunks"] * CHUNK_BYTES
    assert all(k["chunks"] > 0 for k in d["per_rank"])  # every rank read its stretch
    v = tmp_path / "v.json"
    iotest("verify", "--all", str(out), f"--report={v}", check=0)
    v = load(v)["verification"]
    assert v["passed"] and v["values_checked"] == VISIBILITIES and v["checksums_wrong"] == 0
    # The file carries its run's nonce: another run's fails it.
    nonce = run["config"]["nonce"]
    iotest("verify", str(out), f"--nonce={nonce}", check=0)
    iotest("verify", str(out), f"--nonce={nonce ^ 1}", check=1)


def test_a_stonewalled_shared_file_verifies_what_it_holds(phdf5, mpirun, iotest, tmp_path):
    # Every chunk has its place in the file, those past the deadline
    # unwritten: verify checks the written parts, every value of them.
    out, report = tmp_path / "out.h5", tmp_path / "run.json"
    mpirun(3, "--synthetic-vis", *OBS[:2], "--time=-1800:1800/4096/8", *OBS[3:],
           "--storage=phdf5", "--duration=1", str(out), f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    w = load(report)["stonewall"]
    assert w["ended_early"] and 0 < w["visibilities_done"] < w["visibilities_total"]
    v = tmp_path / "v.json"
    iotest("verify", "--all", str(out), f"--report={v}", check=0)
    v = load(v)["verification"]
    assert v["passed"] and v["stonewalled"] and v["written_parts"] > 0
    assert v["visibilities_written"] == w["visibilities_done"] and v["values_wrong"] == 0


@pytest.mark.parametrize("extra", [[], ["--assigner"]])
def test_a_sky_run_in_one_shared_file_verifies(phdf5, mpirun, iotest, tmp_path, extra):
    # A sky set: the chunks split between streamers are checked through
    # their parts' checksums; pyuvdata reads the one file.
    out = tmp_path / "sky.h5"
    mpirun(4, *OBS, "--source-count=10", "--storage=phdf5", *extra, str(out), check=0,
           timeout=MPI_TIMEOUT_S)
    report = tmp_path / "v.json"
    iotest("verify", "--all", str(out), f"--report={report}", check=0)
    v = load(report)["verification"]
    assert v["passed"] and v["chunks_present"] == v["chunks_expected"]
    assert v["chunks_checksummed"] == v["chunks_expected"] and v["checksums_wrong"] == 0
    pyuvdata = pytest.importorskip("pyuvdata")
    uv = pyuvdata.UVData.from_file(str(out), file_type="uvh5")
    assert uv.data_array.shape == (351 * 16, 32, 1)
    import numpy as np
    assert np.count_nonzero(uv.data_array) == VISIBILITIES


@pytest.mark.long
def test_verify_all_catches_one_flipped_value(phdf5, mpirun, iotest, tmp_path):
    out = tmp_path / "out.h5"
    mpirun(3, "--synthetic-vis", *OBS, "--storage=phdf5", "--phdf5.transfer=collective",
           str(out), check=0, timeout=MPI_TIMEOUT_S)
    h5py = pytest.importorskip("h5py")
    with h5py.File(out, "r+") as f:
        vis = f["Data/visdata"]
        data = vis[...]
        data[1000, 5, 0] += 1  # one value
        vis[...] = data
    report = tmp_path / "v.json"
    iotest("verify", "--all", str(out), f"--report={report}", check=1)
    v = load(report)["verification"]
    assert v["values_wrong"] == 1 and v["checksums_wrong"] == 1


@pytest.mark.long
def test_phdf5_usage_errors(phdf5, mpirun, iotest, tmp_path):
    out = str(tmp_path / "out.h5")
    for args, option in ((["--writer-count=2"], "--writer-count"),
                         (["--fork-writer"], "--fork-writer"),
                         (["--phdf5.transfer=sometimes"], "--phdf5.transfer"),
                         (["--phdf5.hints=striping_factor"], "--phdf5.hints"),
                         (["--phdf5.batch=0"], "--phdf5.batch"),
                         (["--phdf5.alignment=lots"], "--phdf5.alignment")):
        proc = mpirun(3, "--synthetic-vis", *OBS, "--storage=phdf5", *args, out,
                      timeout=MPI_TIMEOUT_S)
        assert proc.returncode == 2, (args, proc.stderr)
        errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
        assert len(errors) == 1 and option in errors[0], proc.stderr
    proc = mpirun(3, "--synthetic-vis", *OBS, "--storage=phdf5", str(tmp_path / "out%d.h5"),
                  timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2 and "%d" in proc.stderr, proc.stderr
    # One process has no one to share with.
    proc = iotest("degrid", *OBS[:5], "--storage=phdf5", out)
    assert proc.returncode == 2 and "--storage" in proc.stderr, proc.stderr
    proc = mpirun(3, "--synthetic-vis", *OBS, "--storage=phdf5",
                  str(tmp_path / "missing" / "out.h5"), timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2 and "OUTPUT" in proc.stderr, proc.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_a_killed_streamer_leaves_no_shared_file(phdf5, tmp_path):
    # Killed once the shared file exists (under its temporary name): the
    # job ends and nothing carries the final name.
    out = tmp_path / "out.h5"
    cmd = [*MPIRUN, "-np", "3", iotest_binary(), "--synthetic-vis", *OBS[:2],
           "--time=-1800:1800/2048/8", *OBS[3:], "--storage=phdf5", str(out)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=mpi_env())
    try:
        deadline = time.time() + MPI_TIMEOUT_S
        while not list(tmp_path.glob("out.h5.run-*.partial")) or not job_ranks(job.pid):
            assert job.poll() is None and time.time() < deadline, job.communicate()
            time.sleep(0.02)
        time.sleep(0.5)  # writing
        os.kill(job_ranks(job.pid)[-1], signal.SIGKILL)
        job.communicate(timeout=60)
    except BaseException:
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=60)
        raise
    assert job.returncode != 0
    assert not out.exists()


def job_ranks(pid):
    """The job's ranks, by pid."""
    return sorted(rank_processes(pid).values())
