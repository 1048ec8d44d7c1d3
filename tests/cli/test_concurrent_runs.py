"""Outputs that belong to their run (issue 26): runs started together into
one output pattern, a run refused while another writes its outputs,
another run's output appearing under a final name, a run re-run over its
earlier outputs, and sets mixing two runs' files."""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, load, mpi_env

# About 3 s a run on two cores: two started together overlap.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/384/16",
       "--freq=260e6:300e6/64/16", "--dec=-40", "--no-progress"]
BACKENDS = {"hdf5": (["--storage=hdf5"], "h5"), "posix": (["--storage=posix"], "bin"),
            "fork-writer": (["--storage=hdf5", "--fork-writer"], "h5"),
            "ms": (["--storage=ms"], "ms")}


def start(out, seed, *args):
    # Each mpirun a session folder of its own (short: it holds sockets):
    # two started at once race for /tmp/ompi.HOST.UID ("File exists").
    session = tempfile.mkdtemp(prefix="ompi-")
    env = {**mpi_env(), "OMPI_MCA_orte_tmpdir_base": session}
    job = subprocess.Popen([*MPIRUN, "-np", "3", iotest_binary(), *OBS, f"--seed={seed}", *args,
                            out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)
    job.session = session
    return job


def finish(job):
    try:
        out, err = job.communicate(timeout=MPI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        job.kill()
        job.communicate()
        raise
    finally:
        shutil.rmtree(job.session, ignore_errors=True)
    return job.returncode, out, err


def error_line(err):
    lines = [line for line in err.splitlines() if line.startswith("iotest: error")]
    assert len(lines) == 1, err
    return lines[0]


def final_named(folder, ext):
    """Outputs under their final names (out0.h5), not kept or partial ones."""
    return sorted(str(folder / f) for f in os.listdir(folder) if re.fullmatch(rf"out\d+\.{ext}", f))


def verifies(files, seed):
    proc = subprocess.run([iotest_binary(), "verify", f"--seed={seed}", *files],
                          capture_output=True, text=True, timeout=MPI_TIMEOUT_S)
    return proc.returncode == 0


def wait_for_partials(folder, job, count):
    deadline = time.monotonic() + MPI_TIMEOUT_S
    while len(list(folder.glob("*.run-*[0-9].partial"))) < count:  # not their locks
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.05)


@pytest.mark.long
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_runs_started_together_each_keep_their_own_outputs(tmp_path, backend):
    # Three times, two runs at once into the same pattern, different seeds,
    # in one folder (so from the second time on, both find earlier outputs
    # to replace). A run either succeeds, or is refused before the work
    # (exit 2: the other was writing the outputs), or ends when the other's
    # outputs took the names first (exit 1, its own kept apart). The final
    # names always hold the last successful run's outputs, whole.
    args, ext = BACKENDS[backend]
    out = str(tmp_path / f"out%d.{ext}")
    latest, outcomes = None, []
    for attempt in range(3):
        seeds = (10 * attempt + 1, 10 * attempt + 2)
        reports = [tmp_path / f"run{seed}.json" for seed in seeds]
        jobs = [start(out, seed, *args, f"--report={r}") for seed, r in zip(seeds, reports)]
        results = [finish(job) for job in jobs]
        succeeded = []
        for seed, report, (rc, _, err) in zip(seeds, reports, results):
            outcomes.append(rc)
            if rc == 0:
                succeeded.append((seed, load(report)))
                assert "iotest: error" not in err
            elif rc == 2:
                line = error_line(err)
                assert "OUTPUT" in line and "being written by another run" in line, line
            else:
                assert rc == 1, err
                line = error_line(err)
                assert "another run's output" in line, line
                nonce = re.search(r"'\.run-(\d+)'", line).group(1)
                kept = sorted(str(p) for p in tmp_path.glob(f"out*.run-{nonce}.{ext}"))
                assert len(kept) == 2 and verifies(kept, seed), (line, kept)
        files = final_named(tmp_path, ext)
        assert not list(tmp_path.glob("*.partial")), os.listdir(tmp_path)
        if succeeded:
            # Two successes: one ran wholly after the other (a slow start),
            # a re-run that replaced the first one's outputs.
            latest = [seed for seed, _ in succeeded if len(files) == 2 and verifies(files, seed)]
            assert len(latest) == 1, (attempt, files, succeeded)
            latest = latest[0]
        elif latest is None:
            assert files == [], files
        else:  # none got through: the last successful run's outputs stand
            assert len(files) == 2 and verifies(files, latest), (attempt, files, latest)
    assert 0 in outcomes, outcomes  # at least one run got through


def test_a_run_is_refused_while_another_writes_its_outputs(tmp_path):
    out = str(tmp_path / "out%d.h5")
    first = start(out, 1)
    try:
        wait_for_partials(tmp_path, first, 2)
        started = time.monotonic()
        second = subprocess.run([*MPIRUN, "-np", "3", iotest_binary(), *OBS, "--seed=2", out],
                                capture_output=True, text=True, timeout=MPI_TIMEOUT_S,
                                env=mpi_env())
        assert second.returncode == 2, (second.stdout, second.stderr)
        line = error_line(second.stderr)
        assert "OUTPUT" in line and "being written by another run" in line
        assert re.search(r"out[01]\.h5\.run-\d+\.partial", line), line
        assert "iotest run:" not in second.stdout  # refused before the plan, any work
        assert time.monotonic() - started < 60
    finally:
        rc, _, err = finish(first)
    assert rc == 0, err  # the first run never noticed
    assert verifies(final_named(tmp_path, "h5"), 1)
    assert not list(tmp_path.glob("*.partial"))


def test_another_runs_output_appearing_meanwhile_is_left_alone(tmp_path):
    # While the run writes, another's output takes one of its final names:
    # the run ends with one line naming it, publishes none of its outputs
    # (all or none), and keeps them under its own run's name.
    out = str(tmp_path / "out%d.h5")
    job = start(out, 1)
    try:
        wait_for_partials(tmp_path, job, 2)
        theirs = tmp_path / "theirs.tmp"
        theirs.write_bytes(b"another run's visibilities")
        os.rename(theirs, tmp_path / "out1.h5")
    finally:
        rc, _, err = finish(job)
    assert rc == 1, err
    line = error_line(err)
    assert "OUTPUT" in line and "out1.h5' is another run's output" in line, line
    assert (tmp_path / "out1.h5").read_bytes() == b"another run's visibilities"
    assert not (tmp_path / "out0.h5").exists()
    kept = sorted(str(p) for p in tmp_path.glob("out*.run-*.h5"))
    assert len(kept) == 2 and verifies(kept, 1), kept
    assert not list(tmp_path.glob("*.partial"))


def test_a_rerun_replaces_its_earlier_outputs_and_says_so(mpirun, tmp_path):
    out = str(tmp_path / "out%d.h5")
    for seed, replaced in ((1, 0), (2, 3)):  # --synthetic-vis: three streamers, three files
        report = tmp_path / f"run{seed}.json"
        proc = mpirun(3, "--synthetic-vis", *OBS, f"--seed={seed}", out, f"--report={report}",
                      check=0, timeout=MPI_TIMEOUT_S)
        assert load(report)["config"]["outputs_replaced"] == replaced
        assert ("replaced 3 file(s) there before the run" in proc.stdout) == (replaced == 3)
    nonce = load(tmp_path / "run2.json")["config"]["nonce"]
    subprocess.run([iotest_binary(), "verify", f"--nonce={nonce}",
                    *final_named(tmp_path, "h5")], check=True, capture_output=True,
                   timeout=MPI_TIMEOUT_S)
    assert sorted(os.listdir(tmp_path)) == ["out0.h5", "out1.h5", "out2.h5", "run1.json",
                                            "run2.json"]


def test_verify_refuses_a_set_mixing_two_runs_with_the_same_options(mpirun, tmp_path):
    # The same command twice, into two folders: the files match in every
    # option, only their runs differ. A set of one of each is refused,
    # naming the odd file.
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        mpirun(3, "--synthetic-vis", *OBS, str(tmp_path / run / "out%d.h5"), check=0,
               timeout=MPI_TIMEOUT_S)
    mixed = [str(tmp_path / "a" / "out0.h5"), str(tmp_path / "b" / "out1.h5")]
    proc = subprocess.run([iotest_binary(), "verify", *mixed], capture_output=True, text=True,
                          timeout=MPI_TIMEOUT_S)
    assert proc.returncode != 0
    assert mixed[1] in proc.stdout + proc.stderr and "another run" in proc.stdout + proc.stderr
