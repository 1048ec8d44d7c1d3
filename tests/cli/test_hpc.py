"""iotest on a cluster (issue 14): `plan --slurm` job scripts, %h in output
paths for node-local storage, --config files and the resolved
configuration every report records, grouped --help with an example, and
docs/cli.md kept current."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import MPI_TIMEOUT_S, iotest_binary, load, mpi_flavour

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SMALL = ["--rec-set=small", "--vis-set=vlaa", "--time=-300:300/16/8",
         "--freq=260e6:300e6/64/32"]
TINY_RUN = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
            "--freq=260e6:300e6/32/16", "--dec=-40", "--no-progress"]
COMMANDS = ["run", "plan", "recombine", "degrid", "grid", "read", "verify", "net", "h5",
            "scale", "layout"]


def sbatch(script, key):
    values = re.findall(rf"^#SBATCH --{key}(?:=(\S+))?$", script, re.M)
    assert len(values) == 1, (key, script)
    return values[0]


def launch_line(script):
    """The srun or mpirun command, continuation lines joined."""
    joined = script.replace("\\\n", " ")
    lines = [l for l in joined.splitlines() if re.match(r"\s*(srun|mpirun|/\S*mpiexec\S*) ", l)]
    assert len(lines) == 1, script
    return lines[0].split()


@pytest.mark.parametrize("nodes", [1, 16])
def test_plan_slurm_prints_a_job_script_for_the_layout(iotest, tmp_path, nodes):
    report = tmp_path / "plan.json"
    out = "/local/%h/vis%d.h5"
    proc = iotest("plan", *SMALL, f"--nodes={nodes}", "--cores-per-node=64", "--slurm",
                  "--partition=batch", "--send-queue=16", out, f"--report={report}", check=0)
    script = proc.stdout
    advice = load(report)["advice"]
    # stdout is the script alone (`> job.sh`); the plan's summary on stderr.
    assert script.startswith("#!/bin/bash\n")
    assert proc.stderr.startswith("iotest plan: small") and "#SBATCH" not in proc.stderr
    assert advice["job_script"] == script
    k = advice["ranks_per_node"]
    assert advice["nodes"] == nodes
    assert sbatch(script, "nodes") == str(nodes)
    assert sbatch(script, "ntasks-per-node") == str(k)
    cpus = max(1, 64 // k)
    assert sbatch(script, "cpus-per-task") == str(cpus)
    assert sbatch(script, "partition") == "batch"
    assert sbatch(script, "overcommit") == ""
    assert re.search(r"^export OMP_WAIT_POLICY=PASSIVE", script, re.M) or \
        "OMP_WAIT_POLICY=PASSIVE" in script
    words = launch_line(script)
    assert words[0] == "srun"
    # Each MPI's own settings: Open MPI's yield, MPICH's PMI-2 under srun.
    if mpi_flavour() == "openmpi":
        assert "OMPI_MCA_mpi_yield_when_idle=1" in script
    else:
        assert "OMPI_" not in script and words[1] == "--mpi=pmi2"
    assert f"--ntasks={nodes * k}" in words
    assert f"--cpus-per-task={cpus}" in words
    assert any(w.startswith("--cpu-bind=") for w in words)
    # A rank that dies ends the step, whatever the site's KillOnBadExit.
    assert "--kill-on-bad-exit=1" in words[:words.index("run")]
    # The run the plan was made for: its options, the plan's threads, the
    # output pattern with %h; none of plan's own.
    run = words[words.index("run"):]
    for option in [*SMALL, "--send-queue=16", f"--threads={advice['threads']}",
                   f"--producer-threads={advice['producer_threads']}"]:
        assert option in run, (option, run)
    assert out in run
    assert not any(w.startswith(("--nodes", "--cores-per-node", "--slurm", "--partition"))
                   for w in run)
    assert advice["threads"] == max(1, 64 // k)
    bash = shutil.which("bash")
    subprocess.run([bash, "-n"], input=script, text=True, check=True)


def test_plan_slurm_with_mpirun_maps_by_node(iotest):
    proc = iotest("plan", *SMALL, "--nodes=2", "--ranks-per-node=8", "--cores-per-node=32",
                  "--slurm", "--launcher=mpirun", check=0)
    words = launch_line(proc.stdout)
    if mpi_flavour() == "mpich":  # Hydra's mpiexec, by its path
        assert words[0].endswith("mpiexec.mpich") or words[0].endswith("mpiexec"), words
        assert words[1:7] == ["-n", "16", "-ppn", "8", "-bind-to", "core:4"], words
        return
    assert words[:3] == ["mpirun", "-np", "16"]
    assert "ppr:8:node:PE=4" in words
    assert words[words.index("--bind-to") + 1] == "core"


@pytest.mark.parametrize("args,option", [
    (["--launcher=aprun"], "--launcher"),
    (["--time-limit=soon"], "--time-limit"),
    (["--time-limit=0:30"], "--time-limit"),  # under a minute
    (["--time-limit=1-2-3"], "--time-limit"),
    (["--cores-per-node=0"], "--cores-per-node"),
])
def test_plan_slurm_refuses_bad_options(iotest, args, option):
    proc = iotest("plan", *SMALL, "--slurm", *args, check=2)
    assert proc.stderr.startswith(f"iotest: error: {option}"), proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("limit,duration", [
    ("1", 35),             # 60 s less 10 s setup, 10 s drain, 5 s margin
    ("10:00", 450),        # 600 s less 60 + 60 + 30
    ("02:00:00", 5700),    # 7200 s less 600 + 600 + 300 (10 % and 5 %, capped)
    ("1-00", 84900),       # a day less 600 + 600 + 300
])
def test_plan_slurm_stops_the_run_before_the_time_limit(iotest, limit, duration):
    script = iotest("plan", *SMALL, "--slurm", f"--time-limit={limit}", check=0).stdout
    assert sbatch(script, "time") == limit
    assert f"--duration={duration}" in launch_line(script)
    assert f"--duration={duration} s (stonewalling)" in script  # the rule, stated


def test_host_in_output_paths(mpirun, tmp_path):
    host = socket.gethostname()
    (tmp_path / host).mkdir()
    report = tmp_path / "run.json"
    mpirun(2, *TINY_RUN, "--synthetic-vis", str(tmp_path / "%h" / "vis%d.h5"),
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    written = sorted(os.listdir(tmp_path / host))
    assert written == ["vis0.h5", "vis1.h5"]
    # The report's file system is the expanded folder's.
    env = load(report)["environment"]
    assert env["output_file_system"]["path"].endswith("%h/vis%d.h5")
    assert env["output_file_system"]["mount_point"].startswith("/")


def test_host_in_a_shared_file_is_refused(mpirun, tmp_path):
    proc = mpirun(2, *TINY_RUN, "--synthetic-vis", "--storage=phdf5",
                  str(tmp_path / "%h.h5"), check=2, timeout=MPI_TIMEOUT_S)
    assert "%h" in proc.stderr and proc.stderr.count("iotest: error:") == 1


def write(path, text):
    path.write_text(text)
    return str(path)


def test_config_file_holds_options_and_the_command_line_wins(iotest, tmp_path):
    config = write(tmp_path / "job.toml",
                   'rec-set = "small"\nvis-set = "vlaa"\ntime = "-300:300/16/8"\n'
                   'send-queue = 4\nassigner = true\n[plan]\nnodes = 3\n'
                   '[run]\nnodes_is_not_read = 1\n')
    a = json.loads(iotest("plan", f"--config={config}", "--report=-", check=0).stdout)
    assert a["config"]["rec_set"] == "small"
    assert a["advice"]["nodes"] == 3 and a["advice"]["assigner"] is True
    assert a["observation"]["vis_set"] == "vlaa"
    b = json.loads(iotest("plan", "--config", config, "--nodes=5", "--rec-set=tiny",
                          "--report=-", check=0).stdout)
    assert b["advice"]["nodes"] == 5 and b["config"]["rec_set"] == "tiny"


def test_config_repeats_a_run_from_its_report(iotest, tmp_path):
    first = json.loads(iotest("plan", *SMALL, "--nodes=2", "--subgrid-queue=7",
                              "--node-memory=64G", "--report=-",
                              check=0).stdout)
    configuration = first["environment"]["configuration"]
    assert "subgrid-queue = 7" in configuration
    assert 'rec-set = "small"' in configuration
    assert "send-queue = 8" in configuration  # defaults too
    again = json.loads(iotest("plan", f"--config={write(tmp_path / 'c.toml', configuration)}",
                              "--report=-", check=0).stdout)
    for section in ["config", "advice", "memory", "observation"]:
        assert again[section] == first[section], section
    assert again["environment"]["configuration"] == configuration


def test_config_back_end_options_are_dotted_keys(iotest, tmp_path):
    out = tmp_path / "vis.bin"
    config = write(tmp_path / "d.toml", 'rec-set = "T05_"\nvis-set = "vlaa"\n'
                   'time = "-1800:1800/16/8"\nfreq = "260e6:300e6/32/16"\nstorage = "posix"\n'
                   '[posix]\nfsync = "chunk"\n')
    report = json.loads(iotest("degrid", f"--config={config}", str(out), "--report=-",
                               check=0).stdout)
    assert report["config"]["backend"] == "posix"
    assert "chunk" in report["config"]["durability"]
    assert "posix.fsync" in report["environment"]["configuration"]


@pytest.mark.parametrize("text,start,needle", [
    ('rec-set = "small"\nno-such-option = 3\n', "--config", "no-such-option"),
    ('rec-set = "small"\n[posix]\nno-such = 1\n', "--config", "posix.no-such"),
    ('rec-set = "small"\nnodes = "many"\n', "", "--nodes"),
])
def test_config_faults_are_one_line(iotest, tmp_path, text, start, needle):
    config = write(tmp_path / "bad.toml", text)
    proc = iotest("plan", f"--config={config}", check=2)
    assert proc.stderr.startswith("iotest: error: " + start), proc.stderr
    assert needle in proc.stderr and proc.stderr.count("\n") == 1


def test_config_file_missing(iotest, tmp_path):
    proc = iotest("plan", f"--config={tmp_path / 'none.toml'}", check=2)
    assert proc.stderr.startswith("iotest: error: --config") and "none.toml" in proc.stderr


def test_config_under_mpirun(mpirun, tmp_path):
    config = write(tmp_path / "run.toml", "\n".join(
        f'{o[2:].split("=")[0]} = "{o.split("=", 1)[1]}"' if "=" in o else f"{o[2:]} = true"
        for o in TINY_RUN) + "\nsynthetic-vis = true\n")
    report = tmp_path / "run.json"
    mpirun(2, f"--config={config}", f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    assert r["pipeline"]["synthetic_vis"] is True
    assert 'rec-set = "T05_"' in r["environment"]["configuration"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_grouped_and_ends_with_an_example(iotest, command):
    text = iotest(command, "--help", check=0).stdout
    groups = re.findall(r"^([A-Z][\w ,:=()./-]+):$", text, re.M)
    assert len(groups) >= 2, (command, groups)
    assert "Report and configuration:" in text
    assert "--config" in text
    example = text.rstrip().split("Example:\n")
    assert len(example) == 2 and example[1].strip().startswith(("iotest", "mpirun")), text[-300:]


def test_docs_cli_is_current():
    if mpi_flavour() != "openmpi":  # the defaults shown are the Open MPI build's
        pytest.skip("docs/cli.md is made from the Open MPI build (its default launcher)")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "cli_help.py"),
                           f"--iotest={iotest_binary()}", "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_csv_tables_of_a_run(mpirun, tmp_path):
    import csv
    report = tmp_path / "run.json"
    prefix = tmp_path / "run"
    mpirun(2, *TINY_RUN, "--synthetic-vis", "--timeline=0.5", f"--csv={prefix}",
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = load(report)
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".csv")
    assert {"run.summary.csv", "run.ranks.csv", "run.timeline.csv"} <= set(written)

    def rows(name):
        with open(f"{prefix}.{name}.csv", newline="") as f:
            return list(csv.DictReader(f))
    ranks = rows("ranks")
    assert [int(x["rank"]) for x in ranks] == [k["rank"] for k in r["pipeline"]["per_rank"]]
    for row, k in zip(ranks, r["pipeline"]["per_rank"]):
        assert row["role"] == k["role"]
        assert int(row["bytes_written"]) == k["bytes_written"]
    summary = rows("summary")
    assert len(summary) == 1 and summary[0]["mode"] == "run"
    assert int(summary[0]["chunks_written"]) == r["counts"]["chunks_written"]
    assert len(rows("timeline")) >= len(ranks)


def test_csv_prefix_unwritable_is_a_usage_error(iotest, tmp_path):
    proc = iotest("plan", "--rec-set=T05_", f"--csv={tmp_path / 'no' / 'such' / 'p'}", check=2)
    assert proc.stderr.startswith("iotest: error: --csv"), proc.stderr
