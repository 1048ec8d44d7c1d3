// Visibility sets: a telescope layout with its default observation (hour
// angles, channels, declination, autocorrelations), and the observation a
// user asks for with --vis-set, --time, --freq and --dec.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/telescope/layout.hpp"

namespace iotest::telescope {

// START:END/STEPS[/CHUNK]: STEPS samples from START to END inclusive, in
// chunks of CHUNK (the unit of work and storage; default min(STEPS, 32)).
struct Sampling {
  double start = 0, end = 0;
  index_t steps = 1, chunk = 1;
  double step() const { return steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0; }
  double at(index_t k) const { return start + static_cast<double>(k) * step(); }
  index_t chunks() const { return (steps + chunk - 1) / chunk; }
  std::string text() const;  // back to START:END/STEPS/CHUNK
};
// Throws UsageError(option, ...) naming the expected form.
Sampling parse_sampling(std::string_view text, const std::string& option, bool positive);

struct VisSet {
  std::string_view name;
  std::string_view file;  // under data/layouts
  LayoutFormat format;
  Geodetic centre;
  bool autocorrelations;
  std::string_view time;  // default --time (hour angle, seconds)
  std::string_view freq;  // default --freq (Hz)
  double dec_deg;         // default --dec
  std::string_view description;
};
const std::vector<VisSet>& vis_sets();
const VisSet& find_vis_set(std::string_view name);  // throws UsageError("--vis-set")

struct ObservationOptions {
  std::string vis_set;
  std::optional<std::string> time, freq;
  std::optional<double> dec_deg;
};

struct Observation {
  std::string vis_set;
  std::string description;
  Layout layout;
  bool autocorrelations = false;
  Sampling time;  // hour angle in seconds
  Sampling freq;  // Hz
  double dec_deg = 0;
  // The frame angle of the phase centre's apparent frame against ICRS
  // (telescope::icrs_frame_pa_rad; pyuvdata's phase_center_frame_pa), a
  // constant of the observation: antenna_uvw turns (u, v) by it, so v points
  // to ICRS north. make_observation sets it.
  double frame_pa_rad = 0;

  index_t antenna_count() const { return static_cast<index_t>(layout.antennas.size()); }
  index_t baseline_count() const;
  index_t visibility_count() const { return baseline_count() * time.steps * freq.steps; }
  // One complex double per visibility (a single polarisation).
  index_t visibility_bytes() const {
    return visibility_count() * static_cast<index_t>(sizeof(cplx));
  }
  // Antenna pairs (a1 <= a2; a1 == a2 only with autocorrelations), a1-major.
  std::vector<std::pair<int, int>> baselines() const;
  // (u, v, w) in metres of every antenna at time step `t`, with v toward
  // ICRS north (turned by frame_pa_rad from the apparent frame's north; w
  // toward the phase centre); a baseline's is antenna a2's minus a1's.
  std::vector<Uvw> antenna_uvw(index_t t) const;
  // The largest |w| of any baseline at any time step, in metres: the w
  // range the kernels and towers must cover (exactly 0 for an array laid
  // flat at the pole and observed at dec 90, kPoleSuffix).
  double max_abs_w_m() const;
};

// A built-in visibility set by name, or a layout file of one's own: a path
// to a .cfg file (ECEF "X Y Z diameter name" lines after a header that
// states "# observatory (long,lat)= LON LAT" and "# observatory elevation =
// H m"), observed by default like `custom_defaults()`.
//
// Any set's name followed by kPoleSuffix ("vlaa@pole") lays its array flat
// (east and north kept, no height) at the north pole, observed by default
// at dec 90, where w is exactly 0 at every hour angle: the geometry of the
// 2019 predecessor, whose arrays sit at the pole, for like-for-like
// comparisons with it. Any other --dec gives w again. The name, suffix
// included, is what the files record, so verify rebuilds the same.
inline constexpr std::string_view kPoleSuffix = "@pole";
Observation make_observation(const ObservationOptions& options);

// When and where on the sky the files place an observation: on 2023-02-25
// (JD 2460000.5, UTC), hour angle 0 at that moment, so the phase centre's
// apparent right ascension is the local apparent sidereal time then, and
// its apparent declination is --dec (docs/imaging.md, "Coordinates: the
// uvw model").
inline constexpr double kStartJd = 2460000.5;
inline constexpr double kSiderealPerSolar = 1.00273790935;
// Greenwich apparent sidereal time at kStartJd in degrees: IAU 2006/2000A
// with UT1 - UTC = -0.0151458 s (IERS), as astropy's
// Time(2460000.5, format="jd").sidereal_time("apparent", "greenwich") and
// pyuvdata's LSTs give it. The date is fixed, so the time is a constant;
// mean sidereal time from UTC would put every hour angle 8.71" (0.58 s)
// out: 1.3 m in (u, v, w) at 36 km.
inline constexpr double kStartGastDeg = 154.59950453183504;
double phase_centre_ra_rad(const Observation& obs);
// The first time step (UTC, ISO 8601, to the millisecond), the band's centre
// and its width (channels x channel width), as images state them.
std::string start_utc(const Observation& obs);
double start_mjd(const Observation& obs);
// Time step t's moment in MJD seconds (UTC), as a MeasurementSet's TIME
// gives it (an MSv4's time is Unix seconds: less 40587 days).
double mjd_seconds_utc(const Observation& obs, index_t t);
double band_centre_hz(const Observation& obs);
double bandwidth_hz(const Observation& obs);
const VisSet& custom_defaults();

}  // namespace iotest::telescope
