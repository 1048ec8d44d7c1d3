#include "iotest/commands/layout.hpp"

#include "iotest/common/errors.hpp"
#include "iotest/job/job.hpp"

namespace iotest::commands {

report::Report layout(const LayoutOptions& options) {
  const auto obs = telescope::make_observation(options.observation);
  if (options.baselines < 0 || options.baselines > obs.baseline_count())
    throw UsageError("--baselines", "expected 0.." + std::to_string(obs.baseline_count()) +
                                        " baselines, got " + std::to_string(options.baselines));
  report::Report r;
  r.mode = "layout";
  r.counts.baselines = obs.baseline_count();
  r.counts.visibilities = obs.visibility_count();
  r.observation = job::observation_section(obs);

  report::LayoutDump d;
  d.vis_set = obs.vis_set;
  d.lon_deg = obs.layout.centre.lon_deg;
  d.lat_deg = obs.layout.centre.lat_deg;
  d.height_m = obs.layout.centre.height_m;
  d.max_baseline_m = obs.layout.max_baseline_m();
  for (const auto& a : obs.layout.antennas) d.antennas_enu.push_back({a.east, a.north, a.up});
  // Baselines spread over the list (short and long ones), at the first,
  // middle and last time step.
  const auto baselines = obs.baselines();
  const index_t stride =
      std::max<index_t>(1, obs.baseline_count() / std::max<index_t>(1, options.baselines));
  for (const index_t t : {index_t{0}, obs.time.steps / 2, obs.time.steps - 1}) {
    const auto uvw = obs.antenna_uvw(t);
    for (index_t i = 0; i < options.baselines; ++i) {
      const index_t b = i * stride;
      const auto [a1, a2] = baselines[static_cast<size_t>(b)];
      const auto& p1 = uvw[static_cast<size_t>(a1)];
      const auto& p2 = uvw[static_cast<size_t>(a2)];
      d.uvw.push_back({b, a1, a2, t, obs.time.at(t), p2.u - p1.u, p2.v - p1.v, p2.w - p1.w});
    }
  }
  r.layout = d;
  return r;
}

}  // namespace iotest::commands
