"""iotest on a real parallel file system (issue 44): CephFS in the virtual
cluster (tools/cluster up 3 --storage=cephfs), two storage hosts with an
OSD each, replication 2, and a ceph-fuse client on every compute host and
the login side. Writes cross the storage network; files written on some
hosts are read through another client. The tests that break a daemon or a
link run last, in the order that leaves the cluster usable longest (the
killed OSD host does not come back)."""
import glob
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import (HOSTS, JOB_TIMEOUT_S, T05, TOOL, iotest_binary, load, settle_jobs, tool,
                      virtual_cluster)

ROOT = os.environ.get("IOTEST_CEPHFS_TEST_ROOT", "/var/tmp/iotest-cluster-cephfs")
# Its own subnet and port, apart from the suite's folder-backed cluster
# (which may be up at the same time). The storage hosts' links are shaped
# so that a write lasts long enough for a fault to land in it.
UP_ARGS = ["--storage=cephfs", "--subnet=10.82.0", "--port=16867", "--lifetime=1800",
           "--kill-wait=5", "--storage-link-rate=400mbit"]
# 11.5 M visibilities, 184 MB: seconds through the shaped links.
LONG = [*T05[:2], "--time=-1800:1800/128/8", "--freq=260e6:300e6/256/16", *T05[4:],
        "--facet-workers=1", "--bls-per-task=8"]
OUTPUTS = {"posix": "vis%d", "hdf5": "vis%d.h5", "phdf5": "vis.h5", "ms": "vis%d.ms"}


@pytest.fixture(scope="module")
def ceph():
    tag = None
    with virtual_cluster(ROOT, *UP_ARGS) as c:
        with open(os.path.join(ROOT, "state.json")) as f:
            tag = json.load(f)["tag"]
        yield c
    # After down: no process, link, cgroup or mount of it, no Ceph daemon
    # or client of its configuration, no OSD file.
    from test_cluster import kernel_leftovers
    assert kernel_leftovers(ROOT, tag) == []
    conf = os.path.join(ROOT, "ceph", "ceph.conf")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert f"CEPH_CONF={conf}".encode() not in f.read(), f"process {pid} left"
        except OSError:
            pass
    assert not os.path.exists(os.path.join(ROOT, "ceph"))


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(request):
    """Whatever job a test left is cancelled (conftest's does the same for
    the folder-backed cluster)."""
    yield
    if "ceph" not in request.fixturenames:
        return
    settle_jobs(ROOT)


@pytest.fixture
def folder(ceph, request):
    """A fresh folder of CephFS for one test."""
    name = request.node.name.replace("[", "-").replace("]", "")
    path = os.path.join(ceph.shared, name)
    subprocess.run(["rm", "-rf", path], check=True, timeout=120)
    os.makedirs(path)
    return path


def ceph_json(c, *args):
    return json.loads(c.exec("ceph", *args, "--format=json", check=0, timeout=60).stdout)


def test_one_file_system_through_every_client(ceph, folder):
    health = ceph.exec("ceph", "health", check=0, timeout=60).stdout
    assert health.startswith("HEALTH_OK"), health
    path = os.path.join(folder, "written-on-node1.bin")
    ceph.on("node1", "sh", "-c", f"head -c 3000000 /dev/urandom > {path} && sync", check=0)
    sums = {h: ceph.on(h, "sha1sum", path, check=0).stdout.split()[0] for h in HOSTS}
    sums["login"] = ceph.exec("sha1sum", path, check=0).stdout.split()[0]
    assert len(set(sums.values())) == 1, sums
    for h in ("node3",):
        assert "fuse" in ceph.on(h, "stat", "-f", "-c", "%T", folder, check=0).stdout
        mounts = ceph.on(h, "cat", "/proc/self/mountinfo", check=0).stdout
        assert f" {ceph.shared} " in mounts and "fuse.ceph-fuse" in mounts
    assert "fuse" in ceph.exec("stat", "-f", "-c", "%T", folder, check=0).stdout
    # Two OSDs on two storage hosts, the data pool kept twice.
    osds = ceph_json(ceph, "osd", "tree")["nodes"]
    hosts = {n["name"] for n in osds if n["type"] == "host"}
    assert hosts == {"store1", "store2"}
    assert ceph_json(ceph, "osd", "pool", "get", "cephfs_data", "size")["size"] == 2


def observation(backend):
    """T05; for ms, 8 frequency chunks of 4 channels: a MeasurementSet per
    frequency range needs a chunk for each of the run's outputs (the plan's
    4 streamers, or 3 ranks' synthetic run)."""
    return ["--freq=260e6:300e6/32/4" if a.startswith("--freq=") and backend == "ms" else a
            for a in T05]


def plan_script(c, folder, backend, *extra):
    return subprocess.run(
        [iotest_binary(), "plan", *observation(backend)[:5], "--nodes=3", "--ranks-per-node=2",
         "--cores-per-node=2", "--facet-workers=2", "--threads=1", "--slurm",
         f"--binary={iotest_binary()}", "--time-limit=5", f"--storage={backend}", *extra,
         os.path.join(folder, OUTPUTS[backend])],
        capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.mark.parametrize("backend", list(OUTPUTS))
def test_every_back_end_from_three_hosts_read_through_another_client(ceph, folder, backend):
    report = ceph.sbatch(folder, plan_script(ceph, folder, backend))
    writers = {p["host"] for p in report["pipeline"]["per_rank"] if p["role"] == "streamer"}
    assert len(writers) >= 2, writers
    fs = report["environment"]["output_file_system"]
    assert fs["type"] == "fuse.ceph-fuse", fs
    pattern = os.path.join(folder, OUTPUTS[backend].replace("%d", "[0-9]"))
    files = sorted(glob.glob(pattern))
    assert files and not glob.glob(f"{folder}/*.partial"), os.listdir(folder)
    nonce = str(report["config"]["nonce"])
    # The login side's client, then node3's: neither wrote alone. Every
    # chunk of every file, but for ms: casacore reads a MeasurementSet
    # through ceph-fuse in many small reads, and every value of four took
    # 100 s of the suite; its sampled check still reads each file through
    # this client (tests/cli/test_ms.py checks every value on one host).
    every = [] if backend == "ms" else ["--all"]
    ceph.exec(iotest_binary(), "verify", *every, "--nonce", nonce, *files, check=0)
    # Two more sets from the three hosts, read through node3's client: the
    # imaging direction needs a whole observation (the plan's script
    # stonewalls, --duration, so its files are refused there), and
    # `read --check` checks the synthetic pattern.
    on_node3 = ["srun", "--nodes=1", "--nodelist=node3", "--overcommit", "--kill-on-bad-exit=1"]
    for kind in (["--synthetic-vis"], [] if backend != "posix" else None):
        if kind is None:  # an image needs the field's files (UVH5, MS)
            continue
        sub = os.path.join(folder, "synthetic" if kind else "whole")
        os.makedirs(sub)
        ceph.srun(3, 3, "run", *kind, *observation(backend), f"--storage={backend}",
                  os.path.join(sub, OUTPUTS[backend]), check=0, cwd=sub)
        written = sorted(glob.glob(os.path.join(sub, OUTPUTS[backend].replace("%d", "[0-9]"))))
        if kind:
            ceph.exec(*on_node3, "--ntasks=2", iotest_binary(), "read", "--check", *written,
                      check=0)
        else:
            ceph.exec(*on_node3, "--ntasks=3", iotest_binary(), "run", *observation(backend),
                      "--no-progress",
                      "--direction=image", *written, check=0)


def test_the_report_names_ceph_its_pool_and_the_layout_set(ceph, folder):
    layout = "object_size=8M,stripe_unit=1M,stripe_count=4"
    report = ceph.sbatch(folder, plan_script(ceph, folder, "hdf5", f"--file-layout={layout}"))
    fs = report["environment"]["output_file_system"]
    assert fs["name"] == "ceph" and fs["client"] == "fuse", fs
    assert fs["layout"] == {"object_size": 8 << 20, "stripe_unit": 1 << 20, "stripe_count": 4,
                            "pool": "cephfs_data"}, fs
    assert fs["replication"] == 2, fs
    for f in glob.glob(os.path.join(folder, "vis[0-9].h5")):
        got = os.getxattr(f, "ceph.file.layout").decode()
        assert "stripe_unit=1048576 stripe_count=4 object_size=8388608" in got, got


def srun_run(c, host, folder, *args, seed=1):
    return c.exec("srun", "--nodes=1", f"--nodelist={host}", "--ntasks=3", "--overcommit",
                  "--kill-on-bad-exit=1", iotest_binary(), "run", *args, f"--seed={seed}",
                  cwd=folder)


def test_two_jobs_through_two_clients_into_one_output_pattern(ceph, folder):
    # The claim on an output (O_EXCL, an open-file-description lock, a
    # rename) across ceph-fuse clients: one job gets through, the other is
    # refused before its work (exit 2) or finds the names taken (exit 1).
    out = os.path.join(folder, "out%d.h5")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda hs: srun_run(ceph, hs[0], folder, *LONG, out, seed=hs[1]),
                                [("node1", 1), ("node2", 2)]))
    codes = sorted(p.returncode for p in results)
    assert codes in ([0, 1], [0, 2]), [(p.returncode, p.stderr[-2000:]) for p in results]
    winner = [s for s, p in zip((1, 2), results) if p.returncode == 0][0]
    files = sorted(glob.glob(os.path.join(folder, "out[0-9].h5")))
    ceph.exec(iotest_binary(), "verify", f"--seed={winner}", *files, check=0)


def final_named(folder):
    return [f for f in os.listdir(folder)
            if not f.endswith(".partial") and not f.endswith((".out", ".sh", ".json"))]


@pytest.mark.parametrize("backend", list(OUTPUTS))
def test_a_full_quota_from_three_hosts_ends_the_run_naming_it(ceph, folder, backend):
    # Issue 56: ms from three hosts into a quota ended with status 1 and
    # no line (casacore's tables write as they close, and a destructor's
    # exception ended the rank in std::terminate).
    os.setxattr(folder, "ceph.quota.max_bytes", str(20 << 20).encode())
    # Quotas are enforced by the clients, from what the MDS tells them:
    # the clients learn the new one before the run starts.
    time.sleep(5)
    proc = ceph.srun(3, 6, "run", *LONG, f"--storage={backend}",
                     os.path.join(folder, OUTPUTS[backend]), cwd=folder)
    assert proc.returncode != 0
    errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert errors and all(re.search(r"Disk quota exceeded|No space|disk full", e) for e in errors), \
        proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr, proc.stderr[-3000:]
    assert final_named(folder) == [], os.listdir(folder)


def background_job(c, folder, host_count, *args):
    """An srun in the background, its output in files."""
    return background_srun(c, folder, [f"--nodes={host_count}", f"--ntasks={host_count * 2}"],
                           "run", *args)


def background_srun(c, folder, placement, *args):
    """`srun PLACEMENT iotest ARGS` in the background from the login side,
    its output in FOLDER/job.out (written by the login side's client)."""
    out = open(os.path.join(folder, "job.out"), "w")
    env = dict(os.environ, IOTEST_CLUSTER_ROOT=c.root)
    return subprocess.Popen(
        [sys.executable, TOOL, "exec", "timeout", "-k", "10", str(JOB_TIMEOUT_S), "srun",
         *placement, "--overcommit", "--kill-on-bad-exit=1", iotest_binary(), *args],
        stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True)


def stall_named_within(folder, host, bound_s, slack_s=15):
    """The job's stall line naming `host`, within the bound and a few
    seconds; the seconds it took."""
    start = time.monotonic()
    text, line = "", None
    while line is None and time.monotonic() - start < bound_s + slack_s:
        time.sleep(0.5)
        text = open(os.path.join(folder, "job.out")).read()
        line = re.search(r"iotest: error: storage made no progress.*", text)
    assert line and f" on {host}: " in line.group(0), text[-3000:]
    return time.monotonic() - start, line.group(0)


def wait_for_partials(folder, min_bytes, timeout_s=120):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        sizes = [os.path.getsize(p) for p in glob.glob(f"{folder}/*.partial")
                 if os.path.isfile(p)]
        if sum(sizes) >= min_bytes:
            return
        time.sleep(0.5)
    raise AssertionError(f"no output grew to {min_bytes} B in {timeout_s} s: {os.listdir(folder)}")


def finished_or_partial(c, folder, proc, report, timeout_s):
    """The run either finished and verifies, or ended non-zero leaving only
    .partial files: nothing half-written looks finished."""
    rc = proc.wait(timeout=timeout_s)
    log = open(os.path.join(folder, "job.out")).read()
    if rc == 0:
        files = sorted(glob.glob(os.path.join(folder, "vis[0-9].h5")))
        c.exec(iotest_binary(), "verify", "--nonce", str(load(report)["config"]["nonce"]),
               *files, check=0)
    else:
        assert final_named(folder) == [], (os.listdir(folder), log[-3000:])
    return rc, log


def fault_during_a_run(c, folder, what, fault):
    """A 3-host hdf5 run, `fault()` once it writes; it finishes and
    verifies, or ends non-zero in bounded time with only .partial files."""
    report = os.path.join(folder, "run.json")
    proc = background_job(c, folder, 3, *LONG, f"--report={report}",
                          os.path.join(folder, "vis%d.h5"))
    try:
        wait_for_partials(folder, 1 << 20)
        fault()
        start = time.monotonic()
        rc, _ = finished_or_partial(c, folder, proc, report, JOB_TIMEOUT_S)
        print(f"{what}: the run ended with {rc}, {time.monotonic() - start:.0f} s after")
    finally:
        proc.kill()


def wait_healthy(c, timeout_s=120):
    """The file system whole again for what follows."""
    end = time.monotonic() + timeout_s
    while not c.exec("ceph", "health", check=0, timeout=60).stdout.startswith("HEALTH_OK"):
        assert time.monotonic() < end, c.exec("ceph", "health", "detail", timeout=60).stdout
        time.sleep(2)


def test_the_metadata_server_killed_and_restarted_during_a_run(ceph, folder):
    fault_during_a_run(ceph, folder, "MDS restarted", lambda: tool(
        "restart", "mds.a", "--down-for=5", root=ROOT, check=0))
    wait_healthy(ceph)


def test_a_compute_hosts_storage_link_cut_ends_the_job_naming_it(ceph, folder):
    bound_s = 15
    proc = background_job(ceph, folder, 3, *LONG, f"--storage-stall-timeout={bound_s}",
                          os.path.join(folder, "vis%d.h5"))
    cut = False
    try:
        wait_for_partials(folder, 1 << 20)
        tool("cut", "node2", "storage", root=ROOT, check=0)
        cut = True
        seconds, line = stall_named_within(folder, "node2", bound_s, slack_s=60)
        print(f"stall named {seconds:.0f} s after the cut: {line}")
    finally:
        # The write blocked in node2's kernel returns once its client can
        # reach the storage again; only then can its process end.
        if cut:
            tool("mend", "node2", "storage", root=ROOT, check=0)
    assert proc.wait(timeout=JOB_TIMEOUT_S) != 0
    assert final_named(folder) == [], os.listdir(folder)


@pytest.mark.parametrize("command", ["verify", "image"])
def test_reading_through_a_cut_storage_link_names_the_host_and_file(ceph, folder, command):
    # Issue 56: verify and the imaging direction through such a client
    # printed nothing and did not end. node1's client has not seen the
    # files (node2 and node3 wrote them); its link is cut before it reads.
    ceph.srun(3, 3, "run", *T05, os.path.join(folder, "vis%d.h5"), check=0, cwd=folder)
    files = sorted(glob.glob(os.path.join(folder, "vis[0-9].h5")))
    assert len(files) == 2, os.listdir(folder)
    # The writing job over, its steps on node1 too: one still completing
    # in the folder would hang there once the link is cut, and the next
    # job would wait for node1.
    settle_jobs(ROOT)
    bound_s = 10
    on_node1 = ["--nodes=1", "--nodelist=node1", "--chdir=/", f"--ntasks={1 if command == 'verify' else 3}"]
    args = (["verify", "--all"] if command == "verify" else
            ["run", "--direction=image", *T05[:1], "--no-progress"])
    tool("cut", "node1", "storage", root=ROOT, check=0)
    try:
        proc = background_srun(ceph, folder, on_node1, *args,
                               f"--storage-stall-timeout={bound_s}", *files)
        seconds, line = stall_named_within(folder, "node1", bound_s)
        assert re.search(r"(opening|reading) \S+/vis[01]\.h5 ", line), line
        print(f"{command}: named {seconds:.0f} s after the start: {line}")
    finally:
        # The call blocked in node1's kernel returns once its client can
        # reach the storage again; only then can the process end.
        tool("mend", "node1", "storage", root=ROOT, check=0)
    assert proc.wait(timeout=JOB_TIMEOUT_S) != 0


def test_one_shared_file_through_three_clients_survives_a_metadata_server_restart(ceph, folder):
    # Issue 56: phdf5's close waited for its slowest writer at a barrier,
    # counted as a stalled call; with the MDS down 10 s it passed the bound
    # and the job ended, leaving OMPIO's lock file beside the output. 32 KiB
    # chunks: Ceph's clients write a shared file synchronously (no Fb cap),
    # and LONG's 2 KiB chunks take minutes (docs/storage.md).
    obs = [a.replace("/128/8", "/128/32").replace("/256/16", "/256/64") for a in LONG]
    report = os.path.join(folder, "run.json")
    proc = background_job(ceph, folder, 3, *obs, "--storage=phdf5", "--storage-stall-timeout=30",
                          f"--report={report}", os.path.join(folder, "vis.h5"))
    try:
        wait_for_partials(folder, 1 << 20)
        tool("restart", "mds.a", "--down-for=10", root=ROOT, check=0)
        rc = proc.wait(timeout=JOB_TIMEOUT_S)
    finally:
        proc.kill()
    log = open(os.path.join(folder, "job.out")).read()
    assert rc == 0, log[-3000:]
    assert sorted(f for f in os.listdir(folder) if f.startswith("vis")) == ["vis.h5"], \
        os.listdir(folder)
    ceph.exec(iotest_binary(), "verify", "--nonce", str(load(report)["config"]["nonce"]),
              os.path.join(folder, "vis.h5"), check=0)
    wait_healthy(ceph)


def test_an_osd_host_killed_during_a_write(ceph, folder):
    # Last: store2 does not come back. Replication 2 with min_size 1: the
    # run goes on with one copy, or ends in bounded time, nothing finished-
    # looking left.
    fault_during_a_run(ceph, folder, "OSD host killed",
                       lambda: tool("kill", "store2", root=ROOT, check=0))
    status = ceph_json(ceph, "osd", "stat")
    assert status["num_up_osds"] == 1, status
