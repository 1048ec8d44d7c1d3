"""The virtual cluster's shared file system: a real CephFS (tools/cluster up N
--storage=cephfs).

Storage hosts store1 ... storeS are namespaces like the compute hosts, on a
network of their own (the storage network: its own bridge and subnet, as
sites keep storage traffic off the MPI fabric). store1 runs the monitor,
the manager and the metadata server; every storage host runs one OSD on
file-backed BlueStore. Each compute host reaches the storage network
through a second link (eth1), and mounts CephFS with ceph-fuse at ROOT/shared
in its own mount namespace; the login side mounts it there too. So a file
written on node1 is read on node3 through another client, across the
network, as on a real cluster.

With --object-gateway, store1 also runs Ceph's object gateway (radosgw,
daemon rgw.store1) on the same OSDs; tools/cluster_gateway.py does its S3
side (the user, the bucket, the environment).

What it is not: FUSE, not the kernel client (no kernel modules here);
OSDs on files of one disk, not disks of their own; authentication off
(`auth ... = none`). docs/cluster.md, "A real parallel file system", says
what that changes.

tools/cluster calls these functions with its own helpers (`ops`): run,
start_daemon, wait_for, log and Refused.
"""
import json
import os
import shutil
import signal
import time
import uuid

# The tools a CephFS cluster needs (Debian's ceph-mon, ceph-mgr, ceph-osd,
# ceph-mds, ceph-fuse and ceph-common).
TOOLS = ("ceph", "ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "ceph-fuse", "monmaptool")
MON_PORT = 3300  # msgr2
# The object gateway (--object-gateway): one radosgw on store1, plain HTTP
# on its storage-network address, at radosgw's own default port.
GATEWAY, GATEWAY_HOST, GATEWAY_PORT = "rgw.store1", "store1", 7480
GATEWAY_TOOLS = ("radosgw", "radosgw-admin", "rclone")
DATA_POOL, METADATA_POOL, FS_NAME = "cephfs_data", "cephfs_metadata", "cephfs"


def missing_tools(object_gateway=False):
    tools = TOOLS + (GATEWAY_TOOLS if object_gateway else ())
    return [t for t in tools if shutil.which(t) is None]


def storage_hosts(n):
    return [f"store{k}" for k in range(1, n + 1)]


def storage_subnet(subnet):
    """The storage network beside the compute network: 10.77.0 -> 10.77.1."""
    a, b, c = subnet.split(".")
    return f"{a}.{b}.{(int(c) + 1) % 256}"


def ceph_dir(root):
    return os.path.join(root, "ceph")


def conf_path(root):
    return os.path.join(ceph_dir(root), "ceph.conf")


def write_conf(state, root):
    """ceph.conf: one file for every daemon and client (CEPH_CONF)."""
    d, sub = ceph_dir(root), state["storage_subnet"]
    mon_addr = f"{sub}.{state['storage_addrs']['store1']}"
    lines = [
        "# Written by tools/cluster up --storage=cephfs.",
        "[global]",
        f"fsid = {state['ceph_fsid']}",
        f"mon host = v2:{mon_addr}:{MON_PORT}",
        f"public network = {sub}.0/24",
        # Authentication off: one machine, root only (docs/cluster.md).
        "auth cluster required = none",
        "auth service required = none",
        "auth client required = none",
        "keyring = /dev/null",
        "auth allow insecure global id reclaim = false",
        f"run dir = {d}/run",
        f"log file = {root}/log/ceph-$name.log",
        f"pid file = {d}/run/$name.pid",
        f"mon data = {d}/$name",
        f"mgr data = {d}/$name",
        f"mds data = {d}/$name",
        f"osd data = {d}/$name",
        f"osd pool default size = {state['replication']}",
        "osd pool default min size = 1",
        "osd pool default pg autoscale mode = off",
        # Few placement groups for the pools a client makes without saying
        # how many (the object gateway's six): at Ceph's 32 each, replicated,
        # two OSDs pass the monitor's 250 PGs per OSD and pool creation fails.
        "osd pool default pg num = 8",
        "osd pool default pgp num = 8",
        "mon allow pool size one = true",
        "mon allow pool delete = true",
        "mon warn on pool no redundancy = false",
        # The machine's disk is shared with everything else on it; Ceph's
        # own 30 % warning would say HEALTH_WARN about the build's files.
        "mon data avail warn = 5",
        # A lost OSD is marked down by its one peer, in seconds, not by the
        # monitor's 15-minute report timeout.
        "mon osd min down reporters = 1",
        "osd heartbeat interval = 2",
        "osd heartbeat grace = 8",
        "mds beacon grace = 10",
        # Memory that fits 2 cores and 24 GiB beside the jobs.
        "osd objectstore = bluestore",
        "bluestore block create = true",
        f"bluestore block size = {state['osd_bytes']}",
        "osd memory target autotune = false",
        "bluestore cache autotune = false",
        "bluestore cache size = 134217728",
        "osd op num shards = 1",
        "osd op num threads per shard = 2",
        "mds cache memory limit = 268435456",
        "[client]",
        # No reverse invalidation of the kernel's page cache: with it,
        # Ceph 16.2's client deadlocked here against a writer (the
        # writer's pwrite holding a page lock while it waited on ceph-fuse,
        # ceph-fuse's invalidation waiting on that page; both in D state,
        # unkillable). Without it ceph-fuse lets the kernel drop a file's
        # cached pages at every open, so a file written on one host and
        # opened on another is read as written (close-to-open), and writes
        # still go straight through to the client.
        "fuse use invalidate cb = false",
        "client oc size = 67108864",
        "client oc max dirty = 50331648",
        *gateway_section(state, root),
        "",
    ]
    with open(conf_path(root), "w") as f:
        f.write("\n".join(lines))


def gateway_address(state):
    return f"{state['storage_subnet']}.{state['storage_addrs'][GATEWAY_HOST]}"


def gateway_section(state, root):
    """ceph.conf's section of the object gateway (client.rgw.store1), if any."""
    if not state.get("object_gateway"):
        return []
    return [
        f"[client.{GATEWAY}]",
        f"rgw frontends = beast endpoint={gateway_address(state)}:{GATEWAY_PORT}",
        f"rgw data = {ceph_dir(root)}/$id",
        # With authentication off, radosgw's first talk to the monitor
        # waits 300 s for a secure mode it never gets (tried by hand,
        # DESIGN.md 14); allowing crc as well, it starts in seconds.
        "ms mon client mode = crc secure",
        # radosgw starts 512 request threads by default, for a server of
        # many cores; two cores and a few clients need far fewer, and each
        # thread holds its stack and buffers. 32 still keeps more requests
        # in flight than the benchmarks here send.
        "rgw thread pool size = 32",
    ]


def env(root, base=None):
    e = dict(os.environ if base is None else base)
    e["CEPH_CONF"] = conf_path(root)
    return e


def ceph(ops, root, *args, timeout=60, check=True):
    """The ceph CLI against the cluster, from the login side."""
    return ops.run("timeout", str(timeout), "ceph", "--connect-timeout", str(timeout), *args,
                   check=check, timeout=timeout + 10, env=env(root))


def in_host(state, host):
    """nsenter into a host's network, UTS and mount namespaces."""
    return ["nsenter", "-t", str(state["holders"][host]), "-n", "-u", "-m", "--"]


def start(state, root, ops):
    """The daemons, the file system and every client's mount."""
    d = ceph_dir(root)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "run"))
    state["ceph_fsid"] = str(uuid.uuid4())
    write_conf(state, root)
    start_mon(state, root, ops)
    start_named(state, root, ops, "store1", "mgr.x")
    for k, host in enumerate(state["storage_hosts"]):
        start_osd(state, root, ops, host, k)
    make_file_system(state, root, ops)
    start_named(state, root, ops, "store1", "mds.a")
    if state.get("object_gateway"):
        # Started now, so that the pools it makes (seconds) are made while
        # the file system's PGs peer; tools/cluster_gateway.py waits for it.
        start_named(state, root, ops, GATEWAY_HOST, GATEWAY)
    ops.wait_for("CephFS active with every PG clean", lambda: ready(root, ops), 120)
    for host in state["hosts"]:
        mount(state, root, ops, host)
    mount(state, root, ops, "login")


def start_mon(state, root, ops):
    d = ceph_dir(root)
    monmap = os.path.join(d, "monmap")
    addr = f"{state['storage_subnet']}.{state['storage_addrs']['store1']}"
    ops.run("monmaptool", "--create", "--fsid", state["ceph_fsid"], "--addv", "a",
            f"[v2:{addr}:{MON_PORT}]", monmap)
    ops.run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap, env=env(root))
    start_named(state, root, ops, "store1", "mon.a")
    ops.wait_for("the monitor's quorum", lambda: ceph(ops, root, "mon", "stat", timeout=5,
                                                      check=False).returncode == 0, 60)


def daemon_command(name):
    """How a Ceph daemon (mon.a, mgr.x, mds.a, osd.N, rgw.store1) starts in
    the foreground."""
    kind, ident = name.split(".", 1)
    if kind == "rgw":
        # The gateway is a client of the cluster: its entity is client.rgw.ID.
        return ["radosgw", "-f", "-n", f"client.{name}"]
    return [f"ceph-{kind}", "-f", "-i", ident]


def start_named(state, root, ops, host, name):
    """A Ceph daemon (mon.a, mgr.x, mds.a, osd.N, rgw.store1) in the
    foreground on a host."""
    os.makedirs(os.path.join(ceph_dir(root), name), exist_ok=True)
    state["daemons"][f"ceph-{name}"] = ops.start_daemon(
        host, f"ceph-{name}", [*in_host(state, host), *daemon_command(name)],
        state["lifetime"], env(root))
    state.setdefault("ceph_daemons", {})[name] = host


def start_osd(state, root, ops, host, k):
    osd_uuid = str(uuid.uuid4())
    osd_id = ceph(ops, root, "osd", "new", osd_uuid).stdout.strip()
    name = f"osd.{osd_id}"
    os.makedirs(os.path.join(ceph_dir(root), name))
    # mkfs makes the BlueStore file (bluestore block create); in the host,
    # so that the OSD's first address is on the storage network.
    ops.run(*in_host(state, host), "ceph-osd", "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid,
            env=env(root), timeout=120)
    start_named(state, root, ops, host, name)


def make_file_system(state, root, ops):
    # Few placement groups: a handful of OSDs on one machine.
    ceph(ops, root, "osd", "pool", "create", DATA_POOL, "32")
    ceph(ops, root, "osd", "pool", "create", METADATA_POOL, "16")
    ceph(ops, root, "fs", "new", FS_NAME, METADATA_POOL, DATA_POOL)


def ready(root, ops):
    p = ceph(ops, root, "status", "--format=json", timeout=10, check=False)
    if p.returncode != 0:
        return False
    s = json.loads(p.stdout)
    pgs = s.get("pgmap", {})
    clean = sum(x["count"] for x in pgs.get("pgs_by_state", [])
                if x["state_name"] == "active+clean")
    fs = s.get("fsmap", {})
    return pgs.get("num_pgs", 0) > 0 and clean == pgs["num_pgs"] and fs.get("up", 0) >= 1 and \
        any(m.get("status") == "up:active" for m in fs.get("by_rank", []))


def mount(state, root, ops, host):
    """ceph-fuse at ROOT/shared in the host's own mount namespace (login:
    this machine's)."""
    point = os.path.join(root, "shared")
    prefix = [] if host == "login" else in_host(state, host)
    state["daemons"][f"ceph-fuse-{host}"] = ops.start_daemon(
        host, f"ceph-fuse-{host}", [*prefix, "ceph-fuse", "-f", point], state["lifetime"],
        env(root))
    holder = os.getpid() if host == "login" else state["holders"][host]
    ops.wait_for(f"{host}'s CephFS mount at {point}",
                 lambda: mount_type(holder, point) == "fuse.ceph-fuse", 60)


def mounts_at(pid, point):
    """What is mounted at `point` in a process's mount namespace, in the
    order mounted: (type, device "major:minor") each."""
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    return [(r[r.index("-") + 1], r[2]) for r in rows if r[4] == point]


def mount_type(pid, point):
    """The type of what is mounted at `point` in a process's mount namespace
    (the last one mounted over the others), or None."""
    found = mounts_at(pid, point)
    return found[-1][0] if found else None


def fuse_connections(pid, point):
    """The kernel's FUSE connections (their numbers under fusectl: the
    device's minor) of the ceph-fuse mounts at `point` in a process's mount
    namespace."""
    return {device.split(":")[1] for kind, device in mounts_at(pid, point)
            if kind == "fuse.ceph-fuse"}


def abort_clients(state, root, ops):
    """Abort the kernel's side of this cluster's ceph-fuse mounts, so that
    a process blocked in a call to a client that can no longer answer
    returns (ENOTCONN) and can be killed. Only `down` calls it: nothing
    waits on these mounts' data any more."""
    point = os.path.join(root, "shared")
    connections = set()
    for pid in [os.getpid(), *state.get("holders", {}).values()]:
        connections |= fuse_connections(pid, point)
    control = "/sys/fs/fuse/connections"
    if connections and not os.listdir(control):
        ops.run("mount", "-t", "fusectl", "none", control, check=False)
    for c in sorted(connections):
        try:
            with open(os.path.join(control, c, "abort"), "w") as f:
                f.write("1")
        except OSError:
            pass  # gone already


def unmount_login(root, ops):
    """The login side's mount, lazily: its client may be dead or stalled."""
    point = os.path.join(root, "shared")
    for _ in range(8):
        if mount_type(os.getpid(), point) != "fuse.ceph-fuse":
            return
        ops.run("umount", "-l", point, check=False)


def remove_files(root):
    shutil.rmtree(ceph_dir(root), ignore_errors=True)


def daemon_host(state, name):
    host = state.get("ceph_daemons", {}).get(name)
    if host is None:
        known = ", ".join(sorted(state.get("ceph_daemons", {}))) or "none"
        raise KeyError(f"unknown Ceph daemon '{name}': expected one of {known}")
    return host


def stop_daemon(state, name):
    """SIGKILL a Ceph daemon (its `timeout` wrapper's whole group), as a crash."""
    pid = state["daemons"].get(f"ceph-{name}")
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, TypeError):
        pass
    for _ in range(100):
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, TypeError):
            return
        time.sleep(0.05)


def restart_daemon(state, root, ops, name, down_for_s):
    """A daemon crashes and comes back (on its host) `down_for_s` later."""
    host = daemon_host(state, name)
    stop_daemon(state, name)
    ops.log(f"restart: {name} on {host} killed; back in {down_for_s:g} s")
    time.sleep(down_for_s)
    start_named(state, root, ops, host, name)
    ops.log(f"restart: {name} started again on {host}")


def status_lines(state, root, ops):
    lines = [f"  CephFS at {root}/shared on every host and the login side (ceph-fuse); "
             f"storage network {state['storage_subnet']}.0/24, link "
             f"{state.get('storage_link_rate') or 'unshaped'}"]
    for host in state["storage_hosts"]:
        names = [n for n, h in state.get("ceph_daemons", {}).items() if h == host]
        lines.append(f"  {host:8s} {state['storage_subnet']}.{state['storage_addrs'][host]:<4d} "
                     f"{' '.join(sorted(names))}")
    p = ceph(ops, root, "health", timeout=10, check=False)
    lines.append(f"  ceph health: {(p.stdout or p.stderr).strip()}")
    return lines
