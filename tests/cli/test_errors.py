"""Errors reach every rank (issue 9): a check or a failure on one rank
ends the whole job within the test's timeout, with one line on stderr and
the right status. Usage errors are agreed by every rank: status 2, said
once. A failure mid-run is one rank's: it calls MPI_Abort, and Open MPI's
mpirun returns the abort's code (1), or 128 + the signal of a killed rank.
docs/pipeline.md, "When a rank fails".

A node that sees what the others do not (a missing folder, an unreadable
file, a file-size limit) is played on one host by an MPMD launch: one app
context gets other arguments, or runs under prlimit."""
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, children, iotest_binary, load, mpi_env, rank_processes

# The smallest job of test_run.py: 3 ranks are 1 producer and 2 streamers
# (ranks 1 and 2), writing out0.h5 and out1.h5.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--source-count=10", "--no-progress"]


def with_obs(**changed):
    """OBS with some options changed: with_obs(time="...")."""
    keys = {f"--{k.replace('_', '-')}" for k in changed}
    return [a for a in OBS if a.split("=")[0] not in keys] + \
        [f"--{k.replace('_', '-')}={v}" for k, v in changed.items()]


def mpmd(*contexts, timeout=MPI_TIMEOUT_S):
    """One job of several app contexts: (ranks, prefix, args) each; prefix
    runs before iotest (prlimit) on those ranks only."""
    cmd = list(MPIRUN)
    for i, (ranks, prefix, args) in enumerate(contexts):
        cmd += ([":"] if i else []) + ["-np", str(ranks), *prefix, iotest_binary(), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]


def ends_with_one_error(proc, status, *words):
    """The job's status (None: any failure), and one error line holding `words`."""
    if status is None:
        assert proc.returncode != 0, (proc.stdout, proc.stderr)
    else:
        assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def nothing_looks_complete(folder):
    """After a failure no output has its final name (.partial files may stay)."""
    outputs = [p for ext in ("h5", "bin", "ms") for p in Path(folder).rglob(f"*.{ext}")]
    assert not outputs, sorted(os.listdir(folder))


# Every writing back-end, by its output's name (storage::backend_for).
BACKENDS = ["h5", "bin", "ms"]


needs_prlimit = pytest.mark.skipif(shutil.which("prlimit") is None,
                                   reason="prlimit (util-linux) plays a node's limits")

# ---- before the run: agreed by every rank, status 2 -----------------------


@pytest.mark.parametrize("args,option", [
    (["--threads=0"], "--threads"),          # CLI11's own check
    (["--no-such-option"], "--no-such-option"),
])
def test_a_parse_error_is_said_once(mpirun, tmp_path, args, option):
    proc = mpirun(3, *OBS, *args, str(tmp_path / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, option)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("direction", [[], ["--direction=predict"]])
def test_image_autocorrelations_without_an_image_is_said_once(mpirun, tmp_path, direction):
    # A rule of the dirty image: predict writes every row and makes none.
    proc = mpirun(3, *OBS, *direction, "--image-autocorrelations", str(tmp_path / "out%d.h5"),
                  timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, "--image-autocorrelations", "--direction=image")
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("report", ["missing/r.json", "."])  # no such folder; a folder
def test_the_report_path_checked_on_rank_0_stops_every_rank(mpirun, tmp_path, report):
    (tmp_path / "out").mkdir()
    proc = mpirun(3, *OBS, str(tmp_path / "out" / "out%d.h5"), f"--report={tmp_path / report}",
                  timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, "--report")
    assert not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("ext", BACKENDS)
def test_an_output_folder_one_streamer_lacks_stops_every_rank(mpirun, tmp_path, ext):
    # out0.h5 (rank 1) can be created, out1.h5 (rank 2) cannot: only rank 2
    # finds it, and every rank leaves with the usage status.
    (tmp_path / "d0").mkdir()
    proc = mpirun(3, *OBS, str(tmp_path / "d%d" / f"out.{ext}"), timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, "OUTPUT", "d1")
    assert not os.listdir(tmp_path / "d0")


def test_an_output_folder_one_node_lacks_stops_every_rank(tmp_path):
    # Node-local paths: rank 2's node has no such folder, rank 0's has.
    (tmp_path / "here").mkdir()
    proc = mpmd((2, [], [*OBS, str(tmp_path / "here" / "out%d.h5")]),
                (1, [], [*OBS, str(tmp_path / "elsewhere" / "out%d.h5")]), timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, "OUTPUT", "elsewhere")
    assert not os.listdir(tmp_path / "here")


def test_a_layout_file_one_node_cannot_read_stops_every_rank(tmp_path):
    layout = tmp_path / "array.cfg"
    shutil.copy(Path(__file__).parents[2] / "data" / "layouts" / "mkatplus.cfg", layout)
    here = with_obs(vis_set=layout, dec=-30)
    elsewhere = with_obs(vis_set=tmp_path / "missing" / "array.cfg", dec=-30)
    proc = mpmd((2, [], here), (1, [], elsewhere), timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, "--vis-set", "cannot read layout file")


def test_a_job_the_node_cannot_hold_is_refused_by_every_rank(mpirun):
    proc = mpirun(3, "--rec-set=huge", "--no-progress", timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 2, "--rec-set", "memory model", "available")


def test_the_tower_height_measured_on_one_rank_is_every_ranks(mpirun, iotest, tmp_path):
    # --target-err: measured once and shared, so every rank plans the same walk.
    out, report = tmp_path / "out%d.h5", tmp_path / "r.json"
    mpirun(3, *OBS, "--target-err=1e-6", str(out), f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    assert load(report)["counts"]["visibilities_written"] == 351 * 16 * 32
    iotest("verify", *map(str, sorted(tmp_path.glob("out*.h5"))), check=0)


# ---- during the run: one rank aborts the job ------------------------------


@needs_prlimit
def test_an_allocation_failing_on_one_rank_ends_the_job():
    # small: the producer's prepared facets are 4.5 GiB, past its 2 GB of
    # address space; the other ranks are unlimited.
    args = ["--rec-set=small", *OBS[1:]]
    proc = mpmd((1, ["prlimit", "--as=2000000000"], args), (2, [], args), timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 1, "(rank 0)", "out of memory")


@needs_prlimit
@pytest.mark.parametrize("ext", BACKENDS)
@pytest.mark.parametrize("extra", [[], ["--fork-writer"], ["--assigner"]])
def test_a_write_failing_mid_run_ends_the_job(tmp_path, extra, ext):
    # Rank 2 (streamer 1) may write files up to 6 MB, and its file grows to
    # 9.7 MB: a write fails mid-run as on a full disk (iotest ignores
    # SIGXFSZ). The limit stays above Open MPI's shared-memory segments.
    limit = ["prlimit", "--fsize=6000000"]
    if "--assigner" in extra:
        # The assigner is the 4th rank, and the streamers take parts as they
        # come free, so either may write more: both are limited, with four
        # times the observation (each writes ~23 MB on average), and the
        # first to fail ends the job.
        args = [*with_obs(time="-1800:1800/256/8"), *extra, str(tmp_path / f"out%d.{ext}")]
        proc = mpmd((1, [], args), (2, limit, args), (1, [], args), timeout=MPI_TIMEOUT_S)
        assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
        lines = error_lines(proc)
        assert lines and all("failed" in line and f".{ext}" in line for line in lines), proc.stderr
        nothing_looks_complete(tmp_path)
        return
    # ms stores 8 B per visibility, not 16, and each file half the channels
    # (a MeasurementSet per frequency range): four times the time steps to
    # pass the limit.
    time = "-1800:1800/256/8" if ext == "ms" else "-1800:1800/64/8"
    args = [*with_obs(time=time), *extra, str(tmp_path / f"out%d.{ext}")]
    proc = mpmd((2, [], args), (1, limit, args), timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 1, "(rank 2)", f"out1.{ext}", "failed")
    nothing_looks_complete(tmp_path)
    assert f"out1.{ext}.partial" not in os.listdir(tmp_path)  # the failed writer dropped it


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: a disk that fills up mid-run (mounting needs root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mount.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], check=True)


# What a write into a full disk or quota says, errno's text or the hint.
FULL = r"No space left on device|Disk quota exceeded|\(disk full\?\)"

# Each back-end that writes: its options and output name.
WRITERS = {"hdf5": ([], "out%d.h5"), "posix": ([], "out%d.bin"),
           "phdf5": (["--storage=phdf5"], "out.h5"), "ms": ([], "out%d.ms")}


@pytest.mark.parametrize("backend", sorted(WRITERS))
@pytest.mark.parametrize("extra", [[], ["--fork-writer"], ["--assigner"]])
def test_a_full_disk_fails_cleanly(mpirun, iotest, small_disk, backend, extra):
    # The streamers write ~20 MB to a 4 MiB file system: one write fails
    # as the disk fills, the job ends with the failure, and no output
    # carries its final name.
    if backend == "phdf5" and "--fork-writer" in extra:
        pytest.skip("phdf5's writers are threads (they call MPI)")
    if backend == "phdf5" and "phdf5" not in iotest("run", "--help").stdout:
        pytest.skip("built with the serial HDF5")
    options, name = WRITERS[backend]
    ranks = 4 if "--assigner" in extra else 3
    proc = mpirun(ranks, *with_obs(time="-1800:1800/64/8"), *extra, *options,
                  str(small_disk / name), timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    # Every rank that met it says so in its one line, naming the cause
    # (issue 56), an exception out of a library's destructor too.
    lines = error_lines(proc)
    assert lines and all(re.search(FULL, line) for line in lines), proc.stderr
    assert "terminate called" not in proc.stderr, proc.stderr
    nothing_looks_complete(small_disk)


def test_a_report_that_cannot_be_written_at_the_end_fails_the_job(mpirun, tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    # /dev/full passes the check (it is writable) and fails the write: a disk
    # filling up between the two. Every other rank has finished by then.
    proc = mpirun(3, *OBS, str(tmp_path / "out%d.h5"), "--report=/dev/full", timeout=MPI_TIMEOUT_S)
    ends_with_one_error(proc, 1, "--report", "/dev/full")


# ---- a process killed ------------------------------------------------------

# Long enough that the kill lands mid-run (the job never gets to finish).
LONG = with_obs(time="-1800:1800/1024/8")


needs_proc_children = pytest.mark.skipif(
    not Path(f"/proc/self/task/{os.getpid()}/children").exists(),
    reason="needs /proc/PID/task/TID/children")


def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def kill_mid_run(tmp_path, ranks, args, victim, ext="h5"):
    """Starts the job, kills `victim(ranks by world rank)` with SIGKILL once
    every streamer has claimed its output (out%d.EXT: the back-end) and the
    victim exists, and
    returns the finished process and the pids of the writer processes it had."""
    cmd = [*MPIRUN, "-np", str(ranks), iotest_binary(), *args, str(tmp_path / f"out%d.{ext}")]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=mpi_env())
    try:
        deadline = time.time() + MPI_TIMEOUT_S
        while len(list(tmp_path.glob("*[0-9].partial"))) < 2:  # the outputs, not their locks
            assert job.poll() is None and time.time() < deadline, job.communicate()
            time.sleep(0.02)
        # The outputs are claimed (the .partial files made) before the ranks
        # fork their writers: wait until the victim is there too.
        while True:
            by_rank = rank_processes(job.pid)
            try:
                target = victim(by_rank)
                break
            except (IndexError, KeyError):
                assert job.poll() is None and time.time() < deadline, job.communicate()
                time.sleep(0.02)
        writers = [w for pid in by_rank.values() for w in children(pid)]
        os.kill(target, signal.SIGKILL)
        out, err = job.communicate(timeout=60)
    except BaseException:
        job.send_signal(signal.SIGTERM)  # mpirun takes its ranks down with it
        job.communicate(timeout=60)
        raise
    return subprocess.CompletedProcess(cmd, job.returncode, out, err), writers


@needs_proc_children
@pytest.mark.parametrize("ranks,extra,victim,ext", [
    (3, [], 0, "h5"),                   # the producer
    (3, ["--fork-writer"], 2, "h5"),    # a streamer: its writer process goes too
    (3, ["--fork-writer"], 2, "bin"),   # the same with the posix back-end
    (4, ["--assigner"], 3, "h5"),       # the assigner
])
def test_a_killed_rank_ends_the_job(tmp_path, ranks, extra, victim, ext):
    job, writers = kill_mid_run(tmp_path, ranks, [*LONG, *extra], lambda r: r[victim], ext)
    # The launcher says which signal: Open MPI's mpirun exits 128 + 9 with
    # "signal 9" on stderr, MPICH's Hydra exits 9 with "KILLED BY SIGNAL: 9".
    assert job.returncode in (128 + signal.SIGKILL, signal.SIGKILL), job.stderr
    assert "signal 9" in (job.stderr + job.stdout).lower(), job.stderr
    nothing_looks_complete(tmp_path)
    # No writer process outlives its streamer (it would wait forever).
    deadline = time.time() + 10
    while any(alive(w) for w in writers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in writers)


@needs_proc_children
@pytest.mark.parametrize("ext", BACKENDS)
def test_a_killed_writer_process_ends_the_job(tmp_path, ext):
    # A queue of one chunk per writer fills at once: its streamer must see
    # that the writer died rather than wait for it.
    args = [*LONG, "--fork-writer", "--visibility-queue=1"]
    job, writers = kill_mid_run(tmp_path, 3, args, lambda r: children(r[1])[0], ext)
    assert job.returncode == 1, job.stderr
    lines = error_lines(job)
    assert len(lines) == 1 and "(rank 1)" in lines[0] and "writer process" in lines[0], job.stderr
    nothing_looks_complete(tmp_path)
