"""(u, v, w) from `iotest layout` against an independent computation.

iotest goes geodetic -> ECEF -> local east-north-up -> (u, v, w) with the
site latitude. Here: astropy turns geodetic positions into ECEF, and the
baseline's ECEF vector is rotated straight into the equatorial frame of the
array's meridian (Thompson, Moran & Swenson eq. 4.1), never passing through
east-north-up.
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


@pytest.mark.parametrize("vis_set,dec", [("lowr3", -60.0), ("midr5", -30.0), ("midr5", 20.0),
                                         ("lofar", 45.0)])
def test_uvw_matches_an_independent_computation(iotest, vis_set, dec):
    proc = iotest("layout", f"--vis-set={vis_set}", "--time=-3600:3600/5", f"--dec={dec}",
                  "--baselines=7", "--report=-", check=0)
    r = json.loads(proc.stdout)["layout"]
    ecef = ecef_of(vis_set, r["centre"]["height_m"])
    assert len(ecef) == len(r["antennas_enu_m"])
    assert len(r["uvw"]) == 21
    for s in r["uvw"]:
        b = ecef[s["antenna2"]] - ecef[s["antenna1"]]
        expected = uvw_from_ecef(b, r["centre"]["lon_deg"],
                                 s["hour_angle_s"] * 2 * np.pi / 86400, np.radians(dec))
        got = np.array(s["uvw_m"])
        length = np.linalg.norm(b)
        assert np.linalg.norm(got - expected) <= 1e-9 * length + 1e-6, (s, expected)
        assert abs(np.linalg.norm(got) - length) <= 1e-9 * length + 1e-6


def test_enu_layout_antennas_match_the_file(iotest):
    proc = iotest("layout", "--vis-set=vlaa", "--report=-", check=0)
    enu = np.array(json.loads(proc.stdout)["layout"]["antennas_enu_m"])
    expected = np.loadtxt(LAYOUTS / "vlaa.csv", delimiter=",")
    np.testing.assert_allclose(enu, expected, rtol=0, atol=1e-9)
