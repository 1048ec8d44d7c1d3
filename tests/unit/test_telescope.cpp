// Layouts, geodesy, (u, v, w) and observation parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "iotest/common/errors.hpp"
#include "iotest/telescope/catalog_frame.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::telescope {
namespace {

constexpr double kDeg = std::numbers::pi / 180;

TEST(Layouts, EveryVisSetParsesWithItsAntennaCount) {
  const std::pair<const char*, index_t> expected[] = {
      {"lowbd2", 512}, {"lowbd2-core", 166}, {"lowr3", 512}, {"lowr4", 512}, {"low-aa0.5", 6},
      {"midr5", 197},  {"mkatplus", 84},     {"askap", 36},  {"lofar", 134}, {"vlaa", 27}};
  ASSERT_EQ(vis_sets().size(), std::size(expected));
  for (const auto& [name, antennas] : expected) {
    const auto obs = make_observation({name, {}, {}, {}});
    EXPECT_EQ(obs.antenna_count(), antennas) << name;
    // Every antenna lies on the Earth's surface near the array: within
    // 2500 km (LOFAR's international stations), and below the local
    // horizon by the Earth's curvature at most (3 km of relief allowed).
    for (const auto& a : obs.layout.antennas) {
      const double distance = std::hypot(a.east, a.north);
      EXPECT_LT(distance, 2500e3) << name;
      EXPECT_LT(std::abs(a.up), distance * distance / (2 * 6.371e6) + 3e3) << name;
    }
  }
}

TEST(Layouts, PublishedBaselineCounts) {
  EXPECT_EQ(make_observation({"lowbd2", {}, {}, {}}).baseline_count(), 131328);
  EXPECT_EQ(make_observation({"midr5", {}, {}, {}}).baseline_count(), 19306);
  EXPECT_EQ(make_observation({"vlaa", {}, {}, {}}).baseline_count(), 351);
  const auto vlaa = make_observation({"vlaa", {}, {}, {}});
  EXPECT_EQ(static_cast<index_t>(vlaa.baselines().size()), 351);
  EXPECT_EQ(vlaa.baselines().front(), std::make_pair(0, 1));
}

TEST(Layouts, LongestBaselinesArePlausible) {
  // VLA A ~36 km, SKA1-Mid ~150 km, SKA1-Low baseline design 2 ~80 km.
  EXPECT_NEAR(make_observation({"vlaa", {}, {}, {}}).layout.max_baseline_m(), 36e3, 3e3);
  EXPECT_NEAR(make_observation({"midr5", {}, {}, {}}).layout.max_baseline_m(), 155e3, 10e3);
  EXPECT_NEAR(make_observation({"lowbd2", {}, {}, {}}).layout.max_baseline_m(), 80e3, 5e3);
}

TEST(Layouts, MalformedFilesNameTheLine) {
  const Geodetic centre{0, 0, 0};
  try {
    parse_layout("1,2,3\n4,x,6\n", LayoutFormat::enu_csv, centre, "bad.csv");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_layout("1,2\n3,4\n", LayoutFormat::enu_csv, centre, "short.csv"),
               std::runtime_error);
  EXPECT_THROW(parse_layout("1,2,3\n", LayoutFormat::enu_csv, centre, "one.csv"),
               std::runtime_error);
  EXPECT_THROW(parse_layout("1,95\n2,3\n", LayoutFormat::lonlat_csv, centre, "lat.csv"),
               std::runtime_error);
  const auto ok = parse_layout("# header\n1 2 3 15 A\n\n4 5 6 15 B\n", LayoutFormat::ecef_cfg,
                               centre, "ok.cfg");
  EXPECT_EQ(ok.antennas.size(), 2u);
}

TEST(Geodesy, WellKnownPoints) {
  const Ecef equator = geodetic_to_ecef({0, 0, 0});
  EXPECT_NEAR(equator.x, 6378137.0, 1e-6);
  EXPECT_NEAR(equator.y, 0, 1e-6);
  const Ecef pole = geodetic_to_ecef({0, 90, 0});
  EXPECT_NEAR(pole.z, 6356752.314245, 1e-5);  // WGS84 semi-minor axis
  const Ecef east = geodetic_to_ecef({90, 0, 100});
  EXPECT_NEAR(east.y, 6378237.0, 1e-6);
}

TEST(Geodesy, EnuOfOffsetsAtTheCentre) {
  const Geodetic centre{21.44, -30.71, 1053};
  const Enu up = ecef_to_enu(geodetic_to_ecef({21.44, -30.71, 1153}), centre);
  EXPECT_NEAR(up.up, 100, 1e-6);
  EXPECT_NEAR(std::hypot(up.east, up.north), 0, 1e-6);
  // A small step north in latitude moves north only.
  const Enu north = ecef_to_enu(geodetic_to_ecef({21.44, -30.70, 1053}), centre);
  EXPECT_GT(north.north, 1100);
  EXPECT_NEAR(north.east, 0, 1e-6);
}

TEST(Uvw, ZenithPhaseCentreGivesWEqualToUp) {
  const double lat = -30 * kDeg;
  const UvwRotation rotate(lat, 0, lat);
  const Uvw r = rotate({100, 200, 30});
  EXPECT_NEAR(r.u, 100, 1e-9);
  EXPECT_NEAR(r.v, 200, 1e-9);
  EXPECT_NEAR(r.w, 30, 1e-9);
}

TEST(Uvw, RotationKeepsLengthsAndMovesWithHourAngle) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> d(-1e4, 1e4);
  for (int i = 0; i < 20; ++i) {
    const Enu e{d(rng), d(rng), d(rng) / 100};
    const UvwRotation rotate(-26.8 * kDeg, i * 0.1, -50 * kDeg);
    const Uvw r = rotate(e);
    EXPECT_NEAR(std::hypot(r.u, r.v, r.w), std::hypot(e.east, e.north, e.up), 1e-8);
  }
  // An east-west baseline seen from the pole: u, v rotate with hour angle.
  const UvwRotation at_pole(90 * kDeg, std::numbers::pi / 2, 90 * kDeg);
  const Uvw r = at_pole({1000, 0, 0});
  EXPECT_NEAR(r.u, 0, 1e-9);
  EXPECT_NEAR(std::abs(r.v), 1000, 1e-9);
  EXPECT_NEAR(r.w, 0, 1e-9);
}

TEST(Sampling, ParsesTheDocumentedForm) {
  const auto t = parse_sampling("-460:460/1024/64", "--time", false);
  EXPECT_EQ(t.steps, 1024);
  EXPECT_EQ(t.chunk, 64);
  EXPECT_EQ(t.chunks(), 16);
  EXPECT_DOUBLE_EQ(t.at(0), -460);
  EXPECT_DOUBLE_EQ(t.at(1023), 460);
  const auto f = parse_sampling("260e6:300e6/8192", "--freq", true);
  EXPECT_EQ(f.chunk, 32);
  EXPECT_DOUBLE_EQ(f.at(8191), 300e6);
  EXPECT_EQ(parse_sampling("1:1/1", "--freq", true).step(), 0);
}

TEST(Sampling, RejectsMalformedValuesNamingTheOption) {
  const char* bad[] = {"",        "1:2",   "1/2",     "a:2/3",   "1:2/0",
                       "1:2/4/5", "2:1/4", "1:2/4/x", "1:2/4/0", "1:2/-3"};
  for (const char* text : bad) {
    try {
      parse_sampling(text, "--time", false);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--time");
    }
  }
  EXPECT_THROW(parse_sampling("0:300e6/4", "--freq", true), UsageError);
}

TEST(Observation, RejectsUnknownSetsAndBadDeclinations) {
  EXPECT_THROW(make_observation({"nosuch", {}, {}, {}}), UsageError);
  EXPECT_THROW(make_observation({"vlaa", {}, {}, 95.0}), UsageError);
  EXPECT_THROW(make_observation({"vlaa", "-50000:0/4", {}, {}}), UsageError);
  const auto obs = make_observation({"vlaa", "-300:300/16/8", "1e9:1.1e9/8", -40.0});
  EXPECT_EQ(obs.visibility_count(), 351 * 16 * 8);
  EXPECT_EQ(obs.visibility_bytes(), 351 * 16 * 8 * 16);
}

// NAME@pole: the predecessor's geometry, w exactly 0 at dec 90 at every
// hour angle, with the set's baselines (u, v lengths) unchanged: the turn
// of (u, v) by the frame angle (to ICRS north) keeps both.
TEST(Observation, AnArrayAtThePoleHasNoW) {
  const auto pole = make_observation({"vlaa@pole", {}, {}, {}});
  const auto site = make_observation({"vlaa", {}, {}, {}});
  EXPECT_EQ(pole.vis_set, "vlaa@pole");
  EXPECT_EQ(pole.dec_deg, 90.0);
  EXPECT_EQ(pole.baseline_count(), site.baseline_count());
  for (const index_t t : {index_t{0}, pole.time.steps / 2, pole.time.steps - 1}) {
    const auto uvw = pole.antenna_uvw(t);
    for (size_t a = 0; a < uvw.size(); ++a) {
      EXPECT_EQ(uvw[a].w, 0.0);
      const auto& e = site.layout.antennas[a];
      EXPECT_NEAR(std::hypot(uvw[a].u, uvw[a].v), std::hypot(e.east, e.north),
                  1e-9 * (1 + std::hypot(e.east, e.north)));
    }
  }
  // Elsewhere in the sky w comes back.
  const auto tilted = make_observation({"vlaa@pole", {}, {}, 34.0});
  double w = 0;
  for (const auto& a : tilted.antenna_uvw(0)) w = std::max(w, std::abs(a.w));
  EXPECT_GT(w, 100.0);
  EXPECT_THROW(make_observation({"nosuch@pole", {}, {}, {}}), UsageError);
}

// The phase centre's apparent direction of date in ICRS, held against
// pyuvdata's transform_app_to_icrs (ERFA's atoc13) to 7 mas, the Sun's
// light deflection iotest leaves out (tools/start_epoch_constants.py).
TEST(CatalogFrame, ThePhaseCentreInIcrsIsPyuvdatas) {
  constexpr double kMas = kDeg / 3600e3;
  const struct {
    const char* vis_set;
    double dec_deg, ra_icrs_deg, dec_icrs_deg, frame_pa_deg;
  } cases[] = {{"vlaa", 34, 46.626825534, 33.909855836, 0.1096343},
               {"midr5", -30, 175.749715276, -29.871900471, 0.0100448},
               {"lowbd2", -30, 270.998717069, -30.001131533, -0.1461916}};
  for (const auto& c : cases) {
    const auto obs = make_observation({c.vis_set, {}, {}, c.dec_deg});
    const auto centre = phase_centre(obs);
    EXPECT_EQ(centre.apparent.ra_rad, phase_centre_ra_rad(obs)) << c.vis_set;
    EXPECT_EQ(centre.apparent.dec_rad, c.dec_deg * kDeg) << c.vis_set;
    const double dec = c.dec_icrs_deg * kDeg;
    EXPECT_LT(std::abs(centre.icrs.ra_rad - c.ra_icrs_deg * kDeg) * std::cos(dec), 7 * kMas)
        << c.vis_set;
    EXPECT_LT(std::abs(centre.icrs.dec_rad - dec), 7 * kMas) << c.vis_set;
    EXPECT_NEAR(centre.frame_pa_rad / kDeg, c.frame_pa_deg, 1e-6) << c.vis_set;
    // antenna_uvw turns the apparent frame's (u, v) by it, as pyuvdata's
    // calc_uvw turns them by phase_center_frame_pa, so that v points to
    // ICRS north; w is the apparent frame's (toward the phase centre).
    EXPECT_EQ(obs.frame_pa_rad, centre.frame_pa_rad) << c.vis_set;
    const index_t t = obs.time.steps - 1;
    const UvwRotation apparent(obs.layout.centre.lat_deg * kDeg,
                               obs.time.at(t) * kRadiansPerHourAngleSecond, c.dec_deg * kDeg);
    const auto uvw = obs.antenna_uvw(t);
    const double cp = std::cos(obs.frame_pa_rad), sp = std::sin(obs.frame_pa_rad);
    for (size_t a = 0; a < uvw.size(); ++a) {
      const Uvw q = apparent(obs.layout.antennas[a]);
      const double tol = 1e-9 * (1 + std::hypot(q.u, q.v));
      EXPECT_NEAR(uvw[a].u, q.u * cp - q.v * sp, tol) << c.vis_set;
      EXPECT_NEAR(uvw[a].v, q.u * sp + q.v * cp, tol) << c.vis_set;
      EXPECT_EQ(uvw[a].w, q.w) << c.vis_set;
    }
  }
  // vlaa at dec 34: the apparent coordinates lie 17.6' east and 5.4' north
  // of the truth (the precession since J2000 above all).
  const auto vlaa = phase_centre(make_observation({"vlaa", {}, {}, 34.0}));
  EXPECT_NEAR((vlaa.apparent.ra_rad - vlaa.icrs.ra_rad) * std::cos(vlaa.icrs.dec_rad) / kDeg * 60,
              17.6, 0.1);
  EXPECT_NEAR((vlaa.apparent.dec_rad - vlaa.icrs.dec_rad) / kDeg * 60, 5.4, 0.1);
  // At the pole too (RA then means little, the direction does).
  const auto pole = phase_centre(make_observation({"vlaa@pole", {}, {}, {}}));
  EXPECT_NEAR(pole.icrs.dec_rad / kDeg, 89.869606440, 1e-6);
  EXPECT_GE(pole.icrs.ra_rad, 0.0);
}

}  // namespace
}  // namespace iotest::telescope
