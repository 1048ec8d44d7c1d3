"""The ReFrame checks (reframe/, issue 28) on this machine: ReFrame runs
every check with the local system (mpirun) and the already built iotest;
each passes, and the performance log holds every performance variable each
check declares. A run whose output fails `iotest verify` fails its check."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import iotest_binary
from reframe_results import (CHECK_NAMES, CHECKS, CONFIG, REFRAME, logged_performance,
                             run_report)

# The whole suite (nine jobs, one at a time) takes 20 to 60 s here.
SUITE_TIMEOUT_S = 300
CHECK_TIMEOUT_S = 120


def reframe_command(folder, *args):
    """ReFrame with iotest's configuration and checks and the built iotest;
    its stage, output, performance log and run report under `folder`."""
    return [REFRAME, "-C", CONFIG, "-c", CHECKS, "--system=local",
            f"--prefix={folder}", f"--perflogdir={folder}/perflogs",
            f"--report-file={folder}/report.json", "--nocolor",
            "-S", f"iotest_exe={os.path.abspath(iotest_binary())}", *args]


def reframe(folder, *args, timeout=SUITE_TIMEOUT_S):
    # ReFrame's own files stay in the folder too: ~/.reframe, and the log
    # of its start (a new /tmp/rfm-*.log every run).
    tmp = os.path.join(folder, "tmp")
    os.makedirs(tmp, exist_ok=True)
    return subprocess.run(reframe_command(folder, *args), capture_output=True, text=True,
                          timeout=timeout, cwd=folder,
                          env={**os.environ, "HOME": folder, "TMPDIR": tmp})


def declared_performance_variables(proc):
    """{display name: performance variables} as the checks declare them,
    from the output of `reframe --describe` (which runs nothing)."""
    assert proc.returncode == 0, proc.stderr or proc.stdout
    described = json.loads(proc.stdout)  # --describe prints JSON alone on stdout
    return {d["display_name"]: d["perf_variables"] for d in described}


def assert_all_passed_with_performance(proc, folder, declared, names, system, partition):
    assert proc.returncode == 0, proc.stdout[-6000:]
    cases = run_report(folder)
    assert set(cases) == names, sorted(cases)
    failed = {n: tc.get("fail_reason") for n, tc in cases.items() if tc["result"] != "pass"}
    assert not failed, failed
    assert set(declared) == names
    logged = logged_performance(folder, system, partition)
    for name, variables in declared.items():
        assert variables, name  # every check measures something
        missing = set(variables) - set(logged.get(name, {}))
        assert not missing, (name, missing, logged.get(name))
        assert all(logged[name][v] > 0 for v in variables), (name, logged[name])


@pytest.fixture
def folder(tmp_path):
    """ReFrame's prefix, removed after the test (the assertions quote what
    a failure needs: ReFrame's summary, the failing check's reason)."""
    yield str(tmp_path)
    shutil.rmtree(tmp_path, ignore_errors=True)


def reframe_installed():
    if not os.path.exists(REFRAME):
        pytest.skip("reframe is not in the project's .venv (tools/install-deps.sh installs "
                    "requirements.txt)")
    # The local system launches with Open MPI's mpirun: an iotest built
    # against another MPI (the tests' IOTEST_MPIRUN, e.g. mpiexec.mpich)
    # is not for it.
    launcher = os.environ.get("IOTEST_MPIRUN", "mpirun").split()
    if os.path.basename(launcher[0]) != "mpirun":
        pytest.skip(f"reframe/config.py's local system launches with Open MPI's mpirun, "
                    f"not {launcher[0]}")


def without_phdf5():
    """ReFrame's options leaving out the phdf5 check where iotest was built
    without parallel HDF5 (as tests/cli/test_phdf5.py skips), and the
    checks that remain."""
    proc = subprocess.run([iotest_binary(), "run", "--help"], capture_output=True, text=True,
                          timeout=60)
    if "phdf5" in proc.stdout:
        return [], CHECK_NAMES
    return ["-x", "IotestStorage%backend=phdf5"], CHECK_NAMES - {"IotestStorage %backend=phdf5"}


@pytest.mark.long
def test_every_check_passes_and_logs_every_performance_variable(folder):
    reframe_installed()
    exclude, names = without_phdf5()
    declared = declared_performance_variables(reframe(folder, "--describe", *exclude,
                                                      timeout=120))
    proc = reframe(folder, "-r", *exclude)
    assert_all_passed_with_performance(proc, folder, declared, names, "local", "default")
    # The reports each check read are kept with its output.
    kept = os.path.join(folder, "output", "local", "default", "gnu")
    assert os.path.exists(os.path.join(kept, "IotestPredict", "verify.json")), os.listdir(kept)


def test_a_run_that_fails_verify_fails_its_check(folder):
    reframe_installed()
    proc = reframe(folder, "-r", "-n", "^IotestPredict$", "-S",
                   "IotestPredict.corrupt_output=1", timeout=CHECK_TIMEOUT_S)
    assert proc.returncode != 0, proc.stdout[-4000:]
    case = run_report(folder)["IotestPredict"]
    assert case["result"] == "fail" and case["fail_phase"] == "sanity", case
    # The run itself went through; verify caught the damage.
    assert "iotest verify" in case["fail_reason"], case["fail_reason"]
    with open(os.path.join(folder, "stage", "local", "default", "gnu", "IotestPredict",
                           "rfm_job.out")) as f:
        job_output = f.read()
    assert "iotest run: exit status 0" in job_output
    assert "corrupt_output: overwrote" in job_output
