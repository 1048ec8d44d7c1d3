"""--device=cpu|cuda (issue 29): the commands that degrid or grid (run,
degrid, grid) take it, refuse CUDA in one line where this binary or this
machine cannot give it, and say the device in their report; `plan` counts
the streamers' GPU memory against --gpus-per-node GPUs of --gpu-memory
each, lays out a job every GPU holds and refuses one a GPU cannot."""
import json

import pytest

from conftest import MPI_TIMEOUT_S, load

# The smallest job of test_run.py: 3 ranks are 1 producer and 2 streamers.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--source-count=10"]
PLAN_OBS = OBS[:-1]  # plan takes no sky
GIB = 1 << 30


def has_gpu(iotest):
    """Whether this machine can run --device=cuda (then the refusal tests
    do not apply): a plan that probes the GPU succeeds."""
    proc = iotest("plan", *PLAN_OBS, "--device=cuda", "--report=-")
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert "--gpu-memory: this machine has no GPU to take it from" in proc.stderr
    return proc.returncode == 0


def one_error(proc, status=2):
    """The one line a refusal prints, less its "iotest: error: " prefix."""
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("iotest: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0][len("iotest: error: "):]


# ---- --device=cuda without CUDA or a GPU: one line, status 2 --------------


@pytest.mark.parametrize("command", [["degrid", *OBS], ["grid", *OBS]])
def test_cuda_without_a_gpu_is_one_line_saying_what_is_missing(iotest, command):
    if has_gpu(iotest):
        pytest.skip("this machine has a GPU")
    proc = iotest(*command, "--device=cuda")
    line = one_error(proc)
    assert line.startswith("--device: cuda: "), line
    # The probe's reason: a build without CUDA, or no CUDA device.
    assert "CUDA" in line, line
    assert proc.stdout == ""  # refused before any work or report


def test_cuda_without_a_gpu_stops_every_rank_of_a_run(iotest, mpirun, tmp_path):
    if has_gpu(iotest):
        pytest.skip("this machine has a GPU")
    report = tmp_path / "r.json"
    proc = mpirun(3, *OBS, "--no-progress", "--device=cuda", str(tmp_path / "out%d.h5"),
                  f"--report={report}", timeout=MPI_TIMEOUT_S)
    line = one_error(proc)
    assert line.startswith("--device: cuda: ") and "CUDA" in line, line
    assert not report.exists()
    assert not list(tmp_path.glob("out*"))


def test_cuda_on_a_run_that_computes_nothing_is_refused_naming_why(mpirun):
    proc = mpirun(3, *OBS, "--no-progress", "--device=cuda", "--synthetic-vis",
                  timeout=MPI_TIMEOUT_S)
    assert one_error(proc) == ("--device: cuda: does not apply to --synthetic-vis (nothing is "
                               "degridded)")


@pytest.mark.parametrize("command", [["degrid", *OBS], ["grid", *OBS], ["plan", *PLAN_OBS]])
def test_an_unknown_device_is_refused_naming_device(iotest, command):
    line = one_error(iotest(*command, "--device=bogus"))
    assert line == "--device: expected cpu or cuda, got 'bogus'", line


def test_an_unknown_device_stops_every_rank_of_a_run(mpirun):
    proc = mpirun(3, *OBS, "--no-progress", "--device=bogus", timeout=MPI_TIMEOUT_S)
    assert one_error(proc) == "--device: expected cpu or cuda, got 'bogus'"


# ---- --device=cpu: as before, and the report says so ---------------------


def test_cpu_degrid_reports_its_device(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("degrid", *OBS, "--device=cpu", "--vis-samples=100", f"--report={report}", check=0)
    r = load(report)  # checked against the schema
    assert r["device"] == {"kind": "cpu"}
    assert r["accuracy"]["vis_rmse"] < 1e-5
    assert "streamer_gpu_bytes" not in r["memory"]
    assert all(i["role"] != "streamer GPU" for i in r["memory"]["items"])


def test_the_default_device_is_the_cpu(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("grid", *OBS, "--pixel-samples=8", f"--report={report}", check=0)
    r = load(report)
    assert r["device"] == {"kind": "cpu"}
    assert r["accuracy"]["facet_rmse"] < 1e-5


def test_cpu_run_reports_its_device(mpirun, tmp_path):
    report = tmp_path / "r.json"
    proc = mpirun(3, *OBS, "--no-progress", "--device=cpu", str(tmp_path / "out%d.h5"),
                  f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    assert r["device"] == {"kind": "cpu"}
    assert r["counts"]["visibilities_written"] == r["counts"]["visibilities"] > 0
    assert "GPU" not in proc.stdout  # nothing about GPUs on the CPU


# ---- plan: the GPU memory, laid out and checked ----------------------------


def plan(iotest, *args):
    proc = iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--node-memory=1T", "--threads=1",
                  "--device=cuda", *args, "--report=-")
    return proc


def test_plan_counts_and_prints_each_streamers_gpu_memory(iotest):
    proc = plan(iotest, "--gpus-per-node=4", "--gpu-memory=80G")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    from schema import validate_report
    validate_report(r)
    m = r["memory"]
    items = [i for i in m["items"] if i["role"] == "streamer GPU"]
    assert items and m["streamer_gpu_bytes"] == sum(i["bytes"] for i in items)
    # The GPU's memory is its own: the host's streamer estimate is as on the CPU.
    cpu = json.loads(iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--node-memory=1T",
                            "--threads=1", "--ranks-per-node=13", "--report=-",
                            check=0).stdout)
    assert m["streamer_bytes"] == cpu["memory"]["streamer_bytes"]
    assert "streamer_gpu_bytes" not in cpu["memory"] and "device" not in cpu
    # Printed, item by item, and per GPU.
    assert "per streamer on its GPU" in proc.stderr
    for i in items:
        assert i["name"] in proc.stderr
    assert "per GPU, 4 a node, of 80.0 GiB (--gpu-memory)" in proc.stderr
    assert r["device"]["kind"] == "cuda"


def test_plan_lays_out_one_streamer_per_gpu(iotest):
    proc = plan(iotest, "--gpus-per-node=4", "--gpu-memory=80G", "--nodes=2")
    assert proc.returncode == 0, proc.stderr
    a = json.loads(proc.stdout)["advice"]
    gpu = json.loads(proc.stdout)["memory"]["streamer_gpu_bytes"]
    assert a["gpus_per_node"] == 4 and a["gpu_memory_bytes"] == 80 * GIB
    assert a["gpu_memory_source"] == "--gpu-memory"
    # 9 producers dealt 5 and 4 over the nodes: 8 ranks a node, so no node
    # holds more streamers than GPUs.
    assert a["ranks_per_node"] == 8 and a["streamers"] == 7
    assert [g["streamers"] for g in a["layout"]] == [3, 4]
    assert all(g["streamers_per_gpu"] == 1 and g["gpu_bytes"] == gpu for g in a["layout"])
    assert "one streamer per GPU" in a["rule"]


def test_plan_refuses_a_gpu_that_cannot_hold_its_streamers(iotest):
    fits = json.loads(plan(iotest, "--gpus-per-node=2", "--gpu-memory=80G").stdout)
    one = fits["memory"]["streamer_gpu_bytes"]
    # 9 producers and 5 streamers on a node of 2 GPUs: 3 on the busiest.
    proc = plan(iotest, "--gpus-per-node=2", f"--gpu-memory={3 * one - 1}", "--ranks-per-node=14")
    line = one_error(proc)
    assert line.startswith("--gpu-memory: node 0: 5 streamer(s) on 2 GPU(s), 3 on the busiest"), \
        line
    gib = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
    assert f"= {gib(3 * one)} estimated" in line, line
    assert f"more than the {gib(3 * one - 1)} of a GPU (--gpu-memory)" in line, line
    assert proc.stdout == ""
    # With room for the three it is laid out.
    ok = plan(iotest, "--gpus-per-node=2", f"--gpu-memory={3 * one}", "--ranks-per-node=14")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["advice"]["layout"][0]["gpu_bytes"] == 3 * one


def test_plan_gpu_options_belong_to_cuda(iotest):
    proc = iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--gpus-per-node=4")
    assert one_error(proc).startswith("--gpus-per-node: applies to --device=cuda")
    proc = iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--device=cuda",
                  "--gpus-per-node=0", "--gpu-memory=80G")
    assert one_error(proc) == "--gpus-per-node: expected a GPU count >= 1, got 0"


def test_plan_without_a_gpu_here_needs_its_memory(iotest):
    if has_gpu(iotest):
        pytest.skip("this machine has a GPU")
    line = one_error(iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--device=cuda"))
    assert line.startswith("--gpu-memory: this machine has no GPU to take it from ("), line


def test_plan_slurm_asks_for_the_gpus_and_runs_on_them(iotest):
    proc = iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--node-memory=1T", "--threads=1",
                  "--device=cuda", "--gpus-per-node=4", "--gpu-memory=80G", "--nodes=2",
                  "--cores-per-node=64", "--slurm", check=0)
    script = proc.stdout
    assert "#SBATCH --gpus-per-node=4\n" in script
    assert "#SBATCH --ntasks-per-node=8\n" in script
    run = [line for line in script.splitlines() if line.strip().startswith("iotest run ")]
    assert run and "--device=cuda" in run[0], script
    assert "--gpu-memory" not in script  # plan's alone
    cpu = iotest("plan", "--rec-set=small", "--vis-set=vlaa", "--node-memory=1T", "--threads=1",
                 "--slurm", check=0).stdout
    assert "--gpus-per-node" not in cpu and "--device" not in cpu
