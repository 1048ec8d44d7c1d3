"""The virtual cluster (tools/cluster) for the cluster tests: one cluster of
three hosts for the whole session, brought down at its end whatever
happened. Where it cannot run (not root, no namespaces, Slurm or munge
missing) every test skips with tools/cluster's own one-line reason."""
import contextlib
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(REPO, "tools", "cluster")
# Apart from a user's cluster (/var/tmp/iotest-cluster, 10.77.0.0/24): its
# own root, subnet and controller port.
ROOT = os.environ.get("IOTEST_CLUSTER_TEST_ROOT", "/var/tmp/iotest-cluster-test")
UP_ARGS = ["--subnet=10.78.0", "--port=16827", "--lifetime=1800", "--kill-wait=5"]
HOSTS = ["node1", "node2", "node3"]
# Every job is bounded: a hang fails its test instead of CI.
JOB_TIMEOUT_S = 240
# A small observation every host can degrid in seconds on two shared cores.
T05 = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--no-progress", "--threads=1"]


def iotest_binary():
    return os.path.abspath(os.environ.get("IOTEST_BIN", os.path.join(REPO, "build/bin/iotest")))


def tool(*args, root=ROOT, timeout=120, check=None, **kw):
    """tools/cluster ARGS, its output in files (not pipes: a process it left
    behind could hold a pipe open). Past `timeout` its process group is
    killed and the test fails with what it printed and what the cluster
    was running then."""
    env = {**os.environ, "IOTEST_CLUSTER_ROOT": root}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, TOOL, *args], stdout=out, stderr=err, text=True,
                                env=env, start_new_session=True, **kw)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            state = cluster_state(root)  # before the kill, which may end the ranks
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.seek(0), err.seek(0)
            raise AssertionError(f"{args} did not end in {timeout} s\nstdout: {out.read()[-4000:]}"
                                 f"\nstderr: {err.read()[-4000:]}\n{state}\n"
                                 f"{slurm_log_tails(root)}") from None
        out.seek(0), err.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    if check is not None:
        # A string, not a tuple: pytest shortens a tuple's repr, and the
        # middle of what a failed job printed is what says why.
        assert done.returncode == check, (f"{args} exited {done.returncode}, not {check}\n"
                                          f"stdout: {done.stdout[-6000:]}\n"
                                          f"stderr: {done.stderr[-6000:]}\n"
                                          f"{slurm_log_tails(root)}")
    return done


def slurm_log_tails(root, lines=15):
    """The last lines of Slurm's logs: why a step was ended (a rank's
    abort, a host thought dead) is there, and a CI machine keeps nothing."""
    tails = []
    for log in sorted(glob.glob(os.path.join(root, "log", "slurm*.log"))):
        with open(log, errors="replace") as f:
            tail = f.readlines()[-lines:]
        tails.append(f"{os.path.basename(log)}:\n" + "".join(tail))
    return "\n".join(tails)


def cluster_state(root):
    """What a hung job was doing: the cluster's jobs and steps, and every
    iotest, srun and slurmstepd process with its state and CPU time."""
    env = {**os.environ, "IOTEST_CLUSTER_ROOT": root}
    lines = []
    for cmd in (["squeue", "-h", "-o", "%i %T %M %N %j"], ["squeue", "-h", "--steps"]):
        p = subprocess.run([sys.executable, TOOL, "exec", "timeout", "10", *cmd],
                           capture_output=True, text=True, env=env, timeout=30)
        lines.append(f"{' '.join(cmd)}: {p.stdout.strip()} {p.stderr.strip()}")
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,stat,wchan:24,time,etime,args"],
                        capture_output=True, text=True, timeout=30).stdout.splitlines()
    lines += [ps[0]] + [l for l in ps[1:] if re.search(r"iotest |srun|slurmstepd", l)]
    # Where each rank is, where gdb is installed (a hang's first question).
    if shutil.which("gdb"):
        for l in ps[1:]:
            pid, *_, command = l.split(None, 6)
            if command.split()[0].endswith("/iotest"):
                bt = subprocess.run(["gdb", "-p", pid, "-batch", "-ex", "thread apply all bt 40"],
                                    capture_output=True, text=True, timeout=60).stdout
                # Each thread's top frames, and every frame of iotest, HDF5 or MPI.
                kept = [b for b in bt.splitlines() if b.startswith("Thread") or
                        re.match(r"#[0-2] ", b) or re.search(r"iotest::|H5|MPI_|PMPI_", b)]
                lines += [f"rank process {pid}:"] + kept[:150]
    return "\n".join(lines)


class Cluster:
    def __init__(self, root, hosts=HOSTS):
        self.root = root
        self.shared = os.path.join(root, "shared")
        self.local = os.path.join(root, "local")  # each host's own, at this path
        self.hosts = hosts

    def host_local(self, host):
        """A host's node-local directory, seen from the login side."""
        return os.path.join(self.root, "hosts", host, "local")

    def exec(self, *cmd, timeout=JOB_TIMEOUT_S, check=None, cwd=None):
        """A command on the login side (sbatch, srun, salloc). Past
        `timeout` the test fails with the cluster's state; `timeout`, 30 s
        later, is the backstop should the test itself be gone."""
        return tool("exec", "timeout", "-k", "10", str(timeout + 30), *cmd, timeout=timeout,
                    check=check, cwd=cwd or self.shared, root=self.root)

    def on(self, host, *cmd, timeout=JOB_TIMEOUT_S, check=None):
        return tool("on", host, "timeout", "-k", "10", str(timeout + 30), *cmd,
                    timeout=timeout, check=check, root=self.root)

    def verify_published(self, pattern, count, report):
        """`count` outputs under their final names, none left .partial, and
        `iotest verify` passes on them as the run's (its nonce)."""
        outputs = sorted(glob.glob(pattern))
        folder = os.path.dirname(pattern)
        assert len(outputs) == count and not glob.glob(f"{folder}/*.partial"), outputs
        self.exec(iotest_binary(), "verify", *outputs, "--nonce", str(report["config"]["nonce"]),
                  check=0)

    def limit(self, host, *args):
        return tool("limit", host, *args, root=self.root, check=0)

    def sbatch(self, workdir, script):
        """Runs a job script to its end from `workdir`, and returns the
        report its run wrote (iotest-JOBID.json there). Followed here, a
        look every half second, not by `sbatch --wait`, whose looks grow 2,
        4, 8, 16, 32 s apart: a 12 s job took 42 s to be seen ending."""
        with open(os.path.join(workdir, "job.sh"), "w") as f:
            f.write(script)
        proc = self.exec("sbatch", "--parsable", "job.sh", cwd=workdir, check=0)
        job = proc.stdout.strip().split(";")[0]
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while True:
            show = self.exec("scontrol", "show", "job", "--oneliner", job, timeout=30).stdout
            state = re.search(r"JobState=(\S+)", show)
            assert state, f"job {job} is not known to Slurm: {show}"
            if state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                break
            assert time.monotonic() < deadline, show
            time.sleep(0.5)
        assert state.group(1) == "COMPLETED" and "ExitCode=0:0" in show, show
        return load(os.path.join(workdir, f"iotest-{job}.json"))

    def srun(self, nodes, tasks, *args, check=None, cwd=None, timeout=JOB_TIMEOUT_S):
        """iotest across hosts, launched by Slurm (PMIx), as on a cluster."""
        return self.exec("srun", f"--nodes={nodes}", f"--ntasks={tasks}", "--overcommit",
                         "--kill-on-bad-exit=1",
                         iotest_binary(), *args, check=check, cwd=cwd, timeout=timeout)


@contextlib.contextmanager
def virtual_cluster(root, *up_args, hosts=3):
    """`hosts` hosts up for the duration of the block, down after it
    whatever happened; skips where tools/cluster cannot run, with its
    reason."""
    if os.geteuid() != 0:
        pytest.skip("the virtual cluster needs root (network namespaces, a bridge, cgroups)")
    proc = tool("up", str(hosts), *up_args, root=root, timeout=180)
    if proc.returncode == 2:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    try:
        assert proc.returncode == 0, proc.stderr
        yield Cluster(root, [f"node{i}" for i in range(1, hosts + 1)])
    finally:
        down = tool("down", root=root, timeout=120)
        assert down.returncode == 0, down.stderr


@pytest.fixture(scope="session")
def cluster():
    with virtual_cluster(ROOT, *UP_ARGS) as c:
        yield c


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(request):
    """After a test on the shared cluster, whatever it left (a job whose
    srun was killed at its timeout keeps its ranks) is cancelled and waited
    for: a hung job's spinning ranks would slow every later test. The jobs
    are this test's: the cluster is the session's own."""
    yield
    if not {"cluster", "throttled"} & set(request.fixturenames):
        return
    settle_jobs(ROOT)


# Slurm's UnkillableStepTimeout (60 s), the completing step's clean-up and
# a margin: past it, a job left is a defect of its own.
SETTLE_S = 150


def settle_jobs(root):
    """Cancels every job of the cluster at `root` and waits for the queue
    to empty; then gives back a host that Slurm drained meanwhile because
    a rank outlived SIGKILL ("Kill task failed": a rank the kernel held in
    a file system's request, which ended later). So one test's hang fails
    that test and not the tests after it; a job still there fails it."""
    def queued():
        return tool("exec", "squeue", "-h", "-o", "%i", root=root, timeout=30).stdout.split()

    left = queued()
    if left:
        tool("exec", "scancel", "--full", "--signal=KILL", *left, root=root, timeout=30)
    deadline = time.monotonic() + SETTLE_S
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = queued()
    reasons = tool("exec", "sinfo", "-h", "-R", "-o", "%N|%E", root=root, timeout=30).stdout
    for line in reasons.splitlines():
        hosts, _, reason = line.partition("|")
        if "Kill task failed" in reason:
            tool("exec", "scontrol", "update", f"nodename={hosts}", "state=resume", root=root,
                 timeout=30)
    if left:
        pytest.fail(f"jobs {left} still there {SETTLE_S} s after scancel")


@pytest.fixture
def workdir(cluster, request):
    """A fresh folder of the shared file system for one test."""
    # Named after the test, without a parametrised test's brackets (glob's).
    name = request.node.name.replace("[", "-").replace("]", "")
    path = os.path.join(cluster.shared, name)
    subprocess.run(["rm", "-rf", path], check=True)
    os.makedirs(path)
    return path


def load(path):
    sys.path.insert(0, os.path.join(REPO, "tests", "cli"))
    from schema import load_report
    return load_report(path)


def pytest_terminal_summary(terminalreporter):
    """One line CI greps: how many cluster tests ran, and why any skipped."""
    stats = terminalreporter.stats
    ran = len(stats.get("passed", [])) + len(stats.get("failed", []))
    skipped = stats.get("skipped", [])
    reasons = sorted({str(r.longrepr[2]) for r in skipped if isinstance(r.longrepr, tuple)})
    terminalreporter.write_line(
        f"cluster tests: {ran} ran, {len(stats.get('failed', []))} failed, {len(skipped)} skipped"
        + (f" ({'; '.join(reasons)})" if reasons else ""))
