"""The iotest image (containers/Dockerfile, built by containers/build.sh
with podman): it answers --version, runs the pipeline with the image's own
mpirun and verifies what it wrote, runs as its unprivileged user without a
network, saves as an OCI archive for Apptainer, and runs under the host's
mpirun, one container per rank (the hybrid model, containers/podman-rank.sh).

Slow (the image build): not part of `make test`; containers/ci.sh builds
the image and runs these with IOTEST_IMAGE set. Without IOTEST_IMAGE the
image comes from containers/build.sh (an unchanged tree is not rebuilt).
Skips, with the reason, where podman cannot run containers (not root, no
podman)."""
import glob
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from podman_helpers import (BUILD, RANK, REPO, RUN_TIMEOUT_S, T05, new_prefix,  # noqa: E402
                            openmpi_version, podman, podman_problem, remove_containers)
import podman_helpers  # noqa: E402


sys.path.insert(0, os.path.join(REPO, "tests", "cli"))
from schema import load_report as load  # noqa: E402


@pytest.fixture(scope="session")
def image():
    reason = podman_problem()
    if reason:
        pytest.skip(reason)
    return podman_helpers.image()


@pytest.fixture
def outdir(tmp_path):
    """A folder for a run's files, which the container's users may write."""
    os.chmod(tmp_path, 0o777)
    return str(tmp_path)


@pytest.fixture
def prefix(request):
    """This test's container names; whatever is left of them goes after it."""
    p = new_prefix(request.node.name.replace("_", "-")[:20])
    yield p
    remove_containers(p)


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(iotest VERSION (\S+)", f.read()).group(1)


def verify_in_image(image, folder, files, *extra):
    """iotest verify inside the image on files of `folder` (bound at its path)."""
    return podman("run", "--rm", "--network=none", "--user=0:0", "-v", f"{folder}:{folder}",
                  image, "iotest", "verify", *files, *extra)


def test_the_image_answers_version_and_holds_the_installed_tree(image):
    proc = podman("run", "--rm", "--network=none", image, "iotest", "--version", check=0)
    assert project_version() in proc.stdout, proc.stdout
    # The commit it was built from, as the image's label says (the build
    # context has no .git: containers/build.sh passes it).
    revision = podman_helpers.image_revision(image)
    assert f"({revision})" in proc.stdout, (proc.stdout, revision)
    # The runtime stage: the binary, the tools `iotest scale` runs (with
    # scipy), none of iotest's build tools. (Debian's python3-scipy brings
    # g++ through python3-pythran, so a compiler is there all the same.)
    proc = podman("run", "--rm", "--network=none", image, "sh", "-c",
                  "command -v iotest; ls /opt/iotest/share/iotest/tools; "
                  "python3 -c 'import scipy.optimize, numpy' && echo scipy; "
                  "command -v cmake mpicxx ninja || true; "
                  "ls /usr/include/x86_64-linux-gnu/openmpi /usr/include/hdf5 2>/dev/null || true; "
                  "id -un", check=0)
    lines = proc.stdout.split()
    assert lines[0] == "/opt/iotest/bin/iotest" and "usl.py" in lines and "scipy" in lines
    assert lines[-1] == "iotest"  # the unprivileged user by default
    assert lines[lines.index("scipy") + 1] == "iotest", lines  # no cmake, mpicxx, ninja, headers
    labels = json.loads(podman("image", "inspect", "--format", "{{json .Labels}}", image,
                               check=0).stdout)
    assert labels.get("org.opencontainers.image.revision"), labels


def test_the_image_runs_three_ranks_with_its_own_mpirun_and_verifies(image, outdir, prefix):
    # As the brief's user would: root in the container, the output folder
    # bound in, the image's own Open MPI launching the three ranks.
    proc = podman("run", "--rm", "--name", prefix, "--user=0:0", "--shm-size=1g",
                  "-v", f"{outdir}:/work/out", image,
                  "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                  "iotest", *T05, "--report=out/run.json", "out/vis%d.h5")
    assert proc.returncode == 0, proc.stderr
    report = load(os.path.join(outdir, "run.json"))
    assert len(report["pipeline"]["per_rank"]) == 3
    assert report["environment"]["mpi_version"].startswith("Open MPI v4.1"), \
        report["environment"]["mpi_version"]
    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(outdir, "vis*.h5")))
    assert files and not glob.glob(os.path.join(outdir, "*.partial")), os.listdir(outdir)
    proc = podman("run", "--rm", "--name", prefix + "-verify", "--network=none", "--user=0:0",
                  "-v", f"{outdir}:/work/out", image,
                  "iotest", "verify", *[f"out/{f}" for f in files],
                  "--nonce", str(report["config"]["nonce"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_image_runs_as_its_own_user_without_a_network(image, prefix):
    # The default user (not root: no --allow-run-as-root), no network at
    # all, a dry run: the ranks meet through shared memory only.
    proc = podman("run", "--rm", "--name", prefix, "--network=none", "--shm-size=256m", image,
                  "mpirun", "--oversubscribe", "-np", "3", "iotest", *T05)
    assert proc.returncode == 0, proc.stderr


def test_build_sh_saves_an_oci_archive_for_apptainer(image, tmp_path):
    archive = tmp_path / "iotest.oci.tar"
    proc = subprocess.run([BUILD, f"--tag={image}", f"--oci-archive={archive}"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == image  # found, not rebuilt
    assert "apptainer build iotest.sif oci-archive://" in proc.stderr
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        layout = json.load(tar.extractfile("oci-layout"))
    assert {"oci-layout", "index.json"} <= names and layout["imageLayoutVersion"] == "1.0.0"


def test_host_mpirun_starts_one_container_per_rank(image, outdir, prefix):
    host = openmpi_version(["mpirun"])
    if host is None:
        pytest.skip("no Open MPI mpirun on this host")
    inside = openmpi_version([*podman_helpers.PODMAN, "run", "--rm", "--network=none", image,
                              "mpirun"])
    assert inside, "the image's mpirun does not say its version"
    if host.split(".")[0] != inside.split(".")[0]:
        pytest.skip(f"the host's Open MPI {host} and the image's {inside} differ in major version")
    env = {**os.environ, "IOTEST_IMAGE": image, "IOTEST_CONTAINER_PREFIX": prefix,
           "OMP_WAIT_POLICY": "PASSIVE"}
    report = os.path.join(outdir, "run.json")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
           "-x", "IOTEST_IMAGE", "-x", "IOTEST_CONTAINER_PREFIX", RANK,
           "iotest", *T05, f"--report={report}", f"{outdir}/vis%d.h5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env,
                          cwd=outdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = load(report)
    # One MPI job of three ranks, each the image's iotest (its own Open MPI
    # and its own build, named by the image's revision label).
    assert len(r["pipeline"]["per_rank"]) == 3
    assert r["environment"]["mpi_version"].startswith("Open MPI v" + inside), \
        r["environment"]["mpi_version"]
    assert r["environment"]["git_revision"] == podman_helpers.image_revision(image)
    files = sorted(glob.glob(os.path.join(outdir, "vis*.h5")))
    assert files and not glob.glob(os.path.join(outdir, "*.partial"))
    proc = verify_in_image(image, outdir, files, "--nonce", str(r["config"]["nonce"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # podman's --rm removed every rank's container.
    assert remove_containers(prefix) == []


def documented_run():
    """The shell block of docs/containers.md's "Running inside the image"."""
    with open(os.path.join(REPO, "docs", "containers.md")) as f:
        text = f.read()
    section = text.split("## Running inside the image", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_documented_commands_run_as_written(image, tmp_path):
    # docs/containers.md's commands, exactly as written (podman's default
    # network, the image by its documented name), from a folder of the
    # user's: they run the pipeline and verify what it wrote.
    latest = "localhost/iotest:latest"
    ids = [podman("image", "inspect", "--format", "{{.Id}}", name, check=0).stdout.strip()
           for name in (image, latest)]
    if ids[0] != ids[1]:
        pytest.skip(f"{latest} is not the image under test ({image})")
    os.symlink(os.path.join(REPO, "containers"), tmp_path / "containers")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_run()], cwd=tmp_path,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout, proc.stdout
    assert load(str(tmp_path / "out" / "run.json"))["mode"] == "run"
    assert glob.glob(str(tmp_path / "out" / "vis*.h5"))
