"""The iotest image on the virtual cluster (issue 28): the host's launcher
starts one podman container per rank on each of the three hosts (the hybrid
model, containers/podman-rank.sh), under mpirun inside a Slurm allocation
and under srun with Slurm's PMIx; the ranks talk TCP across the hosts, and
the files they write verify.

Slow (the image): these run only with IOTEST_IMAGE set, as containers/ci.sh
does after building it; `make test-long` skips them with that reason, before the
cluster is brought up for them."""
import glob
import os
import sys

import pytest

from conftest import HOSTS, JOB_TIMEOUT_S, T05, load

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "containers"))
from podman_helpers import (RANK, image_revision, new_prefix, podman,  # noqa: E402
                            podman_problem, remove_containers)

IMAGE = os.environ.get("IOTEST_IMAGE")
_reason = ("IOTEST_IMAGE not set (containers/ci.sh builds the image and runs these)"
           if not IMAGE else podman_problem())
pytestmark = pytest.mark.skipif(bool(_reason), reason=_reason or "")


@pytest.fixture
def prefix(request):
    p = new_prefix(request.node.name.replace("_", "-")[-20:].strip("-"))
    yield p
    remove_containers(p)


def check_run(cluster, workdir, proc, report):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = load(report)
    assert sorted(r["environment"]["hosts"]) == HOSTS
    assert {p["host"] for p in r["pipeline"]["per_rank"]} == set(HOSTS)
    # The image's build (its revision label), not the host's.
    assert r["environment"]["git_revision"] == image_revision(IMAGE)
    files = sorted(glob.glob(os.path.join(workdir, "vis*.h5")))
    assert files and not glob.glob(os.path.join(workdir, "*.partial")), os.listdir(workdir)
    verify = podman("run", "--rm", "--network=none", "--user=0:0", "-v", f"{workdir}:{workdir}",
                    IMAGE, "iotest", "verify", *files, "--nonce", str(r["config"]["nonce"]))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_host_mpirun_runs_a_container_per_rank_across_three_hosts(cluster, workdir, prefix):
    report = os.path.join(workdir, "run.json")
    # mpirun inside an allocation of the three hosts (as a job script's
    # mpirun line): it starts its daemons there through Slurm, and each
    # daemon starts podman for its rank.
    proc = cluster.exec(
        "env", f"IOTEST_CONTAINER_PREFIX={prefix}",
        "salloc", "--nodes=3", "--ntasks=3", "--overcommit",
        # A deadlock fails the test: mpirun (and its ranks) is killed after
        # JOB_TIMEOUT_S, and so is the whole command (cluster.exec's bound).
        "timeout", "-k", "10", str(JOB_TIMEOUT_S),
        "mpirun", "-np", "3", "--map-by", "node",
        "-x", "IOTEST_IMAGE", "-x", "IOTEST_CONTAINER_PREFIX", RANK,
        "iotest", "run", *T05, "--facet-workers=1", f"--report={report}",
        f"{workdir}/vis%d.h5", cwd=workdir, timeout=JOB_TIMEOUT_S + 30)
    check_run(cluster, workdir, proc, report)
    assert remove_containers(prefix) == []  # podman's --rm removed them all


def test_srun_runs_a_container_per_rank_across_three_hosts(cluster, workdir, prefix):
    report = os.path.join(workdir, "run.json")
    # srun's PMIx server (Slurm's) in place of mpirun's daemons: the rank
    # reaches it through the folders podman-rank.sh binds in.
    proc = cluster.exec(
        "env", f"IOTEST_CONTAINER_PREFIX={prefix}",
        "srun", "--nodes=3", "--ntasks=3", "--overcommit", "--mpi=pmix",
        f"--time={JOB_TIMEOUT_S // 60 + 1}", RANK,  # Slurm ends a hung step
        "iotest", "run", *T05, "--facet-workers=1", f"--report={report}",
        f"{workdir}/vis%d.h5", cwd=workdir, timeout=JOB_TIMEOUT_S + 30)
    check_run(cluster, workdir, proc, report)
    assert remove_containers(prefix) == []
