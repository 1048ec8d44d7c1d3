"""A run's UVH5 file as pyuvdata takes it, unchanged: read and checked with
every warning an error, one linear polarisation XX in Jy (an unpolarised
source of S Jy gives XX = S, I = (XX + YY) / 2), (u, v, w) those pyuvdata
computes from the antenna positions and times, the phase centre's catalog
entry its true ICRS position, and a MeasurementSet written by pyuvdata
that casacore opens and pyuvdata reads back (docs/imaging.md,
"Coordinates: the uvw model")."""
import math
import subprocess
import warnings

import numpy as np
import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, load, mpi_env

pyuvdata = pytest.importorskip("pyuvdata")
tables = pytest.importorskip("casacore.tables")

# Small: 351 baselines x 16 times x 4 channels at 1.4 GHz, one 1 Jy source.
RUN = ("--rec-set=T05_", "--vis-set=vlaa", "--time=-300:300/16", "--freq=1.4e9:1.41e9/4",
       "--dec=34", "--source-count=1", "--no-progress")
NBLS, NTIMES, NFREQS = 351, 16, 4
XX = -5  # AIPS's and pyuvdata's code
CASA_XX = 9  # casacore's CORR_TYPE


def two_ranks(*args):
    """One producer and one streamer (one writer: one file)."""
    proc = subprocess.run([*MPIRUN, "-np", "2", iotest_binary(), *RUN, *args],
                          capture_output=True, text=True, timeout=MPI_TIMEOUT_S, env=mpi_env())
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The run's file and report, shared by the tests that only read them."""
    where = tmp_path_factory.mktemp("uvh5")
    two_ranks(str(where / "vis%d.h5"), f"--report={where / 'r.json'}")
    files = sorted(where.glob("vis*.h5"))
    assert len(files) == 1
    return files[0], load(where / "r.json")


def read_strictly(path):
    """pyuvdata's read and check with any warning an error."""
    uv = pyuvdata.UVData()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uv.read(str(path), file_type="uvh5")
        uv.check()
    return uv


def write_ms_strictly(uv, ms_path):
    """pyuvdata's own MeasurementSet writer on the file, any warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uv.write_ms(str(ms_path))
    return ms_path


def test_pyuvdata_reads_one_xx_polarisation_in_jy_without_a_warning(run):
    path, report = run
    uv = read_strictly(path)
    assert (uv.Nbls, uv.Ntimes, uv.Nfreqs, uv.Npols) == (NBLS, NTIMES, NFREQS, 1)
    assert list(uv.polarization_array) == [XX]
    assert uv.get_pols() == ["xx"]
    assert uv.pol_convention == "avg"
    assert uv.vis_units == "Jy"
    # XX = S for the unpolarised 1 Jy source: its direct transform, in Jy.
    (x, y), = report["sky"]["sources"]
    l, m = x * report["sky"]["pixel_lm"], y * report["sky"]["pixel_lm"]
    n = math.sqrt(1 - l * l - m * m)
    uvw = uv.uvw_array[:, None, :] * (uv.freq_array / 299792458.0)[None, :, None]
    want = np.exp(2j * np.pi * (uvw[..., 0] * l + uvw[..., 1] * m + uvw[..., 2] * (n - 1)))
    got = uv.data_array[:, :, 0]
    assert np.max(np.abs(got - want)) < 1e-6, np.max(np.abs(got - want))


def test_uvw_are_those_of_the_antenna_positions_and_times(run):
    """pyuvdata recomputes (u, v, w) from the ECEF antenna positions, its
    apparent sidereal time (astropy, IERS UT1) and the file's apparent
    phase centre. Before iotest placed the phase centre by apparent
    sidereal time they differed by up to 1.28 m here (a 0.58 s offset in
    hour angle); now by well under a millimetre."""
    from astropy.time import Time
    path, _ = run
    uv = read_strictly(path)
    expected = uv.copy(metadata_only=True)
    expected.set_uvws_from_antenna_positions()
    difference = np.max(np.abs(expected.uvw_array - uv.uvw_array))
    assert difference < 1e-3, difference
    assert np.max(np.linalg.norm(uv.uvw_array, axis=1)) > 30e3, "the longest baselines are in"
    # The phase centre transits at the file's JD 2460000.5 (hour angle 0).
    start = Time(2460000.5, format="jd", scale="utc", location=uv.telescope.location)
    last = start.sidereal_time("apparent").rad
    assert np.allclose(uv.phase_center_app_ra, last, rtol=0, atol=1e-8)
    assert np.allclose(uv.phase_center_app_dec, math.radians(34), rtol=0, atol=1e-12)


MAS = math.radians(1 / 3600e3)


def test_the_catalog_holds_the_phase_centre_s_icrs_position(run):
    """The catalog entry (ICRS) is the apparent direction of date in ICRS,
    as pyuvdata turns one into the other (ERFA): within 5 mas, the Sun's
    light deflection, which iotest leaves out. Before, it repeated the
    apparent coordinates, 17.6' east and 5.4' north of the truth here.
    frame_pa is pyuvdata's turn of (u, v) from the apparent north to the
    catalog's (ICRS) north, 0.109 degrees here: iotest's (u, v) are turned
    by it (v toward ICRS north), so the file states it (before, it held 0
    and (u, v) were the apparent frame's)."""
    from pyuvdata.utils.phasing import calc_app_coords, transform_app_to_icrs
    path, _ = run
    uv = read_strictly(path)
    entry = uv.phase_center_catalog[0]
    assert (entry["cat_frame"], entry["cat_epoch"], entry["cat_type"]) == ("icrs", 2000.0,
                                                                          "sidereal")
    ra, dec = transform_app_to_icrs(time_array=np.array([2460000.5]),
                                    app_ra=uv.phase_center_app_ra[:1],
                                    app_dec=uv.phase_center_app_dec[:1],
                                    telescope_loc=uv.telescope.location)
    assert abs(entry["cat_lon"] - ra[0]) * math.cos(dec[0]) < 10 * MAS
    assert abs(entry["cat_lat"] - dec[0]) < 10 * MAS
    assert math.degrees(entry["cat_lon"]) == pytest.approx(46.62683, abs=1e-5)
    assert math.degrees(entry["cat_lat"]) == pytest.approx(33.90986, abs=1e-5)
    # And back: the apparent coordinates pyuvdata computes from the entry
    # at every time are the file's within 10 mas (the phase centre is held
    # at its apparent place of JD0 for the observation's 10 minutes).
    app_ra, app_dec = calc_app_coords(lon_coord=entry["cat_lon"], lat_coord=entry["cat_lat"],
                                      time_array=uv.time_array, lst_array=uv.lst_array,
                                      telescope_loc=uv.telescope.location)
    assert np.max(np.abs(app_ra - uv.phase_center_app_ra)) * math.cos(dec[0]) < 10 * MAS
    assert np.max(np.abs(app_dec - uv.phase_center_app_dec)) < 10 * MAS
    from pyuvdata.utils.phasing import calc_frame_pos_angle
    pa = calc_frame_pos_angle(time_array=np.array([2460000.5]),
                              app_ra=uv.phase_center_app_ra[:1],
                              app_dec=uv.phase_center_app_dec[:1],
                              telescope_loc=uv.telescope.location, ref_frame="icrs")
    # iotest's is taken at the centre, pyuvdata's half a degree south
    # (over its 1 degree arc): 2" apart.
    assert np.all(uv.phase_center_frame_pa == uv.phase_center_frame_pa[0])
    assert uv.phase_center_frame_pa[0] == pytest.approx(pa[0], abs=math.radians(3 / 3600))
    assert math.degrees(uv.phase_center_frame_pa[0]) == pytest.approx(0.1096, abs=1e-4)


def read_ms_back(ms_path):
    """pyuvdata's read of a MeasurementSet, and the warnings it gave."""
    back = pyuvdata.UVData()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        back.read(str(ms_path))
    return back, [str(w.message) for w in caught]


def test_pyuvdata_reads_back_the_measurement_set_it_writes(run, tmp_path):
    """pyuvdata's read of the MS its write_ms makes takes the phase centre
    from FIELD (the catalog's ICRS) and recomputes (u, v, w), turned by
    frame_pa (0.109 degrees here) so that v points to ICRS north. iotest's
    are turned the same way, so the MS reads back with no warning (to
    pyuvdata's 1 degree arc for frame_pa: 2.3" here, 0.41 m at 36.6 km,
    under its 1 m). Before, FIELD held the apparent coordinates and
    they differed by 192 m; then, with ICRS in FIELD but (u, v) in the
    apparent frame, by 69.5 m (the turn), and only pyuvdata's own phase()
    to the catalog entry made a silent MS."""
    path, _ = run
    uv = read_strictly(path)
    ms_path = write_ms_strictly(uv, tmp_path / "vis.ms")
    back, caught = read_ms_back(ms_path)
    assert caught == []
    entry = back.phase_center_catalog[0]
    assert entry["cat_frame"] == "icrs"
    assert entry["cat_lon"] == pytest.approx(uv.phase_center_catalog[0]["cat_lon"], abs=1e-12)
    assert entry["cat_lat"] == pytest.approx(uv.phase_center_catalog[0]["cat_lat"], abs=1e-12)
    assert np.degrees(back.phase_center_frame_pa) == pytest.approx(0.109, abs=0.001)
    expected = back.copy(metadata_only=True)
    expected.set_uvws_from_antenna_positions()
    difference = np.max(np.abs(expected.uvw_array - back.uvw_array))
    # 0.41 m at 36.6 km, under pyuvdata's 1 m: its frame_pa, recomputed on
    # read over a 1 degree arc, is 2.3" from the file's (taken at the
    # centre). Turned by that difference, the MS's are pyuvdata's to 5 mm.
    assert difference < 0.5, difference
    assert np.max(np.abs(back.uvw_array - uv.uvw_array)) < 1e-6
    turn = back.phase_center_frame_pa - uv.phase_center_frame_pa
    assert np.max(np.abs(turn)) < math.radians(3 / 3600)
    u, v, w = back.uvw_array.T
    turned = np.stack([u * np.cos(turn) - v * np.sin(turn), u * np.sin(turn) + v * np.cos(turn),
                       w], axis=1)
    assert np.max(np.abs(turned - expected.uvw_array)) < 5e-3


def test_pyuvdata_writes_a_measurement_set_casacore_opens(run, tmp_path):
    path, _ = run
    uv = read_strictly(path)
    ms_path = write_ms_strictly(uv, tmp_path / "vis.ms")
    with tables.table(str(ms_path), ack=False) as ms:
        assert ms.nrows() == NBLS * NTIMES
        data, ms_uvw = ms.getcol("DATA"), ms.getcol("UVW")
        assert ms.getkeyword("pyuvdata_polconv") == "avg"
    with tables.table(str(ms_path / "POLARIZATION"), ack=False) as pol:
        assert pol.getcol("CORR_TYPE").tolist() == [[CASA_XX]]
    with tables.table(str(ms_path / "SPECTRAL_WINDOW"), ack=False) as spw:
        np.testing.assert_allclose(spw.getcol("CHAN_FREQ")[0], uv.freq_array, rtol=1e-12)
    assert data.shape == (NBLS * NTIMES, NFREQS, 1)
    # The file's visibilities (complex64 in the MS), under either
    # conjugation convention with the (u, v, w) that go with it.
    vis = uv.data_array[:, :, 0]
    same = np.allclose(data[:, :, 0], vis, atol=1e-6) and np.allclose(ms_uvw, uv.uvw_array)
    flipped = (np.allclose(data[:, :, 0], np.conj(vis), atol=1e-6)
               and np.allclose(ms_uvw, -uv.uvw_array))
    assert same or flipped
    assert np.max(np.abs(np.abs(data) - 1)) < 1e-6, "XX = 1 Jy"


def test_a_synthetic_pattern_states_no_pol_convention(tmp_path):
    """--synthetic-vis values are no flux: "uncalib", with which pyuvdata
    refuses a pol_convention."""
    two_ranks("--synthetic-vis", str(tmp_path / "vis%d.h5"))
    uv = read_strictly(tmp_path / "vis0.h5")
    assert uv.vis_units == "uncalib" and uv.pol_convention is None
    assert list(uv.polarization_array) == [XX]
