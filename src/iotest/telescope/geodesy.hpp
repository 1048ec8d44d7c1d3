// Standard geodesy for array layouts: WGS84 geodetic to Earth-centred
// Earth-fixed (ECEF), ECEF to local east-north-up (ENU) at the array centre,
// and ENU baselines to the (u, v, w) frame of a phase centre.
#pragma once

namespace iotest::telescope {

struct Geodetic {
  double lon_deg = 0, lat_deg = 0, height_m = 0;
};
struct Ecef {
  double x = 0, y = 0, z = 0;  // metres
};
struct Enu {
  double east = 0, north = 0, up = 0;  // metres
};
struct Uvw {
  double u = 0, v = 0, w = 0;
};

Ecef geodetic_to_ecef(const Geodetic& g);
// Position (or difference of positions) in the ENU frame at `centre`.
Enu ecef_to_enu(const Ecef& position, const Geodetic& centre);
// And back: the Earth-centred position of an offset from `centre` (an
// antenna's ITRF position, as visibility files list them).
Ecef enu_to_ecef(const Enu& offset, const Geodetic& centre);

// Rotates a local ENU vector at latitude `lat_rad` into (u, v, w) for hour
// angle `ha_rad` and declination `dec_rad` (Thompson, Moran & Swenson,
// eq. 4.1, with the equatorial X Y Z taken from ENU by the site latitude),
// then (u, v) turned by `frame_pa_rad` about w as pyuvdata's calc_uvw turns
// them by phase_center_frame_pa: u' = u cos p - v sin p, v' = u sin p +
// v cos p (w unchanged). With the frame angle of the apparent frame against
// ICRS (icrs_frame_pa_rad) v points to ICRS north, not the apparent north.
class UvwRotation {
 public:
  UvwRotation(double lat_rad, double ha_rad, double dec_rad, double frame_pa_rad = 0);
  Uvw operator()(const Enu& e) const {
    return {ux * e.east + uy * e.north + uz * e.up, vx * e.east + vy * e.north + vz * e.up,
            wx * e.east + wy * e.north + wz * e.up};
  }

 private:
  double ux, uy, uz, vx, vy, vz, wx, wy, wz;
};

inline constexpr double kSpeedOfLight = 299792458.0;  // m/s
// Hour angle units: one second of time is 2 pi / 86400 radians.
inline constexpr double kRadiansPerHourAngleSecond = 2 * 3.14159265358979323846 / 86400.0;

}  // namespace iotest::telescope
