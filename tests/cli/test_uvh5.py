"""Visibilities written by `iotest degrid OUT.h5`: a UVH5 file pyuvdata reads,
every visibility present, values equal to the direct Fourier transform."""
import json
import os
import warnings

import numpy as np
import pytest

from conftest import MPI_TIMEOUT_S

pyuvdata = pytest.importorskip("pyuvdata")


def test_degrid_writes_uvh5_that_pyuvdata_reads(iotest, tmp_path):
    out, report = tmp_path / "vis.h5", tmp_path / "r.json"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", "--source-count=10", str(out),
           f"--report={report}", check=0)
    r = json.loads(report.read_text())
    c = r["counts"]
    assert c["visibilities_written"] == 351 * 8 * 16, "every visibility written once"
    assert c["chunks_written"] == 351 * 2 * 2
    # Chunks several subgrids share are read back, added to and written again.
    assert c["bytes_written"] == (c["chunks_written"] + c["chunks_rewritten"]) * 4 * 8 * 16
    assert r["config"]["output"] == str(out)
    assert sorted(os.listdir(tmp_path)) == ["r.json", "vis.h5"]  # no partial file left

    uv = read_uvh5(out)
    assert (uv.Nbls, uv.Ntimes, uv.Nfreqs, uv.Npols) == (351, 8, 16, 1)
    assert uv.telescope.name == "vlaa"
    data = uv.data_array[:, :, 0]
    assert np.all(data != 0), "every visibility is written"
    assert not uv.flag_array.any() and np.all(uv.nsample_array == 1)

    assert direct_error(uv, data, r) < 1e-7


def direct_error(uv, data, r):
    """Relative RMSE of 300 random visibilities against the direct transform
    of the report's sky, in Jy (every source 1 Jy)."""
    pixel = r["sky"]["pixel_lm"]
    sources = np.array(r["sky"]["sources"], dtype=float) * pixel
    l, m = sources[:, 0], sources[:, 1]
    n = np.sqrt(1 - l * l - m * m)
    rng = np.random.default_rng(3)
    rows, chans = rng.integers(0, uv.Nblts, 300), rng.integers(0, uv.Nfreqs, 300)
    uvw = uv.uvw_array[rows] * (uv.freq_array[chans] / 299792458.0)[:, None]
    want = np.exp(2j * np.pi * (np.outer(uvw[:, 0], l) + np.outer(uvw[:, 1], m)
                                + np.outer(uvw[:, 2], n - 1))).sum(axis=1)
    got = data[rows, chans]
    return np.sqrt(np.sum(np.abs(got - want) ** 2) / np.sum(np.abs(want) ** 2))


def test_a_one_jansky_source_has_visibilities_of_one_jansky(iotest, tmp_path):
    """Physical units: vis_units says Jy, and one source of 1 Jy gives
    |V| = 1 whatever the image size (T05_: N = 512)."""
    out = tmp_path / "vis.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", "--source-count=1", str(out), check=0)
    uv = read_uvh5(out)
    assert uv.vis_units == "Jy"
    amplitude = np.abs(uv.data_array[:, :, 0])
    assert np.max(np.abs(amplitude - 1)) < 1e-6, (amplitude.min(), amplitude.max())


def test_files_from_before_jansky_are_refused(iotest, tmp_path):
    """A sky's file whose vis_units is not Jy was written in the old scale
    (1/N^2 of today's): verify and grid refuse it with one line."""
    import h5py
    out = tmp_path / "vis.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", "--source-count=3", str(out), check=0)
    with h5py.File(out, "r+") as f:
        del f["Header/vis_units"]
        f["Header/vis_units"] = np.bytes_("uncalib")
    for command in (["verify"], ["grid"]):
        proc = iotest(*command, str(out), check=2)
        assert "vis.h5" in proc.stderr and "not Jy" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def read_uvh5(path):
    uv = pyuvdata.UVData()
    with warnings.catch_warnings():
        # pyuvdata takes iotest's files as they are (test_uvh5_pyuvdata.py).
        warnings.simplefilter("error")
        uv.read(str(path), file_type="uvh5")
    return uv


def test_distributed_run_files_sum_to_the_sky(mpirun, tmp_path):
    """Two streamers with two writers each: four UVH5 files, each readable by
    pyuvdata, whose sum is the whole observation."""
    report = tmp_path / "r.json"
    mpirun(5, "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", "--source-count=10", "--no-progress",
           "--facet-workers=3", "--writer-count=2", str(tmp_path / "vis%d.h5"),
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)  # a deadlock fails here
    r = json.loads(report.read_text())
    files = sorted(tmp_path.glob("vis*.h5"))
    assert len(files) == 4
    total = None
    for f in files:
        uv = read_uvh5(f)
        assert (uv.Nbls, uv.Ntimes, uv.Nfreqs, uv.Npols) == (351, 8, 16, 1)
        total = uv.data_array[:, :, 0] if total is None else total + uv.data_array[:, :, 0]
    assert np.all(total != 0), "every visibility is in one of the files"
    assert direct_error(uv, total, r) < 1e-7


def test_verify_passes_on_written_files_and_fails_on_a_wrong_sky(iotest, tmp_path):
    out = tmp_path / "vis.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/8/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", "--source-count=7", "--seed=3", str(out),
           check=0)
    r = json.loads(iotest("verify", str(out), "--report=-", check=0).stdout)
    assert r["verification"]["passed"]
    assert r["verification"]["chunks_present"] == r["verification"]["chunks_expected"] == 1404
    assert r["accuracy"]["vis_rmse"] < 1e-7 and r["accuracy"]["vis_samples"] == 1000
    proc = iotest("verify", str(out), "--seed=4", check=1)
    assert "FAILED" in proc.stdout and "direct transform" in proc.stdout
    proc = iotest("verify", str(tmp_path / "none.h5"), check=2)
    assert "cannot open" in proc.stderr


def test_an_unwritable_output_fails_cleanly(iotest, tmp_path):
    proc = iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-60:60/2/2",
                  "--freq=1e9:1e9/1", str(tmp_path / "missing-dir" / "vis.h5"), check=2)
    assert "output" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing-dir").exists()
