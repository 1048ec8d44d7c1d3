"""The iotest command line as users meet it: reports, exit statuses, errors."""
import json
import os

import pytest

from conftest import load


def test_recombine_t05_meets_the_accuracy_target(iotest, tmp_path):
    report = tmp_path / "t05.json"
    iotest("recombine", "--rec-set=T05_", "--source-count=10", "--direction=both",
           f"--report={report}", check=0)
    r = load(report)
    assert r["mode"] == "recombine"
    assert r["config"]["rec_set"] == "T05_"
    assert r["counts"]["facets"] == 9
    assert r["counts"]["subgrids"] == r["config"]["subgrids_per_axis"] ** 2
    acc = r["accuracy"]
    assert 0 < acc["subgrid_rmse_max"] <= 1e-8
    assert 0 < acc["facet_rmse_max"] <= 1e-8
    assert acc["subgrid_rmse"] <= acc["subgrid_rmse_max"] * 1.0001
    assert "RMS(reference)" in acc["definition"]
    assert r["timing"]["wall_s"] > 0
    for key in ("predict_subgrids_per_s", "image_subgrids_per_s", "gflops"):
        assert r["rates"][key] > 0
    assert r["memory"]["peak_rss_bytes"] > 0


def test_predict_only_reports_no_facet_accuracy(iotest, tmp_path):
    report = tmp_path / "p.json"
    iotest("recombine", "--rec-set=T05_", "--direction=predict", "--subgrids=5",
           "--check=all", f"--report={report}", check=0)
    r = load(report)
    assert r["counts"]["subgrids_processed"] == 5
    assert r["counts"]["subgrids_checked"] == 5
    assert r["accuracy"]["facet_rmse_max"] is None
    assert r["rates"]["image_subgrids_per_s"] == 0


def test_a_narrow_window_shows_in_the_accuracy(iotest, tmp_path):
    report = tmp_path / "w.json"
    iotest("recombine", "--rec-set=T05_", "--window-width=8", "--direction=predict",
           f"--report={report}", check=0)
    r = load(report)
    assert r["config"]["W"] == 8
    assert r["accuracy"]["subgrid_rmse_max"] > 1e-7


def test_plan_to_stdout_is_clean_json(iotest):
    proc = iotest("plan", "--rec-set=small", "--assigner", "--report=/dev/stdout", check=0)
    r = json.loads(proc.stdout)
    assert r["mode"] == "plan"
    assert r["counts"]["facets"] == 9
    assert r["config"]["N"] == 16384 and r["config"]["yN"] == 8192 and r["config"]["xM"] == 512
    assert r["memory"]["image_bytes"] == 16384 ** 2 * 16
    assert r["advice"]["recommended_ranks"] == 11
    assert "16k-8k-512" in proc.stderr  # the human summary moved aside


@pytest.mark.parametrize("name,facets", [("tiny", 64), ("smallish", 36), ("medium", 36),
                                         ("large", 256), ("huge", 144), ("8k-192-2k", 9216)])
def test_plan_counts_facets_of_big_sets_without_computing(iotest, name, facets):
    proc = iotest("plan", f"--rec-set={name}", "--report=-", check=0)
    assert json.loads(proc.stdout)["counts"]["facets"] == facets


@pytest.mark.parametrize("args,option", [
    (["recombine", "--rec-set=bogus"], "--rec-set"),
    (["recombine", "--rec-set=16k-8k-300"], "--rec-set"),
    (["recombine", "--rec-set=8k-5000-256"], "--rec-set"),
    (["recombine", "--rec-set=T05_", "--direction=sideways"], "--direction"),
    (["recombine", "--rec-set=T05_", "--subgrids=0"], "--subgrids"),
    (["recombine", "--rec-set=T05_", "--subgrids=many"], "--subgrids"),
    (["recombine", "--rec-set=T05_", "--subgrids=100000"], "--subgrids"),
    (["recombine", "--rec-set=T05_", "--source-count=0"], "--source-count"),
    (["recombine", "--rec-set=T05_", "--check=lots"], "--check"),
    (["recombine", "--rec-set=T05_", "--window-width=100"], "--window-width"),
    (["recombine", "--rec-set=T05_", "--window-width=abc"], "--window-width"),
    (["recombine", "--rec-set=T05_", "--report=/nonexistent-dir/r.json"], "--report"),
    (["recombine", "--rec-set=huge"], "--rec-set"),
    (["plan", "--rec-set=T05_", "--nodes=0"], "--nodes"),
    (["recombine", "--rec-set=T05_", "--threads=0"], "--threads"),
    (["recombine", "--rec-set=T05_", "--seed=-1"], "--seed"),
    (["recombine"], "--rec-set"),
    (["recombine", "--rec-set=T05_", "--no-such-option"], "--no-such-option"),
])
def test_bad_input_is_one_line_naming_the_option_with_status_2(iotest, args, option):
    proc = iotest(*args, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert option in lines[0]
    assert proc.stdout == ""


def test_a_set_too_big_for_memory_names_the_memory_it_needs(iotest):
    proc = iotest("recombine", "--rec-set=huge", check=2)
    assert "GiB" in proc.stderr and "available" in proc.stderr


def test_a_failed_run_leaves_no_report(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("recombine", "--rec-set=bogus", f"--report={report}", check=2)
    assert not report.exists()
    assert os.listdir(tmp_path) == []


def test_plan_with_a_vis_set_reports_the_visibility_side(iotest):
    proc = iotest("plan", "--rec-set=T05_", "--vis-set=vlaa", "--time=-300:300/16/8",
                  "--freq=260e6:300e6/64/32", "--dec=-20", "--report=-", check=0)
    r = json.loads(proc.stdout)
    assert r["counts"]["baselines"] == 351
    assert r["counts"]["visibilities"] == 351 * 16 * 64
    assert 1 <= r["counts"]["subgrids_used"] <= r["counts"]["subgrids"]
    o = r["observation"]
    assert o["visibility_bytes"] == 351 * 16 * 64 * 16
    assert o["vis_per_subgrid"]["min"] <= o["vis_per_subgrid"]["mean"] <= o["vis_per_subgrid"]["max"]
    assert r["config"]["dec"] == -20 and r["config"]["vis_set"] == "vlaa"
    assert "subgrids used" in proc.stderr


def test_plan_at_ska_scale_counts_published_figures(iotest):
    r = json.loads(iotest("plan", "--rec-set=small", "--vis-set=midr5", "--time=-290:290/64/64",
                          "--report=-", check=0).stdout)
    assert r["counts"]["baselines"] == 19306
    assert r["counts"]["visibilities"] == 19306 * 64 * 11264


@pytest.mark.parametrize("args,option", [
    (["plan", "--rec-set=T05_", "--vis-set=nosuch"], "--vis-set"),
    (["plan", "--rec-set=T05_", "--vis-set=vlaa", "--time=1:2"], "--time"),
    (["plan", "--rec-set=T05_", "--vis-set=vlaa", "--freq=0:1e9/4"], "--freq"),
    (["plan", "--rec-set=T05_", "--vis-set=vlaa", "--dec=91"], "--dec"),
    (["plan", "--rec-set=T05_", "--time=1:2/3"], "--time"),
    (["plan", "--rec-set=8k-8k-256", "--vis-set=lowbd2-core"], "--vis-set"),
    (["layout", "--vis-set=vlaa", "--baselines=1000"], "--baselines"),
])
def test_bad_visibility_options_are_one_line_with_status_2(iotest, args, option):
    proc = iotest(*args, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], proc.stderr


def test_degrid_reports_visibility_accuracy_and_rates(iotest, tmp_path):
    report = tmp_path / "d.json"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", "--source-count=10", f"--report={report}",
           check=0)
    r = load(report)
    assert r["mode"] == "degrid"
    assert r["counts"]["baselines"] == 351
    assert r["counts"]["visibilities"] == 351 * 8 * 16
    assert 1 <= r["counts"]["subgrids_used"] <= r["counts"]["subgrids"]
    assert 0 < r["accuracy"]["vis_rmse"] <= 1e-7
    assert r["accuracy"]["vis_rmse_max"] >= r["accuracy"]["vis_rmse"] * 0.5
    assert r["accuracy"]["vis_samples"] > 500
    assert r["rates"]["vis_per_s"] > 0
    assert len(r["sky"]["sources"]) == 10
    assert r["config"]["margin"] >= r["config"]["support"]


def test_every_report_says_where_it_was_made(iotest, tmp_path):
    # Versions, revision, host, date, the command line, and the output's
    # file system (from /proc/self/mountinfo).
    report, out = tmp_path / "e.json", tmp_path / "e.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", f"--report={report}", str(out), check=0)
    e = load(report)["environment"]
    assert e["iotest_version"] and e["git_revision"]
    assert e["hdf5_version"].count(".") == 2
    assert "MPI" in e["mpi_version"] and e["fftw_version"].startswith("fftw-3")
    assert e["date"].endswith("Z") and e["date"][4] == "-"
    assert e["hosts"] == [os.uname().nodename]
    assert "--vis-set=vlaa" in e["command_line"] and str(out) in e["command_line"]
    fs = e["output_file_system"]
    assert fs["path"] == str(out) and fs["type"] and fs["options"]
    assert str(out).startswith(fs["mount_point"])
    plan = tmp_path / "p.json"
    iotest("plan", "--rec-set=T05_", f"--report={plan}", check=0)
    assert load(plan)["environment"]["hosts"] == [os.uname().nodename]


@pytest.mark.parametrize("args,option", [
    (["degrid", "--rec-set=T05_", "--vis-set=vlaa", "--support=7"], "--support"),
    (["degrid", "--rec-set=T05_", "--vis-set=vlaa", "--w-support=40"], "--w-support"),
    (["degrid", "--rec-set=T05_", "--vis-set=vlaa", "--margin=2"], "--margin"),
    (["degrid", "--rec-set=T05_", "--vis-set=bogus"], "--vis-set"),
    (["degrid", "--rec-set=T05_"], "--vis-set"),
])
def test_bad_degrid_options_are_one_line_with_status_2(iotest, args, option):
    proc = iotest(*args, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], proc.stderr


def test_own_layout_files_are_read_and_malformed_ones_refused(iotest, tmp_path):
    good = tmp_path / "three.cfg"
    good.write_text("# observatory (long,lat)= 21.4 -30.7\n# observatory elevation = 1000 m\n"
                    "5109224.0 2006790.0 -3239100.0 13.5 A\n"
                    "5109000.0 2007000.0 -3239300.0 13.5 B\n"
                    "5108800.0 2006790.0 -3239500.0 13.5 C\n")
    r = json.loads(iotest("layout", f"--vis-set={good}", "--report=-", check=0).stdout)
    assert r["counts"]["baselines"] == 3
    assert r["layout"]["centre"]["lat_deg"] == -30.7
    no_header = tmp_path / "no_header.cfg"
    no_header.write_text("1 2 3 4 A\n5 6 7 8 B\n")
    bad_number = tmp_path / "bad_number.cfg"
    bad_number.write_text("# observatory (long,lat)= 21.4 -30.7\n1 x 3 4 A\n4 5 6 7 B\n")
    for path, words in [(no_header, "header"), (bad_number, ":2:"),
                        (tmp_path / "missing.cfg", "cannot read")]:
        proc = iotest("plan", "--rec-set=T05_", f"--vis-set={path}", check=2)
        assert words in proc.stderr and "--vis-set" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_degrid_tower_options_exclude_each_other(iotest):
    base = ["degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-60:60/2/2", "--freq=1e9:1e9/1"]
    for extra, option in [(["--wstep=4", "--margin=30"], "--wstep"),
                          (["--wstep=4", "--target-err=1e-7"], "--target-err")]:
        proc = iotest(*base, *extra, check=2)
        assert option in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
