#include "iotest/telescope/geodesy.hpp"

#include <cmath>
#include <numbers>
#include <utility>

namespace iotest::telescope {
namespace {
constexpr double kWgs84A = 6378137.0;                 // semi-major axis, m
constexpr double kWgs84F = 1.0 / 298.257223563;       // flattening
constexpr double kWgs84E2 = kWgs84F * (2 - kWgs84F);  // first eccentricity squared
constexpr double kDeg = std::numbers::pi / 180;
}  // namespace

Ecef geodetic_to_ecef(const Geodetic& g) {
  const double lon = g.lon_deg * kDeg, lat = g.lat_deg * kDeg;
  const double n = kWgs84A / std::sqrt(1 - kWgs84E2 * std::sin(lat) * std::sin(lat));
  return {(n + g.height_m) * std::cos(lat) * std::cos(lon),
          (n + g.height_m) * std::cos(lat) * std::sin(lon),
          (n * (1 - kWgs84E2) + g.height_m) * std::sin(lat)};
}

Enu ecef_to_enu(const Ecef& p, const Geodetic& centre) {
  const Ecef c = geodetic_to_ecef(centre);
  const double dx = p.x - c.x, dy = p.y - c.y, dz = p.z - c.z;
  const double lon = centre.lon_deg * kDeg, lat = centre.lat_deg * kDeg;
  const double sl = std::sin(lon), cl = std::cos(lon), sp = std::sin(lat), cp = std::cos(lat);
  return {-sl * dx + cl * dy, -sp * cl * dx - sp * sl * dy + cp * dz,
          cp * cl * dx + cp * sl * dy + sp * dz};
}

Ecef enu_to_ecef(const Enu& e, const Geodetic& centre) {
  const Ecef c = geodetic_to_ecef(centre);
  const double lon = centre.lon_deg * kDeg, lat = centre.lat_deg * kDeg;
  const double sl = std::sin(lon), cl = std::cos(lon), sp = std::sin(lat), cp = std::cos(lat);
  return {c.x - sl * e.east - sp * cl * e.north + cp * cl * e.up,
          c.y + cl * e.east - sp * sl * e.north + cp * sl * e.up, c.z + cp * e.north + sp * e.up};
}

namespace {

// sin and cos, exact at whole right angles: in doubles cos(pi / 2) is
// 6e-17, yet an array at the pole observed at dec 90 must give w = 0
// exactly (telescope::kPoleSuffix).
std::pair<double, double> sin_cos(double x) {
  const double quarters = x / (std::numbers::pi / 2), whole = std::round(quarters);
  if (std::abs(quarters - whole) > 1e-12) return {std::sin(x), std::cos(x)};
  switch ((static_cast<long long>(whole) % 4 + 4) % 4) {
    case 0:
      return {0.0, 1.0};
    case 1:
      return {1.0, 0.0};
    case 2:
      return {0.0, -1.0};
    default:
      return {-1.0, 0.0};
  }
}

}  // namespace

UvwRotation::UvwRotation(double lat, double ha, double dec, double frame_pa) {
  // Equatorial components of an ENU vector: X towards (H = 0, dec = 0),
  // Y towards H = -6h (east), Z towards the pole:
  //   X = -sin(lat) N + cos(lat) U,  Y = E,  Z = cos(lat) N + sin(lat) U.
  const auto [sp, cp] = sin_cos(lat);
  const auto [sh, ch] = sin_cos(ha);
  const auto [sd, cd] = sin_cos(dec);
  // u = sin H X + cos H Y
  ux = ch, uy = -sh * sp, uz = sh * cp;
  // v = -sin d cos H X + sin d sin H Y + cos d Z
  vx = sd * sh, vy = sd * ch * sp + cd * cp, vz = -sd * ch * cp + cd * sp;
  // w = cos d cos H X - cos d sin H Y + sin d Z
  wx = -cd * sh, wy = -cd * ch * sp + sd * cp, wz = cd * ch * cp + sd * sp;
  // pyuvdata's turn by the frame angle: u' = c u - s v, v' = s u + c v.
  if (frame_pa != 0) {
    const auto [s, c] = sin_cos(frame_pa);
    const double u[3] = {ux, uy, uz}, v[3] = {vx, vy, vz};
    ux = c * u[0] - s * v[0], uy = c * u[1] - s * v[1], uz = c * u[2] - s * v[2];
    vx = s * u[0] + c * v[0], vy = s * u[1] + c * v[1], vz = s * u[2] + c * v[2];
  }
}

}  // namespace iotest::telescope
