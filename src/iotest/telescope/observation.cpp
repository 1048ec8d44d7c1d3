#include "iotest/telescope/observation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <numbers>
#include <optional>
#include <sstream>

#include "iotest/common/errors.hpp"
#include "iotest/telescope/catalog_frame.hpp"

namespace iotest::telescope {
namespace {

constexpr Geodetic kLowCentre{116.76444824, -26.824722084, 300};
constexpr Geodetic kVlaCentre{-107.6184, 34.0784, 2124};
// The .cfg files state their own centre (used for the ENU frame); these
// match their headers.
constexpr Geodetic kMidCentre{21.443803, -30.712925, 1053};
constexpr Geodetic kLofarCentre{6.86763008, 52.91139459, 50.11317741};
constexpr Geodetic kMeerKatPlusCentre{21.44388889, -30.711056, 1086.6};
constexpr Geodetic kAskapCentre{116.6356824, -26.7013006, 377};

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string Sampling::text() const {
  // Shortest text that reads back to the same doubles: files record it,
  // and `verify` rebuilds the observation from it.
  return fmt::format("{}:{}/{}/{}", start, end, steps, chunk);
}

Sampling parse_sampling(std::string_view text, const std::string& option, bool positive) {
  const auto fail = [&](const std::string& why) -> UsageError {
    return UsageError(
        option, "expected START:END/STEPS[/CHUNK] (" + why + "), got '" + std::string(text) + "'");
  };
  const size_t colon = text.find(':');
  const size_t slash = text.find('/');
  if (colon == std::string_view::npos || slash == std::string_view::npos || slash < colon)
    throw fail("missing ':' or '/'");
  Sampling s;
  const std::string_view start = text.substr(0, colon),
                         end = text.substr(colon + 1, slash - colon - 1);
  std::string_view rest = text.substr(slash + 1);
  const size_t slash2 = rest.find('/');
  const std::string_view steps = rest.substr(0, slash2);
  const std::string_view chunk =
      slash2 == std::string_view::npos ? std::string_view() : rest.substr(slash2 + 1);
  if (!parse_number(start, s.start) || !parse_number(end, s.end) || !std::isfinite(s.start) ||
      !std::isfinite(s.end))
    throw fail("START and END are numbers");
  if (!parse_number(steps, s.steps) || s.steps < 1) throw fail("STEPS is a count >= 1");
  if (slash2 != std::string_view::npos) {
    if (!parse_number(chunk, s.chunk) || s.chunk < 1 || s.chunk > s.steps)
      throw fail("CHUNK is a count from 1 to STEPS");
  } else {
    s.chunk = std::min<index_t>(s.steps, 32);
  }
  if (s.end < s.start) throw fail("END >= START");
  if (positive && s.start <= 0) throw fail("values > 0");
  return s;
}

const std::vector<VisSet>& vis_sets() {
  // Defaults: realistic snapshots with w != 0 (declination away from the
  // zenith and hour angles that really vary); see docs/vis-sets.md.
  static const std::vector<VisSet> sets = {
      {"lowbd2", "lowbd2.csv", LayoutFormat::enu_csv, kLowCentre, true, "-460:460/1024/64",
       "260e6:300e6/8192/64", -30, "SKA1-Low baseline design 2, 512 stations"},
      {"lowbd2-core", "lowbd2-core.csv", LayoutFormat::enu_csv, kLowCentre, true, "-460:460/256/32",
       "260e6:300e6/256/32", -30, "core of lowbd2, 166 stations"},
      {"lowr3", "lowr3.csv", LayoutFormat::lonlat_csv, kLowCentre, true, "-460:460/1024/64",
       "260e6:300e6/8192/64", -30, "SKA1-Low rev 3, 512 stations"},
      {"lowr4", "lowr4.csv", LayoutFormat::named_lonlat_csv, kLowCentre, true, "-460:460/1024/64",
       "260e6:300e6/8192/64", -30, "SKA1-Low rev 4, 512 stations"},
      {"low-aa0.5", "low-aa0.5.csv", LayoutFormat::lonlat_csv, kLowCentre, true,
       "-1800:1800/256/32", "260e6:300e6/256/32", -30, "SKA1-Low AA0.5, 6 stations"},
      {"midr5", "midr5.cfg", LayoutFormat::ecef_cfg, kMidCentre, false, "-290:290/4096/64",
       "0.35e9:0.4725e9/11264/64", -30, "SKA1-Mid, 133 SKA + 64 MeerKAT dishes"},
      {"mkatplus", "mkatplus.cfg", LayoutFormat::ecef_cfg, kMeerKatPlusCentre, false,
       "-290:290/1024/64", "0.95e9:1.05e9/1024/64", -30, "MeerKAT+, 84 dishes"},
      {"askap", "askap.cfg", LayoutFormat::ecef_cfg, kAskapCentre, false, "-1800:1800/512/32",
       "0.7e9:0.7288e9/288/32", -45, "ASKAP, 36 dishes"},
      {"lofar", "lofar.cfg", LayoutFormat::ecef_cfg, kLofarCentre, false, "-1800:1800/512/32",
       "120e6:160e6/512/32", 30, "LOFAR, 134 stations"},
      {"vlaa", "vlaa.csv", LayoutFormat::enu_csv, kVlaCentre, false, "-1800:1800/128/64",
       "260e6:300e6/2048/64", 10, "VLA A configuration, 27 antennas (small, for checks)"},
  };
  return sets;
}

const VisSet& find_vis_set(std::string_view name) {
  std::string names;
  for (const auto& v : vis_sets()) {
    if (v.name == name) return v;
    names.append(" ").append(v.name);
  }
  throw UsageError("--vis-set",
                   fmt::format("unknown visibility set '{}' (expected one of{})", name, names));
}

index_t Observation::baseline_count() const {
  const index_t n = antenna_count();
  return autocorrelations ? n * (n + 1) / 2 : n * (n - 1) / 2;
}

std::vector<std::pair<int, int>> Observation::baselines() const {
  std::vector<std::pair<int, int>> out;
  out.reserve(static_cast<size_t>(baseline_count()));
  const int n = static_cast<int>(antenna_count());
  for (int a1 = 0; a1 < n; ++a1)
    for (int a2 = autocorrelations ? a1 : a1 + 1; a2 < n; ++a2) out.emplace_back(a1, a2);
  return out;
}

std::vector<Uvw> Observation::antenna_uvw(index_t t) const {
  constexpr double deg = std::numbers::pi / 180;
  const UvwRotation rotate(layout.centre.lat_deg * deg, time.at(t) * kRadiansPerHourAngleSecond,
                           dec_deg * deg, frame_pa_rad);
  std::vector<Uvw> out;
  out.reserve(layout.antennas.size());
  for (const auto& a : layout.antennas) out.push_back(rotate(a));
  return out;
}

double Observation::max_abs_w_m() const {
  // A baseline's w is a difference of its antennas', so the widest at a
  // time step is the spread of the antennas' w.
  double widest = 0;
  for (index_t t = 0; t < time.steps; ++t) {
    const auto uvw = antenna_uvw(t);
    const auto [lo, hi] = std::minmax_element(uvw.begin(), uvw.end(),
                                              [](const Uvw& a, const Uvw& b) { return a.w < b.w; });
    if (lo != uvw.end()) widest = std::max(widest, hi->w - lo->w);
  }
  return widest;
}

const VisSet& custom_defaults() {
  static const VisSet set{
      "",  "",           LayoutFormat::ecef_cfg, {}, false, "-1800:1800/64/32", "1e9:1.1e9/64/32",
      -30, "layout file"};
  return set;
}

namespace {

// A layout file of the user's: the .cfg format with its centre in the header.
Layout read_layout_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--vis-set", "cannot read layout file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  std::optional<double> lon, lat;
  double height = 0;
  std::string line;
  for (std::istringstream lines(text.str()); std::getline(lines, line);) {
    if (line.rfind('#', 0) != 0) continue;
    if (const auto at = line.find("(long,lat)="); at != std::string::npos) {
      std::istringstream values(line.substr(at + 11));
      double a = 0, b = 0;
      if (values >> a >> b) lon = a, lat = b;
    } else if (const auto e = line.find("elevation ="); e != std::string::npos) {
      std::istringstream(line.substr(e + 11)) >> height;
    }
  }
  if (!lon || !lat)
    throw UsageError(
        "--vis-set",
        "layout file '" + path + "': expected a header line '# observatory (long,lat)= LON LAT'");
  try {
    return parse_layout(text.str(), LayoutFormat::ecef_cfg, {*lon, *lat, height}, path);
  } catch (const std::runtime_error& e) {
    throw UsageError("--vis-set", e.what());
  }
}

bool is_layout_path(const std::string& name) {
  return name.find('/') != std::string::npos ||
         (name.size() > 4 && name.compare(name.size() - 4, 4, ".cfg") == 0);
}

}  // namespace

Observation make_observation(const ObservationOptions& o) {
  // NAME@pole: the array laid flat at the pole (see kPoleSuffix).
  std::string name = o.vis_set;
  const bool pole =
      name.size() > kPoleSuffix.size() &&
      name.compare(name.size() - kPoleSuffix.size(), kPoleSuffix.size(), kPoleSuffix) == 0;
  if (pole) name.resize(name.size() - kPoleSuffix.size());
  const bool custom = is_layout_path(name);
  const VisSet& set = custom ? custom_defaults() : find_vis_set(name);
  Observation obs;
  if (custom) {
    obs.layout = read_layout_file(name);
  } else {
    name = std::string(set.name);
    obs.layout = parse_layout(embedded_layout(set.file), set.format, set.centre,
                              "data/layouts/" + std::string(set.file));
  }
  obs.vis_set = pole ? name + std::string(kPoleSuffix) : name;
  obs.description = std::string(set.description);
  if (pole) {
    obs.layout.centre = {0.0, 90.0, 0.0};
    for (auto& a : obs.layout.antennas) a.up = 0;
    obs.description += ", laid flat at the pole";
  }
  obs.layout.name = obs.vis_set;
  obs.autocorrelations = set.autocorrelations;
  obs.time = parse_sampling(o.time.value_or(std::string(set.time)), "--time", false);
  obs.freq = parse_sampling(o.freq.value_or(std::string(set.freq)), "--freq", true);
  obs.dec_deg = o.dec_deg.value_or(pole ? 90.0 : set.dec_deg);
  if (!(std::abs(obs.dec_deg) <= 90))
    throw UsageError(
        "--dec",
        fmt::format("expected a declination in degrees from -90 to 90, got {}", obs.dec_deg));
  if (std::abs(obs.time.end) > 43200 || std::abs(obs.time.start) > 43200)
    throw UsageError("--time", "expected hour angles within +-43200 s (12 h)");
  obs.frame_pa_rad = icrs_frame_pa_rad(
      {phase_centre_ra_rad(obs), obs.dec_deg * std::numbers::pi / 180}, obs.layout.centre);
  return obs;
}

double phase_centre_ra_rad(const Observation& obs) {
  // In [0, 2 pi): a western longitude would otherwise give a negative RA.
  const double deg = std::fmod(kStartGastDeg + obs.layout.centre.lon_deg + 360, 360);
  return deg * std::numbers::pi / 180;
}

std::string start_utc(const Observation& obs) {
  // kStartJd is 2023-02-25T00:00:00 UTC; time steps are sidereal seconds.
  // To the millisecond, as start_mjd gives it.
  constexpr std::int64_t kStartUnixMs = 1677283200000;
  const auto ms = kStartUnixMs + static_cast<std::int64_t>(
                                     std::llround(obs.time.at(0) / kSiderealPerSolar * 1000));
  const std::time_t t = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}", text, static_cast<int>(ms - static_cast<std::int64_t>(t) * 1000));
}

double start_mjd(const Observation& obs) {
  return kStartJd - 2400000.5 + obs.time.at(0) / kSiderealPerSolar / 86400;
}

double mjd_seconds_utc(const Observation& obs, index_t t) {
  const double jd = kStartJd + obs.time.at(t) / kSiderealPerSolar / 86400;
  return (jd - 2400000.5) * 86400;
}

double band_centre_hz(const Observation& obs) {
  return (obs.freq.start + obs.freq.end) / 2;
}

double bandwidth_hz(const Observation& obs) {
  return obs.freq.step() * static_cast<double>(obs.freq.steps);
}

}  // namespace iotest::telescope
