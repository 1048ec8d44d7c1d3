"""Every output checked before the work (issue 26): a path that is a
folder, a missing folder, a folder that takes no new file, a "folder" that
is a file. Each ends the run with status 2 and one line naming OUTPUT and
the path, before the plan is printed (nothing computed), with nothing left
behind, on every back-end that writes files."""
import os
import subprocess
import time

import pytest

from conftest import MPI_TIMEOUT_S

# 92 M visibilities (vlaa's default observation): a run would take many
# seconds, so a check made at the end could not pass for one made first.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--no-progress"]
BACKENDS = [["--storage=hdf5"], ["--storage=posix"], ["--storage=hdf5", "--fork-writer"]]


def refused_before_any_work(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert len(errors) == 1, proc.stderr
    for word in ("OUTPUT", *words):
        assert word in errors[0], errors[0]
    assert "iotest run:" not in proc.stdout  # the plan, printed once set up


def listing(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, files in os.walk(folder) for f in files)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: "+".join(b))
def test_an_output_that_is_a_folder(mpirun, tmp_path, backend):
    (tmp_path / "out0.h5").mkdir()
    proc = mpirun(3, *OBS, *backend, str(tmp_path / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    refused_before_any_work(proc, "out0.h5", "folder")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: "+".join(b))
def test_an_output_whose_folder_is_missing(mpirun, tmp_path, backend):
    proc = mpirun(3, *OBS, *backend, str(tmp_path / "missing" / "out%d.h5"),
                  timeout=MPI_TIMEOUT_S)
    refused_before_any_work(proc, "missing", "No such file or directory")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: "+".join(b))
def test_an_output_whose_folder_is_a_file(mpirun, tmp_path, backend):
    (tmp_path / "plain").write_text("not a folder\n")
    proc = mpirun(3, *OBS, *backend, str(tmp_path / "plain" / "out%d.h5"),
                  timeout=MPI_TIMEOUT_S)
    refused_before_any_work(proc, "plain", "not a folder")
    assert listing(tmp_path) == ["plain"]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: "+".join(b))
def test_an_output_in_a_read_only_folder(mpirun, tmp_path, backend):
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() == 0:
        # Root writes through permission bits; an immutable folder refuses
        # even root, as a read-only mount does.
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not supported on this file system")
    else:
        folder.chmod(0o555)
    try:
        proc = mpirun(3, *OBS, *backend, str(folder / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)
    refused_before_any_work(proc, "locked", "takes no new file")
    assert listing(tmp_path) == []


def test_the_check_leaves_another_runs_partial_file_alone(mpirun, tmp_path):
    # A file in progress of a run that ended (nobody holds it) under the
    # name this run's outputs go to: the check before the work neither
    # truncates nor removes it.
    theirs = tmp_path / "out0.h5.run-12345.partial"
    theirs.write_bytes(b"another run's visibilities")
    (tmp_path / "out1.h5").mkdir()  # so this run stops after its checks
    proc = mpirun(3, *OBS, str(tmp_path / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    refused_before_any_work(proc, "out1.h5")
    assert theirs.read_bytes() == b"another run's visibilities"


@pytest.fixture
def small_file_system(tmp_path):
    """A 1 MiB file system (tmpfs, as root) for a run of 1.5 GB."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        # A rank of a job that MPI_Abort ended may still be closing its files
        # there when mpirun returns: "target is busy" for a moment.
        for _ in range(50):
            if subprocess.run(["umount", str(folder)], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        else:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_require_space_refuses_a_file_system_too_small(mpirun, small_file_system):
    proc = mpirun(3, *OBS, "--require-space", str(small_file_system / "out%d.h5"),
                  timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert len(errors) == 1 and "--require-space" in errors[0], proc.stderr
    assert str(small_file_system) in errors[0] and "MiB free" in errors[0]
    assert "iotest run:" not in proc.stdout
    assert listing(small_file_system) == []


def test_without_require_space_a_small_file_system_is_a_warning(mpirun, small_file_system):
    # The run goes on (and then finds the disk full, ending the job).
    proc = mpirun(3, *OBS, str(small_file_system / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    warnings = [l for l in proc.stderr.splitlines() if l.startswith("iotest: warning: OUTPUT")]
    assert len(warnings) == 2, proc.stderr  # each streamer, for its own output
    assert "--require-space" in warnings[0]
    assert proc.returncode != 0
    assert not [f for f in listing(small_file_system) if not f.endswith(".partial")]


def unusable(tmp_path, case):
    """A path of each unusable kind, under tmp_path: (path, the words the
    error line must hold)."""
    if case == "folder":
        (tmp_path / "taken").mkdir()
        return tmp_path / "taken", ["folder"]
    if case == "missing-folder":
        return tmp_path / "missing" / "r.json", ["No such file or directory"]
    if case == "folder-is-a-file":
        (tmp_path / "plain").write_text("not a folder\n")
        return tmp_path / "plain" / "r.json", ["Not a directory"]
    (tmp_path / "locked").mkdir()  # read-only: made so in the test, undone after
    return tmp_path / "locked" / "r.json", []


CASES = ["folder", "missing-folder", "folder-is-a-file", "read-only-folder"]


# --csv takes a prefix: one that names a folder writes beside it.
@pytest.mark.parametrize("option,case", [("--report", c) for c in CASES] +
                         [("--csv", c) for c in CASES if c != "folder"])
def test_report_and_csv_paths_are_checked_before_any_work(mpirun, tmp_path, option, case):
    path, words = unusable(tmp_path, case)
    before = listing(tmp_path)
    locked = case == "read-only-folder"
    if locked and os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path.parent)], capture_output=True).returncode:
            pytest.skip("chattr +i is not supported on this file system")
    elif locked:
        path.parent.chmod(0o555)
    try:
        proc = mpirun(3, *OBS, f"{option}={path}", str(tmp_path / "out%d.h5"),
                      timeout=MPI_TIMEOUT_S)
    finally:
        if locked and os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path.parent)], check=True)
        elif locked:
            path.parent.chmod(0o755)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert len(errors) == 1 and option in errors[0], proc.stderr
    for word in words:
        assert word in errors[0], errors[0]
    assert "iotest run:" not in proc.stdout
    assert listing(tmp_path) == before


def test_plan_slurm_checks_the_jobs_output_folder(iotest, tmp_path):
    # Found when the script is made, not when the job starts after its
    # wait in the queue; a %h path (each node's own) is not looked at.
    plan = ["plan", "--rec-set=T05_", "--vis-set=vlaa", "--nodes=2", "--slurm"]
    proc = iotest(*plan, str(tmp_path / "missing" / "out%d.h5"), check=2)
    assert "OUTPUT" in proc.stderr and "missing" in proc.stderr and proc.stdout == ""
    iotest(*plan, str(tmp_path / "out%d.h5"), check=0)
    iotest(*plan, "/local/%h/out%d.h5", check=0)
    assert listing(tmp_path) == []
