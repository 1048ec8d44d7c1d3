"""A stalled file system ends the job (docs/pipeline.md, "A stalled file
system"): a storage call that makes no progress for --storage-stall-timeout
seconds ends the run with one line naming the host, the call and the file,
a non-zero status, and no output under its final name.

A host whose link to a shared file system is cut is played on one host by
the test hook IOTEST_TEST_STALL_STORAGE=STEP in one rank's environment (an
MPMD launch): that rank's first call of STEP blocks for ever, as a write
into a dead mount would."""
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, children, iotest_binary, mpi_env, rank_processes

# test_errors.py's smallest job: 3 ranks are 1 producer and 2 streamers.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--source-count=10", "--no-progress"]


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]


def nothing_looks_complete(folder):
    """No output under its final name: only in-progress files (or none)."""
    assert all(p.name.endswith(".partial") for p in folder.iterdir()), \
        sorted(os.listdir(folder))

# The whole job, stall included, is over well within this.
BOUND_S = 30


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def stalled_job(tmp_path, hook, args, stall_timeout="3", ext="h5"):
    """Runs 3 ranks (a producer, streamers 1 and 2 writing out0 and out1)
    with `hook` in rank 2's environment; returns the finished process, its
    seconds and every rank's and writer process's pid seen meanwhile.
    Whatever happens, no process of the job outlives the call."""
    return hooked_job(3, hook, [*OBS, f"--storage-stall-timeout={stall_timeout}", *args,
                                str(tmp_path / f"out%d.{ext}")])


def hooked_job(ranks, hook, args):
    """`ranks` ranks of `iotest ARGS`, the last with `hook` in its environment."""
    run = [iotest_binary(), *args]
    cmd = [*MPIRUN, "-np", str(ranks - 1), *run, ":", "-np", "1", "env",
           f"IOTEST_TEST_STALL_STORAGE={hook}", *run]
    start = time.time()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=mpi_env())
    seen = set()
    try:
        while job.poll() is None and time.time() - start < MPI_TIMEOUT_S:
            for pid in rank_processes(job.pid).values():
                seen |= {pid, *children(pid)}
            time.sleep(0.1)
        out, err = job.communicate(timeout=max(1, MPI_TIMEOUT_S - (time.time() - start)))
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)  # mpirun takes its ranks down with it
            job.communicate(timeout=60)
        for pid in seen:  # and whatever it left
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    seconds = time.time() - start
    return subprocess.CompletedProcess(cmd, job.returncode, out, err), seconds, seen


def stall_line(proc, step, ext, file=r"out1\.{ext}\.run-\d+\.partial"):
    """The one error line, naming the host, the call and rank 2's output."""
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    file = file.format(ext=ext)
    pattern = (r"iotest: error: storage made no progress for (\d+) s on (\S+): "
               rf"{step} (\S+/{file}) "
               r"\(the file system stopped answering; --storage-stall-timeout\)$")
    match = re.match(pattern, lines[0])
    assert match, lines[0]
    return int(match.group(1)), match.group(2), match.group(3)


@pytest.mark.long
@pytest.mark.parametrize("step,extra,ext", [
    ("writing", [], "h5"),                  # a writer thread's chunk write
    ("writing", ["--fork-writer"], "h5"),   # a writer process's, marked in shared memory
    ("writing", [], "bin"),                 # the posix back-end
    ("opening", [], "h5"),                  # before the start barrier
    ("closing", ["--fork-writer"], "bin"),  # the close, the streamer joining its writer
])
def test_a_stalled_storage_call_ends_the_job_with_one_line(tmp_path, step, extra, ext):
    proc, seconds, pids = stalled_job(tmp_path, step, extra, ext=ext)
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert seconds < BOUND_S, (seconds, proc.stderr)
    stalled_s, host, _ = stall_line(proc, step, ext)
    assert stalled_s >= 3
    assert host == subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    nothing_looks_complete(tmp_path)
    # Every rank and writer process is gone (a stall in userland here:
    # one in the kernel would leave its process to the kernel).
    deadline = time.time() + 10
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_a_stalled_read_ends_the_job_with_one_line(mpirun, tmp_path):
    mpirun(3, *OBS, "--synthetic-vis", str(tmp_path / "out%d.h5"), check=0)
    files = [str(tmp_path / f"out{i}.h5") for i in range(2)]
    # Rank 1 reads out1.h5, and its first read never returns.
    job = hooked_job(2, "reading", ["read", *files, "--storage-stall-timeout=3"])
    ended_naming_the_stall(*job, "reading", file=r"out1\.h5")


def ended_naming_the_stall(proc, seconds, pids, step, file):
    """A hooked job ended non-zero within the bound, its one line naming
    the step and the file, and none of its processes left."""
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert seconds < BOUND_S, (seconds, proc.stderr)
    stall_line(proc, step, "h5", file=file)
    deadline = time.time() + 10
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_a_slow_call_under_the_bound_is_no_stall(tmp_path):
    # One write takes 2 s, under a bound of 10 s: the run completes.
    proc, _, _ = stalled_job(tmp_path, "writing:2", [], stall_timeout="10")
    assert proc.returncode == 0, proc.stderr
    assert not error_lines(proc), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out0.h5", "out1.h5"]


@pytest.mark.parametrize("value", ["-1", "soon", "inf", ""])
def test_a_bound_that_is_no_number_of_seconds_is_a_usage_error(iotest, tmp_path, value):
    proc = iotest("run", *OBS, f"--storage-stall-timeout={value}", str(tmp_path / "out%d.h5"))
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc)
    assert len(lines) == 1 and "--storage-stall-timeout" in lines[0], proc.stderr
    assert not list(tmp_path.iterdir())


# ---- every read watched (issue 56) ------------------------------------------------

def hooked_command(hook, args):
    """A one-process command (verify, grid) with `hook` in its environment:
    the finished process and its seconds; it never outlives the call."""
    start = time.time()
    job = subprocess.Popen([iotest_binary(), *args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "IOTEST_TEST_STALL_STORAGE": hook})
    try:
        out, err = job.communicate(timeout=MPI_TIMEOUT_S)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate(timeout=30)
    return subprocess.CompletedProcess(job.args, job.returncode, out, err), time.time() - start


def written_set(mpirun, tmp_path, ext, storage=()):
    """A sky's set of two files from the smallest job, and their paths."""
    mpirun(3, *OBS, *storage, str(tmp_path / f"out%d.{ext}"), check=0)
    files = [str(tmp_path / f"out{i}.{ext}") for i in range(2)]
    assert all(os.path.exists(f) for f in files), sorted(os.listdir(tmp_path))
    return files


@pytest.mark.parametrize("ext,storage", [("h5", []), ("bin", []), ("ms", ["--storage=ms"])])
@pytest.mark.parametrize("step", ["opening", "reading"])
def test_verify_through_a_stalled_mount_ends_with_one_line(mpirun, tmp_path, ext, storage, step):
    files = written_set(mpirun, tmp_path, ext, storage)
    proc, seconds = hooked_command(step, ["verify", *files, "--storage-stall-timeout=3"])
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert seconds < BOUND_S, (seconds, proc.stderr)
    stalled_s, host, _ = stall_line(proc, step, ext, file=rf"out0\.{ext}")
    assert stalled_s >= 3 and host == os.uname().nodename
    assert proc.stdout == ""  # no verdict, and no report


def test_grid_through_a_stalled_mount_ends_with_one_line(mpirun, tmp_path):
    files = written_set(mpirun, tmp_path, "h5")
    proc, seconds = hooked_command("reading", ["grid", *files, "--storage-stall-timeout=3",
                                               "--threads=1"])
    assert proc.returncode == 1 and seconds < BOUND_S, (seconds, proc.stderr)
    stall_line(proc, "reading", "h5", file=r"out[01]\.h5")


def test_the_dirty_image_written_into_a_stalled_mount_ends_with_one_line(mpirun, tmp_path):
    files = written_set(mpirun, tmp_path, "h5")
    image = tmp_path / "dirty.fits"
    proc, seconds = hooked_command("writing", ["grid", *files, f"--image={image}",
                                               "--storage-stall-timeout=3", "--threads=1"])
    assert proc.returncode == 1 and seconds < BOUND_S, (seconds, proc.stderr)
    stall_line(proc, "writing", "fits", file=r"dirty\.fits\.run-\d+\.partial")
    assert not image.exists()


def test_the_imaging_direction_through_a_stalled_mount_ends_with_one_line(mpirun, tmp_path):
    files = written_set(mpirun, tmp_path, "h5")
    # The last rank, a streamer, reads its file; its first read never returns.
    job = hooked_job(3, "reading", ["run", "--direction=image", "--rec-set=T05_",
                                    "--storage-stall-timeout=3", "--no-progress", *files])
    ended_naming_the_stall(*job, "reading", file=r"out[01]\.h5")


@pytest.mark.parametrize("command", ["verify", "grid"])
def test_verify_and_grid_take_the_stall_bound_as_run_does(iotest, tmp_path, command):
    proc = iotest(command, str(tmp_path / "none.h5"), "--storage-stall-timeout=soon")
    assert proc.returncode == 2 and "--storage-stall-timeout" in proc.stderr, proc.stderr
