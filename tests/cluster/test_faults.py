"""Faults a cluster has (issue 25): a host dying mid-run, the batch
system's time limit, a slow host. Each job is made long by throttling the
hosts' O_DIRECT writes (the block I/O controller), so the fault lands
while it streams."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import (HOSTS, JOB_TIMEOUT_S, T05, TOOL, iotest_binary, load, tool,
                      virtual_cluster)

# 11.5 M visibilities (184 MB) over 5 streamers on 3 hosts: about 3 s on
# this machine unthrottled, minutes at half a MB/s a host. Small degrid
# tasks (8 baselines) and a short chunk queue keep what is in flight at
# the --duration deadline, which still drains through the throttle, small.
LONG = [*T05[:2], "--time=-1800:1800/128/8", "--freq=260e6:300e6/256/16", *T05[4:],
        "--facet-workers=1", "--storage=posix", "--posix.direct", "--visibility-queue=64",
        "--bls-per-task=8"]
SLOW_WRITES = "--write-bps=500000"


def final_named(folder):
    """Files a reader could take for finished outputs: anything but
    .partial (and the job's own logs and scripts)."""
    return [f for f in os.listdir(folder)
            if not f.endswith(".partial") and not f.endswith((".out", ".sh", ".json"))]


@pytest.fixture
def throttled(cluster):
    for h in HOSTS:
        cluster.limit(h, SLOW_WRITES)
    yield cluster
    for h in HOSTS:
        cluster.limit(h, "--clear")


def test_a_host_dies_mid_run():
    # Its own cluster: the dead host does not come back.
    root = tempfile.mkdtemp(prefix="iotest-cluster-dead-host-", dir="/var/tmp")
    try:
        dead_host_run(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def dead_host_run(root):
    with virtual_cluster(root, "--subnet=10.80.0", "--port=16847", "--lifetime=600") as c:
        for h in HOSTS:
            c.limit(h, SLOW_WRITES)
        out = os.path.join(c.shared, "run")
        os.makedirs(out)
        start = time.monotonic()
        job = subprocess.Popen(
            [sys.executable, TOOL,
             "exec", "timeout", "-k", "10", str(JOB_TIMEOUT_S), "srun", "--nodes=3",
             "--ntasks=6", "--overcommit", iotest_binary(), "run", *LONG,
             f"{out}/vis%d.bin"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out,
            env={**os.environ, "IOTEST_CLUSTER_ROOT": root})
        try:
            # Streaming: every streamer has its output open.
            deadline = time.monotonic() + 60
            outputs = f"{out}/*[0-9].partial"  # (not their claims' .lock.partial files)
            while len(glob.glob(outputs)) < 5 and time.monotonic() < deadline:
                time.sleep(0.5)
            assert len(glob.glob(outputs)) == 5, os.listdir(out)
            time.sleep(3)
            tool("kill", "node3", root=root, check=0)
            killed = time.monotonic()
            _, stderr = job.communicate(timeout=90)
            ended = time.monotonic()
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        print(f"a host dies: the job ended {ended - killed:.1f} s after, status "
              f"{job.returncode}: {[l for l in stderr.splitlines() if 'node3' in l][:1]}")
        assert job.returncode != 0
        assert ended - killed < 60, (ended - killed, stderr)
        # One line names the lost host.
        assert any("node3" in line for line in stderr.splitlines()), stderr
        assert final_named(out) == [], os.listdir(out)
        for h in HOSTS:
            assert final_named(os.path.join(root, "hosts", h, "local")) == []
        assert ended - start < JOB_TIMEOUT_S


def plan_script(folder, *extra):
    script = subprocess.run(
        [iotest_binary(), "plan", *LONG[:5], "--nodes=3", "--ranks-per-node=2",
         "--cores-per-node=2", "--facet-workers=1", "--threads=1", "--storage=posix",
         "--posix.direct", "--visibility-queue=64", "--bls-per-task=8", "--slurm", f"--binary={iotest_binary()}",
         "--time-limit=1", *extra, f"{folder}/vis%d.bin"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    path = os.path.join(folder, "job.sh")
    with open(path, "w") as f:
        f.write(script)
    return path, script


def submit(cluster, folder):
    proc = cluster.exec("sbatch", "--wait", "job.sh", cwd=folder, timeout=200)
    job = re.search(r"Submitted batch job (\d+)", proc.stdout).group(1)
    return proc, job


def test_the_time_limit_without_duration_leaves_only_partial_files(throttled, workdir):
    path, script = plan_script(workdir)
    # A script of the user's own, without the plan's --duration.
    with open(path, "w") as f:
        f.write(re.sub(r" --duration=\d+", "", script))
    start = time.monotonic()
    proc, job = submit(throttled, workdir)
    elapsed = time.monotonic() - start
    print(f"time limit without --duration: ended after {elapsed:.1f} s")
    # Slurm's own word (sbatch --wait's status depends on whether the batch
    # shell or srun took the SIGTERM first: once 0).
    state = throttled.exec("scontrol", "show", "job", job, check=0).stdout
    assert "JobState=TIMEOUT" in state, state
    # Slurm checks limits every 30 s or so, sbatch --wait polls its job; the
    # ranks end at the SIGTERM itself (their line says so), not KillWait's
    # SIGKILL.
    assert 60 <= elapsed < 150, elapsed
    log = open(os.path.join(workdir, f"iotest-{job}.out")).read()
    assert "DUE TO TIME LIMIT" in log and "ended by SIGTERM" in log, log
    assert final_named(workdir) == [] and glob.glob(f"{workdir}/*.partial"), os.listdir(workdir)
    assert not os.path.exists(os.path.join(workdir, f"iotest-{job}.json"))


def test_the_plans_duration_ends_the_job_before_its_time_limit(throttled, workdir):
    path, script = plan_script(workdir)
    assert "--duration=35" in script
    start = time.monotonic()
    proc, job = submit(throttled, workdir)
    elapsed = time.monotonic() - start
    print(f"time limit with the plan's --duration: ended after {elapsed:.1f} s")
    assert proc.returncode == 0, open(os.path.join(workdir, f"iotest-{job}.out")).read()
    assert elapsed < 60, elapsed
    report = load(os.path.join(workdir, f"iotest-{job}.json"))
    sw = report["stonewall"]
    assert sw["ended_early"] and 0 < sw["fraction"] < 1
    assert sw["projected_s"] > sw["duration_s"] == 35
    throttled.verify_published(f"{workdir}/vis*.bin", 5, report)


def test_a_slow_host_is_singled_out(cluster, workdir):
    report = os.path.join(workdir, "run.json")
    cluster.limit("node2", "--cpu=0.2")  # a fifth of a core for all of node2
    try:
        cluster.srun(3, 3, "run", *LONG, "--timeline=0.5", f"--report={report}",
                     f"{workdir}/vis%d.bin", check=0, cwd=workdir)
    finally:
        cluster.limit("node2", "--clear")
    r = load(report)
    per_rank = r["pipeline"]["per_rank"]
    # The per-rank table: the slowest rank is node2's streamer.
    assert per_rank[r["pipeline"]["slowest_rank"]]["host"] == "node2", per_rank
    streamers = {p["host"]: p for p in per_rank if p["role"] == "streamer"}
    assert set(streamers) == {"node2", "node3"}
    # The time line: node2's streamer is still busy after node3's is done.
    def last_busy(host):
        rank = next(t for t in r["timeline"]["ranks"] if t["host"] == host and
                    t["role"] == "streamer")
        busy = [i for i, b in enumerate(rank["busy_s"]) if b > 0]
        return busy[-1] if busy else -1
    assert last_busy("node2") > last_busy("node3"), r["timeline"]
