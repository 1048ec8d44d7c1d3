import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

# Every iotest run here is bounded so a hang fails the test instead of CI.
TIMEOUT_S = 300


@pytest.fixture
def iotest():
    binary = iotest_binary()

    def run(*args, check=None, timeout=TIMEOUT_S):
        proc = subprocess.run([binary, *args], capture_output=True, text=True,
                              timeout=timeout)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return run


def load(path):
    """A JSON file; an iotest report (a dict with a mode) is checked against
    docs/report.schema.json on the way."""
    from schema import validate_report
    with open(path) as f:
        report = json.load(f)
    if isinstance(report, dict) and "mode" in report:
        validate_report(report)
    return report


# MPI jobs: one host, as root in CI, more ranks than cores. IOTEST_MPIRUN
# names another launcher (the mpich preset's tests: mpiexec.mpich, whose
# Hydra runs as root and oversubscribes without being asked).
MPI_TIMEOUT_S = 180
MPIRUN = shlex.split(os.environ.get("IOTEST_MPIRUN",
                                    "mpirun --allow-run-as-root --oversubscribe"))


def mpi_flavour():
    """'mpich' when the launcher is MPICH's Hydra, else 'openmpi'."""
    proc = subprocess.run([MPIRUN[0], "--version"], capture_output=True, text=True, timeout=30)
    return "mpich" if "HYDRA" in proc.stdout else "openmpi"


def iotest_binary():
    return os.environ.get("IOTEST_BIN", "build/bin/iotest")


def mpi_env():
    env = dict(os.environ)
    # Containers often forbid the cross-memory attach Open MPI's shared
    # memory transport tries first; copying through the buffer always works.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


@pytest.fixture
def mpirun():
    binary, env = iotest_binary(), mpi_env()

    def run(ranks, *args, check=None, timeout=MPI_TIMEOUT_S):
        cmd = [*MPIRUN, "-np", str(ranks), binary, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return run


# The ranks of a job, found among the launcher's descendants (Open MPI's
# mpirun starts them itself, MPICH's Hydra through a proxy per host) by
# their rank variable.
def children(pid):
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


RANK_VARIABLES = (b"OMPI_COMM_WORLD_RANK=", b"PMI_RANK=")


def world_rank(pid):
    """The process's MPI rank, or None for a process that is not a rank."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((int(v.split(b"=")[1]) for v in env if v.startswith(RANK_VARIABLES)), None)


def rank_processes(launcher):
    """{rank: pid}: the shallowest process of each rank below the launcher
    (a forked writer inherits its streamer's rank variable)."""
    found, level = {}, [launcher]
    while level:
        below = []
        for pid in level:
            rank = world_rank(pid) if pid != launcher else None
            if rank is None:
                below += children(pid)
            else:
                found.setdefault(rank, pid)
        level = below
    return found


def pytest_configure(config):
    # `make test` leaves these out; `make test-long` (and CI) runs them.
    config.addinivalue_line(
        "markers", "long: a check of about 10 s or more, run by `make test-long` (cli-long)")
