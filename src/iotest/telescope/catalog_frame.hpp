// The phase centre in ICRS. iotest defines its phase centre by apparent
// coordinates of date (right ascension the local apparent sidereal time at
// kStartJd, declination --dec) and computes (u, v, w) in that apparent
// frame, (u, v) then turned by the frame angle to v toward ICRS north
// (Observation::frame_pa_rad); files that state a position in ICRS (or J2000) state the ICRS
// position of that direction, computed here (docs/imaging.md, "Coordinates:
// the uvw model", "The catalog frame").
#pragma once

#include "iotest/telescope/geodesy.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::telescope {

struct SkyDirection {
  double ra_rad = 0, dec_rad = 0;  // RA in [0, 2 pi)
};

// The ICRS direction of an apparent direction at kStartJd seen from `site`:
// apparent as pyuvdata's phase_center_app_ra/app_dec (and ERFA's atco13)
// mean it, an hour angle and declination about the ITRS pole with RA the
// local apparent sidereal time minus the hour angle. Through ITRS to GCRS by
// the constant rotation of kStartJd (IAU 2006/2000A: polar motion, Earth
// rotation, bias-precession-nutation), then without the aberration of the
// site's barycentric velocity (the Earth's, annual, plus the site's
// rotation, diurnal). The Sun's light deflection (ERFA's ldsun) is left
// out: under 7 mas for every built-in visibility set (the Sun is over 65
// degrees from their phase centres), so this agrees with pyuvdata's
// transform_app_to_icrs to 6.5 mas (tools/start_epoch_constants.py).
SkyDirection apparent_to_icrs(const SkyDirection& apparent, const Geodetic& site);

// pyuvdata's phase_center_frame_pa of an apparent direction against ICRS:
// minus the position angle (east of north), in ICRS, of the apparent
// frame's north there, taken at the direction itself (pyuvdata measures it
// over a 1 degree arc, whose south end it takes it at). Turning the
// apparent frame's (u, v) by it gives (u, v) with v to ICRS north.
double icrs_frame_pa_rad(const SkyDirection& apparent, const Geodetic& site);

struct PhaseCentre {
  SkyDirection apparent;  // of date, at kStartJd: the (u, v, w)'s frame
  SkyDirection icrs;      // the same direction in ICRS
  double frame_pa_rad = 0;
};
PhaseCentre phase_centre(const Observation& obs);

}  // namespace iotest::telescope
