// The w-tower height from a target error: measured, not bounded.
#include <cmath>

#include "iotest/common/accuracy.hpp"
#include "iotest/degrid/degridder.hpp"

namespace iotest::degrid {

TowerCalibration calibrate_tower_height(const Degridder& d, double w_max, double target) {
  const auto& rec = d.recombination();
  const auto& p = rec.params();
  const auto& g = d.geometry();
  const double dw = d.planes().dw;

  // Worst-case sky: the corners and edge centres of the used field.
  const index_t h = p.used_size / 2 - 1;
  const std::vector<sky::PointSource> sources = {{-h, -h}, {h, h}, {-h, h}, {h, -h},
                                                 {0, h},   {h, 0}, {-h, 0}, {0, -h}};
  // The central subgrid (offsets 0, 0), from one facet at a time.
  Array2D facet = rec.make_facet(), prepared = rec.make_prepared_facet(),
          column = rec.make_column(), contribution = rec.make_contribution(),
          sum = rec.make_subgrid_sum();
  swiftly::ColumnWorkspace ws(p);
  for (const auto& t0 : swiftly::facet_tiles(p))
    for (const auto& t1 : swiftly::facet_tiles(p)) {
      sky::fill_facet(sources, t0, t1, facet.view());
      d.correct_facet(t0, t1, 0, facet.view());
      rec.prepare_facet(facet.view(), prepared.view());
      rec.prepare_column(prepared.view(), t0.offset, 0, ws, column.view());
      rec.extract_contribution(column.view(), t1.offset, 0, contribution.view());
      rec.add_contribution(contribution.view(), t0.offset, t1.offset, sum.view());
    }
  // Visibilities across the subgrid's tile, edges included.
  const auto tile = swiftly::subgrid_tiles(p).front();
  std::vector<double> cells;
  for (const double f : {0.0, 0.25, 0.5, 0.75, 1.0})
    cells.push_back(static_cast<double>(tile.lo) + f * static_cast<double>(tile.hi - 1 - tile.lo) +
                    0.3 * (f == 0.0   ? 1
                           : f == 1.0 ? -1
                                      : 0));
  Degridder::Workspace tower(p);
  TowerCalibration c;
  const auto error = [&](double height) {
    ++c.trials;
    d.build_tower(sum.view(), -height / dw, height / dw, tower);
    RelativeError e;
    for (const double frac : {-1.0, -0.5, 0.0, 0.5, 1.0})
      for (const double uc : cells)
        for (const double vc : cells) {
          const double w = frac * height;
          const cplx got = d.degrid_point(uc, vc, w, w, tower);
          const cplx want = d.direct_at(sources, uc * g.cell_uv, vc * g.cell_uv, w);
          e.add(CView2D(&got, 1, 1), CView2D(&want, 1, 1));
        }
    return e.value();
  };
  c.error_at_zero = error(0);
  c.target = target > 0 ? target : 2 * c.error_at_zero;
  // Double while the error holds, then bisect between the last good height
  // and the first bad one. Towers stop at 256 planes (memory).
  w_max = std::min(w_max, 128 * dw);
  double good = 0, bad = dw;
  while (bad < w_max && error(bad) <= c.target) good = bad, bad *= 2;
  if (bad >= w_max && error(w_max) <= c.target) {
    c.height = w_max;
    return c;
  }
  for (int i = 0; i < 6; ++i) {
    const double mid = (good + bad) / 2;
    (error(mid) <= c.target ? good : bad) = mid;
  }
  c.height = std::max(good, dw / 2);  // at least the planes one visibility needs
  return c;
}

}  // namespace iotest::degrid
