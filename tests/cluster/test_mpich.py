"""The MPICH build (the `mpich` preset) on three virtual hosts under Slurm
(issue 28). Debian's MPICH speaks Slurm's PMI-2, so srun starts its ranks
itself (`srun --mpi=pmi2`; the cluster's default plugin is Open MPI's
PMIx), and the job scripts `iotest plan --slurm` writes for an MPICH build
say so. Skips where no MPICH build is there."""
import glob
import os
import re
import subprocess

import pytest

from conftest import HOSTS, REPO, T05, load


@pytest.fixture
def iotest_mpich():
    """The MPICH build's iotest: IOTEST_BIN when it is one (ctest --preset
    mpich), else build-mpich/."""
    for path in (os.environ.get("IOTEST_BIN", ""), os.path.join(REPO, "build-mpich/bin/iotest")):
        if path and os.path.exists(path):
            libraries = subprocess.run(["ldd", path], capture_output=True, text=True,
                                       timeout=30).stdout
            if "libmpich" in libraries:
                return os.path.abspath(path)
    pytest.skip("no MPICH build (cmake --preset mpich && cmake --build --preset mpich)")


def srun_pmi2(cluster, binary, tasks, *args, cwd):
    return cluster.exec("srun", "--mpi=pmi2", "--nodes=3", f"--ntasks={tasks}", "--overcommit",
                        binary, *args, check=0, cwd=cwd)


def test_the_mpich_build_runs_on_three_hosts_under_srun(cluster, workdir, iotest_mpich):
    report = os.path.join(workdir, "run.json")
    srun_pmi2(cluster, iotest_mpich, 6, "run", *T05, "--facet-workers=1", f"--report={report}",
              f"{workdir}/vis%d.h5", cwd=workdir)
    r = load(report)
    assert r["environment"]["mpi_version"].startswith("MPICH "), r["environment"]["mpi_version"]
    assert sorted(r["environment"]["hosts"]) == HOSTS
    assert {p["host"] for p in r["pipeline"]["per_rank"] if p["role"] == "streamer"} == set(HOSTS)
    outputs = sorted(glob.glob(f"{workdir}/vis*.h5"))
    assert len(outputs) >= 3, outputs  # one per streamer
    cluster.exec(iotest_mpich, "verify", *outputs, "--nonce", str(r["config"]["nonce"]), check=0)


def test_the_mpich_build_writes_one_shared_file_from_three_hosts(cluster, workdir, iotest_mpich):
    report = os.path.join(workdir, "run.json")
    out = os.path.join(workdir, "vis.h5")
    # Four ranks (srun places 2, 1, 1): a streamer on each host. With six,
    # ten threads spun in MPICH's blocking collectives on this machine's
    # two cores: the file's collective open took 0.8-28 s (25 runs), with
    # four 0.14-1.2 s (15). CI once saw the six-rank job end at 30 s.
    srun_pmi2(cluster, iotest_mpich, 4, "run", *T05, "--facet-workers=1", "--storage=phdf5",
              f"--report={report}", out, cwd=workdir)
    r = load(report)
    assert {p["host"] for p in r["pipeline"]["per_rank"] if p["role"] == "streamer"} == set(HOSTS)
    cluster.exec(iotest_mpich, "verify", "--all", out, check=0)


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_an_mpich_job_script_runs_under_sbatch(cluster, workdir, iotest_mpich, launcher):
    script = subprocess.run(
        [iotest_mpich, "plan", *T05[:5], "--nodes=3", "--ranks-per-node=2",
         "--cores-per-node=2", "--facet-workers=2", "--threads=1", "--slurm",
         f"--launcher={launcher}", f"--binary={iotest_mpich}", "--time-limit=5",
         f"{workdir}/vis%d.h5"], capture_output=True, text=True, check=True, timeout=60).stdout
    # MPICH's own ways: Slurm's PMI-2 under srun; inside the allocation its
    # Hydra mpiexec (which starts its proxies through Slurm), no Open MPI
    # variables.
    if launcher == "srun":
        assert re.search(r"^srun --mpi=pmi2 ", script, re.M), script
    else:
        assert re.search(r"^/\S*mpiexec\S* -n 6 -ppn 2 ", script, re.M), script
    assert "OMPI_" not in script
    report = cluster.sbatch(workdir, script)
    assert sorted(report["environment"]["hosts"]) == HOSTS
    assert report["environment"]["mpi_version"].startswith("MPICH ")
    cluster.verify_published(f"{workdir}/vis*.h5", 4, report)
