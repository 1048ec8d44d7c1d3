"""`iotest plan` sizes a real job (issue 9): the ranks laid out on --nodes,
each node's estimate from the memory model `run` checks, against the
memory of a node, with a warning where it does not fit."""
import json

import pytest

from conftest import MPI_TIMEOUT_S, load

VLAA = ["--vis-set=vlaa", "--time=-300:300/16/8", "--freq=260e6:300e6/64/32", "--dec=-20"]
SKA1_LOW = ["--rec-set=small", "--vis-set=lowbd2", "--time=-460:460/1024/64",
            "--freq=260e6:300e6/8192/64", "--dec=-30"]


def plan(iotest, *args):
    return json.loads(iotest("plan", *args, "--report=-", check=0).stdout)


def role_totals(advice):
    totals = {"producers": 0, "streamers": 0, "assigners": 0}
    for g in advice["layout"]:
        for role in totals:
            totals[role] += g["node_count"] * g[role]
    return totals


def check_layout(advice):
    """The groups cover every node once, in order, each node full, and
    the roles in rank order (producers, streamers, the assigner) dealt
    over the nodes."""
    layout = advice["layout"]
    assert sum(g["node_count"] for g in layout) == advice["nodes"]
    assert [g["first_node"] for g in layout] == \
        [sum(h["node_count"] for h in layout[:i]) for i in range(len(layout))]
    for g in layout:
        assert g["producers"] + g["streamers"] + g["assigners"] == advice["ranks_per_node"]
    assert advice["recommended_ranks"] == advice["nodes"] * advice["ranks_per_node"]
    totals = role_totals(advice)
    assert sum(totals.values()) == advice["recommended_ranks"]
    assert totals == {"producers": advice["producers"], "streamers": advice["streamers"],
                      "assigners": 1 if advice["assigner"] else 0}
    # The run places ranks node-cyclically (as mpirun --map-by node): rank
    # r on node r mod nodes, roles in rank order.
    n, ends = advice["nodes"], []
    for role, count in [("producers", advice["producers"]), ("streamers", advice["streamers"]),
                        ("assigners", 1 if advice["assigner"] else 0)]:
        ends.append((role, (ends[-1][1] if ends else 0) + count))
    nodes = [g for g in layout for _ in range(g["node_count"])]
    for j, g in enumerate(nodes):
        lo = 0
        for role, hi in ends:
            assert g[role] == sum(1 for r in range(lo, hi) if r % n == j), (j, role)
            lo = hi


@pytest.mark.parametrize("args,ranks_per_node,producers", [
    (["--rec-set=small"], 10, 9),  # one producer per facet, a streamer
    (["--rec-set=small", "--nodes=30"], 2, 9),
    (["--rec-set=small", "--nodes=30", "--assigner"], 2, 9),
    (["--rec-set=small", "--nodes=4", "--ranks-per-node=7", "--facet-workers=5",
      "--assigner"], 7, 5),
    (["--rec-set=tiny", "--nodes=3"], 23, 64),
    (["--rec-set=8k-192-2k", "--nodes=1000", "--ranks-per-node=48"], 48, 9216),
    (["--rec-set=small", "--facet-workers=3", "--ranks-per-node=5"], 5, 3),
])
def test_the_layout_covers_exactly_the_ranks(iotest, args, ranks_per_node, producers):
    a = plan(iotest, *args)["advice"]
    assert a["ranks_per_node"] == ranks_per_node
    assert a["producers"] == producers
    check_layout(a)
    if "--ranks-per-node" not in " ".join(args):
        assert all(g["streamers"] >= 1 for g in a["layout"][-1:])
        assert a["streamers"] >= a["nodes"]  # one streamer per node at least


def test_the_dev_machine_run_is_one_node_of_three_producers_and_two_streamers(iotest):
    # As `mpirun -np 5 iotest ... --facet-workers=3` lays it out.
    a = plan(iotest, "--rec-set=small", *VLAA, "--facet-workers=3", "--ranks-per-node=5")["advice"]
    assert a["layout"] == [{"first_node": 0, "node_count": 1, "producers": 3, "streamers": 2,
                            "writers": 0,
                            "assigners": 0, "bytes": a["layout"][0]["bytes"],
                            "fits": a["layout"][0]["fits"]}]


def test_storage_only_has_no_producers(iotest):
    a = plan(iotest, "--rec-set=small", *VLAA, "--synthetic-vis", "--nodes=2")["advice"]
    assert (a["producers"], a["streamers"], a["ranks_per_node"]) == (0, 2, 1)
    assert a["threads"] == 1  # as run: the pattern leaves the cores to the writers
    check_layout(a)


def test_each_node_holds_what_the_memory_model_gives_its_ranks(iotest):
    r = plan(iotest, "--rec-set=small", *VLAA, "--nodes=3", "--ranks-per-node=4", "--assigner",
             "--threads=2", "--node-memory=3G")
    m, a = r["memory"], r["advice"]
    assert a["threads"] == 2 and a["producer_threads"] == 2
    assert a["node_memory_bytes"] == 3 << 30 and a["node_memory_source"] == "--node-memory"
    per_rank = {"producers": m["producer_bytes"], "streamers": m["streamer_bytes"],
                "assigners": m["assigner_bytes"]}
    for g in a["layout"]:
        assert g["bytes"] == sum(g[role] * per_rank[role] for role in per_rank)
        assert g["fits"] == (g["bytes"] <= a["node_memory_bytes"])
    # The model's items add up to the bytes per rank.
    for role, key in [("producer", "producer_bytes"), ("streamer", "streamer_bytes"),
                      ("assigner", "assigner_bytes")]:
        assert sum(i["bytes"] for i in m["items"] if i["role"] == role) == m[key]


def test_queues_and_threads_reach_the_model_as_in_run(iotest):
    base = plan(iotest, "--rec-set=small", *VLAA, "--threads=1")["memory"]
    short = plan(iotest, "--rec-set=small", *VLAA, "--threads=1", "--subgrid-queue=16")["memory"]
    # Receive slots: one contribution per facet for each queued subgrid.
    assert base["streamer_bytes"] - short["streamer_bytes"] == 16 * 9 * base["contribution_bytes"]
    more = plan(iotest, "--rec-set=small", *VLAA, "--threads=4")["memory"]
    assert more["streamer_bytes"] > base["streamer_bytes"]
    assert more["producer_bytes"] > base["producer_bytes"]  # --producer-threads follows


def test_plan_gives_the_estimate_run_checks(iotest, mpirun, tmp_path):
    args = ["--rec-set=T05_", *VLAA, "--facet-workers=1", "--threads=1"]
    report = tmp_path / "run.json"
    mpirun(3, *args, "--no-progress", f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    ran = load(report)["memory"]
    planned = plan(iotest, *args, "--ranks-per-node=3")
    assert planned["advice"]["producers"] == 1 and planned["advice"]["streamers"] == 2
    for key in ("producer_bytes", "streamer_bytes", "items"):
        assert planned["memory"][key] == ran[key], key


def test_a_node_too_small_is_a_warning_naming_the_role_and_the_figures(iotest):
    proc = iotest("plan", "--rec-set=small", "--nodes=2", "--node-memory=64M", "--report=-",
                  check=0)
    a = json.loads(proc.stdout)["advice"]
    assert not any(g["fits"] for g in a["layout"])
    assert len(a["warnings"]) == len(a["layout"])
    first = a["warnings"][0]
    assert first.startswith("node 0:") and "producer" in first
    assert "GiB estimated" in first and "0.06 GiB of a node (--node-memory)" in first
    assert any("streamer" in w for w in a["warnings"])
    assert "warning: node 0:" in proc.stderr and "DOES NOT FIT" in proc.stderr


def test_a_node_that_fits_has_no_warning(iotest):
    a = plan(iotest, "--rec-set=small", "--nodes=2", "--node-memory=1T")["advice"]
    assert a["warnings"] == [] and all(g["fits"] for g in a["layout"])


def test_node_memory_defaults_to_what_this_machine_has_available(iotest):
    a = plan(iotest, "--rec-set=T05_")["advice"]
    total = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo")
                 if line.startswith("MemTotal:"))
    assert 0 < a["node_memory_bytes"] <= total
    assert a["node_memory_source"] == "available on this machine"


@pytest.mark.parametrize("text,bytes_", [("24G", 24 << 30), ("24GiB", 24 << 30),
                                         ("512m", 512 << 20), ("2T", 1 << 41),
                                         ("1000000", 1000000)])
def test_node_memory_is_bytes_with_binary_suffixes(iotest, text, bytes_):
    a = plan(iotest, "--rec-set=T05_", f"--node-memory={text}")["advice"]
    assert a["node_memory_bytes"] == bytes_


@pytest.mark.parametrize("args,option", [
    (["--nodes=0"], "--nodes"),
    (["--ranks-per-node=0"], "--ranks-per-node"),
    (["--ranks-per-node=-2"], "--ranks-per-node"),
    (["--ranks-per-node=9"], "--ranks-per-node"),  # 9 producers leave no streamer
    (["--nodes=2", "--ranks-per-node=5", "--assigner"], "--ranks-per-node"),
    (["--nodes=100000", "--ranks-per-node=100000"], "--ranks-per-node"),
    (["--node-memory=lots"], "--node-memory"),
    (["--node-memory=1.5T"], "--node-memory"),
    (["--node-memory=0"], "--node-memory"),
    (["--node-memory=-4G"], "--node-memory"),
    (["--node-memory="], "--node-memory"),
    (["--facet-workers=-1"], "--facet-workers"),
    (["--facet-workers=2", "--synthetic-vis"], "--facet-workers"),
    (["--threads=0"], "--threads"),
    (["--producer-threads=0"], "--producer-threads"),
    (["--subgrid-queue=0"], "--subgrid-queue"),
    (["--writer-count=4", "--visibility-queue=2"], "--visibility-queue"),
])
def test_impossible_input_is_one_line_naming_the_option_with_status_2(iotest, args, option):
    proc = iotest("plan", "--rec-set=small", *VLAA, *args, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], proc.stderr
    assert proc.stdout == ""


def test_writing_needs_a_vis_set_as_in_run(iotest):
    proc = iotest("plan", "--rec-set=T05_", "out%d.h5", check=2)
    assert "OUTPUT" in proc.stderr and "--vis-set" in proc.stderr


def test_ska1_low_on_30_nodes_writes_its_visibilities(iotest):
    # DESIGN.md section 3: 131,328 baselines x 1024 x 8192 (~10 s here).
    r = plan(iotest, *SKA1_LOW, "--nodes=30", "--node-memory=96G", "--threads=24")
    visibilities = 131328 * 1024 * 8192
    assert r["counts"]["visibilities"] == visibilities
    assert r["observation"]["visibility_bytes"] == visibilities * 16
    a = r["advice"]
    check_layout(a)
    assert (a["producers"], a["streamers"], a["ranks_per_node"]) == (9, 51, 2)
    assert a["warnings"] == []
