"""`iotest scale` (issue 12): one job at several rank counts, or run
reports already made, with the Universal Scalability Law fitted to every
stage by tools/usl.py and its plots."""
import struct

import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, load, mpi_env

JOB = ("--rec-set=T05_ --vis-set=vlaa --time=-600:600/8/4 --freq=260e6:300e6/16/8 --dec=-40 "
       "--threads=1")


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def check(r, folder):
    sc = r["scale"]
    assert [p["n"] for p in sc["points"]] == [1, 2, 3]  # streamers of 2, 3, 4 ranks
    assert all(p["vis_per_s"] > 0 and p["stream_s"] > 0 for p in sc["points"])
    stages = {f["stage"]: f for f in sc["fits"]}
    assert {"overall", "network", "degridding"} <= set(stages)
    assert "writing" not in stages  # dry runs write nothing
    for f in stages.values():
        assert f["gamma"] > 0 and 0 <= f["alpha"] <= 1 and f["beta"] >= 0
    assert len(sc["plots"]) == 2 * len(stages)
    for plot in sc["plots"]:
        assert plot.startswith(str(folder)) and png_size(plot) == (640, 480)


@pytest.mark.long
def test_scale_runs_a_job_at_each_rank_count_and_fits(iotest, tmp_path, monkeypatch):
    for key, value in mpi_env().items():  # the runs' mpirun inherits them
        if key.startswith(("OMPI_", "OMP_")):
            monkeypatch.setenv(key, value)
    out, report = tmp_path / "study", tmp_path / "scale.json"
    # Each MPI job the study starts is bounded itself (coreutils timeout
    # kills its mpirun), and the study as a whole by the three of them: a
    # deadlock fails the test instead of hanging CI or leaving an mpirun.
    launcher = " ".join(["timeout", "-k", "10", str(MPI_TIMEOUT_S), *MPIRUN])
    proc = iotest("scale", "--ranks=2,3,4", f"--job={JOB}", f"--launcher={launcher}",
                  f"--out={out}", f"--report={report}", check=0, timeout=3 * MPI_TIMEOUT_S + 60)
    assert "Universal Scalability Law" in proc.stdout
    check(load(report), out)
    for n in (2, 3, 4):
        assert load(out / f"report-{n}.json")["pipeline"]["ranks"] == n
    # The same reports, collected: the same fit.
    again, report2 = tmp_path / "again", tmp_path / "scale2.json"
    iotest("scale", *(str(out / f"report-{n}.json") for n in (2, 3, 4)), f"--out={again}",
           f"--report={report2}", check=0)
    check(load(report2), again)
    assert load(report2)["scale"]["fits"] == load(report)["scale"]["fits"]


@pytest.mark.parametrize("args,option", [
    (["--ranks=2,3", f"--job={JOB}"], "--ranks"),
    (["--ranks=2,3,4"], "--job"),
    (["--ranks=2,3,0", f"--job={JOB}"], "--ranks"),
    (["--ranks=2,3,4", "--job=--rec-set=T05_ --no-such-option"], "--job"),
    (["--ranks=2,3,4", f"--job={JOB}", "--n=cores"], "--n"),
])
def test_scale_rejects_impossible_studies(iotest, tmp_path, args, option):
    proc = iotest("scale", *args, f"--out={tmp_path / 'study'}", check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], proc.stderr


def test_scale_refuses_what_is_not_a_run_report(iotest, tmp_path):
    plan = tmp_path / "plan.json"
    iotest("plan", "--rec-set=T05_", f"--report={plan}", check=0)
    proc = iotest("scale", str(plan), str(plan), str(plan), f"--out={tmp_path / 's'}", check=2)
    assert "plan.json" in proc.stderr and "not an `iotest run` report" in proc.stderr
