"""`iotest grid`: the imaging direction in one process. The dirty image from
gridding, w-towers and the recombination's image direction, against the
direct adjoint transform of the same visibilities."""
import json
import os

import pytest

from conftest import MPI_TIMEOUT_S

OBS = ["--time=-600:600/8/4", "--freq=260e6:300e6/16/8", "--dec=-40"]


def test_grid_of_the_sky_in_memory_matches_the_direct_adjoint(iotest, tmp_path):
    report = tmp_path / "r.json"
    iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--pixel-samples=40",
           f"--report={report}", check=0)
    r = json.loads(report.read_text())
    assert r["mode"] == "grid" and r["config"]["direction"] == "image"
    assert r["counts"]["visibilities"] == 351 * 8 * 16
    assert r["accuracy"]["pixel_samples"] == 40
    # Stated tolerance: the kernels' accuracy (u, v support 12 ~2e-9 per
    # axis, w ~1e-8), as for degridding.
    assert r["accuracy"]["facet_rmse"] < 1e-7
    assert r["rates"]["vis_per_s"] > 0 and r["timing"]["image_s"] > 0


def test_grid_of_a_predict_runs_file_matches_and_reads_every_chunk(iotest, tmp_path):
    vis, report = tmp_path / "vis.h5", tmp_path / "r.json"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--source-count=10", str(vis),
           check=0)
    iotest("grid", str(vis), "--pixel-samples=40", f"--report={report}", check=0)
    r = json.loads(report.read_text())
    assert r["accuracy"]["facet_rmse"] < 1e-7
    assert r["counts"]["visibilities"] == 351 * 8 * 16
    reading = r["read"]
    assert reading["files"] == [str(vis)] and reading["backend"] == "hdf5"
    # 351 x 2 row chunks x 2 frequency chunks, each read at least once.
    assert reading["chunks"] >= 351 * 2 * 2
    assert reading["bytes"] == reading["chunks"] * 4 * 8 * 16


def test_grid_of_a_distributed_runs_files(iotest, mpirun, tmp_path):
    """The files of a distributed predict run (one per streamer), whose
    chunks split between streamers lie in parts in several files."""
    mpirun(3, "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--no-progress",
           str(tmp_path / "vis%d.h5"), check=0, timeout=MPI_TIMEOUT_S)
    files = sorted(str(p) for p in tmp_path.glob("vis*.h5"))
    assert len(files) == 2
    report = tmp_path / "r.json"
    iotest("grid", *files, "--pixel-samples=20", f"--report={report}", check=0)
    assert json.loads(report.read_text())["accuracy"]["facet_rmse"] < 1e-7


@pytest.mark.parametrize("extra, option", [
    (["--rec-set=T05_"], "--rec-set"),
    (["--time=-600:600/8/4"], "--time"),
])
def test_grid_of_files_refuses_a_second_job(iotest, tmp_path, extra, option):
    vis = tmp_path / "vis.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, str(vis), check=0)
    proc = iotest("grid", str(vis), *extra, check=2)
    assert option in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_grid_of_bad_files_fails_cleanly(iotest, tmp_path):
    proc = iotest("grid", str(tmp_path / "missing.h5"), check=2)
    assert "missing.h5" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # A truncated file: HDF5 cannot open it.
    vis = tmp_path / "vis.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, str(vis), check=0)
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(vis.read_bytes()[: os.path.getsize(vis) // 2])
    proc = iotest("grid", str(truncated))
    assert proc.returncode != 0 and "truncated.h5" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # Files of two observations are not one set.
    other = tmp_path / "other.h5"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", "--time=-600:600/4/4",
           "--freq=260e6:300e6/16/8", "--dec=-40", str(other), check=0)
    proc = iotest("grid", str(vis), str(other), check=2)
    assert "other.h5" in proc.stderr and "not one output set" in proc.stderr


@pytest.mark.parametrize("source", ["memory", "file"])
def test_a_one_jansky_source_reads_one_in_the_dirty_image(iotest, tmp_path, source):
    """Natural weighting: the dirty image over the sum of the weights (the
    visibilities gridded) reads a source's flux, 1 Jy, at its pixel, after
    the grid correction; from the sky in memory and from a predict run's
    file (whose visibilities are in Jy)."""
    import h5py
    import numpy as np
    image, report = tmp_path / "dirty.h5", tmp_path / "r.json"
    job = ["--rec-set=T05_", "--vis-set=vlaa", *OBS, "--source-count=1"]
    if source == "file":
        vis = tmp_path / "vis.h5"
        iotest("degrid", *job, str(vis), check=0)
        job = [str(vis)]
    iotest("grid", *job, f"--image={image}", f"--report={report}", check=0)
    r = json.loads(report.read_text())
    (y0, y1), = r["sky"]["sources"]
    used = r["config"]["used_size"]
    with h5py.File(image, "r") as f:  # [y][x]: m = y - used/2 north, l = used/2 - x east
        peak = f["dirty_image"][used // 2 + y1, used // 2 - y0]
    assert abs(complex(*peak) - 1) < 1e-4, peak


# SKA-Low's core: 13,861 baselines, 166 of them autocorrelations.
CORE = ["--rec-set=T05_", "--vis-set=lowbd2-core", "--time=-460:460/8/4",
        "--freq=260e6:300e6/8/8"]


def test_the_image_leaves_autocorrelations_out_unless_asked(iotest, tmp_path):
    """As WSClean and CASA image (docs/imaging.md, "Autocorrelations"): the
    rows whose two antennas are the same are neither gridded nor counted in
    the sum of the weights, unless --image-autocorrelations; either image
    matches the direct adjoint of what it gridded. At |u, v, w| = 0 each
    autocorrelation is the sky's total flux (3 sources of 1 Jy), so the two
    images, times their weights, differ by that at every pixel."""
    import h5py
    import numpy as np
    per_row, images = 8 * 8, {}
    for imaged in (False, True):
        image, report = tmp_path / f"dirty{imaged}.h5", tmp_path / f"r{imaged}.json"
        extra = ["--image-autocorrelations"] if imaged else []
        proc = iotest("grid", *CORE, "--source-count=3", "--pixel-samples=32",
                      f"--image={image}", f"--report={report}", *extra, check=0)
        r = json.loads(report.read_text())
        assert r["accuracy"]["facet_rmse"] < 1e-7
        assert r["observation"]["autocorrelations_imaged"] is imaged
        said = "(imaged)" if imaged else "(left out of the image)"
        assert proc.stdout.count("autocorrelations") == 1
        assert f"with autocorrelations {said}" in proc.stdout
        assert r["counts"]["visibilities"] == 13861 * per_row  # the observation's, as ever
        assert r["accuracy"]["pixel_samples"] == 32
        with h5py.File(image, "r") as f:
            d = f["dirty_image"]
            weights = int(d.attrs["visibilities"])
            images[imaged] = (d[:, 1:, 0] + 1j * d[:, 1:, 1]) * weights
        assert weights == (13861 if imaged else 13861 - 166) * per_row
        assert r["observation"]["visibilities_imaged"] == weights  # the report's is the file's
    autos = 166 * per_row
    lifted = (images[True] - images[False]) / autos
    assert np.allclose(lifted, 3, rtol=0, atol=1e-5), np.max(np.abs(lifted - 3))


def test_grid_rejects_impossible_options(iotest):
    proc = iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--support=7", check=2)
    assert "--support" in proc.stderr
    proc = iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--pixel-samples=-1",
                  check=2)
    assert "--pixel-samples" in proc.stderr


def test_grid_writes_the_dirty_image(iotest, tmp_path):
    """--image: the dirty image as one HDF5 dataset laid out as the FITS
    image (row y: m = y - used/2 north; column x: l = used/2 - x east),
    bright where the sources are; an unwritable path is a usage error
    before any work."""
    import h5py
    import numpy as np
    vis, image, report = tmp_path / "vis.h5", tmp_path / "dirty.h5", tmp_path / "r.json"
    iotest("degrid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, str(vis), check=0)
    iotest("grid", str(vis), f"--image={image}", f"--report={report}", check=0)
    r = json.loads(report.read_text())
    used = r["config"]["used_size"]
    with h5py.File(image, "r") as f:
        d = f["dirty_image"]
        assert d.shape == (used, used, 2) and d.attrs["rec_set"] == b"T05_"
        assert d.attrs["units"] == b"Jy/beam" and d.attrs["phase_centre_pixel"] == used // 2
        assert d.attrs["visibilities"] == r["counts"]["visibilities"]
        dirty = d[..., 0] + 1j * d[..., 1]
    assert np.all(np.isfinite(dirty[:, 1:])) and not list(tmp_path.glob("*.partial"))
    assert np.isnan(dirty[:, 0]).all()  # l = used/2: outside the image iotest makes
    assert r["image"]["path"] == str(image) and r["image"]["format"] == "hdf5"
    at_sources = [abs(dirty[used // 2 + y1, used // 2 - y0]) for y0, y1 in r["sky"]["sources"]]
    assert np.mean(at_sources) > 3 * np.nanmedian(abs(dirty))
    proc = iotest("grid", str(vis), f"--image={tmp_path}/no/such/folder/dirty.h5", check=2)
    assert "--image" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
