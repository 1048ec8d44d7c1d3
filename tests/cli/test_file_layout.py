"""--file-layout (CephFS's ceph.file.layout, as IOR sets Lustre stripes)
and the output's file system in the report (docs/storage.md, "Shared file
systems: file layout"). Here, on this machine's own file system (no
CephFS): a bad layout is a usage error; a good one cannot be set, so the
run says so in one line, once, and goes on to outputs that verify; the
report records what was asked and why it was not set. Setting and reading
a layout on a real CephFS is tests/cluster/test_cephfs.py's."""
import pytest

from conftest import MPI_TIMEOUT_S, load

OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8", "--freq=260e6:300e6/32/16",
       "--no-progress", "--synthetic-vis"]
LAYOUT = "object_size=8M,stripe_unit=1M,stripe_count=4"


@pytest.mark.parametrize("value,says", [
    ("colour=blue", "unknown field 'colour'"),
    ("object_size", "expected FIELD=VALUE"),
    ("object_size=4X", "object_size=4X: expected a size"),
    ("stripe_count=0", "stripe_count=0: expected a count"),
    ("stripe_count=2,stripe_count=4", "stripe_count given twice"),
    ("stripe_unit=100K", "stripe_unit=100K: expected a multiple of 64K"),
    ("object_size=1M,stripe_unit=4M", "object_size=1M: expected a multiple of stripe_unit=4M"),
    ("", "expected FIELD=VALUE"),
])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_bad_layout_is_one_line_with_status_2(iotest, tmp_path, command, value, says):
    extra = ["--slurm", "--nodes=2"] if command == "plan" else []
    proc = iotest(command, *OBS, *extra, f"--file-layout={value}", str(tmp_path / "out%d.h5"))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iotest: error: --file-layout: "), proc.stderr
    assert says in lines[0], lines[0]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("backend,output,attribute", [
    ("hdf5", "out%d.h5", "ceph.file.layout"),
    ("posix", "out%d.bin", "ceph.file.layout"),
    ("ms", "out%d.ms", "ceph.dir.layout"),  # a folder: set on it, its files inherit it
])
def test_a_layout_that_cannot_be_set_is_said_once_and_the_run_goes_on(
        mpirun, iotest, tmp_path, backend, output, attribute):
    # Streamers with 2 writers each: several outputs, one warning, from rank 0.
    # A MeasurementSet per frequency range: a frequency chunk for each.
    obs = [a if not a.startswith("--freq=") or backend != "ms" else "--freq=260e6:300e6/32/4"
           for a in OBS]
    report = tmp_path / "run.json"
    proc = mpirun(4, *obs, f"--storage={backend}", "--writer-count=2", f"--file-layout={LAYOUT}",
                  str(tmp_path / output),
                  f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    warnings = [l for l in proc.stderr.splitlines() if "--file-layout" in l]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("iotest: warning: --file-layout: not set on "), warnings
    assert f"has no {attribute}: Operation not supported" in warnings[0], warnings
    assert warnings[0].endswith("; the run goes on with the file system's own layout")
    files = sorted(tmp_path.glob(output.replace("%d", "[0-9]")))
    assert len(files) >= 4 and not list(tmp_path.glob("*.partial")), list(tmp_path.iterdir())
    assert "passed" in iotest("verify", *map(str, files), check=0).stdout
    r = load(report)
    asked = r["config"]["file_layout"]
    assert asked["requested"] == {"object_size": 8 << 20, "stripe_unit": 1 << 20,
                                  "stripe_count": 4}
    assert asked["applied"] is False
    assert asked["not_applied_why"] in warnings[0]
    fs = r["environment"]["output_file_system"]
    assert fs["client"] == "kernel" and fs["name"] == fs["type"] != "ceph"
    assert "layout" not in fs and "replication" not in fs
    assert f"--file-layout={LAYOUT}: not set on " in proc.stdout


def test_without_the_option_nothing_is_said_or_recorded(mpirun, tmp_path):
    report = tmp_path / "run.json"
    proc = mpirun(3, *OBS, str(tmp_path / "out%d.h5"), f"--report={report}", check=0,
                  timeout=MPI_TIMEOUT_S)
    assert "--file-layout" not in proc.stderr + proc.stdout
    assert "file_layout" not in load(report)["config"]


def test_plan_carries_the_layout_into_its_job_script(iotest, tmp_path):
    proc = iotest("plan", *OBS, "--slurm", "--nodes=2", f"--file-layout={LAYOUT}",
                  str(tmp_path / "out%d.h5"), check=0)
    assert f"--file-layout={LAYOUT}" in proc.stdout


def test_the_dirty_image_is_made_with_it_too(mpirun, tmp_path):
    # --direction=both: no visibility file, the image alone.
    report = tmp_path / "run.json"
    sky = [a for a in OBS if a != "--synthetic-vis"]
    proc = mpirun(3, *sky, "--direction=both", f"--image={tmp_path / 'dirty.fits'}",
                  "--file-layout=stripe_count=2", f"--report={report}", check=0,
                  timeout=MPI_TIMEOUT_S)
    warnings = [l for l in proc.stderr.splitlines() if "--file-layout" in l]
    assert len(warnings) == 1 and "dirty.fits (" in warnings[0], proc.stderr
    asked = load(report)["config"]["file_layout"]
    assert asked["requested"] == {"stripe_count": 2} and asked["applied"] is False
    assert (tmp_path / "dirty.fits").exists()


def test_a_dry_run_makes_no_file_to_lay_out(mpirun, tmp_path):
    report = tmp_path / "run.json"
    proc = mpirun(3, *OBS, "--file-layout=stripe_count=2", f"--report={report}", check=0,
                  timeout=MPI_TIMEOUT_S)
    assert "warning" not in proc.stderr
    asked = load(report)["config"]["file_layout"]
    assert asked["applied"] is False and asked["not_applied_why"] == "the run made no output file"
