"""`iotest plan` sizes a real job (issue 9): the ranks laid out on --nodes,
each node's estimate from the memory model `run` checks, against the
memory of a node, with a warning where it does not fit."""
import json
import re
import shlex

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
    deep = plan(iotest, "--rec-set=small", *VLAA, "--threads=1", "--subgrid-queue=24")["memory"]
    # Receive slots: one contribution per facet for each queued subgrid
    # (the default queue holds 8).
    assert deep["streamer_bytes"] - base["streamer_bytes"] == 16 * 9 * base["contribution_bytes"]
    more = plan(iotest, "--rec-set=small", *VLAA, "--threads=4")["memory"]
    assert more["streamer_bytes"] > base["streamer_bytes"]
    assert more["producer_bytes"] > base["producer_bytes"]  # --producer-threads follows


@pytest.mark.parametrize("direction", ["predict", "image", "both"])
def test_plan_gives_the_estimate_run_checks(iotest, mpirun, tmp_path, direction):
    """In every direction: the imaging direction's producers hold their
    dirty image facets and its streamers grid (what they hold differs from
    predict's), and the image's rows leave out lowbd2-core's
    autocorrelations in the plan as in the run."""
    obs = VLAA if direction == "predict" else ["--vis-set=lowbd2-core", *VLAA[1:]]
    args = ["--rec-set=T05_", *obs, "--facet-workers=1", "--threads=1", f"--direction={direction}"]
    report = tmp_path / "run.json"
    mpirun(3, *args, "--no-progress", f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    ran = load(report)
    planned = plan(iotest, *args, "--ranks-per-node=3")
    assert planned["advice"]["producers"] == 1 and planned["advice"]["streamers"] == 2
    assert planned["advice"]["direction"] == direction
    assert planned["advice"]["reads_files"] is False
    for key in ("producer_bytes", "streamer_bytes", "items"):
        assert planned["memory"][key] == ran["memory"][key], key
    for key in ("autocorrelations_imaged", "visibilities_imaged", "vis_per_subgrid"):
        assert planned["observation"].get(key) == ran["observation"].get(key), key
    if direction != "predict":
        assert ran["observation"]["visibilities_imaged"] < ran["counts"]["visibilities"]


def test_plan_of_an_imaging_run_takes_the_observation_of_its_files(iotest, mpirun, tmp_path):
    """Without --vis-set, from the first file's provenance, as `run` does;
    with it, no file is opened (they may be on compute nodes' disks)."""
    obs = ["--vis-set=lowbd2-core", *VLAA[1:]]
    mpirun(3, "--rec-set=T05_", *obs, "--no-progress", str(tmp_path / "vis%d.h5"), check=0,
           timeout=MPI_TIMEOUT_S)
    files = sorted(str(p) for p in tmp_path.glob("vis*.h5"))
    shape = ["--rec-set=T05_", "--direction=image", "--facet-workers=1", "--ranks-per-node=3"]
    from_files = plan(iotest, *shape, *files)
    given = plan(iotest, *shape, *obs, *files)
    assert from_files["observation"]["vis_set"] == "lowbd2-core"
    assert from_files["advice"]["reads_files"] is True
    for key in ("visibilities", "baselines"):
        assert from_files["counts"][key] == given["counts"][key], key
    assert from_files["observation"]["visibilities_imaged"] == \
        given["observation"]["visibilities_imaged"] < given["counts"]["visibilities"]
    assert from_files["memory"]["streamer_bytes"] == given["memory"]["streamer_bytes"]
    missing = str(tmp_path / "on-a-compute-node%h.h5")
    assert iotest("plan", *shape, *obs, missing, check=0).returncode == 0
    proc = iotest("plan", *shape, missing, check=2)
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert missing in proc.stderr and "give the --vis-set" in proc.stderr, proc.stderr


def test_plan_of_an_imaging_run_names_what_its_streamers_do_with_the_visibilities(iotest):
    args = ["--rec-set=T05_", *VLAA, "--facet-workers=1", "--ranks-per-node=3"]
    said = {}
    for direction, paths in [("predict", []), ("image", []), ("image", ["vis0.h5", "vis1.h5"]),
                             ("both", ["vis0.h5"])]:
        proc = iotest("plan", *args, f"--direction={direction}", *paths, check=0)
        line = next(l for l in proc.stdout.splitlines() if "in all, about" in l)
        said[(direction, len(paths))] = line.split(":")[0].strip()
    assert said == {("predict", 0): "to write", ("image", 0): "to predict in memory",
                    ("image", 2): "to read", ("both", 1): "to read"}


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


def test_more_ms_outputs_than_frequency_chunks_is_refused_with_runs_line(iotest, mpirun,
                                                                        tmp_path):
    obs = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-230:230/32/16", "--node-memory=1T",
           "--ranks-per-node=3", "--facet-workers=1"]
    out = str(tmp_path / "vis%d.ms")
    # Two streamers, two outputs: two frequency chunks take them, one does not.
    fits = plan(iotest, *obs, "--freq=260e6:300e6/64/32", "--storage=ms", out)["advice"]
    assert fits["streamers"] == 2 and fits["warnings"] == []
    one_chunk = [*obs, "--freq=260e6:300e6/64/64", "--storage=ms", out]
    # Issue 56: a warning and a script, then a job that failed on the
    # cluster. Now exit 2 and no script, with the line `run` gives.
    refused = iotest("plan", *one_chunk, "--nodes=1", "--slurm", check=2)
    assert refused.stdout == "", refused.stdout
    line = "2 ms outputs each hold a range of frequency chunks, and the observation has 1"
    assert refused.stderr.startswith("iotest: error: --writer-count: " + line), refused.stderr
    run_obs = [a for a in one_chunk if not a.startswith(("--node-memory", "--ranks-per-node"))]
    ran = mpirun(3, *run_obs, check=2)
    assert refused.stderr.splitlines()[0] in ran.stderr.splitlines(), (ran.stderr, refused.stderr)
    assert not list(tmp_path.iterdir())
    # UVH5 files split by row chunk: any number of outputs.
    h5 = plan(iotest, *obs, "--freq=260e6:300e6/64/64", str(tmp_path / "vis%d.h5"))["advice"]
    assert h5["warnings"] == []


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


@pytest.mark.long
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


# ---- plan --slurm takes every option of `iotest run` (issue 37) ----------------

T05_SLURM = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
             "--freq=260e6:300e6/32/16", "--nodes=3", "--cores-per-node=2", "--slurm"]
# A value for each run option whose --help shows no default (or none that
# is a value). A new run option without a default must get one here: the
# test below names it.
RUN_VALUES = {
    "--rec-set": "T05_", "--vis-set": "vlaa", "--time": "-1800:1800/16/8",
    "--freq": "260e6:300e6/32/16", "--dec": "-40", "--margin": "3", "--wstep": "4",
    "--target-err": "1e-05", "--facet-workers": "2", "--threads": "1",
    "--producer-threads": "1", "--visibility-queue": "32", "--duration": "30",
    "--image": "dirty image.fits", "--storage": "posix", "--phdf5.alignment": "4096",
    "--phdf5.chunk-cache": "1048576", "--phdf5.hints": "striping_factor=4",
    "--file-layout": "object_size=8M,stripe_unit=1M,stripe_count=4",
    "--calibration": "CALIBRATION", "--link-rate": "1Gbit", "--storage-rate": "2GB",
}
# Each command's own, never carried: where its report goes, its --config.
NOT_CARRIED = {"--help", "--report", "--csv", "--config"}
# Options that make sense only with others (plan checks the run's
# combinations as run does): the rest of the command they are given in (OUT:
# the output; CALIBRATION: a run's report).
IN_CONTEXT = {"--network-only": [], "--image": ["--direction=image", "vis0.h5"],
              "--image-autocorrelations": ["--direction=image", "vis0.h5"],
              "--calibration": ["--link-rate=1Gbit", "OUT"],
              "--link-rate": ["--calibration=CALIBRATION", "OUT"],
              "--storage-rate": ["--calibration=CALIBRATION", "--link-rate=1Gbit", "OUT"]}


def run_help_options(iotest):
    """`iotest run --help`'s options: (name, value or None for a flag,
    --storage=BACKEND for a back-end's option or None)."""
    options, backend = [], None
    lines = iotest("run", "--help", check=0).stdout.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith(" "):  # a group's title
            group = re.match(r"Storage: --storage=(\w+) ", line)
            backend = f"--storage={group.group(1)}" if group else None
            continue
        # CLI11's option column is 30 wide; a longer one puts the
        # description on the next line.
        below = lines[i + 1] if i + 1 < len(lines) else ""
        overflows = re.match(r" {30}\S", below) is not None
        column = (line if overflows else line[:30]).strip()
        match = re.match(r"(?:-h,)?(--[\w.-]+)(\{\w+\})?(?: (.*))?$", column)
        if not match or match.group(1) in NOT_CARRIED:
            continue
        name, flag_value, kind = match.groups()
        if kind is None or flag_value:  # a flag (--synthetic-vis{walk} too)
            options.append((name, None, backend))
            if flag_value:  # and its values
                for value in re.search(r"\{([\w,]+)\}", kind).group(1).split(","):
                    options.append((name, value, backend))
            continue
        default = re.search(r"=([^\s\]]+)$", kind)
        described = re.search(r"\(default: ([\w.-]+)\)$", below if overflows else line)
        value = RUN_VALUES.get(name) or (default and default.group(1)) or \
            (described and described.group(1))
        assert value, f"{name}: give tests/cli/test_plan.py RUN_VALUES a value for it"
        options.append((name, value, backend))
    return options


def script_run_words(script):
    """The words of the job script's `iotest run` line, as the shell splits them."""
    joined = script.replace("\\\n", " ")
    line = [l for l in joined.splitlines() if re.match(r"\s*(srun|mpirun|\S*mpiexec\S*) ", l)]
    assert len(line) == 1, script
    words = shlex.split(line[0])
    return words[words.index("run") + 1:]


def test_plan_slurm_takes_every_run_option_into_its_run_line(iotest, mpirun, tmp_path):
    # A one-node run's report, for --calibration (test_prediction.py).
    calibration = str(tmp_path / "calibration.json")
    mpirun(2, *T05_SLURM[:4], "--facet-workers=1", "--no-progress", f"--report={calibration}",
           check=0)
    options = run_help_options(iotest)
    names = {name for name, _, _ in options}
    # The parse found run's options, of every kind.
    assert {"--source-count", "--seed", "--support", "--w-support", "--margin", "--wstep",
            "--target-err", "--direction", "--network-only", "--repetitions", "--timeline",
            "--check", "--vis-samples", "--pixel-samples", "--require-space", "--image",
            "--duration", "--synthetic-vis", "--posix.direct", "--phdf5.hints"} <= names
    out = str(tmp_path / "vis%d")
    for name, value, backend in options:
        given = name if value is None else f"{name}={value}"
        base = [a for a in T05_SLURM if not a.startswith(name + "=")]
        extra = [backend] if backend and backend != given else []
        # phdf5 writes one file that every streamer shares: one name.
        output = str(tmp_path / "vis.h5") if backend == "--storage=phdf5" else out
        if backend == "--storage=s3":  # an object store's name (plan does not ask the store)
            output = "s3://iotest/vis%d"
        if backend in ("--storage=ms", "--storage=msv4"):  # a frequency chunk a streamer's output
            base = [a if not a.startswith("--freq=") else "--freq=260e6:300e6/32/8" for a in base]
        if backend == "--storage=msv4":  # one processing set for the run
            output = str(tmp_path / "vis.ps.zarr")
        context = [output if w == "OUT" else w.replace("CALIBRATION", calibration)
                   for w in IN_CONTEXT.get(name, ["OUT"])]
        given = given.replace("CALIBRATION", calibration)
        proc = iotest("plan", *base, given, *extra, *context)
        assert proc.returncode == 0, (given, proc.stderr)
        words = script_run_words(proc.stdout)
        carried = [w for w in words if w == name or w.startswith(name + "=")]
        # A bare flag may be carried with the value it stands for
        # (--synthetic-vis as --synthetic-vis=walk), =true bare.
        assert carried == [given] or (value in (None, "true") and len(carried) == 1), \
            (given, words)
        assert not any(w.startswith(("--nodes", "--cores-per-node", "--slurm")) for w in words)


@pytest.mark.parametrize("args,option", [
    (["--source-count=many"], "--source-count"),
    (["--seed=-1"], "--seed"),
    (["--direction=sideways"], "--direction"),
    (["--repetitions=0"], "--repetitions"),
    (["--timeline=-1"], "--timeline"),
    (["--device=fpga"], "--device"),
    (["--synthetic-vis=random"], "--synthetic-vis"),
    (["--posix.fsync=always"], "--posix.fsync"),
    (["a%d.h5", "b%d.h5"], "OUTPUT"),  # predict writes one output pattern
])
def test_plan_slurm_refuses_what_run_refuses(iotest, args, option):
    for command in (["plan", *T05_SLURM], ["run", *T05_SLURM[:4]]):
        proc = iotest(*command, *args, check=2)
        assert proc.stderr.startswith("iotest: error: ") and option in proc.stderr, \
            (command, proc.stderr)
        assert proc.stdout == ""


def test_plan_slurm_quotes_the_run_line_for_the_shell(iotest, tmp_path):
    image = str(tmp_path / "it's dirty.fits")
    inputs = [str(tmp_path / "vis 0.h5"), str(tmp_path / "vis$1.h5")]
    proc = iotest("plan", *T05_SLURM, "--direction=image", f"--image={image}", *inputs,
                  check=0)
    words = script_run_words(proc.stdout)
    assert f"--image={image}" in words and words[-2:] == inputs, words
    # Nothing to stonewall: the imaging direction takes no --duration.
    assert not any(w.startswith("--duration") for w in words)


@pytest.mark.parametrize("args,duration", [
    ([], 2700),
    (["--repetitions=2"], 1350),  # 1800 s each less 180 + 180 + 90
    (["--duration=99"], 99),      # the user's own
    (["--network-only"], None),   # the run refuses --duration with these
    (["--direction=both"], None),
    (["--synthetic-vis=sequential"], None),
])
def test_plan_slurm_stonewalls_only_runs_that_take_a_duration(iotest, args, duration):
    words = script_run_words(iotest("plan", *T05_SLURM, *args, check=0).stdout)
    durations = [w for w in words if w.startswith("--duration")]
    assert durations == ([f"--duration={duration}"] if duration else []), words


@pytest.mark.parametrize("cores,ranks_per_node", [(2, 4), (1, 4), (4, 4), (64, 4)])
def test_plan_slurm_overcommits_with_ntasks_where_ranks_exceed_cores(iotest, cores,
                                                                      ranks_per_node):
    # 9 producers and 3 streamers on 3 nodes: 4 ranks a node. An exclusive
    # allocation of --ntasks-per-node=4 on 2 cores is refused by sbatch
    # ("Requested node configuration is not available"); --ntasks=12 with
    # --overcommit is not, and srun's --ntasks-per-node places 4 on each.
    args = [*T05_SLURM[:-2], f"--cores-per-node={cores}", "--slurm"]
    script = iotest("plan", *args, check=0).stdout
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?$", script, re.M))
    assert sbatch["nodes"] == "3" and "overcommit" in sbatch and "exclusive" in sbatch
    launch = [l for l in script.replace("\\\n", " ").splitlines() if l.startswith("srun")][0]
    assert f"--ntasks=12 --ntasks-per-node={ranks_per_node}" in launch
    # The plan's producers, one per facet, not run's default of a third.
    assert " --facet-workers=9 " in launch
    if ranks_per_node > cores:
        assert sbatch["ntasks"] == "12" and "ntasks-per-node" not in sbatch
        assert "Requested node configuration is not available" in script  # why, said
        assert " --overcommit " in launch
    else:
        assert sbatch["ntasks-per-node"] == str(ranks_per_node) and "ntasks" not in sbatch


@pytest.mark.parametrize("args,option", [
    (["--network-only", "out%d.h5"], "OUTPUT"),
    (["--image=dirty.fits", "out%d.h5"], "--image"),
    (["--storage=phdf5", "out%d.h5"], "OUTPUT"),
    (["--ms.stman=standard", "out%d.h5"], "--ms.stman"),
])
def test_plan_slurm_refuses_a_run_that_run_would_refuse(iotest, args, option):
    # The run's own combination checks, before a script is written: a job
    # never waits in the queue only to exit 2 at its start.
    proc = iotest("plan", *T05_SLURM, *args, check=2)
    assert proc.stdout == "" and option in proc.stderr, proc.stderr
