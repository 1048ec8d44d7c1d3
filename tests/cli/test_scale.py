"""SKA scale (issue 9): memory is bounded by the queues, not by the
observation; the memory model the plan prints is what every role holds;
--duration stonewalls a run and projects the whole observation."""
import os

import pytest

from conftest import MPI_TIMEOUT_S, load

SMALL_LOW = ["--rec-set=small", "--vis-set=lowbd2", "--freq=260e6:300e6/1024/64", "--dec=-30",
             "--threads=1", "--no-progress"]


def per_role(r):
    """(role, measured peak RSS, estimate) for every rank."""
    m = r["memory"]
    estimate = {"producer": m["producer_bytes"], "streamer": m["streamer_bytes"],
                "assigner": m.get("assigner_bytes", 0)}
    return [(k["role"], k["peak_rss_bytes"], estimate[k["role"]])
            for k in r["pipeline"]["per_rank"]]


def check_estimate(r):
    for role, measured, estimate in per_role(r):
        # Within 25 % of the measured peak, never below 80 % of it.
        assert 0.8 * measured <= estimate <= 1.25 * measured, (role, measured, estimate)


@pytest.mark.long
@pytest.mark.parametrize("ranks,args", [
    (3, ["--rec-set=T05_", "--vis-set=vlaa", "--no-progress"]),
    (3, ["--rec-set=small", "--vis-set=vlaa", "--time=-230:230/128/64",
         "--freq=260e6:300e6/2048/64", "--dec=34", "--threads=1", "--duration=8",
         "--no-progress"]),
    (2, [*SMALL_LOW, "--time=-460:460/64/64", "--duration=8"]),
])
def test_memory_estimate_holds_for_every_role(mpirun, tmp_path, ranks, args):
    report = tmp_path / "r.json"
    mpirun(ranks, *args, f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    check_estimate(r)
    # The model lists what it counts, and its items add up per role.
    items = r["memory"]["items"]
    assert sum(i["bytes"] for i in items if i["role"] == "streamer") == \
        r["memory"]["streamer_bytes"]


@pytest.mark.long
def test_memory_is_flat_in_the_observation_length(mpirun, tmp_path):
    """16 times the time steps: every role's peak RSS within 15 %."""
    peaks = []
    for steps in (64, 1024):
        report = tmp_path / f"r{steps}.json"
        mpirun(2, *SMALL_LOW, f"--time=-460:460/{steps}/64", "--duration=6",
               f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
        r = load(report)
        assert r["counts"]["visibilities"] == 131328 * steps * 1024
        peaks.append({role: measured for role, measured, _ in per_role(r)})
    for role in peaks[0]:
        assert abs(peaks[1][role] - peaks[0][role]) < 0.15 * peaks[0][role], (role, peaks)


@pytest.mark.long
@pytest.mark.parametrize("extra,duration,output", [
    # The first task ends some seconds into the stream: 8 s once ended
    # before it under ctest -j 2 (MPICH, nothing done); the whole run is
    # over an hour, so 15 s still ends early.
    ([], 15, False),
    # Files (each UVH5 header alone is 0.4 GB here): a longer run.
    (["--assigner", "--fork-writer", "--writer-count=2"], 12, True),
])
def test_duration_stonewalls_and_projects(mpirun, iotest, tmp_path, extra, duration, output):
    report = tmp_path / "r.json"
    proc = mpirun(3 + ("--assigner" in extra), *SMALL_LOW, "--time=-460:460/64/64",
                  f"--duration={duration}", *extra,
                  *([str(tmp_path / "vis%d.h5")] if output else []),
                  f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    w = r["stonewall"]
    assert w["ended_early"]
    assert w["duration_s"] == duration
    assert 0 < w["visibilities_done"] < w["visibilities_total"] == r["counts"]["visibilities"]
    assert w["fraction"] == pytest.approx(w["visibilities_done"] / w["visibilities_total"])
    assert 0 < w["visits_walked"] < w["visits_total"]
    assert w["projected_s"] == pytest.approx(r["timing"]["stream_s"] / w["fraction"])
    assert r["accuracy"]["vis_rmse"] < 1e-7
    assert f"stonewall {duration} s" in proc.stdout
    if not output:
        return

    # The files list what they hold: verify checks exactly that, every
    # visibility the run says it did, ...
    files = sorted(str(f) for f in tmp_path.glob("vis*.h5"))
    assert len(files) >= 2 and len(files) % 2 == 0  # two per streamer
    checked = tmp_path / "v.json"
    iotest("verify", *files, f"--report={checked}", check=0)
    v = load(checked)["verification"]
    assert v["stonewalled"] and v["passed"]
    assert v["visibilities_written"] == w["visibilities_done"]
    assert v["written_parts"] > 0
    assert 0 < v["chunks_present"] == v["chunks_expected"] < r["observation"]["time_chunks"] * \
        r["observation"]["freq_chunks"] * r["counts"]["baselines"]
    # ... and fails when a chunk inside the written parts is missing: each
    # streamer's two files hold different chunks and the same list. The
    # largest file holds chunks (a streamer may have done nothing).
    largest = max(files, key=lambda f: os.path.getsize(f))
    proc = iotest("verify", *[f for f in files if f != largest], check=1)
    assert "chunks of the written parts missing" in proc.stdout


def test_duration_longer_than_the_run_changes_nothing(mpirun, tmp_path):
    report = tmp_path / "r.json"
    mpirun(3, "--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
           "--freq=260e6:300e6/32/16", "--no-progress", "--duration=600",
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    w = r["stonewall"]
    assert not w["ended_early"]
    assert w["fraction"] == 1.0
    assert w["visits_walked"] == w["visits_total"]
    assert r["counts"]["visibilities_written"] == r["counts"]["visibilities"]


@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_bad_duration_is_a_usage_error(mpirun, value):
    proc = mpirun(2, "--rec-set=T05_", "--vis-set=vlaa", f"--duration={value}",
                  timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2
    assert "--duration" in proc.stderr


@pytest.mark.long
def test_memory_is_flat_in_the_chunk_size(mpirun, tmp_path):
    """Issue 27: the visibility queue's default is a budget in bytes, so a
    streamer's peak RSS at 1 MiB chunks stays within 25 % of its figure at
    64 KiB on the same observation, and the memory model holds at both."""
    peaks = {}
    for channels in (64, 1024):  # 64 dumps x 64 or 1024 channels: 64 KiB or 1 MiB
        report = tmp_path / f"r{channels}.json"
        mpirun(2, "--synthetic-vis", "--rec-set=T05_", "--vis-set=vlaa",
               "--time=-1800:1800/128/64", f"--freq=260e6:300e6/2048/{channels}", "--dec=10",
               "--no-progress", str(tmp_path / "out%d.bin"), f"--report={report}", check=0,
               timeout=MPI_TIMEOUT_S)
        r = load(report)
        assert r["pipeline"]["queues"]["visibility"] == (1024 if channels == 64 else 64)
        check_estimate(r)
        peaks[channels] = max(m for role, m, _ in per_role(r) if role == "streamer")
    assert peaks[1024] <= 1.25 * peaks[64], peaks
