"""`iotest grid --image=FILE.fits`: the dirty image as FITS with a celestial
WCS, read by astropy (a reader no one here wrote): the source where its
direction cosines put it on the sky, east to the left, north up, the phase
centre at pixel used/2 + 1 as WSClean puts it."""
import json
import math

import pytest

astropy_fits = pytest.importorskip("astropy.io.fits")
astropy_wcs = pytest.importorskip("astropy.wcs")
np = pytest.importorskip("numpy")

OBS = ["--time=-300:300/16/16", "--freq=260e6:300e6/32/32", "--dec=34"]


def sin_deprojection(l, m, ra0, dec0):
    """(RA, Dec) in degrees of direction cosines (l east, m north) about a
    phase centre, the SIN projection's inverse (Greisen & Calabretta)."""
    ra0, dec0 = math.radians(ra0), math.radians(dec0)
    n = math.sqrt(1 - l * l - m * m)
    dec = math.asin(m * math.cos(dec0) + n * math.sin(dec0))
    ra = ra0 + math.atan2(l, n * math.cos(dec0) - m * math.sin(dec0))
    return math.degrees(ra) % 360, math.degrees(dec)


# A header astropy has to fix (DATE-OBS against MJD-OBS, say) fails.
@pytest.mark.filterwarnings("error")
def test_a_single_source_lands_where_astropy_reads_its_coordinates(iotest, tmp_path):
    image, report = tmp_path / "dirty.fits", tmp_path / "r.json"
    iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--source-count=1",
           f"--image={image}", f"--report={report}", check=0)
    r = json.loads(report.read_text())
    (y0, y1), = r["sky"]["sources"]
    pixel_lm = r["sky"]["pixel_lm"]
    with astropy_fits.open(image) as hdus:
        header, data = hdus[0].header, hdus[0].data
    # As WSClean writes its images: RA, DEC, FREQ, STOKES.
    assert [header[f"CTYPE{k}"] for k in range(1, 5)] == ["RA---SIN", "DEC--SIN", "FREQ",
                                                         "STOKES"]
    used = header["NAXIS1"]
    assert header["NAXIS2"] == used and data.shape == (1, 1, used, used)
    assert header["CRPIX1"] == header["CRPIX2"] == used // 2 + 1
    assert header["CDELT1"] == pytest.approx(-math.degrees(pixel_lm), rel=1e-12)
    assert header["CDELT2"] == pytest.approx(math.degrees(pixel_lm), rel=1e-12)
    assert header["CRVAL2"] == pytest.approx(34)
    assert header["CRVAL3"] == pytest.approx(280e6)

    plane = data[0, 0]
    row, column = np.unravel_index(np.nanargmax(plane), plane.shape)
    # Column 0 (l = used/2) lies outside iotest's facets: undefined, NaN.
    assert np.isnan(plane[:, 0]).all() and np.isfinite(plane[:, 1:]).all()
    # The peak is the source's pixel: l = y0 pixels east, m = y1 north;
    # a 1 Jy source reads 1 Jy/beam there.
    assert (column, row) == (used // 2 - y0, used // 2 + y1)
    assert plane[row, column] == pytest.approx(1.0, abs=1e-4)
    assert header["BUNIT"] == "JY/BEAM"
    wcs = astropy_wcs.WCS(header).celestial
    where = wcs.pixel_to_world(column, row)
    ra, dec = sin_deprojection(y0 * pixel_lm, y1 * pixel_lm, header["CRVAL1"], header["CRVAL2"])
    # Within a hundredth of a pixel (the pixel is 2.8 arcsec here).
    tolerance = 0.01 * math.degrees(pixel_lm)
    assert abs((where.ra.deg - ra + 180) % 360 - 180) * math.cos(math.radians(dec)) < tolerance
    assert abs(where.dec.deg - dec) < tolerance
    # East to the left: RA falls as the column rises; north up.
    step = wcs.pixel_to_world([column, column + 1], [row, row + 1])
    assert step[1].ra.deg < step[0].ra.deg and step[1].dec.deg > step[0].dec.deg
    # The phase centre is the reference pixel (counted from 1).
    centre = wcs.pixel_to_world(used // 2, used // 2)
    assert centre.ra.deg == pytest.approx(header["CRVAL1"], abs=1e-9)
    assert centre.dec.deg == pytest.approx(header["CRVAL2"], abs=1e-9)


def test_an_unwritable_fits_path_is_a_usage_error(iotest, tmp_path):
    proc = iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS,
                  f"--image={tmp_path}/missing/dirty.fits", check=2)
    assert proc.stderr.strip().startswith("iotest: error: --image:")
    assert not list(tmp_path.glob("**/*.fits*"))
