"""`iotest grid --image=FILE.fits`: the dirty image as FITS with a celestial
WCS, read by astropy (a reader no one here wrote): the source where its
direction cosines put it on the sky, east to the left, north up, the phase
centre at pixel used/2 + 1 as WSClean puts it, and at its true ICRS
position (docs/imaging.md, "Coordinates: the uvw model")."""
import json
import math

import pytest

astropy_fits = pytest.importorskip("astropy.io.fits")
astropy_wcs = pytest.importorskip("astropy.wcs")
np = pytest.importorskip("numpy")

OBS = ["--time=-300:300/16/16", "--freq=260e6:300e6/32/32", "--dec=34"]
# vlaa's array centre (observation.cpp's kVlaCentre): lon, lat (deg), height (m).
VLAA_SITE = (-107.6184, 34.0784, 2124.0)
JD0 = 2460000.5  # telescope::kStartJd: hour angle 0


def sin_deprojection(l, m, ra0, dec0):
    """(RA, Dec) in degrees of direction cosines (l east, m north) about a
    phase centre, the SIN projection's inverse (Greisen & Calabretta)."""
    ra0, dec0 = math.radians(ra0), math.radians(dec0)
    n = math.sqrt(1 - l * l - m * m)
    dec = math.asin(m * math.cos(dec0) + n * math.sin(dec0))
    ra = ra0 + math.atan2(l, n * math.cos(dec0) - m * math.sin(dec0))
    return math.degrees(ra) % 360, math.degrees(dec)


def grid_one_source(iotest, tmp_path):
    """`iotest grid` of one 1 Jy source into a FITS image: its path and report."""
    image, report = tmp_path / "dirty.fits", tmp_path / "r.json"
    iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS, "--source-count=1",
           f"--image={image}", f"--report={report}", check=0)
    return image, json.loads(report.read_text())


# A header astropy has to fix (DATE-OBS against MJD-OBS, say) fails.
@pytest.mark.filterwarnings("error")
def test_a_single_source_lands_where_astropy_reads_its_coordinates(iotest, tmp_path):
    image, r = grid_one_source(iotest, tmp_path)
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
    assert header["RADESYS"] == "ICRS"  # CRVAL: test_the_wcs_places_the_sky_in_icrs
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


def apparent_to_icrs(ra, dec):
    """ICRS (astropy SkyCoord) of apparent directions of date at JD0 seen
    from the VLA, apparent as iotest and pyuvdata mean it: hour angle (the
    local apparent sidereal time minus RA) and declination about the ITRS
    pole. The way pyuvdata's transform_app_to_icrs goes with astropy (to
    AltAz, then ICRS): astropy's TETE frame, about the CIP, puts the phase
    centre 0.30" away from pyuvdata's apparent one (polar motion)."""
    from astropy import units as u
    from astropy.coordinates import AltAz, EarthLocation, ICRS, SkyCoord
    from astropy.time import Time
    import erfa
    site = EarthLocation.from_geodetic(*VLAA_SITE)
    t = Time(JD0, format="jd", scale="utc", location=site)
    az, alt = erfa.hd2ae(t.sidereal_time("apparent").rad - np.asarray(ra), np.asarray(dec),
                         site.lat.rad)
    return SkyCoord(az * u.rad, alt * u.rad, frame=AltAz(obstime=t, location=site)) \
        .transform_to(ICRS())


@pytest.mark.filterwarnings("error")
def test_the_wcs_places_the_sky_in_icrs(iotest, tmp_path):
    """iotest's phase centre is apparent RA (the local apparent sidereal
    time at JD0) and Dec (--dec) of date; the FITS WCS (RADESYS ICRS) puts
    it, and a source off it, at their ICRS positions. Before, CRVAL were the
    apparent coordinates themselves, 17.6' east and 5.4' north of the truth."""
    from astropy import units as u
    from astropy.coordinates import SkyCoord
    from astropy.time import Time
    image, r = grid_one_source(iotest, tmp_path)
    (y0, y1), = r["sky"]["sources"]
    pixel_lm = r["sky"]["pixel_lm"]
    header = astropy_fits.getheader(image)
    wcs = astropy_wcs.WCS(header).celestial
    used = header["NAXIS1"]
    # The apparent phase centre, as pyuvdata reads it from iotest's UVH5.
    lst = Time(JD0, format="jd", scale="utc").sidereal_time(
        "apparent", longitude=VLAA_SITE[0] * u.deg).rad
    dec0 = math.radians(34)
    centre = apparent_to_icrs(lst, dec0)
    at_centre = wcs.pixel_to_world(used // 2, used // 2)
    assert centre.separation(at_centre).arcsec < 0.02  # 5 mas: the Sun's deflection
    assert header["CRVAL1"] == pytest.approx(46.62683, abs=1e-5)
    assert header["CRVAL2"] == pytest.approx(33.90986, abs=1e-5)
    # The source: y0 pixels east, y1 north. iotest's (u, v) are turned by
    # the frame angle (IOTFRMPA, pyuvdata's frame_pa: minus the ICRS
    # position angle of apparent north, 0.11 degrees here) so that v points
    # to ICRS north: (l, m) are direction cosines about the phase centre
    # along ICRS east and north, as the WCS (no rotation) reads them. The
    # WCS puts the source at its ICRS position but for annual aberration's
    # scale (1e-4: 0.04" at 144 pixels). Before the turn, the image's north
    # was the apparent frame's and the source was 0.77" off (r x 0.0019
    # pixels at r pixels from the centre).
    step = 1e-4
    pa = -apparent_to_icrs(lst, dec0 - step).position_angle(apparent_to_icrs(lst, dec0 + step))
    pa = (pa.deg + 180) % 360 - 180
    assert header["IOTFRMPA"] == pytest.approx(pa, abs=1e-4)
    assert header["IOTFRMPA"] == pytest.approx(0.1096, abs=1e-4)
    l, m = y0 * pixel_lm, y1 * pixel_lm
    ra, dec = sin_deprojection(l, m, header["CRVAL1"], header["CRVAL2"])
    source = SkyCoord(ra * u.deg, dec * u.deg)
    at_source = wcs.pixel_to_world(used // 2 - y0, used // 2 + y1)
    off = source.separation(at_source).arcsec
    assert off < 0.1, off
    # The same source as a direction of date, turned back into the apparent
    # frame and taken to ICRS: the same place, to aberration's scale.
    turn = math.radians(header["IOTFRMPA"])
    east = l * math.cos(turn) + m * math.sin(turn)
    north = -l * math.sin(turn) + m * math.cos(turn)
    ra, dec = sin_deprojection(east, north, math.degrees(lst), 34)
    assert apparent_to_icrs(math.radians(ra), math.radians(dec)).separation(
        at_source).arcsec < 0.1


def test_an_unwritable_fits_path_is_a_usage_error(iotest, tmp_path):
    proc = iotest("grid", "--rec-set=T05_", "--vis-set=vlaa", *OBS,
                  f"--image={tmp_path}/missing/dirty.fits", check=2)
    assert proc.stderr.strip().startswith("iotest: error: --image:")
    assert not list(tmp_path.glob("**/*.fits*"))
