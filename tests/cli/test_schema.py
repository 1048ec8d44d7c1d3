"""The JSON report as an interface (docs/report.md): docs/report.schema.json
is a valid JSON Schema that describes every field, every kind of report the
commands write validates against it, and a broken report does not."""
import copy
import json
import subprocess

import pytest
from jsonschema import Draft202012Validator

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, load, mpi_env
from schema import schema, validate_report

# Small enough for a second or two a job on two cores (as tests/cli's others).
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4", "--freq=260e6:300e6/16/8",
       "--dec=-40", "--no-progress"]
NET_QUICK = ["--max-size=1024", "--iterations=20", "--warmup=2", "--window=8"]


def check(report, mode, *sections):
    """A report read through load (so validated) is of `mode` with `sections`."""
    assert report["schema_version"] == 1
    assert report["mode"] == mode
    missing = [s for s in sections if s not in report]
    assert not missing, f"{mode} report without {missing}"
    return report


def mpi_job(folder, ranks, *args):
    """A run for a module's fixture (the mpirun fixture is per test)."""
    proc = subprocess.run([*MPIRUN, "-np", str(ranks), iotest_binary(), *args],
                          capture_output=True, text=True, timeout=MPI_TIMEOUT_S, env=mpi_env())
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """A distributed predict run with output and a time line: its report and
    its files (one per streamer)."""
    folder = tmp_path_factory.mktemp("predicted")
    report = folder / "run.json"
    mpi_job(folder, 3, *OBS, "--source-count=10", "--timeline=0.1", str(folder / "vis%d.h5"),
            f"--report={report}")
    files = sorted(str(p) for p in folder.glob("vis*.h5"))
    assert len(files) == 2
    return report, files


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A storage-only run: its report and its files."""
    folder = tmp_path_factory.mktemp("synthetic")
    report = folder / "run.json"
    mpi_job(folder, 2, "--synthetic-vis", *OBS, str(folder / "syn%d.h5"), f"--report={report}")
    files = sorted(str(p) for p in folder.glob("syn*.h5"))
    assert len(files) == 2
    return report, files


# The schema itself.

def walk(node, where="$"):
    """Every (place, subschema) of the schema."""
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{where}/{i}")


def test_the_schema_is_a_valid_draft_2020_12_schema():
    s = schema()
    Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["$id"].endswith("/report.schema.json") and s["title"]
    # The compatibility rule is written down where readers look.
    assert "without raising schema_version" in s["description"]
    assert s["properties"]["schema_version"]["const"] == 1
    assert {"schema_version", "mode"} <= set(s["required"])


def test_every_property_and_definition_has_a_description():
    s = schema()
    # Conditions (if: mode is run) name fields the schema describes elsewhere.
    undescribed = [f"{where}/properties/{name}"
                   for where, node in walk(s)
                   if isinstance(node.get("properties"), dict) and "if" not in where.split("/")
                   for name, sub in node["properties"].items()
                   if not (isinstance(sub, dict) and sub.get("description", "").strip())]
    undescribed += [f"$defs/{name}" for name, sub in s["$defs"].items()
                    if not sub.get("description", "").strip()]
    assert not undescribed, undescribed


def test_no_object_forbids_fields_a_newer_iotest_adds():
    # Fields are added without raising schema_version: old readers must pass them.
    closed = [where for where, node in walk(schema())
              if node.get("additionalProperties") is False
              or node.get("unevaluatedProperties") is False]
    assert not closed, closed


# One real report of every kind.

def test_recombine(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("recombine", "--rec-set=T05_", "--subgrids=4", "--check=2", f"--report={report}",
           check=0)
    r = check(load(report), "recombine", "config", "counts", "accuracy", "timing", "rates",
              "memory", "environment")
    assert r["accuracy"]["subgrid_rmse"] is not None


@pytest.mark.parametrize("rates_from", [False, True])
def test_plan(iotest, tmp_path, predicted, rates_from):
    report = tmp_path / "r.json"
    extra = [f"--rates-from={predicted[0]}", "--writer-ranks=1"] if rates_from else []
    iotest("plan", "--rec-set=T05_", "--vis-set=vlaa", *extra, f"--report={report}", check=0)
    r = check(load(report), "plan", "counts", "memory", "advice", "observation")
    assert ("suggested_writer_ranks" in r["advice"]) == rates_from


def test_plan_to_stdout(iotest):
    proc = iotest("plan", "--rec-set=T05_", "--report=-", check=0)
    validate_report(check(json.loads(proc.stdout), "plan", "advice"))


def test_degrid(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("degrid", *OBS[:-1], "--source-count=10", f"--report={report}",
           str(tmp_path / "vis.h5"), check=0)
    r = check(load(report), "degrid", "counts", "accuracy", "timing", "rates", "memory",
              "observation", "sky")
    assert r["environment"]["output_file_system"]["path"] == str(tmp_path / "vis.h5")


@pytest.mark.parametrize("of_files", [False, True])
def test_grid(iotest, tmp_path, predicted, of_files):
    report = tmp_path / "r.json"
    inputs = predicted[1] if of_files else OBS[:-1]
    iotest("grid", *inputs, "--pixel-samples=20", f"--report={report}", check=0)
    r = check(load(report), "grid", "counts", "accuracy", "timing", "rates", "observation")
    assert ("read" in r) == of_files


def test_layout(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("layout", "--vis-set=vlaa", f"--report={report}", check=0)
    r = check(load(report), "layout", "layout")
    assert r["config"].get("N") is None  # no recombination


@pytest.mark.parametrize("kind", ["sky", "synthetic", "incomplete"])
def test_verify(iotest, tmp_path, predicted, synthetic, kind):
    report = tmp_path / "r.json"
    files, extra = {"sky": (predicted[1], []), "synthetic": (synthetic[1], ["--all"]),
                    "incomplete": (synthetic[1][:1], [])}[kind]  # a file left out: fails
    iotest("verify", *extra, *files, f"--report={report}", check=int(kind == "incomplete"))
    v = check(load(report), "verify", "verification")["verification"]
    assert v["passed"] == (kind != "incomplete") and v["synthetic"] == (kind != "sky")
    assert bool(v["reason"]) == (not v["passed"])  # why not, when not


def test_run_predict(predicted):
    r = check(load(predicted[0]), "run", "pipeline", "timing", "rates", "counts", "memory",
              "accuracy", "observation", "sky", "transit", "timeline")
    assert r["config"]["direction"] == "predict" and r["transit"]["placement"] == "in situ"


def test_run_synthetic(synthetic):
    r = check(load(synthetic[0]), "run", "pipeline", "timing", "rates", "transit")
    assert r["pipeline"]["synthetic_vis"] and "accuracy" not in r


FILES = object()  # the predict run's files, in a run's arguments

RUNS = {
    # name: (ranks, arguments, sections beyond every run's)
    "image": (2, ["--direction=image", "--rec-set=T05_", "--no-progress",
                  "--pixel-samples=16", FILES], ["read", "accuracy"]),
    "both": (2, ["--direction=both", "--rec-set=T05_", "--no-progress", FILES],
             ["read", "accuracy"]),
    "duration": (3, [*OBS, "--duration=600"], ["stonewall"]),
    "repetitions": (3, [*OBS, "--repetitions=2", "OUT"], ["repetitions", "transit"]),
    "writer_ranks": (3, ["--synthetic-vis", *OBS, "--writer-ranks=1", "OUT"], ["transit"]),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_run(mpirun, tmp_path, predicted, name):
    ranks, args, sections = RUNS[name]
    report = tmp_path / "r.json"
    args = [a for arg in args
            for a in (predicted[1] if arg is FILES
                      else [str(tmp_path / "out%d.h5")] if arg == "OUT" else [arg])]
    mpirun(ranks, *args, f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    r = check(load(report), "run", "pipeline", "timing", "rates", "counts", "memory", *sections)
    if name == "both":
        assert "residual_rms" in r["accuracy"]
    if name == "repetitions":
        assert r["repetitions"]["count"] == 2
    if name == "writer_ranks":
        assert r["transit"]["placement"] == "in transit" and r["pipeline"]["writer_ranks"] == 1


def test_read(mpirun, tmp_path, synthetic):
    report = tmp_path / "r.json"
    mpirun(2, "read", "--check", *synthetic[1], f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    assert check(load(report), "read", "read")["read"]["passed"]


def test_net(mpirun, tmp_path):
    report = tmp_path / "r.json"
    mpirun(2, "net", *NET_QUICK, "--check", f"--report={report}", check=0,
           timeout=MPI_TIMEOUT_S)
    n = check(load(report), "net", "net")["net"]
    assert all(t in n["pairs"][0] for t in n["transports"])


def test_h5(mpirun, tmp_path):
    report = tmp_path / "r.json"
    mpirun(2, "h5", str(tmp_path / "ck.h5"), "--domain=4,4,4", "--steps=2", "--check",
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    check(load(report), "h5", "h5")


@pytest.mark.long
def test_scale(iotest, mpirun, tmp_path):
    # Three dry runs at 1, 2 and 3 streamers: the fewest the fit takes.
    reports = [tmp_path / f"run{n}.json" for n in (2, 3, 4)]
    for n, report in zip((2, 3, 4), reports):
        mpirun(n, *OBS, "--threads=1", f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    report = tmp_path / "scale.json"
    iotest("scale", *map(str, reports), f"--out={tmp_path / 'study'}", f"--report={report}",
           check=0)
    sc = check(load(report), "scale", "scale")["scale"]
    assert len(sc["points"]) == 3 and sc["fits"]


# The validation cannot pass by accident.

def set_at(report, path, value):
    *parents, last = path
    node = report
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value


DELETE = object()


@pytest.mark.parametrize("path,value,where", [
    (["schema_version"], DELETE, "schema_version"),
    (["schema_version"], 2, "report.schema_version"),
    (["mode"], "sideways", "report.mode"),
    (["pipeline", "ranks"], "3", "report.pipeline.ranks"),
    (["pipeline", "bound"], "luck", "report.pipeline.bound"),
    (["pipeline", "per_rank", 0, "role"], "painter", "report.pipeline.per_rank[0].role"),
    (["accuracy", "subgrid_rmse"], "NaN", "report.accuracy.subgrid_rmse"),
    (["counts", "visibilities"], -1.5, "report.counts.visibilities"),
    (["environment", "hosts"], "vm", "report.environment.hosts"),
    (["pipeline"], DELETE, "pipeline"),  # a run report must have it
    (["config", "rec_set"], DELETE, "rec_set"),  # a recombination's parameters come whole
])
def test_a_broken_report_fails_validation(predicted, path, value, where):
    good = load(predicted[0])
    validate_report(good)
    bad = copy.deepcopy(good)
    set_at(bad, path, value)
    with pytest.raises(AssertionError, match=where.replace("[", r"\[").replace("]", r"\]")):
        validate_report(bad)
