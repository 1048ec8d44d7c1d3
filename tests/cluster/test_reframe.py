"""The ReFrame checks (reframe/, issue 28) on the virtual cluster: ReFrame
runs on the login side (tools/cluster exec: SLURM_CONF and the cluster's
Open MPI settings), submits every check with sbatch and follows it with
squeue (there is no Slurm accounting), and srun starts the ranks, one per
host. Every check passes and logs every performance variable it declares;
a run whose output fails `iotest verify` fails its check."""
import json
import os
import shutil
import sys

import pytest

from conftest import REPO, iotest_binary

sys.path.insert(0, os.path.join(REPO, "tests", "cli"))
from reframe_results import (CHECK_NAMES, CHECKS, CONFIG, REFRAME,  # noqa: E402
                             logged_performance, run_report)

# The suite takes 1 to 1.5 min (three jobs at a time); a job that hangs
# ends at the partition's 3 min time limit.
SUITE_TIMEOUT_S = 400
CHECK_TIMEOUT_S = 180


def reframe(cluster, folder, *args, timeout=SUITE_TIMEOUT_S):
    """ReFrame on the login side, its prefix in the shared folder (every
    host runs its jobs there); HOME and TMPDIR too, for ReFrame's own files
    (~/.reframe, a /tmp/rfm-*.log every run)."""
    tmp = os.path.join(folder, "tmp")
    os.makedirs(tmp, exist_ok=True)
    return cluster.exec(
        "env", f"HOME={folder}", f"TMPDIR={tmp}",
        REFRAME, "-C", CONFIG, "-c", CHECKS, "--system=vcluster", f"--prefix={folder}",
        f"--perflogdir={folder}/perflogs", f"--report-file={folder}/report.json", "--nocolor",
        "-S", f"iotest_exe={iotest_binary()}", *args, cwd=folder, timeout=timeout)


@pytest.fixture
def folder(workdir):
    """The test's shared folder, removed after it (ReFrame's stage and
    output folders, the jobs' files)."""
    yield workdir
    shutil.rmtree(workdir, ignore_errors=True)


def test_every_check_passes_on_the_cluster_and_logs_its_performance(cluster, folder):
    if not os.path.exists(REFRAME):
        pytest.skip("reframe is not in the project's .venv (tools/install-deps.sh)")
    described = reframe(cluster, folder, "--describe", timeout=120)
    assert described.returncode == 0, described.stderr
    # --describe prints JSON alone on stdout, every check's variables.
    declared = {d["display_name"]: d["perf_variables"] for d in json.loads(described.stdout)}
    proc = reframe(cluster, folder, "-r")
    assert proc.returncode == 0, proc.stdout[-6000:]
    cases = run_report(folder)
    assert set(cases) == set(declared) == CHECK_NAMES, sorted(cases)
    assert all(tc["result"] == "pass" for tc in cases.values())
    # They ran under Slurm, across the hosts: one rank a host.
    assert all(tc["scheduler"] == "squeue" and tc["jobid"] for tc in cases.values()), cases
    with open(os.path.join(folder, "output", "vcluster", "cluster", "gnu", "IotestPredict",
                           "run.json")) as f:
        hosts = json.load(f)["environment"]["hosts"]
    assert sorted(hosts) == cluster.hosts
    # Every performance variable each check declares is in its log, measured.
    logged = logged_performance(folder, "vcluster", "cluster")
    for name, variables in declared.items():
        missing = set(variables) - set(logged.get(name, {}))
        assert variables and not missing, (name, missing, logged.get(name))
        assert all(logged[name][v] > 0 for v in variables), (name, logged[name])


def test_a_run_that_fails_verify_fails_its_check_on_the_cluster(cluster, folder):
    if not os.path.exists(REFRAME):
        pytest.skip("reframe is not in the project's .venv (tools/install-deps.sh)")
    proc = reframe(cluster, folder, "-r", "-n", "^IotestPredict$", "-S",
                   "IotestPredict.corrupt_output=1", timeout=CHECK_TIMEOUT_S)
    assert proc.returncode != 0, proc.stdout[-4000:]
    case = run_report(folder)["IotestPredict"]
    assert case["result"] == "fail" and case["fail_phase"] == "sanity", case
    assert "iotest verify" in case["fail_reason"], case["fail_reason"]
