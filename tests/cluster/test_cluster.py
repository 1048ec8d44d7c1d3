"""iotest on a cluster (issue 25): a real Slurm on three virtual hosts
(tools/cluster), each a network namespace with its own hostname, address,
/dev/shm and node-local directory. What only a cluster exercises: roles
placed by node, job scripts under sbatch, %h outputs, a shared file written
from several hosts, TCP between hosts, writer ranks on another host, srun
scaling studies, and two jobs on two hosts writing one shared folder."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import (HOSTS, JOB_TIMEOUT_S, ROOT, T05, TOOL, iotest_binary, load, tool)


def roles_by_host(report):
    """{host: {role: ranks}} from a run report's per-rank table."""
    out = {}
    for r in report["pipeline"]["per_rank"]:
        roles = out.setdefault(r["host"], {})
        roles[r["role"]] = roles.get(r["role"], 0) + 1
    return out


# ---- the tool itself ---------------------------------------------------------


def kernel_leftovers(root, tag):
    """What a cluster at `root` (its names in the kernel carry `tag`) could
    leave: its links, cgroups, processes in its cgroups, mounts of its
    folders."""
    found = []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [l.split(":")[1].strip() for l in links.splitlines() if tag in l]
    found += glob.glob(f"/sys/fs/cgroup/*/iotest-cluster-{tag}")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                if tag in f.read():
                    found.append(f"process {pid}")
            with open(f"/proc/{pid}/mountinfo") as f:
                if root + "/" in f.read():
                    found.append(f"mounts of process {pid}")
        except OSError:
            pass
    return found


def running(pid):
    """Alive and not a zombie (an exited process its new parent, init, has
    not reaped yet holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_up_then_down_leaves_no_namespace_process_link_mount_or_cgroup():
    if os.geteuid() != 0:
        pytest.skip("the virtual cluster needs root")
    root = tempfile.mkdtemp(prefix="iotest-cluster-updown-", dir="/var/tmp")
    up = tool("up", "3", "--subnet=10.79.0", "--port=16837", "--lifetime=300", root=root,
              timeout=180)
    if up.returncode == 2:
        pytest.skip(up.stderr.strip().splitlines()[-1])
    tag = None  # from the cluster's state, once up
    try:
        assert up.returncode == 0, up.stderr
        with open(os.path.join(root, "state.json")) as f:
            state = json.load(f)
        holders, tag = list(state["holders"].values()), state["tag"]
        assert len(holders) == 3 and kernel_leftovers(root, tag)  # it was there
        # Each host is its own: hostname, address, node-local folder.
        for k, host in enumerate(HOSTS, 1):
            p = tool("on", host, "sh", "-c", "hostname; ip -4 -o addr show eth0; "
                     f"echo {host} > {root}/local/mine", root=root, check=0)
            assert p.stdout.startswith(host + "\n") and f"10.79.0.{k}/24" in p.stdout
            with open(os.path.join(root, "hosts", host, "local", "mine")) as f:
                assert f.read() == host + "\n"
        sinfo = tool("exec", "sinfo", "-h", "-o", "%D %T", root=root, check=0)
        assert sinfo.stdout.split() == ["3", "idle"]
    finally:
        down = tool("down", root=root, timeout=120)
        leftovers = kernel_leftovers(root, tag) if tag else []
        shutil.rmtree(root, ignore_errors=True)
    assert down.returncode == 0, down.stderr
    assert leftovers == []
    assert not any(running(p) for p in holders)
    # A second down finds nothing to do, and says so without failing.
    assert tool("down", root=root).returncode == 0


def test_it_refuses_without_root_in_one_line():
    # A copy anyone may read and run, for a user who is not root.
    folder = tempfile.mkdtemp(prefix="iotest-cluster-tool-")
    try:
        copy = os.path.join(folder, "cluster")
        shutil.copy(TOOL, copy)
        for part in glob.glob(os.path.join(os.path.dirname(TOOL), "cluster_*.py")):
            shutil.copy(part, folder)  # its modules: cluster_cephfs.py, cluster_gateway.py
        os.chmod(folder, 0o755)
        os.chmod(copy, 0o755)
        if os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                   "/usr/bin/python3", copy, "up", "3"]
        else:
            cmd = [sys.executable, copy, "up", "3"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(folder)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs root" in lines[0], proc.stderr


def test_unknown_commands_and_hosts_are_refused(cluster):
    assert tool("reboot").returncode == 2
    proc = tool("on", "node9", "hostname")
    assert proc.returncode == 2 and "node9" in proc.stderr and "node1" in proc.stderr
    proc = tool("up", "3", "--link-rate=fast", root="/var/tmp/iotest-cluster-nonesuch")
    assert proc.returncode == 2 and "--link-rate" in proc.stderr
    for args, named in [(["--storage=nfs"], "--storage"),
                        (["--storage=cephfs", "--replication=3"], "--replication"),
                        (["--storage-hosts=3"], "--storage=cephfs")]:
        proc = tool("up", "3", *args, root="/var/tmp/iotest-cluster-nonesuch")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and named in lines[0], proc.stderr
    # The folder-backed cluster has no storage link and no Ceph daemon.
    for args, named in [(["cut", "node1", "storage"], "no storage link"),
                        (["restart", "mds.a"], "--storage=cephfs"),
                        (["cut", "node1", "disk"], "storage or network")]:
        proc = tool(*args)
        assert proc.returncode == 2 and named in proc.stderr, proc.stderr


# ---- jobs --------------------------------------------------------------------


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_a_plan_slurm_job_script_runs_under_sbatch_as_planned(cluster, workdir, launcher):
    plan = os.path.join(workdir, "plan.json")
    script = subprocess.run(
        [iotest_binary(), "plan", *T05[:5], "--nodes=3", "--ranks-per-node=2",
         "--cores-per-node=2", "--facet-workers=2", "--threads=1", "--slurm",
         f"--launcher={launcher}",
         f"--binary={iotest_binary()}", "--time-limit=5", f"{workdir}/vis%d.h5",
         f"--report={plan}"], capture_output=True, text=True, check=True, timeout=60).stdout
    assert re.search(rf"^\s*{launcher} ", script, re.M)
    report = cluster.sbatch(workdir, script)
    assert sorted(report["environment"]["hosts"]) == HOSTS
    # The plan's layout, node by node, is what ran: node j is the host of
    # rank j (ranks are dealt over the nodes), and its roles are the plan's.
    advice = load(plan)["advice"]
    nodes = [g for g in advice["layout"] for _ in range(g["node_count"])]
    per_rank = report["pipeline"]["per_rank"]
    host_of_node = [per_rank[j]["host"] for j in range(3)]
    assert sorted(host_of_node) == HOSTS
    by_host = roles_by_host(report)
    for j, g in enumerate(nodes):
        assert by_host[host_of_node[j]] == {
            role: g[key] for role, key in [("producer", "producers"), ("streamer", "streamers")]
            if g[key]}, (j, by_host)
    # The producers are spread, one a node, as --map-by node places them.
    producer_hosts = [r["host"] for r in per_rank if r["role"] == "producer"]
    assert len(set(producer_hosts)) == 2
    cluster.verify_published(f"{workdir}/vis*.h5", 4, report)


# A job's time limit from the prediction (issue 59): calibrated on one host,
# planned on three without --time-limit, run under sbatch within it, whole.
def test_a_time_limit_from_the_prediction_holds_its_job(cluster, workdir):
    calibration = os.path.join(workdir, "node.json")
    cluster.srun(1, 2, *T05, "--facet-workers=1", f"{workdir}/calibration%d.h5",
                 f"--report={calibration}", check=0)
    plan = os.path.join(workdir, "plan.json")
    script = subprocess.run(
        [iotest_binary(), "plan", *T05[:5], "--nodes=3", "--ranks-per-node=1",
         "--cores-per-node=2", "--facet-workers=1", "--threads=1", "--slurm",
         f"--binary={iotest_binary()}", f"--calibration={calibration}", "--link-rate=1Gbit",
         f"{workdir}/vis%d.h5", f"--report={plan}"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    advice = load(plan)["advice"]
    limit = advice["time_limit_from_prediction"]
    assert re.search(rf"^#SBATCH --time={limit}$", script, re.M), script
    report = cluster.sbatch(workdir, script)
    # It ran whole (its --duration, the limit's stream budget, not reached)
    # and within the limit, its prediction beside what it measured.
    assert report["counts"]["visibilities_written"] == report["counts"]["visibilities"]
    h, m, sec = (int(x) for x in limit.split(":"))
    assert report["timing"]["wall_s"] < 3600 * h + 60 * m + sec
    assert report["prediction"]["measured_stream_s"] == report["timing"]["stream_s"]
    assert report["prediction"]["cluster"]["nodes"] == 3
    cluster.verify_published(f"{workdir}/vis*.h5", 2, report)


# Job scripts of runs that plan --slurm once refused (issue 37): every run
# option is carried into the run line, and a plan of more ranks than cores
# asks for an allocation sbatch takes.
@pytest.mark.parametrize("case", ["overcommitted", "both", "network-only", "repetitions"])
def test_plan_slurm_scripts_of_run_options_run_under_sbatch(cluster, workdir, case):
    args, out = {
        # One producer per facet and streamers on 3 nodes of 2 cores: 4 ranks a node.
        "overcommitted": (["--threads=1"], f"{workdir}/vis%d.h5"),
        "both": (["--ranks-per-node=2", "--facet-workers=2", "--threads=1",
                  "--direction=both"], None),
        "network-only": (["--ranks-per-node=2", "--facet-workers=2", "--threads=1",
                          "--network-only"], None),
        "repetitions": (["--ranks-per-node=2", "--facet-workers=2", "--threads=1",
                         "--repetitions=2", "--source-count=3", "--seed=7"],
                        f"{workdir}/vis%d.h5"),
    }[case]
    script = subprocess.run(
        [iotest_binary(), "plan", *T05[:5], "--nodes=3", "--cores-per-node=2", *args,
         "--slurm", f"--binary={iotest_binary()}", "--time-limit=5",
         *([out] if out else [])],
        capture_output=True, text=True, check=True, timeout=60).stdout
    if case == "overcommitted":
        assert re.search(r"^#SBATCH --ntasks=12$", script, re.M)
        assert not re.search(r"^#SBATCH --ntasks-per-node", script, re.M)
    report = cluster.sbatch(workdir, script)
    assert sorted(report["environment"]["hosts"]) == HOSTS
    if case == "overcommitted":
        # The plan's layout (its --facet-workers carried): a streamer and
        # three of the nine producers on each host.
        assert roles_by_host(report) == {h: {"producer": 3, "streamer": 1} for h in HOSTS}
        streamers = sum(1 for r in report["pipeline"]["per_rank"] if r["role"] == "streamer")
        cluster.verify_published(f"{workdir}/vis*.h5", streamers, report)
    elif case == "both":
        assert report["config"]["direction"] == "both" and report["accuracy"]
    elif case == "network-only":
        assert report["pipeline"]["network_only"] is True
    else:
        assert report["repetitions"]
        assert (report["config"]["seed"], report["config"]["source_count"]) == (7, 3)
        files = sorted(glob.glob(f"{workdir}/vis*.h5"))
        cluster.exec(iotest_binary(), "verify", *files, "--seed=7", "--source-count=3",
                     check=0)
        # Another sky's visibilities are not these: the seed was the run's.
        cluster.exec(iotest_binary(), "verify", *files, "--seed=8", "--source-count=3",
                     check=1)


def test_node_local_outputs_land_on_their_own_host(cluster, workdir):
    report = os.path.join(workdir, "run.json")
    cluster.srun(3, 6, "run", *T05, "--facet-workers=1", f"--report={report}",
                 f"{cluster.local}/%h-vis%d.h5", check=0, cwd=workdir)
    r = load(report)
    assert sorted(r["environment"]["hosts"]) == HOSTS
    streamer_hosts = {p["host"] for p in r["pipeline"]["per_rank"] if p["role"] == "streamer"}
    assert streamer_hosts == set(HOSTS)
    every = []
    for host in HOSTS:
        files = sorted(os.listdir(cluster.host_local(host)))
        mine = [f for f in files if f.startswith(f"{host}-vis")]
        assert mine and mine == files, (host, files)  # only its own, none of others
        every += [os.path.join(cluster.host_local(host), f) for f in mine]
    # The set is whole across the hosts (verify needs every chunk; a host
    # alone holds its streamers' share).
    verified = os.path.join(workdir, "verify.json")
    cluster.exec(iotest_binary(), "verify", *every, "--nonce", str(r["config"]["nonce"]),
                 f"--report={verified}", check=0)
    # The files say which hosts wrote them.
    assert sorted(load(verified)["verification"]["run"]["hosts"]) == HOSTS


def test_a_shared_file_is_written_from_three_hosts(cluster, workdir):
    report = os.path.join(workdir, "run.json")
    out = os.path.join(workdir, "vis.h5")
    # Four ranks, a streamer on each host: six spun in the shared file's
    # collective open on two cores (test_mpich.py; CI once timed out here).
    cluster.srun(3, 4, "run", *T05, "--facet-workers=1", "--storage=phdf5",
                 f"--report={report}", out, check=0, cwd=workdir)
    r = load(report)
    writers = {p["host"] for p in r["pipeline"]["per_rank"] if p["role"] == "streamer"}
    assert writers == set(HOSTS)
    cluster.exec(iotest_binary(), "verify", "--all", out, check=0)
    from pyuvdata import UVData
    uv = UVData.from_file(out, file_type="uvh5")
    assert uv.Nbls == 351 and uv.Nfreqs == 32 and uv.Ntimes == 16


def test_net_measures_between_hosts_over_mpi_and_tcp(cluster, workdir):
    report = os.path.join(workdir, "net.json")
    cluster.srun(3, 3, "net", "--max-size=1048576", "--iterations=200", "--check",
                 f"--report={report}", check=0, cwd=workdir)
    r = load(report)["net"]
    assert r["nodes"] == 3 and r["checked"] and r["passed"] and r["messages_wrong"] == 0
    assert r["messages_checked"] > 0
    assert r["transports"] == ["mpi", "tcp"]
    assert r["pairs"]
    for pair in r["pairs"]:
        assert pair["sender_host"] != pair["receiver_host"]
        # TCP reached the other host at its own address on the bridge.
        assert pair["tcp_address"].startswith("10.78.0.")
        for transport in ("mpi", "tcp"):
            assert len(pair[transport]) == len(r["sizes"])
            assert all(f["bandwidth_mb_per_s"] > 0 for f in pair[transport])


def test_a_writer_rank_on_another_host_and_both_directions(cluster, workdir):
    report = os.path.join(workdir, "transit.json")
    # 4 ranks dealt over 3 hosts: producer and writer rank on node1, the
    # streamers on node2 and node3.
    cluster.srun(3, 4, "run", *T05, "--facet-workers=1", "--writer-ranks=1",
                 f"--report={report}", f"{workdir}/vis%d.h5", check=0, cwd=workdir)
    r = load(report)
    hosts = {p["role"]: set() for p in r["pipeline"]["per_rank"]}
    for p in r["pipeline"]["per_rank"]:
        hosts[p["role"]].add(p["host"])
    assert len(hosts["writer"]) == 1 and not hosts["writer"] & hosts["streamer"], hosts
    assert r["transit"]["chunks_sent"] > 0
    cluster.exec(iotest_binary(), "verify", *sorted(glob.glob(f"{workdir}/vis*.h5")), check=0)
    # Predict and image in one run, across the hosts.
    both = os.path.join(workdir, "both.json")
    cluster.srun(3, 3, "run", *T05, "--facet-workers=1", "--direction=both",
                 f"--report={both}", check=0, cwd=workdir)
    b = load(both)
    assert sorted(b["environment"]["hosts"]) == HOSTS
    assert b["accuracy"]


def test_scale_launches_its_runs_with_srun(cluster, workdir):
    out = os.path.join(workdir, "study")
    report = os.path.join(workdir, "scale.json")
    job = " ".join([*T05, "--synthetic-vis"])
    # salloc holds the three hosts; each run's srun takes as many as ranks.
    cluster.exec("salloc", "--nodes=3", "--overcommit", iotest_binary(), "scale",
                 "--launcher=srun --overcommit --ntasks-per-node=1", "--np-flag=-n", "--n=nodes",
                 "--ranks=1,2,3", f"--job={job} {workdir}/vis%d.h5", f"--out={out}",
                 f"--report={report}", check=0, cwd=workdir, timeout=3 * JOB_TIMEOUT_S)
    sc = load(report)["scale"]
    assert sc["n_by"] == "nodes"
    assert [p["n"] for p in sc["points"]] == [1, 2, 3]
    assert sc["fits"] and sc["plots"]
    for n in (1, 2, 3):
        hosts = load(os.path.join(out, f"report-{n}.json"))["environment"]["hosts"]
        assert len(hosts) == n


def test_two_jobs_on_two_hosts_into_one_shared_folder_keep_their_own_outputs(cluster, workdir):
    # Issue 26 across hosts: twice, two jobs at once, one on node1 and one
    # on node2, the same output pattern in one shared folder, different
    # seeds. At most one gets through each time (the other is refused
    # before the work, exit 2, or finds the names taken at the end, exit 1,
    # and keeps its own apart); the final names hold a successful job's
    # outputs, whole.
    obs = [*T05[:2], "--time=-1800:1800/256/16", "--freq=260e6:300e6/64/16", *T05[4:]]
    out = os.path.join(workdir, "out%d.h5")

    def job(host, seed):
        return cluster.exec("srun", "--nodes=1", f"--nodelist={host}", "--ntasks=3",
                            "--overcommit", iotest_binary(), "run", *obs, f"--seed={seed}", out,
                            cwd=workdir)

    def verifies(files, seed):
        return cluster.exec(iotest_binary(), "verify", f"--seed={seed}", *files).returncode == 0

    outcomes = []
    for attempt in range(2):
        seeds = (10 * attempt + 1, 10 * attempt + 2)
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(job, ["node1", "node2"], seeds))
        winners = []
        for seed, proc in zip(seeds, results):
            outcomes.append(proc.returncode)
            errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
            if proc.returncode == 0:
                winners.append(seed)
            elif proc.returncode == 2:
                assert len(errors) == 1 and "being written by another run" in errors[0], proc.stderr
            else:
                assert proc.returncode == 1 and len(errors) == 1, proc.stderr
                assert "another run's output" in errors[0], errors[0]
        files = sorted(glob.glob(os.path.join(workdir, "out[0-9].h5")))
        assert not glob.glob(os.path.join(workdir, "*.partial")), os.listdir(workdir)
        if winners:
            # Two winners: one job ran wholly after the other (a re-run).
            assert len(files) == 2 and sum(verifies(files, s) for s in winners) == 1, files
    assert 0 in outcomes, outcomes
