#include "iotest/telescope/catalog_frame.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

namespace iotest::telescope {
namespace {

using Vector = std::array<double, 3>;

// Constants of kStartJd (JD 2460000.5 UTC), printed by
// tools/start_epoch_constants.py from astropy (its IERS tables: UT1 - UTC =
// -0.0151458 s, polar motion x = -0.039675", y = 0.305058") and ERFA
// (pyerfa), as kStartGastDeg was.
//
// GCRS to ITRS: ERFA's c2t06a, IAU 2006/2000A, CIO based. It equals polar
// motion x R3(GAST) x the bias-precession-nutation matrix (pnm06a).
constexpr double kCelestialToTerrestrial[3][3] = {
    {-0.90111459756743761, 0.43357639988552948, 0.0019968758545243896},
    {-0.43357526007298958, -0.90111680959375517, 0.00099464577178696219},
    {0.002230673332076577, 3.0493856407076278e-05, 0.999997511580209}};
// The Earth's barycentric velocity (ERFA's epv00, TDB) in units of c, GCRS
// axes: 30.11 km/s, annual aberration up to 20.7".
constexpr Vector kEarthVelocity = {-4.2327819985719139e-05, -8.3573209387915394e-05,
                                   -3.6231823088636865e-05};
// The Earth's rotation rate (ERFA's), rad/s: the site's velocity, diurnal
// aberration up to 0.32".
constexpr double kEarthRotationRate = 1.00273781191135448 * 2 * std::numbers::pi / 86400;

constexpr double kStartGastRad = kStartGastDeg * std::numbers::pi / 180;

double dot(const Vector& a, const Vector& b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

Vector normalised(const Vector& a) {
  const double n = std::sqrt(dot(a, a));
  return {a[0] / n, a[1] / n, a[2] / n};
}

// The transpose of kCelestialToTerrestrial: ITRS to GCRS.
Vector to_gcrs(const Vector& itrs) {
  Vector out{};
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) out[i] += kCelestialToTerrestrial[k][i] * itrs[k];
  return out;
}

// ERFA's ab (special relativity; its term for the Sun's potential, 1e-12
// rad, left out): the direction seen at velocity beta (units of c) of
// light arriving from direction p. Its inverse is the same with -beta.
Vector aberrate(const Vector& p, const Vector& beta) {
  const double bm1 = std::sqrt(1 - dot(beta, beta)), pdv = dot(p, beta);
  const double w1 = 1 + pdv / (1 + bm1);
  return normalised(
      {p[0] * bm1 + w1 * beta[0], p[1] * bm1 + w1 * beta[1], p[2] * bm1 + w1 * beta[2]});
}

// ERFA's pas: the position angle of b from a, east of north.
double position_angle(const SkyDirection& a, const SkyDirection& b) {
  const double dra = b.ra_rad - a.ra_rad;
  return std::atan2(std::cos(b.dec_rad) * std::sin(dra),
                    std::sin(b.dec_rad) * std::cos(a.dec_rad) -
                        std::cos(b.dec_rad) * std::sin(a.dec_rad) * std::cos(dra));
}

}  // namespace

SkyDirection apparent_to_icrs(const SkyDirection& apparent, const Geodetic& site) {
  // Hour angle H = LAST - RA about the ITRS pole at longitude lambda: the
  // direction's ITRS longitude is lambda - H = RA - GAST.
  const double lon = apparent.ra_rad - kStartGastRad, dec = apparent.dec_rad;
  const Vector seen =
      to_gcrs({std::cos(dec) * std::cos(lon), std::cos(dec) * std::sin(lon), std::sin(dec)});
  // The site's velocity: the Earth's about the barycentre plus its own
  // about the Earth's axis, rotated into GCRS.
  const Ecef r = geodetic_to_ecef(site);
  const Vector turning = to_gcrs(
      {-kEarthRotationRate * r.y / kSpeedOfLight, kEarthRotationRate * r.x / kSpeedOfLight, 0});
  const Vector back = {-(kEarthVelocity[0] + turning[0]), -(kEarthVelocity[1] + turning[1]),
                       -(kEarthVelocity[2] + turning[2])};
  const Vector p = aberrate(seen, back);
  const double ra = std::atan2(p[1], p[0]);
  return {ra < 0 ? ra + 2 * std::numbers::pi : ra, std::asin(std::clamp(p[2], -1.0, 1.0))};
}

double icrs_frame_pa_rad(const SkyDirection& apparent, const Geodetic& site) {
  // Over 2 x 1e-5 rad of the apparent meridian (rounding: ~1e-11 rad).
  // pyuvdata's, over 1 degree and so at half a degree south, differs by 2"
  // at vlaa dec 34 (0.10900 degrees against 0.10963 here).
  constexpr double kArc = 1e-5;
  const SkyDirection south = apparent_to_icrs({apparent.ra_rad, apparent.dec_rad - kArc}, site);
  const SkyDirection north = apparent_to_icrs({apparent.ra_rad, apparent.dec_rad + kArc}, site);
  return -position_angle(south, north);
}

PhaseCentre phase_centre(const Observation& obs) {
  PhaseCentre c;
  c.apparent = {phase_centre_ra_rad(obs), obs.dec_deg * std::numbers::pi / 180};
  c.icrs = apparent_to_icrs(c.apparent, obs.layout.centre);
  c.frame_pa_rad = obs.frame_pa_rad;  // make_observation's icrs_frame_pa_rad
  return c;
}

}  // namespace iotest::telescope
