#!/usr/bin/env python3
"""The constants of iotest's start epoch, and the check of what C++ does with them.

iotest places every observation at JD 2460000.5 UTC (telescope::kStartJd)
with the phase centre at hour angle 0 then, and defines the phase centre by
its apparent coordinates of date: right ascension the local apparent
sidereal time, declination --dec (docs/imaging.md, "Coordinates: the uvw
model"). The date is fixed, so everything that turns that direction into
ICRS is a constant, derived here once with astropy and ERFA (pyerfa) and
hard-coded in src/iotest/telescope/observation.hpp and catalog_frame.cpp:

- kStartGastDeg: Greenwich apparent sidereal time (IAU 2006/2000A, UT1 from
  the IERS tables astropy carries), as pyuvdata's LSTs give it;
- kCelestialToTerrestrial: ERFA's c2t06a at JD0, the rotation from GCRS to
  ITRS (IAU 2006/2000A, CIO based: bias-precession-nutation, Earth rotation
  angle, polar motion). It equals polar motion x R3(GAST) x the
  bias-precession-nutation matrix (pnm06a), which this checks;
- kEarthVelocity: the Earth's barycentric velocity (ERFA's epv00 at JD0,
  TDB), in units of c, in GCRS axes: annual aberration.

Then it runs the same algorithm as telescope::apparent_to_icrs (Python
here, double precision there) for every built-in visibility set and
compares it with pyuvdata's transform_app_to_icrs (ERFA's atoc13, which
pyuvdata uses for the apparent coordinates it checks files against) and
with pyuvdata's calc_frame_pos_angle, and prints what the algorithm leaves
out (the Sun's light deflection) and how far FK5 J2000 (a MeasurementSet's
"J2000") lies from ICRS there.

    .venv/bin/python tools/start_epoch_constants.py
"""
import math

import erfa
import numpy as np
from astropy.coordinates import FK5, ICRS, SkyCoord, get_sun
from astropy.time import Time
from astropy.utils import iers
import astropy.units as u

JD0 = 2460000.5
ARCSEC = math.pi / (180 * 3600)
OMEGA = 1.00273781191135448 * 2 * math.pi / 86400  # ERFA's Earth rotation rate, rad/s
C = 299792458.0

# The built-in visibility sets' centres (lon, lat deg, height m) and default
# --dec, as src/iotest/telescope/observation.cpp states them; "vlaa dec 34"
# is the checks' observation; "@pole" any set laid flat at the pole.
SETS = {
    "lowbd2 (Low)": ((116.76444824, -26.824722084, 300), -30),
    "midr5": ((21.443803, -30.712925, 1053), -30),
    "mkatplus": ((21.44388889, -30.711056, 1086.6), -30),
    "askap": ((116.6356824, -26.7013006, 377), -45),
    "lofar": ((6.86763008, 52.91139459, 50.11317741), 30),
    "vlaa": ((-107.6184, 34.0784, 2124), 10),
    "vlaa dec 34": ((-107.6184, 34.0784, 2124), 34),
    "vlaa dec 89": ((-107.6184, 34.0784, 2124), 89),
    "vlaa dec -60": ((-107.6184, 34.0784, 2124), -60),
    "@pole": ((0.0, 90.0, 0.0), 90),
}


def epoch():
    t = Time(JD0, format="jd", scale="utc")
    xp, yp = iers.earth_orientation_table.get().pm_xy(t)
    xp, yp = xp.to_value("rad"), yp.to_value("rad")
    tt, ut1, tdb = t.tt, t.ut1, t.tdb
    gast = erfa.gst06a(ut1.jd1, ut1.jd2, tt.jd1, tt.jd2)  # radians
    npb = erfa.pnm06a(tt.jd1, tt.jd2)
    c2t = erfa.c2t06a(tt.jd1, tt.jd2, ut1.jd1, ut1.jd2, xp, yp)
    # The same rotation, equinox based: polar motion x R3(GAST) x NPB.
    rpom = erfa.pom00(xp, yp, erfa.sp00(tt.jd1, tt.jd2))
    assert np.max(np.abs(erfa.c2teqx(npb, gast, rpom) - c2t)) < 1e-14
    _, pvb = erfa.epv00(tdb.jd1, tdb.jd2)
    beta = pvb["v"] * erfa.AULT / erfa.DAYSEC  # AU/day -> units of c
    return dict(t=t, dut1=float(t.delta_ut1_utc), xp=xp, yp=yp, gast=gast, npb=npb, c2t=c2t,
                beta=beta)


def geodetic_to_ecef(lon_deg, lat_deg, h):
    return erfa.gd2gc(1, math.radians(lon_deg), math.radians(lat_deg), h)  # WGS84


def aberrate(p, beta):
    """ERFA's ab (special relativity; the Sun's potential term, 1e-12 rad,
    left out): the apparent direction of natural direction p seen at beta."""
    bm1 = math.sqrt(1 - beta @ beta)
    pdv = p @ beta
    q = p * bm1 + (1 + pdv / (1 + bm1)) * beta
    return q / np.linalg.norm(q)


def apparent_to_icrs(app_ra, app_dec, site, e):
    """telescope::apparent_to_icrs: the apparent direction (pyuvdata's: hour
    angle and declination about the ITRS pole, RA = apparent sidereal time -
    hour angle) at JD0 -> ITRS -> GCRS (the constant rotation) -> without
    the aberration of the site's barycentric velocity (annual + diurnal)."""
    lon = app_ra - e["gast"]  # the direction's ITRS longitude
    s_itrs = np.array([math.cos(app_dec) * math.cos(lon), math.cos(app_dec) * math.sin(lon),
                       math.sin(app_dec)])
    p_obs = e["c2t"].T @ s_itrs
    x, y, _ = geodetic_to_ecef(*site)
    beta = e["beta"] + e["c2t"].T @ np.array([-OMEGA * y, OMEGA * x, 0.0]) / C
    p = aberrate(p_obs, -beta)  # the boost's inverse
    return math.atan2(p[1], p[0]) % (2 * math.pi), math.asin(max(-1.0, min(1.0, p[2])))


def position_angle(a, b):
    """ERFA's pas: the position angle of b from a (east of north)."""
    (al, ap), (bl, bp) = a, b
    return math.atan2(math.cos(bp) * math.sin(bl - al),
                      math.sin(bp) * math.cos(ap) - math.cos(bp) * math.sin(ap) * math.cos(bl - al))


def frame_pa(app_ra, app_dec, site, e, offset=1e-5):
    """pyuvdata's phase_center_frame_pa: minus the ICRS position angle of the
    apparent frame's north at the phase centre (an arc of 2 x offset)."""
    down = apparent_to_icrs(app_ra, app_dec - offset, site, e)
    up = apparent_to_icrs(app_ra, app_dec + offset, site, e)
    return -position_angle(down, up)


def scale(app_ra, app_dec, site, e, offset=1e-4):
    """The apparent frame's angles over ICRS's, minus 1, at the direction:
    annual and diurnal aberration stretch the sky by -beta . p."""
    a = apparent_to_icrs(app_ra, app_dec - offset, site, e)
    b = apparent_to_icrs(app_ra, app_dec + offset, site, e)
    icrs = SkyCoord(*a, unit="rad").separation(SkyCoord(*b, unit="rad")).rad
    return 2 * offset / icrs - 1


def cpp_matrix(m):
    rows = ",\n".join("    {" + ", ".join(f"{v:.17g}" for v in row) + "}" for row in m)
    return "{{\n" + rows + "}}"


def main():
    e = epoch()
    print(f"JD {JD0} UTC = {e['t'].isot}; UT1 - UTC = {e['dut1']:.7f} s; "
          f"polar motion xp = {e['xp'] / ARCSEC:.6f}\", yp = {e['yp'] / ARCSEC:.6f}\"")
    print(f"kStartGastDeg = {e['gast'] * 180 / math.pi:.17g};  // "
          f"astropy: {e['t'].sidereal_time('apparent', 'greenwich').deg:.17g}")
    print("// GCRS -> ITRS at JD0: ERFA c2t06a (IAU 2006/2000A, IERS UT1 and polar motion)")
    print(f"kCelestialToTerrestrial = {cpp_matrix(e['c2t'])};")
    print("// bias-precession-nutation alone (pnm06a), for reference")
    print(f"npb = {cpp_matrix(e['npb'])};")
    print("// the Earth's barycentric velocity at JD0 (epv00, TDB), units of c, GCRS axes")
    print("kEarthVelocity = {" + ", ".join(f"{v:.17g}" for v in e["beta"]) + "};"
          f"  // |v| = {np.linalg.norm(e['beta']) * C / 1e3:.4f} km/s")

    from pyuvdata.utils.phasing import calc_frame_pos_angle, transform_app_to_icrs
    sun = get_sun(e["t"])
    print("\nset (dec): ICRS RA, Dec [deg]; ICRS - the apparent label [arcmin east, north];"
          " vs pyuvdata [mas]; frame_pa [deg] here, pyuvdata's; Sun: elongation [deg], "
          "deflection left out [mas]; FK5 J2000 - ICRS [mas]; apparent/ICRS scale - 1")
    for name, (site, dec_deg) in SETS.items():
        app_ra = (e["gast"] + math.radians(site[0])) % (2 * math.pi)
        app_dec = math.radians(dec_deg)
        ra, dec = apparent_to_icrs(app_ra, app_dec, site, e)
        loc = (math.radians(site[1]), math.radians(site[0]), site[2])
        t0 = np.array([JD0])
        ref_ra, ref_dec = transform_app_to_icrs(time_array=t0, app_ra=np.array([app_ra]),
                                                app_dec=np.array([app_dec]), telescope_loc=loc)
        here = SkyCoord(ra * u.rad, dec * u.rad, frame=ICRS())
        theirs = SkyCoord(ref_ra[0] * u.rad, ref_dec[0] * u.rad, frame=ICRS())
        label = SkyCoord(app_ra * u.rad, app_dec * u.rad, frame=ICRS())
        east, north = label.spherical_offsets_to(here)
        pa = frame_pa(app_ra, app_dec, site, e)
        pa_pyuvdata = calc_frame_pos_angle(time_array=t0, app_ra=np.array([app_ra]),
                                           app_dec=np.array([app_dec]), telescope_loc=loc,
                                           ref_frame="icrs")[0]
        elongation = here.separation(SkyCoord(sun.ra, sun.dec, frame=ICRS())).rad
        deflection = 4.07e-3 / math.tan(elongation / 2) * 1e3  # 2 GM/(c^2 AU) cot(E/2), mas
        fk5 = here.transform_to(FK5(equinox="J2000"))
        fk5_offset = here.separation(SkyCoord(fk5.ra, fk5.dec, frame=ICRS())).to_value("mas")
        print(f"{name:>13}: {math.degrees(ra):11.6f} {math.degrees(dec):+10.6f}; "
              f"{east.to_value('arcmin'):+6.2f}' {north.to_value('arcmin'):+6.2f}'; "
              f"{here.separation(theirs).to_value('mas'):6.2f}; "
              f"{math.degrees(pa):+.5f} {math.degrees(pa_pyuvdata):+.5f}; "
              f"{math.degrees(elongation):5.1f} {deflection:5.2f}; {fk5_offset:5.1f}; "
              f"{scale(app_ra, app_dec, site, e):+.2e}")


if __name__ == "__main__":
    main()
