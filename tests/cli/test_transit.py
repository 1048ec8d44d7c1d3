"""In-transit writers (issue 12, --writer-ranks): the streamers send their
chunks to a group of writer ranks over MPI with bounded slots; every
visibility is written exactly once, the files verify, the report shows
both sides, and the memory model holds for the writer ranks too."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import MPI_TIMEOUT_S, load
from test_phdf5 import phdf5  # noqa: F401 (a fixture)
from test_run import CHUNKS, OBS, VISIBILITIES, check_complete

SYNTHETIC = ["--synthetic-vis", *(a for a in OBS if not a.startswith("--source-count"))]


def roles(r):
    return [k["role"] for k in r["pipeline"]["per_rank"]]


@pytest.mark.parametrize("ranks,writer_ranks,extra", [
    (4, 1, []),
    (5, 2, []),
    # One slot everywhere: every chunk waits on the writer group.
    (4, 1, ["--visibility-queue=1", "--transit-queue=1"]),
    (5, 2, ["--visibility-queue=1", "--transit-queue=1", "--send-queue=1",
            "--subgrid-queue=1"]),
    (5, 1, ["--assigner", "--writer-count=2"]),
    (4, 2, ["--storage=posix"]),
])
def test_writer_group_writes_every_visibility_once(mpirun, iotest, tmp_path, ranks,
                                                    writer_ranks, extra):
    posix = "--storage=posix" in extra
    out, report = tmp_path / ("out%d.raw" if posix else "out%d.h5"), tmp_path / "r.json"
    mpirun(ranks, *OBS, f"--writer-ranks={writer_ranks}", *extra, str(out), f"--report={report}",
           check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    check_complete(r)
    pl = r["pipeline"]
    assert pl["writer_ranks"] == writer_ranks
    assert roles(r).count("writer") == writer_ranks
    assert roles(r)[-1] == ("assigner" if "--assigner" in extra else "writer")
    # Only the writer ranks write; one file per writer, numbered across them.
    per_rank = pl["per_rank"]
    assert all(k["bytes_written"] == 0 for k in per_rank if k["role"] != "writer")
    assert all(k["bytes_written"] > 0 for k in per_rank if k["role"] == "writer")
    files = sorted(tmp_path.glob("out*.raw" if posix else "out*.h5"))
    assert len(files) == writer_ranks * pl["writers_per_streamer"]
    assert not list(tmp_path.glob("*.partial"))
    assert "passed" in iotest("verify", "--all", *map(str, files), check=0).stdout
    t = r["transit"]
    assert t["placement"] == "in transit" and t["writer_ranks"] == writer_ranks
    # Every chunk or part of one went over once; whole ones carry 2 KiB.
    assert t["chunks_sent"] >= CHUNKS
    assert t["bytes_sent"] >= CHUNKS * 8 * 16 * 16
    received = sum(k["bytes_received"] for k in per_rank if k["role"] == "writer")
    assert received == t["bytes_sent"]
    assert t["bound"] in ("streamers", "writers", "transfer")
    assert t["suggested_writer_ranks"] >= 1
    if "--visibility-queue=1" in extra:
        streamers = [k for k in per_rank if k["role"] == "streamer"]
        assert all(k["queue_high_water"]["visibility"] == 1 for k in streamers)


def test_in_situ_report_says_so_and_suggests_writer_ranks(mpirun, tmp_path):
    report = tmp_path / "r.json"
    mpirun(3, *OBS, str(tmp_path / "out%d.h5"), f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    t = load(report)["transit"]
    assert t["placement"] == "in situ" and t["writer_ranks"] == 0 and t["chunks_sent"] == 0
    assert t["compute_bytes_per_s"] > 0 and t["write_bytes_per_s"] > 0
    assert t["suggested_writer_ranks"] >= 1


def test_stonewalled_writer_group_records_what_it_wrote(mpirun, iotest, tmp_path):
    """--duration in transit: the written parts travel to the writer ranks,
    so verify checks exactly what the files hold."""
    report = tmp_path / "r.json"
    obs = [a for a in SYNTHETIC if not a.startswith("--time")] + ["--time=-1800:1800/256/8"]
    mpirun(4, *obs, "--writer-ranks=2", "--duration=0.5", "--threads=1",
           str(tmp_path / "out%d.h5"), f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    files = sorted(map(str, tmp_path.glob("out*.h5")))
    assert len(files) == 2
    proc = iotest("verify", "--all", *files, check=0)
    assert "passed" in proc.stdout
    sw = r["stonewall"]
    assert r["counts"]["visibilities_written"] == sw["visibilities_done"]


@pytest.mark.long
def test_memory_model_holds_for_writer_ranks_and_plan_gives_it(mpirun, iotest, tmp_path):
    report = tmp_path / "r.json"
    args = ["--rec-set=T05_", "--vis-set=vlaa", "--threads=1", "--facet-workers=1",
            "--writer-ranks=1"]
    mpirun(4, *args, "--no-progress", str(tmp_path / "out%d.h5"), f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    r = load(report)
    m = r["memory"]
    # `plan` lays out the same ranks and gives the estimate run checked.
    planned = iotest("plan", *args, "--ranks-per-node=4", f"--rates-from={report}",
                     str(tmp_path / "out%d.h5"), "--report=-", check=0)
    p = json.loads(planned.stdout)
    a = p["advice"]
    assert (a["producers"], a["streamers"], a["writer_ranks"]) == (1, 2, 1)
    assert a["layout"][0]["writers"] == 1
    assert a["layout"][0]["bytes"] == m["producer_bytes"] + 2 * m["streamer_bytes"] + \
        m["writer_bytes"]
    for key in ("streamer_bytes", "writer_bytes", "items"):
        assert p["memory"][key] == m[key], key
    # ... and the writer ranks that keep pace at the rates it measured.
    t = r["transit"]
    assert a["suggested_writer_ranks"] == max(1, math.ceil(
        2 * t["compute_bytes_per_s"] / t["write_bytes_per_s"]))
    estimate = {"producer": m["producer_bytes"], "streamer": m["streamer_bytes"],
                "writer": m["writer_bytes"]}
    for k in r["pipeline"]["per_rank"]:
        measured = k["peak_rss_bytes"]
        assert 0.8 * measured <= estimate[k["role"]] <= 1.25 * measured, k
    assert sum(i["bytes"] for i in m["items"] if i["role"] == "writer") == m["writer_bytes"]


@pytest.mark.parametrize("args,option", [
    (["--writer-ranks=3"], "--writer-ranks"),  # no streamer left
    (["--writer-ranks=-1"], "--writer-ranks"),
    (["--writer-ranks=1", "--transit-queue=0"], "--transit-queue"),
    (["--writer-ranks=1", "--network-only"], "--writer-ranks"),
    (["--writer-ranks=1", "--facet-workers=2"], "--facet-workers"),
])
def test_writer_ranks_usage_errors(mpirun, tmp_path, args, option):
    extra = [] if "--network-only" in args else [str(tmp_path / "out%d.h5")]
    proc = mpirun(3, *OBS, *args, *extra, timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]
    assert len(errors) == 1 and option in errors[0], errors
    assert not os.listdir(tmp_path)


def test_writer_ranks_need_visibilities(mpirun):
    proc = mpirun(3, "--rec-set=T05_", "--writer-ranks=1", "--no-progress",
                  timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2 and "--writer-ranks" in proc.stderr


def test_rates_from_needs_a_run_report(iotest, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"mode": "plan"}')
    for path in (bad, tmp_path / "missing.json"):
        proc = iotest("plan", "--rec-set=T05_", f"--rates-from={path}")
        assert proc.returncode == 2 and "--rates-from" in proc.stderr, proc.stderr


def test_writer_ranks_share_one_phdf5_file(phdf5, mpirun, iotest, tmp_path):
    """--storage=phdf5 in transit: the writer ranks, not the streamers,
    share the one file."""
    out, report = tmp_path / "vis.h5", tmp_path / "r.json"
    mpirun(5, *OBS, "--writer-ranks=2", "--storage=phdf5", str(out), f"--report={report}",
           check=0, timeout=MPI_TIMEOUT_S)
    check_complete(load(report))
    assert [f.name for f in tmp_path.glob("*.h5")] == ["vis.h5"]
    assert "passed" in iotest("verify", "--all", str(out), check=0).stdout


@pytest.mark.long
def test_time_line_per_rank_adds_up_and_plots(mpirun, tmp_path):
    """The report's time line: every rank's intervals; the streamers'
    visibilities and the writer ranks' bytes add up to the run's, and
    tools/timeline_plot.py draws it."""
    report = tmp_path / "r.json"
    mpirun(4, *OBS, "--writer-ranks=1", "--timeline=0.05", str(tmp_path / "out%d.h5"),
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    t = r["timeline"]
    assert t["interval_s"] == 0.05
    lines = {k["rank"]: k for k in t["ranks"]}
    assert sorted(k["role"] for k in t["ranks"]) == ["producer", "streamer", "streamer", "writer"]
    for k in t["ranks"]:
        n = len(k["busy_s"])
        assert n >= 1 and all(len(k[key]) == n for key in
                              ("wait_s", "visibilities", "bytes_sent", "bytes_written"))
        assert all(0 <= b <= 0.05 + 1e-9 for b in k["busy_s"])
        assert n * 0.05 <= r["timing"]["stream_s"] + 0.05
    streamed = sum(sum(k["visibilities"]) for k in lines.values() if k["role"] == "streamer")
    assert abs(streamed - VISIBILITIES) <= len(t["ranks"]) * 100  # rounding per interval
    written = sum(sum(k["bytes_written"]) for k in lines.values() if k["role"] == "writer")
    assert abs(written - 16 * VISIBILITIES) <= 100 * 16
    sent = sum(sum(k["bytes_sent"]) for k in lines.values() if k["role"] == "producer")
    assert abs(sent - r["counts"]["bytes_sent"]) <= 100
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "timeline_plot.py")
    proc = subprocess.run([sys.executable, tool, str(report), f"--plots={tmp_path}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("timeline_ranks.png", "timeline_rates.png"):
        assert (tmp_path / name).stat().st_size > 5000


def test_no_time_line_when_asked(mpirun, tmp_path):
    report = tmp_path / "r.json"
    mpirun(3, *OBS, "--timeline=0", f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    assert "timeline" not in load(report)
