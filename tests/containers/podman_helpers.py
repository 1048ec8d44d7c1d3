"""What the container tests share (tests/containers and
tests/cluster/test_container.py): podman as the tests call it, the image
(IOTEST_IMAGE, else built by containers/build.sh, which skips an image
already built from this tree), and removing by name the containers a test
started. A module of its own name, not a conftest, so that it can be
imported next to tests/cluster's conftest."""
import os
import shutil
import subprocess
import uuid

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(REPO, "containers", "build.sh")
RANK = os.path.join(REPO, "containers", "podman-rank.sh")
# podman as the container scripts call it: IOTEST_PODMAN_ARGS, and this
# machine's runtime and limits where podman's defaults fail.
PODMAN = [os.path.join(REPO, "containers", "podman.sh")]
# A cold build downloads the compilers and compiles iotest on the machine's
# cores; everything else is bounded much tighter.
BUILD_TIMEOUT_S = 3600
RUN_TIMEOUT_S = 300
# The small observation of the cluster tests: seconds on two shared cores.
T05 = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--no-progress", "--threads=1"]


def podman_problem():
    """Why podman cannot run containers here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "the container tests need root (podman's root storage, host namespaces)"
    if shutil.which("podman") is None:
        return "podman not found (tools/install-deps.sh --containers installs it)"
    try:
        proc = subprocess.run([*PODMAN, "info", "--format", "{{.Store.GraphDriverName}}"],
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "podman info did not answer in 120 s"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        return f"podman does not work here: {lines[-1]}"
    return None


def podman(*args, timeout=RUN_TIMEOUT_S, check=None, **kw):
    proc = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout,
                          **kw)
    if check is not None:
        assert proc.returncode == check, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def image():
    """The image under test: IOTEST_IMAGE (which must exist), else the one
    containers/build.sh makes (or finds) for this tree."""
    name = os.environ.get("IOTEST_IMAGE")
    if name:
        assert podman("image", "exists", name).returncode == 0, \
            f"IOTEST_IMAGE={name}: no such image (containers/build.sh builds it)"
        return name
    proc = subprocess.run([BUILD, "--quiet"], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"containers/build.sh failed:\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def image_revision(image):
    """The commit an image was built from: its label, which containers/build.sh
    also passes to the build (IOTEST_REVISION), so iotest reports it."""
    proc = podman("image", "inspect", "--format",
                  '{{index .Labels "org.opencontainers.image.revision"}}', image, check=0)
    revision = proc.stdout.strip()
    assert revision and revision != "unknown", proc.stdout
    return revision


def new_prefix(what):
    """A container name prefix no other test or run uses."""
    return f"iotest-test-{what}-{uuid.uuid4().hex[:8]}"


def remove_containers(prefix):
    """podman rm -f of this test's containers, by name: those a launcher
    left behind when it killed podman before podman's --rm did its work."""
    proc = podman("ps", "-a", "--filter", f"name=^{prefix}", "--format", "{{.Names}}",
                  timeout=60)
    names = [n for n in proc.stdout.split() if n.startswith(prefix)]
    if names:
        podman("rm", "-f", "-t", "0", *names, timeout=120)
    return names


def openmpi_version(cmd, **kw):
    """'4.1.4' from `mpirun --version` (run by cmd, a list), or None."""
    try:
        proc = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60,
                              **kw)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not first or "Open MPI" not in first[0]:
        return None
    return first[0].split()[-1]
