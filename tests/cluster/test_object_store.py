"""An object store in the virtual cluster (issue 57): Ceph's object
gateway (tools/cluster up 3 --storage=cephfs --object-gateway), radosgw on
store1 speaking S3 on the storage network, a user and a bucket made by
`up`, and the environment `tools/cluster env` gives an S3 client; then
iotest's s3 back-end from three hosts, read back on another, and its
faults. One cluster for the module (about 30 s to come up on two cores);
the tests that break a daemon or a link run last, the killed OSD host
last of all (it does not come back)."""
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest

from conftest import JOB_TIMEOUT_S, T05, TOOL, iotest_binary, tool, virtual_cluster

ROOT = os.environ.get("IOTEST_GATEWAY_TEST_ROOT", "/var/tmp/iotest-cluster-gateway")
# Its own subnets (10.84.0 and, for storage, 10.84.1) and controller port.
# The storage links shaped, so that a write lasts long enough for a fault
# to land in it.
UP_ARGS = ["--storage=cephfs", "--object-gateway", "--subnet=10.84.0", "--port=16887",
           "--lifetime=1800", "--kill-wait=5", "--storage-link-rate=400mbit"]
ENDPOINT = "http://10.84.1.101:7480"
# Two parts of 5 MiB and one of 2 MiB: rclone uploads it in parts, as a
# benchmark's large object would be.
OBJECT_BYTES = 12 << 20
RCLONE_PARTS = ["--s3-upload-cutoff=5M", "--s3-chunk-size=5M"]


@pytest.fixture(scope="module")
def gateway():
    with virtual_cluster(ROOT, *UP_ARGS) as c:
        with open(os.path.join(ROOT, "state.json")) as f:
            tag = json.load(f)["tag"]
        yield c
    # After down: nothing of it left, the gateway included.
    from test_cluster import kernel_leftovers, running
    assert kernel_leftovers(ROOT, tag) == []
    conf = f"CEPH_CONF={os.path.join(ROOT, 'ceph', 'ceph.conf')}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert conf not in f.read() or not running(pid), f"process {pid} left"
        except OSError:
            pass
    assert not os.path.exists(os.path.join(ROOT, "ceph"))


@pytest.fixture(scope="module")
def env_file(gateway, tmp_path_factory):
    """What `tools/cluster env` prints, as a file a shell sources."""
    path = tmp_path_factory.mktemp("gateway") / "env.sh"
    path.write_text(tool("env", root=ROOT, check=0).stdout)
    return str(path)


def exports(env_file):
    with open(env_file) as f:
        text = f.read()
    return {k: shlex.split(v)[0] for k, v in re.findall(r"^export (\w+)=(.*)$", text, re.M)}


def rclone_on(c, host, env_file, *args, timeout=120, check=None):
    """rclone on a host with only what `tools/cluster env` sets, in an
    environment that has the machine's AWS_CA_BUNDLE (which env unsets)."""
    script = f". {shlex.quote(env_file)} && exec rclone -q {shlex.join(args)}"
    return c.on(host, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                "AWS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "sh", "-c", script,
                timeout=timeout, check=check)


def test_object_gateway_needs_cephfs():
    p = tool("up", "3", "--object-gateway", root=ROOT, timeout=60)
    assert p.returncode == 2 and "--object-gateway" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_env_names_the_gateway_its_keys_and_bucket(gateway, env_file):
    e = exports(env_file)
    assert e["AWS_ENDPOINT_URL"] == ENDPOINT and e["IOTEST_S3_BUCKET"] == "iotest", e
    assert e["AWS_ACCESS_KEY_ID"] and e["AWS_SECRET_ACCESS_KEY"] and e["AWS_REGION"], e
    assert e["RCLONE_CONFIG_GATEWAY_TYPE"] == "s3", e
    assert e["RCLONE_CONFIG_GATEWAY_ENDPOINT"] == ENDPOINT, e
    assert re.search(r"^unset AWS_CA_BUNDLE$", open(env_file).read(), re.M)
    status = tool("status", root=ROOT, check=0).stdout
    assert f"S3 at {ENDPOINT}" in status and "answering" in status, status


def test_radosgw_admin_shows_the_user_and_the_bucket(gateway, env_file):
    user = json.loads(gateway.exec("radosgw-admin", "user", "info", "--uid=iotest",
                                   timeout=60, check=0).stdout)
    keys = {k["access_key"]: k["secret_key"] for k in user["keys"]}
    e = exports(env_file)
    assert keys.get(e["AWS_ACCESS_KEY_ID"]) == e["AWS_SECRET_ACCESS_KEY"], user["keys"]
    bucket = json.loads(gateway.exec("radosgw-admin", "bucket", "stats", "--bucket=iotest",
                                     timeout=60, check=0).stdout)
    assert bucket["owner"] == "iotest", bucket


def test_rclone_on_compute_hosts_writes_lists_and_reads_back(gateway, env_file, tmp_path):
    sent, back = tmp_path / "sent", tmp_path / "back"
    sent.write_bytes(os.urandom(OBJECT_BYTES))
    rclone_on(gateway, "node2", env_file, *RCLONE_PARTS, "copyto", str(sent),
              "gateway:iotest/test/object", check=0)
    listed = rclone_on(gateway, "node2", env_file, "lsl", "gateway:iotest/test", check=0).stdout
    assert re.search(rf"^\s*{OBJECT_BYTES} .* object$", listed, re.M), listed
    # Read back through another host.
    rclone_on(gateway, "node3", env_file, "copyto", "gateway:iotest/test/object", str(back),
              check=0)
    assert back.read_bytes() == sent.read_bytes()


def test_the_gateway_restarted_answers_again(gateway, env_file):
    tool("restart", "rgw.store1", "--down-for=1", root=ROOT, check=0)
    # It answers in seconds (its pools are made); the bucket is still there.
    deadline = time.monotonic() + 60
    while True:
        p = rclone_on(gateway, "node1", env_file, "--retries=1", "--low-level-retries=1",
                      "lsf", "gateway:", timeout=60)
        if p.returncode == 0:
            break
        assert time.monotonic() < deadline, p.stderr
        time.sleep(1)
    assert p.stdout.split() == ["iotest/"], p.stdout


# --- iotest's s3 back-end --------------------------------------------------

BUCKET = "iotest"
# 11.5 M visibilities, 184 MB: seconds through the shaped links. Storage
# only (--synthetic-vis): the faults are the store's, and two cores spend
# a minute degridding it.
LONG = ["--synthetic-vis", *T05[:2], "--time=-1800:1800/128/8", "--freq=260e6:300e6/256/16",
        *T05[4:], "--bls-per-task=8"]


def s3_env(env_file, **changes):
    """The login side's environment with the gateway's variables (as
    `tools/cluster env` gives them), some changed."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update(exports(env_file))
    env.update(changes)
    return env


def iotest_exec(c, env_file, *args, timeout=JOB_TIMEOUT_S, **changes):
    """`tools/cluster exec ARGS` (srun, iotest) with the gateway's
    variables, from a node-local folder: nothing of the run's goes through
    CephFS, so a cut storage host does not hang its output."""
    env = s3_env(env_file, IOTEST_CLUSTER_ROOT=ROOT, **changes)
    return subprocess.run([sys.executable, TOOL, "exec", "timeout", "-k", "10", str(timeout + 30),
                           *args], capture_output=True, text=True, env=env, timeout=timeout + 60,
                          cwd=os.path.join(ROOT, "local"))


def srun_iotest(c, env_file, hosts, tasks, *args, placement=(), **changes):
    return iotest_exec(c, env_file, "srun", f"--nodes={hosts}", f"--ntasks={tasks}", *placement,
                       "--overcommit", "--kill-on-bad-exit=1", iotest_binary(), *args, **changes)


def objects(c, env_file, prefix):
    """The objects under `prefix` of the bucket, by rclone (not iotest)."""
    p = rclone_on(c, "node1", env_file, "lsf", f"gateway:{BUCKET}/{prefix}", check=None)
    return sorted(p.stdout.split()) if p.returncode == 0 else []


def open_uploads(c, env_file):
    """The bucket's multipart uploads begun and neither completed nor
    aborted, as rclone lists them."""
    p = rclone_on(c, "node1", env_file, "backend", "list-multipart-uploads", f"gateway:{BUCKET}",
                  check=0)
    return {k: v for k, v in json.loads(p.stdout).items() if v}


def background_run(env_file, hosts, tasks, url, *extra):
    """`srun iotest run LONG URL` in the background, bounded, its stderr
    kept, from a node-local folder."""
    env = s3_env(env_file, IOTEST_CLUSTER_ROOT=ROOT)
    return subprocess.Popen([sys.executable, TOOL, "exec", "timeout", "-k", "10",
                             str(JOB_TIMEOUT_S), "srun", f"--nodes={hosts}", f"--ntasks={tasks}",
                             "--overcommit", "--kill-on-bad-exit=1", iotest_binary(), "run",
                             *LONG, *extra, url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=os.path.join(ROOT, "local"), start_new_session=True)


def wait_for_an_upload(c, env_file, proc, timeout_s=60):
    """Until the run has begun an upload (it writes)."""
    deadline = time.monotonic() + timeout_s
    while not open_uploads(c, env_file):
        assert time.monotonic() < deadline and proc.poll() is None, "no upload began"
        time.sleep(0.5)


def one_error_line(proc):
    lines = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert lines, proc.stderr[-3000:]
    return lines[0]


def test_a_plan_script_from_three_hosts_verified_on_another(gateway, env_file):
    url = f"s3://{BUCKET}/run/vis%d"
    # The job's script and report on CephFS, where every host sees them.
    workdir = pathlib.Path(gateway.shared) / "s3-plan"
    workdir.mkdir(exist_ok=True)
    script = subprocess.run(
        [iotest_binary(), "plan", *T05[:5], "--nodes=3", "--ranks-per-node=2",
         "--cores-per-node=2", "--facet-workers=2", "--threads=1", "--slurm",
         f"--binary={iotest_binary()}", "--time-limit=5", "--storage=s3", url],
        capture_output=True, text=True, check=True, timeout=60, env=s3_env(env_file)).stdout
    # Submitted and followed as any cluster test's job (tools/cluster exec
    # gives it the gateway's variables).
    report = gateway.sbatch(str(workdir), script)
    writers = {p["host"] for p in report["pipeline"]["per_rank"] if p["role"] == "streamer"}
    assert len(writers) >= 2, writers
    store = report["config"]["store"]
    assert store["endpoint"] == ENDPOINT and store["bucket"] == BUCKET, store
    assert "Ceph" in store["server"], store
    assert "SECRET" not in json.dumps(report) and exports(env_file)["AWS_SECRET_ACCESS_KEY"] \
        not in json.dumps(report)
    names = objects(gateway, env_file, "run")
    assert names and all(re.fullmatch(r"vis\d+", n) for n in names), names
    assert open_uploads(gateway, env_file) == {}
    got = srun_iotest(gateway, env_file, 1, 1, "verify", "--all", "--nonce",
                      str(report["config"]["nonce"]),
                      *[f"s3://{BUCKET}/run/{n}" for n in names], placement=["--nodelist=node3"])
    assert got.returncode == 0, got.stderr[-3000:]


def test_read_check_grid_and_the_imaging_direction_read_objects(gateway, env_file):
    # A synthetic set and a sky set from three hosts, read back on node3
    # with ranged GETs: the pattern checked, the dirty image made by grid
    # and by the pipeline's imaging direction.
    sets = {}
    for name, kind in (("synthetic", ["--synthetic-vis"]), ("sky", [])):
        made = srun_iotest(gateway, env_file, 3, 3, "run", *kind, *T05,
                           f"s3://{BUCKET}/read/{name}/vis%d")
        assert made.returncode == 0, made.stderr[-3000:]
        sets[name] = [f"s3://{BUCKET}/read/{name}/{n}"
                      for n in objects(gateway, env_file, f"read/{name}")]
        assert sets[name], name
    on_node3 = ["--nodelist=node3"]
    checked = srun_iotest(gateway, env_file, 1, 1, "read", "--check", *sets["synthetic"],
                          placement=on_node3)
    assert checked.returncode == 0 and "0 wrong" in checked.stdout, checked.stderr[-3000:]
    gridded = srun_iotest(gateway, env_file, 1, 1, "grid", *sets["sky"], placement=on_node3)
    assert gridded.returncode == 0 and "dirty image" in gridded.stdout, gridded.stderr[-3000:]
    imaged = srun_iotest(gateway, env_file, 1, 3, "run", *T05, "--direction=image", *sets["sky"],
                         placement=on_node3)
    assert imaged.returncode == 0 and "read 2 file(s) (s3)" in imaged.stdout, \
        imaged.stderr[-3000:]


# xradio on the login side, as a user of the store opens a processing set:
# s3fs (botocore) takes the keys and the endpoint from the AWS_* variables
# `tools/cluster env` exports (AWS_ENDPOINT_URL; the region from
# AWS_DEFAULT_REGION, which botocore reads where it ignores AWS_REGION).
XRADIO_OPENS = r"""
import sys, warnings
import zarr
import xradio.measurement_set.schema
from xradio.measurement_set import open_processing_set
from xradio.schema.check import check_datatree
with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)  # no consolidated metadata
    warnings.simplefilter("error", zarr.errors.ZarrUserWarning)  # a key zarr does not know
    ps = open_processing_set(sys.argv[1])
issues = check_datatree(ps)
print(" ".join(sorted(ps.children)))
print(len(issues), str(issues).replace(chr(10), " "))
for name in sorted(ps.children):
    vis = ps[name].ds["VISIBILITY"].values
    print(name, vis.dtype, "x".join(map(str, vis.shape)), bool((vis != 0).all()))
"""


def test_an_msv4_set_from_three_hosts_opens_in_xradio_through_s3fs(gateway, env_file):
    """--storage=msv4 on S3: one processing set from the three hosts (two
    streamers, an MSv4 each), published whole by its root key; verified on
    another host and opened by xradio through s3fs with no schema issue."""
    pytest.importorskip("xradio")
    prefix = f"msv4-{os.getpid()}-{int(time.time())}"
    url = f"s3://{BUCKET}/{prefix}/vis.ps.zarr"
    # Every dump in one time chunk: 702 chunk objects, not 1,404 (each a
    # PutObject, a GET to verify and one to open: most of the test's time).
    whole = [a if not a.startswith("--time=") else "--time=-1800:1800/16/16" for a in T05]
    made = srun_iotest(gateway, env_file, 3, 3, "run", *whole, "--storage=msv4", url)
    assert made.returncode == 0, made.stderr[-3000:]
    assert objects(gateway, env_file, prefix) == ["vis.ps.zarr/"]
    assert objects(gateway, env_file, f"{prefix}/vis.ps.zarr") == ["vis_0/", "vis_1/",
                                                                    "zarr.json"]
    assert open_uploads(gateway, env_file) == {}  # the root key's upload completed
    checked = srun_iotest(gateway, env_file, 1, 1, "verify", "--all", url,
                          placement=["--nodelist=node3"])
    assert checked.returncode == 0 and ": passed" in checked.stdout, checked.stderr[-3000:]
    env = s3_env(env_file)
    env.setdefault("AWS_DEFAULT_REGION", env.get("AWS_REGION", "us-east-1"))
    opened = subprocess.run([sys.executable, "-c", XRADIO_OPENS, url], capture_output=True,
                            text=True, env=env, timeout=300)
    assert opened.returncode == 0, opened.stderr[-3000:]
    lines = opened.stdout.splitlines()
    assert lines[0] == "vis_0 vis_1", opened.stdout
    assert lines[1].startswith("0 No schema issues found"), opened.stdout
    # T05: 16 times, 351 baselines, 32 channels in two MSv4s, every value written.
    assert lines[2:] == [f"vis_{i} complex64 16x351x16x1 True" for i in range(2)], opened.stdout


def test_a_wrong_secret_or_a_missing_bucket_is_one_line_before_any_work(gateway, env_file):
    for url, changes in ((f"s3://{BUCKET}/wrong/vis%d", {"AWS_SECRET_ACCESS_KEY": "not-it"}),
                         ("s3://no-such-bucket/x/vis%d", {})):
        # On the login side itself: `tools/cluster exec` would set the
        # gateway's own keys again.
        p = subprocess.run([iotest_binary(), "run", "--synthetic-vis", *T05, url],
                           capture_output=True, text=True, env=s3_env(env_file, **changes),
                           timeout=120)
        assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
        line = one_error_line(p)
        assert "OUTPUT" in line and ("AccessDenied" in line or "SignatureDoesNotMatch" in line
                                     or "NoSuchBucket" in line), line
        assert "not-it" not in p.stderr
    assert objects(gateway, env_file, "wrong") == []


def test_a_second_run_into_one_output_pattern_is_refused(gateway, env_file):
    url = f"s3://{BUCKET}/twice/vis%d"
    first = background_run(env_file, 2, 3, url)
    try:
        wait_for_an_upload(gateway, env_file, first)
        second = srun_iotest(gateway, env_file, 1, 3, "run", *LONG, url)
        assert second.returncode == 2, second.stderr[-2000:]
        assert "another run is writing" in one_error_line(second), second.stderr[-2000:]
        assert first.wait(timeout=JOB_TIMEOUT_S) == 0, first.stderr.read()[-3000:]
    finally:
        first.kill()
    assert open_uploads(gateway, env_file) == {}


def test_a_bucket_quota_reached_publishes_nothing_and_leaves_no_upload(gateway, env_file):
    rclone_on(gateway, "node1", env_file, "mkdir", "gateway:quota", check=0)
    for args in (["quota", "set", "--quota-scope=bucket", "--bucket=quota", "--max-size=20971520"],
                 ["quota", "enable", "--quota-scope=bucket", "--bucket=quota"]):
        gateway.exec("radosgw-admin", *args, timeout=60, check=0)
    p = srun_iotest(gateway, env_file, 3, 6, "run", *LONG, "s3://quota/run/vis%d")
    assert p.returncode != 0
    line = one_error_line(p)
    assert "QuotaExceeded" in line, line
    listed = rclone_on(gateway, "node1", env_file, "lsf", "gateway:quota", check=0).stdout
    assert listed.split() == [], listed
    uploads = rclone_on(gateway, "node1", env_file, "backend", "list-multipart-uploads",
                        "gateway:quota", check=0).stdout
    assert not any(json.loads(uploads).values()), uploads


def fault_during_an_s3_run(c, env_file, prefix, fault, *extra):
    """A 3-host run into the bucket, `fault()` once its uploads have begun;
    it finishes and verifies, or ends non-zero in bounded time with
    nothing published and no upload left. Returns its status and stderr."""
    url = f"s3://{BUCKET}/{prefix}/vis%d"
    proc = background_run(env_file, 3, 6, url, *extra)
    try:
        wait_for_an_upload(c, env_file, proc)
        fault()
        start = time.monotonic()
        rc = proc.wait(timeout=JOB_TIMEOUT_S + 30)
        err = proc.stderr.read()
        print(f"{prefix}: the run ended with {rc}, {time.monotonic() - start:.0f} s after")
    finally:
        proc.kill()
    return rc, err, url


def finished_or_nothing(c, env_file, prefix, rc, err):
    names = objects(c, env_file, prefix)
    if rc == 0:
        got = srun_iotest(c, env_file, 1, 1, "verify",
                          *[f"s3://{BUCKET}/{prefix}/{n}" for n in names])
        assert got.returncode == 0, got.stderr[-3000:]
    else:
        assert names == [], (names, err[-3000:])


def test_the_gateway_restarted_during_a_write(gateway, env_file):
    rc, err, _ = fault_during_an_s3_run(gateway, env_file, "restarted", lambda: tool(
        "restart", "rgw.store1", "--down-for=3", root=ROOT, check=0))
    finished_or_nothing(gateway, env_file, "restarted", rc, err)


def test_the_gateway_hosts_link_cut_ends_the_job_naming_it(gateway, env_file):
    bound_s = 15
    cut = []

    def cut_link():
        tool("cut", "store1", "storage", root=ROOT, check=0)
        cut.append(time.monotonic())
    try:
        rc, err, url = fault_during_an_s3_run(gateway, env_file, "cut", cut_link,
                                              f"--storage-stall-timeout={bound_s}")
    finally:
        tool("mend", "store1", "storage", root=ROOT, check=0)
    assert rc != 0, err[-3000:]
    # The watchdog's line (a request that stalls), or the request's own
    # (refused at once, after its retries): the object and the host.
    line = re.search(r"iotest: error: .*", err)
    assert line and "s3://iotest/cut/vis" in line.group(0) and \
        re.search(r" (on|from) node\d", line.group(0)), err[-3000:]
    finished_or_nothing(gateway, env_file, "cut", rc, err)


def test_an_osd_host_killed_during_a_write(gateway, env_file):
    # Last: store2 does not come back. Its pools keep a copy on store1.
    rc, err, _ = fault_during_an_s3_run(gateway, env_file, "osd-killed", lambda: tool(
        "kill", "store2", root=ROOT, check=0))
    finished_or_nothing(gateway, env_file, "osd-killed", rc, err)
