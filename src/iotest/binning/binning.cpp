#include "iotest/binning/binning.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "iotest/common/errors.hpp"

namespace iotest::binning {

GridGeometry grid_geometry(const config::RecombinationParams& p,
                           const telescope::Observation& obs) {
  GridGeometry g;
  g.max_uv = obs.layout.max_baseline_m() * obs.freq.end / telescope::kSpeedOfLight;
  g.pixel_lm = 1.0 / (2.0 * g.max_uv);
  g.cell_uv = 1.0 / (static_cast<double>(p.N) * g.pixel_lm);
  g.field_lm = p.f * static_cast<double>(p.N) * g.pixel_lm;
  // The corners of the used field must stay above the horizon.
  if (g.field_lm / 2 * std::sqrt(2.0) >= 1.0)
    throw UsageError("--vis-set",
                     fmt::format("{} with {} would image a field of {:.2f} in direction cosines, "
                                 "beyond the horizon; use a smaller image or a shorter array",
                                 obs.vis_set, p.canonical, g.field_lm));
  return g;
}

SubgridLocator::SubgridLocator(const config::RecombinationParams& p)
    : N_(p.N), tiles_(swiftly::subgrid_tiles(p)), owner_(static_cast<size_t>(p.N), -1) {
  for (size_t i = 0; i < tiles_.size(); ++i)
    for (index_t c = tiles_[i].offset + tiles_[i].lo; c < tiles_[i].offset + tiles_[i].hi; ++c)
      owner_[static_cast<size_t>(wrap(c))] = static_cast<std::int32_t>(i);
}

std::pair<index_t, index_t> SubgridLocator::tile_span(index_t tile, index_t cell) const {
  const auto& t = tiles_[static_cast<size_t>(tile)];
  const index_t into = wrap(cell - (t.offset + t.lo));  // cells from the tile's first
  return {cell - into, cell - into + (t.hi - t.lo)};
}

void for_each_run(const config::RecombinationParams& p, const telescope::Observation& obs,
                  const GridGeometry& g, index_t t_begin, index_t t_end,
                  const std::function<void(index_t, const VisRun&)>& visit, const RunSplit& split) {
  const SubgridLocator locate(p);
  const auto baselines = obs.baselines();
  const index_t steps = obs.freq.steps, chunk = split.chunks ? obs.freq.chunk : steps;
  const double per_stack =
      split.w_stack_step > 0 ? 1.0 / (telescope::kSpeedOfLight * split.w_stack_step) : 0.0;
  // Position in cells along the channel axis: A + B k for channel k.
  const double per_metre = 1.0 / (telescope::kSpeedOfLight * g.cell_uv);
  const double f0 = obs.freq.start, df = obs.freq.step();
  for (index_t t = t_begin; t < t_end; ++t) {
    const auto uvw = obs.antenna_uvw(t);
    for (size_t b = 0; b < baselines.size(); ++b) {
      const auto& a1 = uvw[static_cast<size_t>(baselines[b].first)];
      const auto& a2 = uvw[static_cast<size_t>(baselines[b].second)];
      const double um = (a2.u - a1.u) * per_metre, vm = (a2.v - a1.v) * per_metre,
                   wm = (a2.w - a1.w) * per_stack;
      const double Au = um * f0, Bu = um * df, Av = vm * f0, Bv = vm * df, Aw = wm * f0,
                   Bw = wm * df;
      for (index_t k = 0; k < steps;) {
        const index_t chunk_end = std::min(steps, (k / chunk + 1) * chunk);
        const index_t cu = nearest_cell(Au + Bu * static_cast<double>(k)),
                      cv = nearest_cell(Av + Bv * static_cast<double>(k));
        const index_t tu = locate.tile_of(cu), tv = locate.tile_of(cv);
        const auto su = locate.tile_span(tu, cu), sv = locate.tile_span(tv, cv);
        const index_t stack = nearest_cell(Aw + Bw * static_cast<double>(k));
        const std::pair<index_t, index_t> sw{stack, stack + 1};
        const auto inside = [&](index_t kk) {
          const double x = static_cast<double>(kk);
          const index_t cu2 = nearest_cell(Au + Bu * x), cv2 = nearest_cell(Av + Bv * x);
          return cu2 >= su.first && cu2 < su.second && cv2 >= sv.first && cv2 < sv.second &&
                 nearest_cell(Aw + Bw * x) == stack;
        };
        // The channel where the track leaves the tile, from the linear
        // track, then corrected against the exact rounding rule.
        double limit = static_cast<double>(chunk_end);
        for (const auto& [A, B, span] :
             {std::tuple(Au, Bu, su), std::tuple(Av, Bv, sv), std::tuple(Aw, Bw, sw)}) {
          if (B > 0) limit = std::min(limit, std::ceil((span.second - 0.5 - A) / B));
          if (B < 0) limit = std::min(limit, std::floor((span.first - 0.5 - A) / B) + 1);
        }
        index_t end = std::clamp(static_cast<index_t>(limit), k + 1, chunk_end);
        while (end > k + 1 && !inside(end - 1)) --end;
        while (end < chunk_end && inside(end)) ++end;
        visit(tu * locate.per_axis() + tv,
              VisRun{static_cast<std::int32_t>(b), static_cast<std::int32_t>(t),
                     static_cast<std::int32_t>(k), static_cast<std::int32_t>(end),
                     static_cast<std::int32_t>(stack)});
        k = end;
      }
    }
  }
}

Distribution distribution(const config::RecombinationParams& p, const telescope::Observation& obs,
                          const GridGeometry& g) {
  Distribution d;
  const index_t subgrids = p.subgrid_count();
  d.per_subgrid.assign(static_cast<size_t>(subgrids), 0);
#pragma omp parallel
  {
    std::vector<index_t> counts(static_cast<size_t>(subgrids), 0);
    const index_t threads = omp_get_num_threads(), me = omp_get_thread_num();
    const index_t t_begin = obs.time.steps * me / threads,
                  t_end = obs.time.steps * (me + 1) / threads;
    for_each_run(
        p, obs, g, t_begin, t_end,
        [&](index_t subgrid, const VisRun& run) {
          counts[static_cast<size_t>(subgrid)] += run.count();
        },
        RunSplit{false, 0});
#pragma omp critical
    for (size_t i = 0; i < counts.size(); ++i) d.per_subgrid[i] += counts[i];
  }
  return summarise(std::move(d.per_subgrid));
}

Distribution summarise(std::vector<index_t> per_subgrid) {
  Distribution d;
  d.per_subgrid = std::move(per_subgrid);
  d.min = -1;
  for (const index_t n : d.per_subgrid) {
    if (n == 0) continue;
    ++d.subgrids_used;
    d.visibilities += n;
    d.min = d.min < 0 ? n : std::min(d.min, n);
    d.max = std::max(d.max, n);
  }
  d.min = std::max<index_t>(d.min, 0);
  d.mean = d.subgrids_used
               ? static_cast<double>(d.visibilities) / static_cast<double>(d.subgrids_used)
               : 0;
  return d;
}

}  // namespace iotest::binning
