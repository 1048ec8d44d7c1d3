"""`iotest run --direction=image|both --image=FILE` (issue 36, item 3): the
distributed imaging direction writes the dirty image as the field keeps
it. Rank 0 writes the file; the other producers send it their facets a
block of rows at a time. Held against `iotest grid --image` of the same
files with astropy and h5py: the same pixels, the same WCS, a 1 Jy source
reading 1 Jy/beam at its pixel; nothing under the final name before the
image is complete (a bad path, a SIGTERM)."""
import json
import signal
import subprocess
import time

import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, load, mpi_env
from test_scale import check_estimate

astropy_fits = pytest.importorskip("astropy.io.fits")
astropy_wcs = pytest.importorskip("astropy.wcs")
h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")

# test_image_fits.py's observation: one 1 Jy source, 179,712 visibilities.
OBS = ["--vis-set=vlaa", "--time=-300:300/16/16", "--freq=260e6:300e6/32/32", "--dec=34"]
JOB = ["--rec-set=T05_", *OBS]

# The run sums the same contributions as iotest grid, in the same order
# unless an assigner deals the parts otherwise, with FFT plans measured
# anew: the images agreed bit for bit with one to four producers, and to a
# relative RMS of 9e-14 to 1.1e-13 with an assigner or other plans.
ROUNDING = 1e-10


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """A distributed predict run's files (one per streamer), the dirty image
    `iotest grid` makes of them, as FITS and HDF5, and its report."""
    folder = tmp_path_factory.mktemp("predicted")
    subprocess.run([*MPIRUN, "-np", "3", iotest_binary(), *JOB, "--source-count=1",
                    "--no-progress", str(folder / "vis%d.h5")],
                   check=True, capture_output=True, timeout=MPI_TIMEOUT_S, env=mpi_env())
    files = sorted(str(p) for p in folder.glob("vis*.h5"))
    assert len(files) == 2
    for name in ("grid.fits", "grid.h5"):
        subprocess.run([iotest_binary(), "grid", *files, f"--image={folder / name}",
                        f"--report={folder / (name + '.json')}"],
                       check=True, capture_output=True, timeout=MPI_TIMEOUT_S)
    return folder, files, load(folder / "grid.fits.json")


def image_run(mpirun, tmp_path, ranks, image, files, *extra, check=0):
    """--direction=image unless extra names a direction."""
    report = tmp_path / "r.json"
    direction = [] if any(a.startswith("--direction") for a in extra) else ["--direction=image"]
    proc = mpirun(ranks, *JOB, *direction, f"--image={image}", "--no-progress",
                  f"--report={report}", *extra, *files, check=check)
    return proc, (load(report) if check == 0 else None)


def relative_rms(got, want):
    """Over the pixels the image defines: all but column 0 (NaN in both)."""
    got, want = got[:, 1:], want[:, 1:]
    return float(np.sqrt(np.mean(np.abs(got - want) ** 2) / np.mean(np.abs(want) ** 2)))


def source_pixel(report, used):
    """(row, column) of the one source: l = y0 pixels east, m = y1 north."""
    (y0, y1), = report["sky"]["sources"]
    return used // 2 + y1, used // 2 - y0


@pytest.mark.parametrize("ranks,extra", [
    (3, []),                                     # one producer: rank 0 writes its own facets
    (4, ["--facet-workers=3"]),                  # two producers send it theirs, block by block
    (4, ["--facet-workers=2", "--assigner"]),
])
def test_the_runs_fits_image_is_grids_pixel_by_pixel(mpirun, tmp_path, predicted, ranks, extra):
    folder, files, grid_report = predicted
    (tmp_path / "out").mkdir()
    image = tmp_path / "out" / "img.fits"
    proc, r = image_run(mpirun, tmp_path, ranks, image, files, *extra)
    with astropy_fits.open(folder / "grid.fits") as hdus:
        want, want_header = hdus[0].data[0, 0], hdus[0].header
    with astropy_fits.open(image) as hdus:
        got, header = hdus[0].data[0, 0], hdus[0].header
    used = header["NAXIS1"]
    assert got.shape == want.shape == (used, used) == (r["config"]["used_size"],) * 2
    # The same pixels to rounding, the same header card for card (WCS,
    # units, what was gridded), so the same world coordinates.
    assert relative_rms(got, want) < ROUNDING, relative_rms(got, want)
    assert list(header.items()) == list(want_header.items())
    wcs, want_wcs = astropy_wcs.WCS(header), astropy_wcs.WCS(want_header)
    corners = [[0, 0, 0, 0], [used - 1, used - 1, 0, 0], [used // 2, used // 2, 0, 0]]
    assert np.array_equal(wcs.wcs_pix2world(corners, 0), want_wcs.wcs_pix2world(corners, 0))
    # A 1 Jy source reads 1 Jy/beam at its pixel; column 0 (l = used/2,
    # outside the image iotest makes) is undefined: NaN, and only it.
    row, column = source_pixel(grid_report, used)
    assert (row, column) == np.unravel_index(np.nanargmax(got), got.shape)
    assert got[row, column] == pytest.approx(1.0, abs=1e-4)
    assert np.isnan(got[:, 0]).all() and np.isfinite(got[:, 1:]).all()
    # The report names the file, which alone is left.
    assert r["image"]["path"] == str(image) and r["image"]["format"] == "fits"
    assert r["image"]["bytes"] == image.stat().st_size and r["image"]["writer_rank"] == 0
    assert f"dirty image -> {image}" in proc.stdout
    assert sorted(p.name for p in image.parent.iterdir()) == ["img.fits"]
    # The writer's share in the memory model, which holds.
    assert ("producer", "image writer (rank 0)") in {(i["role"], i["name"])
                                                     for i in r["memory"]["items"]}
    check_estimate(r)


def test_the_hdf5_image_lies_as_the_fits_image(mpirun, tmp_path, predicted):
    """--image=FILE.h5: the dataset [y][x][real, imaginary], the FITS
    image's pixel array, from grid and from the run alike; --direction=both
    writes its residual's image the same way."""
    folder, files, grid_report = predicted
    with astropy_fits.open(folder / "grid.fits") as hdus:
        fits_pixels = hdus[0].data[0, 0]
    image = tmp_path / "img.h5"
    _, r = image_run(mpirun, tmp_path, 4, image, files, "--facet-workers=2")
    used = r["config"]["used_size"]
    for path in (folder / "grid.h5", image):
        with h5py.File(path, "r") as f:
            d = f["dirty_image"]
            assert d.shape == (used, used, 2)
            assert d.attrs["units"] == b"Jy/beam" and d.attrs["rec_set"] == b"T05_"
            assert d.attrs["phase_centre_pixel"] == used // 2
            assert d.attrs["layout"].startswith(b"[y][x][real, imaginary]")
            pixels = d[...]
        assert relative_rms(pixels[..., 0], fits_pixels) < ROUNDING
        row, column = source_pixel(grid_report, used)
        assert abs(complex(*pixels[row, column]) - 1) < 1e-4
    assert r["image"]["format"] == "hdf5" and r["image"]["bytes"] == image.stat().st_size
    # The residual of the files' own sky: zero to rounding.
    residual = tmp_path / "residual.h5"
    _, r = image_run(mpirun, tmp_path, 3, residual, files, "--direction=both")
    with h5py.File(residual, "r") as f:
        assert np.nanmax(np.abs(f["dirty_image"][...])) < 1e-10


@pytest.mark.parametrize("imaged", [False, True])
def test_the_runs_image_of_the_core_is_grids_with_or_without_autocorrelations(
        mpirun, iotest, tmp_path, imaged):
    """SKA-Low's core holds autocorrelations: run and grid leave them out
    of the image alike (docs/imaging.md, "Autocorrelations"), or take them
    alike with --image-autocorrelations, with the same sum of the weights
    (IOTNVIS, the rows gridded)."""
    core = ["--rec-set=T05_", "--vis-set=lowbd2-core", "--time=-460:460/8/4",
            "--freq=260e6:300e6/16/8", "--source-count=1"]
    extra = ["--image-autocorrelations"] if imaged else []
    iotest("grid", *core, *extra, f"--image={tmp_path / 'grid.fits'}", check=0)
    mpirun(3, *core, *extra, "--direction=image", f"--image={tmp_path / 'run.fits'}",
           "--no-progress", check=0)
    with astropy_fits.open(tmp_path / "grid.fits") as hdus:
        want, want_header = hdus[0].data[0, 0], hdus[0].header
    with astropy_fits.open(tmp_path / "run.fits") as hdus:
        got, header = hdus[0].data[0, 0], hdus[0].header
    assert relative_rms(got, want) < ROUNDING, relative_rms(got, want)
    assert list(header.items()) == list(want_header.items())
    assert header["IOTNVIS"] == (13861 - (0 if imaged else 166)) * 8 * 16


def error_line(proc):
    lines = [line for line in proc.stderr.splitlines() if line.startswith("iotest: error")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("image,extra,says", [
    ("{tmp}/no/such/folder/img.fits", [], "--image: cannot create"),
    ("{tmp}", [], "--image: cannot create"),               # a folder
    ("{file}", [], "--image: '{file}' is one of the files to read"),
    ("{tmp}/img.fits", ["--direction=predict"], "--image: expected --direction=image or both"),
])
def test_a_bad_image_path_is_one_line_and_status_2(mpirun, tmp_path, predicted, image, extra,
                                                   says):
    _, files, _ = predicted
    image = image.format(tmp=tmp_path, file=files[0])
    args = [*JOB, "--no-progress", f"--image={image}", *(extra or ["--direction=image"])]
    proc = mpirun(3, *args, *(files if not extra else []), check=2)
    assert error_line(proc).startswith("iotest: error: " + says.format(file=files[0]))
    assert not list(tmp_path.rglob("*.fits*"))


def test_a_run_ended_by_sigterm_leaves_no_image_under_its_name(tmp_path):
    """SIGTERM (a batch system's time limit) mid-walk: the image's partial
    file may stay, nothing takes the final name."""
    image = tmp_path / "img.fits"
    # Long enough to be mid-walk at the signal: the streamers predict 11.5 M
    # visibilities by direct transform and grid them (over 10 s here).
    cmd = [*MPIRUN, "-np", "3", iotest_binary(), "--rec-set=T05_", "--vis-set=vlaa",
           "--time=-1800:1800/1024/16", "--freq=260e6:300e6/32/32", "--dec=34",
           "--direction=image", f"--image={image}", "--no-progress"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=mpi_env())
    try:
        deadline = time.time() + MPI_TIMEOUT_S
        # The image is claimed before any work; a second later the walk is on.
        while not list(tmp_path.glob("img.fits.run-*.partial")):
            assert job.poll() is None and time.time() < deadline, job.communicate()
            time.sleep(0.02)
        time.sleep(1)
        assert job.poll() is None, "the run ended before the signal: make it longer"
        job.send_signal(signal.SIGTERM)  # mpirun passes it to its ranks
        _, err = job.communicate(timeout=60)
    except BaseException:
        job.send_signal(signal.SIGTERM)  # mpirun takes its ranks down with it
        job.communicate(timeout=60)
        raise
    assert job.returncode != 0
    assert "ended by SIGTERM" in err, err
    assert not image.exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".partial")] == []
