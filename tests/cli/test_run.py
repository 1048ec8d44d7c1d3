"""The distributed pipeline end to end under mpirun (each job under a
timeout): every role layout and queue setting must finish, write every
visibility exactly once and match the direct Fourier transform."""
import os

import pytest

from conftest import MPI_TIMEOUT_S, load

# 351 baselines x 16 dumps x 32 channels = 179,712 visibilities in chunks of
# 8 x 16: small enough for CI, with chunks shared by several subgrids.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--source-count=10", "--no-progress"]
VISIBILITIES = 351 * 16 * 32
CHUNKS = 351 * 2 * 2


def check_complete(r, files=None):
    c = r["counts"]
    assert c["visibilities"] == VISIBILITIES
    assert c["visibilities_written"] == VISIBILITIES, "every visibility written exactly once"
    assert c["chunks_written"] >= CHUNKS  # a chunk split over streamers is in several files
    chunk_bytes = 8 * 16 * 16
    assert c["bytes_written"] == (c["chunks_written"] + c["chunks_rewritten"]) * chunk_bytes
    assert c["bytes_sent"] == c["bytes_received"] > 0
    a = r["accuracy"]
    assert 0 < a["subgrid_rmse_max"] <= 1e-8
    assert 0 < a["vis_rmse"] <= 1e-7
    assert a["vis_samples"] > 500
    ranks = r["pipeline"]["per_rank"]
    assert len(ranks) == r["pipeline"]["ranks"]
    assert sum(k["visibilities"] for k in ranks) == VISIBILITIES


@pytest.mark.parametrize("ranks,extra", [
    (2, []),
    (3, []),
    (5, []),
    (3, ["--assigner"]),
    (5, ["--assigner", "--facet-workers=2"]),
    (4, ["--facet-workers=1"]),  # one producer holds all 9 facets
    # One slot everywhere: back-pressure at every stage.
    (3, ["--send-queue=1", "--subgrid-queue=1", "--task-queue=1", "--bls-per-task=1",
         "--visibility-queue=1"]),
    (5, ["--assigner", "--send-queue=1", "--subgrid-queue=1", "--task-queue=1"]),
    (3, ["--facet-workers=1", "--threads=2", "--producer-threads=2", "--writer-count=2"]),
    (3, ["--fork-writer", "--writer-count=2"]),
])
def test_pipeline_writes_every_visibility(mpirun, iotest, tmp_path, ranks, extra):
    out, report = tmp_path / "out%d.h5", tmp_path / "r.json"
    mpirun(ranks, *OBS, *extra, str(out), f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    r = load(report)
    check_complete(r)
    pl = r["pipeline"]
    assert pl["assigner"] == ("--assigner" in extra)
    writers = pl["streamers"] * pl["writers_per_streamer"]
    files = sorted(tmp_path.glob("out*.h5"))
    assert [f.name for f in files] == [f"out{i}.h5" for i in range(writers)]
    assert not list(tmp_path.glob("*.partial"))
    proc = iotest("verify", *map(str, files), check=0)
    assert "passed" in proc.stdout
    if "--subgrid-queue=1" in extra:
        streamers = [k for k in pl["per_rank"] if k["role"] == "streamer"]
        assert all(k["queue_high_water"]["subgrid"] == 1 for k in streamers)
    if "--send-queue=1" in extra:
        producers = [k for k in pl["per_rank"] if k["role"] == "producer"]
        assert all(k["queue_high_water"]["send"] == 1 for k in producers)


def test_report_carries_rates_and_role_timings(mpirun, tmp_path):
    report = tmp_path / "r.json"
    # A dry run: the null back-end.
    mpirun(3, *OBS, f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    assert r["mode"] == "run"
    assert r["config"]["backend"] == "null"
    for key in ("net_bytes_per_s", "write_bytes_per_s", "vis_per_s", "subgrids_per_s"):
        assert key in r["rates"]
    assert r["rates"]["net_bytes_per_s"] > 0
    assert r["timing"]["stream_s"] > 0
    roles = r["timing"]["roles"]
    assert roles["producer"]["ranks"] == 1 and roles["streamer"]["ranks"] == 2
    assert r["pipeline"]["bound"] in ("network", "degridding", "storage", "producers")
    assert 0 <= r["pipeline"]["slowest_rank"] < 3
    # Where the time went, per stage: each positive and in its role, the
    # ranks' figures adding up to the run's.
    stages = r["timing"]["stages"]
    per_rank = r["pipeline"]["per_rank"]
    for key in ("facet_s", "column_s", "contribution_s", "assembly_s", "tower_s",
                "degrid_task_s"):
        assert stages[key] > 0, key
        assert abs(sum(k["stages"][key] for k in per_rank) - stages[key]) < 1e-9
    producer = next(k for k in per_rank if k["role"] == "producer")
    assert producer["stages"]["tower_s"] == 0 and producer["stages"]["column_s"] > 0
    assert all(k["stages"]["column_s"] == 0 for k in per_rank if k["role"] == "streamer")


def test_recombination_alone_checks_subgrids(mpirun, tmp_path):
    report = tmp_path / "r.json"
    proc = mpirun(2, "--rec-set=T05_", "--no-progress", f"--report={report}", check=0,
                  timeout=MPI_TIMEOUT_S)
    assert "iotest run: T05_" in proc.stdout  # the plan, printed before starting
    r = load(report)
    assert r["counts"]["subgrids_processed"] == 36
    assert 0 < r["accuracy"]["subgrid_rmse_max"] <= 1e-8
    assert r["counts"]["bytes_sent"] == 36 * 9 * 64 * 64 * 16


def test_zero_facet_workers_degrid_zeros_without_deadlock(mpirun, tmp_path):
    report = tmp_path / "r.json"
    mpirun(2, *OBS, "--facet-workers=0", f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    r = load(report)
    assert r["pipeline"]["producers"] == 0
    assert r["counts"]["visibilities_written"] == VISIBILITIES
    assert r["counts"]["bytes_sent"] == 0
    assert r["accuracy"]["vis_samples"] == 0  # zero data: nothing to compare


def test_runs_without_mpirun(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("--rec-set=T05_", "--no-progress", f"--report={report}", check=0)
    r = load(report)
    assert r["pipeline"]["ranks"] == 1 and r["pipeline"]["producers"] == 1


@pytest.mark.parametrize("args,option", [
    (["--send-queue=0"], "--send-queue"),
    (["--subgrid-queue=0"], "--subgrid-queue"),
    (["--facet-workers=7"], "--facet-workers"),
    (["--time=-1800:1800"], "--time"),
    (["--writer-count=0"], "--writer-count"),
])
def test_bad_flags_fail_cleanly(mpirun, tmp_path, args, option):
    base = [a for a in OBS if not a.startswith(option.split("=")[0])]
    proc = mpirun(3, *base, *args, str(tmp_path / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]
    assert len(errors) == 1 and option in errors[0]
    assert not os.listdir(tmp_path)


def test_unwritable_output_fails_before_any_work(mpirun, tmp_path):
    proc = mpirun(3, *OBS, str(tmp_path / "missing" / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "OUTPUT" in proc.stderr and "cannot create" in proc.stderr
    assert not os.listdir(tmp_path)


# Storage only: no producers, no degridding, a pattern in the real run's chunks.
SYNTHETIC = ["--synthetic-vis", *(a for a in OBS if not a.startswith("--source-count"))]


def synthetic_run(mpirun, tmp_path, ranks=2, *extra):
    out, report = tmp_path / "out%d.h5", tmp_path / "r.json"
    mpirun(ranks, *SYNTHETIC, *extra, str(out), f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    return load(report), sorted(tmp_path.glob("out*.h5"))


def test_synthetic_vis_writes_every_visibility_once(mpirun, iotest, tmp_path):
    r, files = synthetic_run(mpirun, tmp_path)
    pl, c = r["pipeline"], r["counts"]
    assert pl["synthetic_vis"] is True
    assert pl["producers"] == 0 and pl["streamers"] == 2
    assert c["visibilities"] == c["visibilities_written"] == VISIBILITIES
    assert sum(k["visibilities"] for k in pl["per_rank"]) == VISIBILITIES
    assert c["chunks_written"] >= CHUNKS
    assert c["bytes_written"] == (c["chunks_written"] + c["chunks_rewritten"]) * 8 * 16 * 16
    assert c["bytes_sent"] == 0
    assert "accuracy" not in r and "sky" not in r  # no sky, nothing to compare
    assert pl["bound"] in ("storage", "chunk assembly")
    assert [f.name for f in files] == ["out0.h5", "out1.h5"]
    verify = tmp_path / "v.json"
    proc = iotest("verify", *map(str, files), f"--report={verify}", check=0)
    assert "synthetic" in proc.stdout and "passed" in proc.stdout
    v = load(verify)
    assert v["verification"]["synthetic"] is True
    assert v["verification"]["chunks_present"] == CHUNKS


def test_synthetic_files_say_so_and_a_changed_value_fails_verify(mpirun, iotest, tmp_path):
    h5py = pytest.importorskip("h5py")
    _, files = synthetic_run(mpirun, tmp_path)
    with h5py.File(files[0], "r+") as f:
        assert f["Header/extra_keywords/iotest_synthetic_vis"][()] == 1
        assert b"synthetic" in f["Header/history"][()]
        # Chunk (0, 0), zeros where not this file's (h5py reads {r, i} as complex).
        block = f["Data/visdata"][0:8, 0:16, 0]
        f["Data/visdata"][0:8, 0:16, 0] = block + 0.5j
    # --samples: one visibility in every chunk, so the changed chunk is among them.
    proc = iotest("verify", *map(str, files), f"--samples={CHUNKS}", check=1)
    assert "differ from the synthetic pattern" in proc.stdout


@pytest.mark.parametrize("args,option", [
    (["--rec-set=T05_", "--synthetic-vis", "--no-progress"], "--synthetic-vis"),  # no --vis-set
    ([*SYNTHETIC, "--facet-workers=1"], "--facet-workers"),
])
def test_synthetic_vis_usage_errors(mpirun, tmp_path, args, option):
    proc = mpirun(2, *args, str(tmp_path / "out%d.h5"), timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]
    assert len(errors) == 1 and option in errors[0], proc.stderr
    assert not os.listdir(tmp_path)


def test_network_only_sends_the_walks_contributions_and_computes_nothing(mpirun, tmp_path):
    """--network-only (issue 12's collective pattern): the same walk, slots
    and back-pressure, the contributions sent as they are; the memory model
    holds without facets or towers."""
    from test_scale import check_estimate
    report = tmp_path / "r.json"
    mpirun(3, "--rec-set=T05_", "--vis-set=vlaa", "--network-only", "--send-queue=1",
           "--subgrid-queue=1", "--no-progress", f"--report={report}", check=0)
    r = load(report)
    pl = r["pipeline"]
    assert pl["network_only"] and pl["bound"] == "network" and "accuracy" not in r
    parts = pl["subgrid_parts"]
    assert r["counts"]["bytes_sent"] == r["counts"]["bytes_received"] == parts * 9 * 64 * 64 * 16
    assert sum(k["subgrids"] for k in pl["per_rank"]) == parts
    assert sum(k["visibilities"] for k in pl["per_rank"]) == 0
    check_estimate(r)
    names = {i["name"] for i in r["memory"]["items"] if i["role"] == "producer"}
    assert "prepared facets" not in names
    proc = mpirun(3, "--rec-set=T05_", "--vis-set=vlaa", "--network-only",
                  str(tmp_path / "vis%d.h5"), check=2)
    assert "--network-only" in proc.stderr


def test_per_peer_host_traffic_on_one_host_names_no_link(mpirun, tmp_path):
    """Issue 37, item 4: every rank's contributions per peer host, with
    their seconds in flight; on one host no link is crossed, so none is
    judged and none named (tests/cluster/test_slow_link.py: three hosts)."""
    report = tmp_path / "r.json"
    proc = mpirun(3, "--rec-set=T05_", "--vis-set=vlaa", "--network-only", "--no-progress",
                  f"--report={report}", check=0)
    r = load(report)
    pl = r["pipeline"]
    host = pl["per_rank"][0]["host"]
    assert {p["peer_host"] for p in pl["peers"]} == {host}
    by_rank = {p["rank"]: p for p in pl["peers"]}
    for k in pl["per_rank"]:
        p = by_rank[k["rank"]]
        assert (p["bytes_sent"], p["bytes_received"]) == (k["bytes_sent"], k["bytes_received"])
        assert p["messages_sent"] == k["messages_sent"]
        assert p["messages_received"] == k["messages_received"]
    sent = sum(p["sent_in_flight_s"] for p in pl["peers"])
    received = sum(p["received_in_flight_s"] for p in pl["peers"])
    assert sent > 0 and abs(sent - received) <= 1e-9 * max(1.0, sent)
    assert pl["links"] == [] and pl["slow_link"] == ""
    assert "links between hosts: none crossed (one host)" in proc.stdout
    assert "bound by network\n" in proc.stdout


@pytest.mark.long
def test_repetitions_report_every_rates_min_median_and_max(mpirun, iotest, tmp_path):
    """--repetitions=3: the job three times in one mpirun; every rate has
    three values and their min <= median <= max; the last outputs verify."""
    report = tmp_path / "r.json"
    proc = mpirun(3, *OBS, "--repetitions=3", str(tmp_path / "out%d.h5"), f"--report={report}",
                  check=0, timeout=MPI_TIMEOUT_S)
    # The plan before the first, the summary after the last: once each.
    assert proc.stdout.count("iotest run: T05_") == 2
    r = load(report)
    check_complete(r)
    reps = r["repetitions"]
    assert reps["count"] == 3
    for name in ("timing.stream_s", "rates.vis_per_s", "rates.write_bytes_per_s"):
        f = reps["figures"][name]
        assert len(f["values"]) == 3 and all(v > 0 for v in f["values"])
        assert f["min"] == min(f["values"]) and f["max"] == max(f["values"])
        assert f["min"] <= f["median"] <= f["max"]
    assert r["rates"]["vis_per_s"] == reps["figures"]["rates.vis_per_s"]["values"][-1]
    files = sorted(map(str, tmp_path.glob("out*.h5")))
    assert len(files) == 2 and not list(tmp_path.glob("*.partial"))
    assert "passed" in iotest("verify", "--all", *files, check=0).stdout
    single = tmp_path / "single.json"
    mpirun(3, *OBS, f"--report={single}", check=0, timeout=MPI_TIMEOUT_S)
    assert "repetitions" not in load(single)


def test_an_array_at_the_pole_runs_with_w_zero_and_verifies(mpirun, iotest, tmp_path):
    """vlaa@pole (issue 13's like-for-like mode): the predecessor's geometry,
    w = 0 exactly; the files name the set so verify rebuilds the same."""
    obs = [a for a in OBS if not a.startswith(("--vis-set", "--dec"))]
    report = tmp_path / "r.json"
    mpirun(3, *obs, "--vis-set=vlaa@pole", str(tmp_path / "out%d.h5"), f"--report={report}",
           check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    check_complete(r)
    assert r["config"]["vis_set"] == "vlaa@pole" and r["config"]["dec"] == 90
    # No w kernel: one plane a subgrid, a margin for the u, v kernel alone.
    assert r["config"]["w_free"] is True
    assert r["config"]["margin"] == r["config"]["support"] + 2
    assert r["accuracy"]["vis_rmse"] < 1e-7
    files = sorted(map(str, tmp_path.glob("out*.h5")))
    assert "passed" in iotest("verify", *files, check=0).stdout
