"""MSv4 processing sets (--storage=msv4): a run writes one processing set
(zarr format 3), an MSv4 per frequency range as ms writes a MeasurementSet
per frequency range; xradio opens it and finds no schema issue, its
visibilities and (u, v, w) are the ms back-end's DATA and UVW, zarr-python
reads every array, iotest's readers take it whole (verify, read --check,
the imaging direction), and a run killed at any moment leaves nothing that
opens as a complete set. docs/storage.md, "MSv4 processing sets"."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, load, mpi_env

pytest.importorskip("xradio")
tables = pytest.importorskip("casacore.tables")
zarr = pytest.importorskip("zarr")
import xradio.measurement_set.schema  # noqa: E402,F401  (registers the MSv4 schemas)
from xradio.measurement_set import open_processing_set  # noqa: E402
from xradio.schema.check import check_datatree  # noqa: E402

# The issue's run (test_ms.py's SDP): T05_ + vlaa at dec -30, 32 times in
# time chunks of 16, 64 channels in 2 frequency chunks, 3 ranks (a
# producer, 2 streamers): two MSv4s of 351 x 32 rows and 32 channels each.
SDP = ["--rec-set=T05_", "--vis-set=vlaa", "--dec=-30", "--time=-230:230/32/16",
       "--freq=260e6:300e6/64/32", "--source-count=10"]
TIMES, BASELINES, CHANNELS = 32, 351, 32
ROWS = TIMES * BASELINES  # 11,232 (time, baseline) rows in each MSv4
# MS TIME is MJD seconds (UTC), an MSv4's time Unix seconds: MJD 40587 is 1970-01-01.
MJD_UNIX_S = 40587 * 86400.0
NAMES = ["vis_0", "vis_1"]  # "<stem>_<file>" of vis.ps.zarr


def run_job(ranks, *args, timeout=MPI_TIMEOUT_S):
    return subprocess.run([*MPIRUN, "-np", str(ranks), iotest_binary(), *args],
                          capture_output=True, text=True, timeout=timeout, env=mpi_env())


def opened(path):
    """open_processing_set as a user calls it: no warning of a missing
    consolidated metadata (xarray's RuntimeWarning) nor of a key zarr does
    not know (zarr's ZarrUserWarning, listing a group without it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", zarr.errors.ZarrUserWarning)
        return open_processing_set(str(path))


def no_schema_issue(ps):
    issues = check_datatree(ps)
    assert len(issues) == 0, str(issues)
    assert "No schema issues found" in str(issues)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The issue's run as a processing set, and the same run as
    MeasurementSets (vis0.ms, vis1.ms) to hold it against."""
    top = tmp_path_factory.mktemp("msv4")
    (top / "ps").mkdir()
    (top / "ms").mkdir()
    ps = top / "ps" / "vis.ps.zarr"
    report = top / "ps.json"
    proc = run_job(3, *SDP, "--no-progress", "--storage=msv4", f"--report={report}", str(ps))
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    ms = run_job(3, *SDP, "--no-progress", "--storage=ms", str(top / "ms" / "vis%d.ms"))
    assert ms.returncode == 0, ms.stderr[-3000:]
    return {"top": top, "ps": ps, "report": load(report), "stdout": proc.stdout,
            "ms": sorted((top / "ms").glob("vis*.ms"))}


@pytest.fixture(scope="module")
def ps(sets):
    return opened(sets["ps"])


def test_xradio_opens_the_set_without_a_warning_and_finds_no_schema_issue(sets, ps):
    assert sorted(ps.children) == NAMES
    assert ps.attrs.get("type") == "processing_set"
    no_schema_issue(ps)
    # The set alone, under its final name: no run's folder left beside it.
    assert os.listdir(sets["top"] / "ps") == ["vis.ps.zarr"]


def test_each_msv4_holds_every_row_of_its_own_channels(sets, ps):
    frequencies = []
    for name in NAMES:
        ds = ps[name].ds
        assert ds.attrs["type"] == "visibility"
        assert (ds.sizes["time"], ds.sizes["baseline_id"], ds.sizes["frequency"],
                ds.sizes["polarization"]) == (TIMES, BASELINES, CHANNELS, 1)
        assert ds.sizes["time"] * ds.sizes["baseline_id"] == ROWS
        assert list(ds["polarization"].values) == ["XX"]
        # Every baseline once, its antennas named as the ms names them.
        pairs = list(zip(ds["baseline_antenna1_name"].values, ds["baseline_antenna2_name"].values))
        assert len(set(pairs)) == BASELINES
        assert {a for p in pairs for a in p} == {f"ANT{i}" for i in range(27)}
        vis = ds["VISIBILITY"]
        assert vis.dtype == np.complex64 and vis.attrs["units"] == "Jy"
        assert vis.dims == ("time", "baseline_id", "frequency", "polarization")
        values = vis.values
        assert np.all(values != 0)  # every value written
        assert not ds["FLAG"].values.any()
        assert ds["WEIGHT"].dtype == np.float32 and np.all(ds["WEIGHT"].values == 1)
        assert ds["UVW"].dtype == np.float64 and ds["UVW"].shape == (TIMES, BASELINES, 3)
        assert np.all(np.isfinite(ds["UVW"].values))
        # Unix seconds, every time step once, in order.
        times = ds["time"].values
        assert np.all(np.diff(times) > 0) and 1.6e9 < times[0] < 1.8e9
        frequencies.append(ds["frequency"].values)
    # No channel in two MSv4s; together every channel of the observation.
    assert not set(frequencies[0]) & set(frequencies[1])
    assert np.allclose(np.sort(np.concatenate(frequencies)), np.linspace(260e6, 300e6, 64),
                       rtol=1e-12, atol=0)


def ms_cubes(ms_path, ds):
    """The MeasurementSet's DATA and UVW as the MSv4's (time, baseline,
    channel) cubes: its rows placed by the MSv4's time coordinate (Unix
    seconds against TIME's MJD seconds) and its baselines' antenna names."""
    main = tables.table(str(ms_path), ack=False)
    names = list(tables.table(str(ms_path / "ANTENNA"), ack=False).getcol("NAME"))
    baseline = {pair: i for i, pair in enumerate(zip(ds["baseline_antenna1_name"].values,
                                                     ds["baseline_antenna2_name"].values))}
    a1, a2 = main.getcol("ANTENNA1"), main.getcol("ANTENNA2")
    b = np.array([baseline[(names[i], names[j])] for i, j in zip(a1, a2)])
    unix = main.getcol("TIME") - MJD_UNIX_S
    times = ds["time"].values
    t = np.abs(unix[:, None] - times[None, :]).argmin(axis=1)
    assert np.abs(times[t] - unix).max() < 1e-3  # each row's time is one of the MSv4's
    assert len(set(zip(t, b))) == main.nrows() == ROWS
    data = np.zeros((TIMES, BASELINES, CHANNELS), np.complex64)
    uvw = np.full((TIMES, BASELINES, 3), np.nan)
    data[t, b] = main.getcol("DATA")[:, :, 0]
    uvw[t, b] = main.getcol("UVW")
    return data, uvw


def test_visibility_and_uvw_are_the_measurement_sets_data_and_uvw(sets, ps):
    """The same run's values as the ms back-end stores them: DATA in single
    precision, conjugated as the MS holds it, and UVW antenna 1 minus
    antenna 2, row for row."""
    by_first = {}
    for path in sets["ms"]:
        freq = tables.table(str(path / "SPECTRAL_WINDOW"), ack=False).getcol("CHAN_FREQ")[0]
        by_first[round(freq[0])] = (path, freq)
    assert len(by_first) == 2
    for name in NAMES:
        ds = ps[name].ds
        path, freq = by_first[round(ds["frequency"].values[0])]
        assert np.allclose(ds["frequency"].values, freq, rtol=1e-12, atol=0)
        data, uvw = ms_cubes(path, ds)
        got = ds["VISIBILITY"].values[..., 0]
        exact = np.count_nonzero(got == data)
        print(f"{name}: {exact} of {got.size} values equal to DATA's bit for bit")
        np.testing.assert_allclose(got, data, rtol=1e-6, atol=1e-6 * np.abs(data).max())
        np.testing.assert_allclose(ds["UVW"].values, uvw, rtol=0, atol=1e-6)


def zarr_arrays(group, prefix=""):
    for name, array in group.arrays():
        yield prefix + name, array
    for name, child in group.groups():
        yield from zarr_arrays(child, prefix + name + "/")


def test_zarr_python_reads_every_array_whole(sets):
    with warnings.catch_warnings():
        warnings.simplefilter("error", zarr.errors.ZarrUserWarning)
        root = zarr.open_group(str(sets["ps"]), mode="r")
        assert root.metadata.zarr_format == 3
        found = {}
        for name, array in zarr_arrays(root):
            values = array[...]
            assert values.shape == array.shape, name
            found[name] = values
    for ms in NAMES:
        assert found[f"{ms}/VISIBILITY"].shape == (TIMES, BASELINES, CHANNELS, 1)
        assert found[f"{ms}/VISIBILITY"].dtype == np.complex64
        assert found[f"{ms}/UVW"].shape == (TIMES, BASELINES, 3)
        assert not found[f"{ms}/FLAG"].any() and np.all(found[f"{ms}/WEIGHT"] == 1)
    assert any("antenna_xds/" in name for name in found), sorted(found)
    assert any("field_and_source" in name for name in found), sorted(found)


def node(path):
    with open(path) as f:
        return json.load(f)


def files_under(folder):
    return [Path(d) / f for d, _, fs in os.walk(folder) for f in fs]


def chunk_files(group, array="VISIBILITY"):
    """An array's chunk files: "c.i.j.k.l" beside its zarr.json (the key
    encoding's '.' separator)."""
    return sorted((group / array).glob("c.*"))


def test_a_zarr_chunk_is_an_iotest_chunk_written_once(sets):
    """VISIBILITY's chunk is an iotest chunk, (time chunk, 1, freq chunk,
    1), stored raw (the 'bytes' codec alone); FLAG and WEIGHT are fill
    values with no chunk written; the root's metadata, consolidated, was
    written last."""
    root = sets["ps"]
    for name in NAMES:
        vis = node(root / name / "VISIBILITY" / "zarr.json")
        assert vis["data_type"] == "complex64" and vis["shape"] == [TIMES, BASELINES, CHANNELS, 1]
        assert vis["chunk_grid"]["configuration"]["chunk_shape"] == [16, 1, 32, 1]
        assert [c["name"] for c in vis["codecs"]] == ["bytes"], vis["codecs"]
        assert vis["dimension_names"] == ["time", "baseline_id", "frequency", "polarization"]
        chunks = chunk_files(root / name)
        assert len(chunks) == 2 * BASELINES  # 2 time chunks x 351 baselines x 1 frequency chunk
        assert all(c.stat().st_size == 16 * 32 * 8 for c in chunks)
        flag, weight = (node(root / name / a / "zarr.json") for a in ("FLAG", "WEIGHT"))
        assert flag["data_type"] == "bool" and flag["fill_value"] is False
        assert weight["data_type"] == "float32" and weight["fill_value"] == 1.0
        assert files_under(root / name / "FLAG") == [root / name / "FLAG" / "zarr.json"]
        assert files_under(root / name / "WEIGHT") == [root / name / "WEIGHT" / "zarr.json"]
        # iotest's own: the group's "iotest" attribute (the run's nonce
        # among its provenance) and the checksums' key beside the nodes.
        attrs = node(root / name / "zarr.json")["attributes"]
        layout = attrs["iotest"]
        layout = json.loads(layout) if isinstance(layout, str) else layout
        assert str(sets["report"]["config"]["nonce"]) in json.dumps(layout), layout
        assert (root / name / "iotest" / "chunks").stat().st_size > 0
    top = node(root / "zarr.json")
    assert top["zarr_format"] == 3 and top["node_type"] == "group"
    consolidated = top["consolidated_metadata"]["metadata"]
    for name in NAMES:
        assert consolidated[name]["node_type"] == "group"
        assert consolidated[f"{name}/VISIBILITY"]["node_type"] == "array"
    # The publication: nothing under the set changed after its root's key.
    last = (root / "zarr.json").stat().st_mtime_ns
    assert max(p.stat().st_mtime_ns for p in files_under(root)) == last


def test_the_checksums_are_of_the_chunks_as_stored(sets):
    """iotest/chunks: int64 words, [magic, checksums, parts], then (chunk,
    CRC-32) pairs: a CRC-32 for each VISIBILITY chunk, of its bytes as the
    zarr chunk holds them."""
    for name in NAMES:
        words = np.frombuffer((sets["ps"] / name / "iotest" / "chunks").read_bytes(), "<i8")
        magic, checksums, parts = words[:3]
        assert magic == 0x3476534d74736f69 and parts == 0
        assert checksums == 2 * BASELINES and len(words) == 3 + 2 * checksums
        stored = sorted(words[3:3 + 2 * checksums].reshape(-1, 2)[:, 1])
        chunks = chunk_files(sets["ps"] / name)
        assert stored == sorted(zlib.crc32(c.read_bytes()) for c in chunks)


def test_the_report_counts_single_precision_values(sets):
    r = sets["report"]
    c = r["counts"]
    assert r["config"]["value_bytes"] == 8  # complex64, as ms
    assert c["visibilities_written"] == c["visibilities"] == 2 * ROWS * CHANNELS
    assert c["chunks_rewritten"] == 0


def test_verify_all_passes(iotest, sets):
    proc = iotest("verify", "--all", str(sets["ps"]), check=0)
    assert ": passed" in proc.stdout
    assert "1404 of 1404 chunks present" in proc.stdout, proc.stdout
    # Single precision, as the MS: the kernel's 2e-8 and float32's rounding.
    rmse = float(proc.stdout.split("visibilities vs direct FT ")[1].split()[0])
    assert 1e-9 < rmse < 5e-8, proc.stdout


def test_a_changed_bit_fails_verify_all(iotest, sets, tmp_path):
    copy = tmp_path / "vis.ps.zarr"
    shutil.copytree(sets["ps"], copy)
    chunk = sorted(chunk_files(copy / "vis_1"))[7]
    data = bytearray(chunk.read_bytes())
    data[8 * 5] ^= 1  # the last bit of value 5's real part
    chunk.write_bytes(bytes(data))
    proc = iotest("verify", "--all", str(copy))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "1 chunks differ from what their writers wrote" in proc.stdout, proc.stdout


def relative_rms(got, want):
    """Over the pixels the image defines: all but column 0 (NaN in both)."""
    got, want = got[:, 1:], want[:, 1:]
    return float(np.sqrt(np.mean(np.abs(got - want) ** 2) / np.mean(np.abs(want) ** 2)))


def test_the_imaging_direction_makes_the_ms_sets_dirty_image(sets, tmp_path):
    fits = pytest.importorskip("astropy.io.fits")
    images = {}
    for kind, files in (("ms", sets["ms"]), ("msv4", [sets["ps"]])):
        image, report = tmp_path / f"{kind}.fits", tmp_path / f"{kind}.json"
        proc = run_job(3, "run", "--direction=image", "--rec-set=T05_", "--no-progress",
                       f"--image={image}", f"--report={report}", *map(str, files))
        assert proc.returncode == 0, proc.stderr[-3000:]
        r = load(report)
        assert r["accuracy"]["facet_rmse"] < 1e-7
        assert r["read"]["backend"] == kind
        assert r["counts"]["visibilities"] == 2 * ROWS * CHANNELS
        with fits.open(image) as hdus:
            images[kind] = (hdus[0].data[0, 0], hdus[0].header)
    (got, header), (want, want_header) = images["msv4"], images["ms"]
    assert got.shape == want.shape
    assert relative_rms(got, want) < 1e-6, relative_rms(got, want)
    assert list(header.items()) == list(want_header.items())


# test_ms.py's synthetic run: T05_ + vlaa at dec 34, 32 times, 16 channels
# in 2 frequency chunks, 2 ranks (both streamers).
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--dec=34", "--time=-900:900/32/16",
       "--freq=260e6:300e6/16/8"]


def test_a_synthetic_set_reads_back_and_verifies_exactly(iotest, tmp_path):
    out = tmp_path / "syn.ps.zarr"  # .zarr: msv4 without --storage
    proc = run_job(2, "run", "--synthetic-vis=walk", *OBS, "--no-progress", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(opened(out).children) == ["syn_0", "syn_1"]
    read = iotest("read", "--check", str(out), check=0)
    assert "0 wrong" in read.stdout and ": passed" in read.stdout, read.stdout
    assert ": passed" in iotest("verify", "--all", str(out), check=0).stdout


def test_a_time_chunk_of_every_time_step_is_one_baseline_a_chunk(iotest, tmp_path):
    """A time chunk of all 8 time steps: a zarr chunk (8, 1, 32, 1), one
    baseline's whole time range of a frequency chunk, 351 of them an MSv4.
    (--time takes no chunk larger than the steps, so the other shape, whole
    baselines' times in one chunk, is not reachable from the command line.)"""
    out = tmp_path / "vis.ps.zarr"
    proc = run_job(3, *SDP[:3], "--time=-230:230/8/8", *SDP[4:], "--no-progress",
                   "--storage=msv4", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ps = opened(out)
    no_schema_issue(ps)
    for name in NAMES:
        vis = node(out / name / "VISIBILITY" / "zarr.json")
        assert vis["chunk_grid"]["configuration"]["chunk_shape"] == [8, 1, 32, 1]
        assert len(chunk_files(out / name)) == BASELINES
        assert ps[name].ds.sizes["time"] == 8 and np.all(ps[name].ds["VISIBILITY"].values != 0)
    proc = iotest("verify", "--all", str(out), check=0)
    assert ": passed" in proc.stdout


def test_a_time_chunk_neither_dividing_nor_a_multiple_of_the_times_is_refused(tmp_path):
    # 30 time steps in chunks of 16: neither divides the other.
    out = tmp_path / "vis.ps.zarr"
    proc = run_job(3, "--rec-set=T05_", "--vis-set=vlaa", "--time=-900:900/30/16",
                   "--freq=260e6:300e6/16/8", "--no-progress", "--storage=msv4", str(out))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]
    assert len(lines) == 1 and "--time" in lines[0], proc.stderr
    assert "iotest run:" not in proc.stdout  # refused before the plan, any work
    assert os.listdir(tmp_path) == []  # nothing written, nothing claimed


def test_an_msv4_option_given_to_another_back_end_is_refused(tmp_path):
    for args in (["--msv4.in-flight=4", str(tmp_path / "v%d.h5")],
                 ["--storage=msv4", "--msv4.in-flight=0", str(tmp_path / "vis.ps.zarr")]):
        proc = subprocess.run([iotest_binary(), *OBS, *args], capture_output=True, text=True,
                              timeout=MPI_TIMEOUT_S)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "--msv4.in-flight" in lines[0], proc.stderr
    assert os.listdir(tmp_path) == []


def test_a_folder_that_is_no_processing_set_is_never_replaced(tmp_path):
    mine = tmp_path / "vis.ps.zarr"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    proc = run_job(3, *SDP, "--no-progress", "--storage=msv4", str(mine))
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-3000:])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]
    assert len(lines) == 1 and "OUTPUT" in lines[0] and str(mine) in lines[0], proc.stderr
    assert "not a MeasurementSet or a processing set" in lines[0], lines[0]
    assert (mine / "notes.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["vis.ps.zarr"]


def test_a_set_published_but_for_its_root_key_is_replaced_by_the_next_run(sets, tmp_path):
    """What a run killed between its rename and its root key leaves: the
    final name, every MSv4 whole, no root zarr.json. It opens as nothing,
    and the next run into the name should take it as an earlier run's set."""
    out = tmp_path / "vis.ps.zarr"
    shutil.copytree(sets["ps"], out)
    (out / "zarr.json").unlink()
    with pytest.raises(Exception):
        open_processing_set(str(out))
    proc = run_job(3, *SDP, "--no-progress", "--storage=msv4", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_schema_issue(opened(out))


# --- runs into one name, and runs killed -----------------------------------

# About 4-5 s on two cores (2808 chunk files): long enough for a kill or a
# second run to land while it writes. (In time chunks of 16, 11,232 files
# of 4 KiB, each fsynced, it took 10 s.)
LONG = ["--rec-set=T05_", "--vis-set=vlaa", "--dec=-30", "--time=-900:900/256/64",
        "--freq=260e6:300e6/64/32", "--source-count=10", "--no-progress"]


LONGER = [a if not a.startswith("--time=") else "--time=-900:900/1024/64" for a in LONG]


def start(out, *args):
    """The job in a session of its own (its ranks are each in their own
    process group, all in the session), with an Open MPI session folder of
    its own (two jobs at once race for /tmp/ompi.HOST.UID)."""
    session = tempfile.mkdtemp(prefix="ompi-")
    env = {**mpi_env(), "OMPI_MCA_orte_tmpdir_base": session}
    job = subprocess.Popen([*MPIRUN, "-np", "3", iotest_binary(), *args, str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    job.session = session
    return job


def session_processes(sid):
    """{pid: process group} of the live processes of session `sid`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state ppid pgrp session ...
        if fields[0] != "Z" and int(fields[3]) == sid:
            found[int(entry.name)] = int(fields[2])
    return found


def kill_job(job):
    """SIGKILL to every process group of the job's session (mpirun's and
    each rank's) at once, then reap the launcher."""
    deadline = time.monotonic() + 20
    while True:
        groups = set(session_processes(job.pid).values())
        if not groups:
            break
        for group in sorted(groups, key=lambda g: g == job.pid):  # the ranks first
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, session_processes(job.pid)
        time.sleep(0.05)
    job.out, job.err = job.communicate(timeout=60)


def finish(job):
    try:
        out, err = job.communicate(timeout=MPI_TIMEOUT_S)
    except BaseException:
        kill_job(job)
        raise
    finally:
        shutil.rmtree(job.session, ignore_errors=True)
    return job.returncode, out, err


def wait_for(path_glob, folder, job):
    deadline = time.monotonic() + MPI_TIMEOUT_S
    while not list(folder.glob(path_glob)):
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.01)


def complete_set(iotest, path):
    """A set xradio opened: it must be whole. 0 schema issues and every
    chunk there and right."""
    ps = opened(path)
    assert sorted(ps.children) == NAMES, sorted(ps.children)
    no_schema_issue(ps)
    assert ": passed" in iotest("verify", "--all", str(path), check=0).stdout


@pytest.mark.parametrize("when", [0.3, 1.0, 2.0, "at the rename", "after the end"])
def test_a_run_killed_at_any_moment_leaves_no_set_that_opens_incomplete(iotest, tmp_path, when):
    out = tmp_path / "vis.ps.zarr"
    job = start(out, *LONG, "--storage=msv4")
    try:
        if when == "after the end":
            job.wait(timeout=MPI_TIMEOUT_S)
        elif when == "at the rename":
            # The moment the set takes its final name, before its root's key.
            deadline = time.monotonic() + MPI_TIMEOUT_S
            while not out.exists() and job.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.0005)
        else:
            try:
                job.wait(timeout=when)
            except subprocess.TimeoutExpired:
                pass
    finally:
        kill_job(job)
        shutil.rmtree(job.session, ignore_errors=True)
    finished = job.returncode == 0
    if when == "after the end":
        assert finished, job.err[-3000:]
    print(f"{when}: the run {'had finished' if finished else 'was killed'} "
          f"({job.returncode}); left {sorted(os.listdir(tmp_path))}")
    if not finished:
        assert job.returncode == -signal.SIGKILL, (job.returncode, job.err[-3000:])
    for entry in sorted(tmp_path.iterdir()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                open_processing_set(str(entry))
            except Exception as e:  # nothing there that zarr takes for a group: fine
                assert not (finished and entry == out), f"{entry}: {e!r}"
                continue
        # It opened: only the final name may, and only whole.
        assert entry == out, f"{entry} opens as a processing set"
        complete_set(iotest, entry)
    if finished:
        assert out.exists() and not list(tmp_path.glob("*.partial")), os.listdir(tmp_path)
    elif when == 1.0:
        # What a killed run left does not stop the next run into the name.
        rc, _, err = finish(start(out, *LONG, "--storage=msv4"))
        assert rc == 0, err[-3000:]
        complete_set(iotest, out)


def test_a_second_run_into_the_name_is_refused_while_the_first_writes_then_replaces_it(
        iotest, tmp_path):
    out = tmp_path / "vis.ps.zarr"
    # Four times LONG's times: the first run outlasts the second's start
    # (mpirun's own second or two) however fast the disk is that minute.
    first = start(out, *LONGER, "--seed=1", f"--report={tmp_path / 'first.json'}")
    try:
        wait_for("vis.ps.zarr.run-*[0-9].partial", tmp_path, first)  # not its lock
        second = run_job(3, *LONG, "--seed=2", str(out))
        assert second.returncode == 2, (second.stdout, second.stderr[-3000:])
        lines = [line for line in second.stderr.splitlines() if line.startswith("iotest: error")]
        assert len(lines) == 1 and "being written by another run" in lines[0], second.stderr
        assert re.search(r"vis\.ps\.zarr\.run-\d+\.partial", lines[0]), lines[0]
    finally:
        rc, _, err = finish(first)
    assert rc == 0, err[-3000:]  # the first run never noticed
    first_nonce = load(tmp_path / "first.json")["config"]["nonce"]
    iotest("verify", f"--nonce={first_nonce}", str(out), check=0)
    # Run again into the same name: the second run's set replaces the first.
    again = run_job(3, *LONG, "--seed=2", f"--report={tmp_path / 'second.json'}", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    r = load(tmp_path / "second.json")
    assert r["config"]["outputs_replaced"] == 1
    assert "replaced 1 file(s) there before the run" in again.stdout, again.stdout
    iotest("verify", "--all", f"--nonce={r['config']['nonce']}", str(out), check=0)
    assert iotest("verify", f"--nonce={first_nonce}", str(out)).returncode != 0
    ps = opened(out)
    assert sorted(ps.children) == NAMES
    no_schema_issue(ps)
    assert sorted(os.listdir(tmp_path)) == ["first.json", "second.json", "vis.ps.zarr"]
