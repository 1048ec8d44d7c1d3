// Gridding, the imaging direction: each step the exact adjoint of its
// degridding step, <A x, y> = <x, A^H y> to rounding over random x and y.
#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <random>
#include <string_view>
#include <vector>

#include "degrid_fixture.hpp"
#include "iotest/binning/binning.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/degrid/kernel.hpp"
#include "iotest/job/job.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::degrid {
namespace {

using test::dot;
using test::random_values;
using Fixture = test::DegridFixture;

job::Job small_job(std::optional<index_t> margin = {}, const char* vis_set = "vlaa") {
  job::JobOptions o;
  o.rec_set = "2k-1k-256";  // w spans many planes here (T05_'s planes are far apart)
  const bool pole = std::string_view(vis_set).ends_with(telescope::kPoleSuffix);
  o.observation = telescope::ObservationOptions{vis_set, "-1800:1800/12/6", "260e6:300e6/24/12",
                                                pole ? 90.0 : -40.0};
  o.margin = margin;
  return job::resolve(o);
}

// The visit with the most visibilities (one w-stacking plane or several).
binning::VisitRuns busiest_visit(const Fixture& s) {
  const auto counts = s.binner.count_visits(0, s.job.obs->baseline_count(), 1);
  const auto it = std::max_element(counts.visibilities.begin(), counts.visibilities.end());
  const index_t at = it - counts.visibilities.begin();
  return {s.binner, counts.first_stack + at / counts.subgrids, at % counts.subgrids};
}

// <degrid(x), y> and <x, grid(y)> over the busiest visit, for random
// subgrid sums x and visibilities y.
std::pair<cplx, cplx> adjoint_products(const Fixture& s) {
  const auto visit = busiest_visit(s);
  std::vector<binning::VisRun> runs;
  visit.runs(0, visit.pieces().size(), runs);
  double w_lo = 0, w_hi = 0;
  EXPECT_TRUE(visit.w_range(w_lo, w_hi));
  const double dw = s.degridder.planes().dw;
  const auto& p = s.job.p;
  const auto tiles = swiftly::subgrid_tiles(p);
  const index_t ns = p.subgrids_per_axis;
  const index_t off0 = tiles[static_cast<size_t>(visit.subgrid() / ns)].offset;
  const index_t off1 = tiles[static_cast<size_t>(visit.subgrid() % ns)].offset;

  std::mt19937_64 rng(7);
  const index_t n_sum = p.xM * p.xM;
  const auto x = random_values(n_sum, rng);
  const auto y = random_values(visit.visibilities(), rng);
  EXPECT_GT(visit.visibilities(), 1000);

  // A x: the subgrid sum x through the tower to visibilities.
  Degridder::Workspace forward(p);
  s.degridder.build_tower(CView2D(x.data(), p.xM, p.xM), w_lo / dw, w_hi / dw, forward);
  std::vector<cplx> ax;
  s.degridder.degrid(runs.data(), runs.data() + runs.size(), off0, off1, forward, ax);
  EXPECT_EQ(static_cast<index_t>(ax.size()), visit.visibilities());
  if (static_cast<index_t>(ax.size()) != visit.visibilities()) return {};

  // A^H y: the visibilities y onto a tower of the same planes, collapsed.
  Degridder::Workspace adjoint(p);
  EXPECT_EQ(s.degridder.begin_tower(w_lo / dw, w_hi / dw, adjoint), forward.plane_count);
  s.degridder.grid(runs.data(), runs.data() + runs.size(), off0, off1, y.data(), adjoint);
  std::vector<cplx> ahy(static_cast<size_t>(n_sum));
  s.degridder.collapse_tower(adjoint, MView2D(ahy.data(), p.xM, p.xM));

  return {dot(ax.data(), y.data(), visit.visibilities()), dot(x.data(), ahy.data(), n_sum)};
}

TEST(Grid, GriddingIsTheAdjointOfDegridding) {
  const Fixture s(small_job());
  // w != 0: the busiest visit's w spans several planes, so the screens
  // matter.
  const auto visit = busiest_visit(s);
  double w_lo = 0, w_hi = 0;
  ASSERT_TRUE(visit.w_range(w_lo, w_hi));
  const double dw = s.degridder.planes().dw;
  EXPECT_GT(w_hi - w_lo, 2 * dw);
  EXPECT_GT(std::max(std::abs(w_lo), std::abs(w_hi)), 2 * dw);
  const auto [lhs, rhs] = adjoint_products(s);
  // Rounding of ~1e5 visibilities x 12^2 x 8 taps and two FFTs of 2-D
  // planes: relative 1e-12 leaves room; a wrong conjugate or screen power
  // gives O(1).
  EXPECT_LT(std::abs(lhs - rhs), 1e-12 * std::abs(lhs)) << lhs << " vs " << rhs;
  EXPECT_GT(std::abs(lhs), 0);
}

TEST(Grid, GriddingIsTheAdjointOfDegriddingWithoutW) {
  // An array at the pole: towers of one plane, no w kernel.
  const Fixture s(small_job({}, "vlaa@pole"));
  ASSERT_TRUE(s.job.w.w_free());
  const auto [lhs, rhs] = adjoint_products(s);
  EXPECT_LT(std::abs(lhs - rhs), 1e-12 * std::abs(lhs)) << lhs << " vs " << rhs;
  EXPECT_GT(std::abs(lhs), 0);
}

TEST(Grid, GriddingAddsToWhatTheTowerHolds) {
  // Gridding two halves of the visibilities into one tower equals gridding
  // them all: grid() adds, begin_tower() alone zeroes.
  const Fixture s(small_job());
  const auto visit = busiest_visit(s);
  std::vector<binning::VisRun> runs;
  visit.runs(0, visit.pieces().size(), runs);
  double w_lo = 0, w_hi = 0;
  visit.w_range(w_lo, w_hi);
  const double dw = s.degridder.planes().dw;
  const auto& p = s.job.p;
  std::mt19937_64 rng(3);
  const auto y = random_values(visit.visibilities(), rng);
  const auto collapse = [&](bool halves) {
    Degridder::Workspace ws(p);
    s.degridder.begin_tower(w_lo / dw, w_hi / dw, ws);
    const size_t half = halves ? runs.size() / 2 : runs.size();
    index_t first = 0;
    for (size_t r = 0; r < half; ++r) first += runs[r].count();
    s.degridder.grid(runs.data(), runs.data() + half, 0, 0, y.data(), ws);
    s.degridder.grid(runs.data() + half, runs.data() + runs.size(), 0, 0, y.data() + first, ws);
    std::vector<cplx> out(static_cast<size_t>(p.xM * p.xM));
    s.degridder.collapse_tower(ws, MView2D(out.data(), p.xM, p.xM));
    return out;
  };
  const auto whole = collapse(false), halves = collapse(true);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    diff += std::norm(whole[i] - halves[i]);
    norm += std::norm(whole[i]);
  }
  EXPECT_GT(norm, 0);
  EXPECT_LT(std::sqrt(diff / norm), 1e-13);
}

TEST(Grid, FacetCorrectionAdjointWithWStacking) {
  const Fixture s(small_job(40));  // a short tower: w-stacking planes
  ASSERT_GT(s.job.w.stack_step, 0);
  const auto& p = s.job.p;
  const auto tiles = swiftly::facet_tiles(p);
  std::mt19937_64 rng(11);
  for (const index_t stack : {0, 3, -2}) {
    const auto x = random_values(p.yB * p.yB, rng);
    const auto y = random_values(p.yB * p.yB, rng);
    auto cx = x, chy = y;
    s.degridder.correct_facet(tiles[0], tiles.back(), stack, MView2D(cx.data(), p.yB, p.yB));
    s.degridder.correct_facet_adjoint(tiles[0], tiles.back(), stack,
                                      MView2D(chy.data(), p.yB, p.yB));
    // correct_facet carries the flux scale N^2, its imaging twin not
    // (SwiFTly's image direction brings it): <C x, y> = N^2 <x, C' y>.
    const double N2 = static_cast<double>(p.N) * static_cast<double>(p.N);
    const cplx lhs = dot(cx.data(), y.data(), p.yB * p.yB);
    const cplx rhs = N2 * dot(x.data(), chy.data(), p.yB * p.yB);
    EXPECT_LT(std::abs(lhs - rhs), 1e-12 * std::abs(lhs)) << "stack " << stack;
  }
}

TEST(Grid, FacetCorrectionMatchesTheKernelsTransforms) {
  // facet_correction takes the w kernel's transform from a Chebyshev
  // series: it must equal the direct evaluation to rounding over the used
  // field, corners included, times the flux scale N^2 (visibilities in Jy).
  const Fixture s(small_job());
  const auto& p = s.job.p;
  const GridKernel uv(s.job.kernel.support, p.f / 2), w(s.job.kernel.w_support, kWKernelX0);
  const auto& planes = s.degridder.planes();
  const double N = static_cast<double>(p.N), pixel = s.job.geometry->pixel_lm;
  const index_t h = p.used_size / 2;
  double worst = 0;
  for (index_t y0 = -h; y0 < h; y0 += h / 7)
    for (index_t y1 = -h; y1 < h; y1 += h / 5) {
      const double l = static_cast<double>(y0) * pixel, m = static_cast<double>(y1) * pixel;
      const double n = std::sqrt(1 - l * l - m * m);
      const double want =
          N * N /
          (uv.correction(static_cast<double>(y0) / N) * uv.correction(static_cast<double>(y1) / N) *
           w.correction(planes.dw * (n - 1 - planes.centre)));
      const cplx got =
          s.degridder.facet_correction(static_cast<double>(y0), static_cast<double>(y1), 0);
      worst = std::max(worst, std::abs(got - want) / want);
    }
  EXPECT_LT(worst, 1e-13);
}

}  // namespace
}  // namespace iotest::degrid
