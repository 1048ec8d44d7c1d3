"""(u, v, w) from `iotest layout` against an independent computation.

iotest goes geodetic -> ECEF -> local east-north-up -> (u, v, w) with the
site latitude. Here: astropy turns geodetic positions into ECEF, and the
baseline's ECEF vector is rotated straight into the equatorial frame of the
array's meridian (Thompson, Moran & Swenson eq. 4.1), never passing through
east-north-up. iotest then turns (u, v) about w by the frame angle of the
phase centre's apparent frame against ICRS (v toward ICRS north, as
pyuvdata's phase_center_frame_pa turns them): the turn is found here from
the baselines, one angle for all of them, and checked against pyuvdata's
calc_frame_pos_angle (to its 1 degree arc: 14" at dec -60).
"""
import json
from pathlib import Path

import numpy as np
import pytest
from astropy import units
from astropy.coordinates import EarthLocation

LAYOUTS = Path(__file__).resolve().parents[2] / "data" / "layouts"


def ecef_of(vis_set, centre_height):
    if vis_set == "lowr3":
        lon, lat = np.loadtxt(LAYOUTS / "lowr3.csv", delimiter=",", unpack=True)
        loc = EarthLocation.from_geodetic(lon * units.deg, lat * units.deg,
                                          centre_height * units.m)
        return np.stack([loc.x.to_value(units.m), loc.y.to_value(units.m),
                         loc.z.to_value(units.m)], axis=1)
    rows = [line.split() for line in (LAYOUTS / f"{vis_set}.cfg").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return np.array([[float(r[0]), float(r[1]), float(r[2])] for r in rows])


def uvw_from_ecef(baseline, lon_deg, hour_angle_rad, dec_rad):
    lon = np.radians(lon_deg)
    x = np.cos(lon) * baseline[0] + np.sin(lon) * baseline[1]   # towards the local meridian
    y = -np.sin(lon) * baseline[0] + np.cos(lon) * baseline[1]  # east
    z = baseline[2]                                              # north pole
    h, d = hour_angle_rad, dec_rad
    return np.array([np.sin(h) * x + np.cos(h) * y,
                     -np.sin(d) * np.cos(h) * x + np.sin(d) * np.sin(h) * y + np.cos(d) * z,
                     np.cos(d) * np.cos(h) * x - np.cos(d) * np.sin(h) * y + np.sin(d) * z])


def pyuvdata_frame_pa(centre, dec_deg):
    """pyuvdata's phase_center_frame_pa (ICRS) of iotest's phase centre:
    apparent RA the local apparent sidereal time at JD 2460000.5, Dec dec."""
    from astropy.time import Time
    from pyuvdata.utils.phasing import calc_frame_pos_angle
    site = EarthLocation.from_geodetic(centre["lon_deg"] * units.deg,
                                       centre["lat_deg"] * units.deg,
                                       centre["height_m"] * units.m)
    jd = 2460000.5
    lst = Time(jd, format="jd", scale="utc").sidereal_time(
        "apparent", longitude=centre["lon_deg"] * units.deg).rad
    return calc_frame_pos_angle(time_array=np.array([jd]), app_ra=np.array([lst]),
                                app_dec=np.array([np.radians(dec_deg)]),
                                telescope_loc=site, ref_frame="icrs")[0]


@pytest.mark.parametrize("vis_set,dec", [("lowr3", -60.0), ("midr5", -30.0), ("midr5", 20.0),
                                         ("lofar", 45.0)])
def test_uvw_matches_an_independent_computation(iotest, vis_set, dec):
    proc = iotest("layout", f"--vis-set={vis_set}", "--time=-3600:3600/5", f"--dec={dec}",
                  "--baselines=7", "--report=-", check=0)
    r = json.loads(proc.stdout)["layout"]
    ecef = ecef_of(vis_set, r["centre"]["height_m"])
    assert len(ecef) == len(r["antennas_enu_m"])
    assert len(r["uvw"]) == 21
    rows = []
    for s in r["uvw"]:
        b = ecef[s["antenna2"]] - ecef[s["antenna1"]]
        expected = uvw_from_ecef(b, r["centre"]["lon_deg"],
                                 s["hour_angle_s"] * 2 * np.pi / 86400, np.radians(dec))
        rows.append((s, b, expected, np.array(s["uvw_m"])))
    # The turn (u' = u cos p - v sin p, v' = u sin p + v cos p) from the
    # longest baseline.
    _, _, e, g = max(rows, key=lambda row: np.linalg.norm(row[1]))
    pa = np.arctan2(e[0] * g[1] - e[1] * g[0], e[0] * g[0] + e[1] * g[1])
    for s, b, expected, got in rows:
        c, t = np.cos(pa), np.sin(pa)
        turned = np.array([c * expected[0] - t * expected[1], t * expected[0] + c * expected[1],
                           expected[2]])
        length = np.linalg.norm(b)
        assert np.linalg.norm(got - turned) <= 1e-9 * length + 1e-6, (s, turned)
        assert abs(np.linalg.norm(got) - length) <= 1e-9 * length + 1e-6
    # pyuvdata's is taken over a 1 degree arc, in effect half a degree
    # south: 14" from iotest's at dec -60, 2.3" at vlaa dec 34.
    assert np.degrees(abs(pa - pyuvdata_frame_pa(r["centre"], dec))) < 20 / 3600, pa


def test_enu_layout_antennas_match_the_file(iotest):
    proc = iotest("layout", "--vis-set=vlaa", "--report=-", check=0)
    enu = np.array(json.loads(proc.stdout)["layout"]["antennas_enu_m"])
    expected = np.loadtxt(LAYOUTS / "vlaa.csv", delimiter=",")
    np.testing.assert_allclose(enu, expected, rtol=0, atol=1e-9)
