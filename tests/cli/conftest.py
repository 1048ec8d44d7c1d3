import json
import os
import subprocess

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


# MPI jobs: one host, as root in CI, more ranks than cores.
MPI_TIMEOUT_S = 180
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


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
