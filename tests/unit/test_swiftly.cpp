// SwiFTly against the direct Fourier transform, in both directions, plus
// additivity and the image(predict(x)) round trip. Small sets keep it quick;
// their windows reach the ~1e-12 floor, so the stated tolerance is 1e-10.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>

#include "iotest/commands/recombine.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/swiftly/core.hpp"

namespace iotest::swiftly {
namespace {

constexpr double kTolerance = 1e-10;

// A plain single-threaded walk over the core's steps: the obvious order,
// one subgrid or facet at a time.
class Harness {
 public:
  explicit Harness(const char* set)
      : p(config::resolve_rec_set(set)),
        rec(p, FFTW_ESTIMATE),
        facets(facet_tiles(p)),
        subgrids(subgrid_tiles(p)),
        roots(p.N),
        ws(p) {}

  index_t nf() const { return p.facets_per_axis; }

  // Prepared facets of a sky (facet f = j0 * nf + j1).
  std::vector<Array2D> prepare(const std::vector<sky::PointSource>& sky) {
    std::vector<Array2D> out;
    Array2D facet = rec.make_facet();
    for (index_t f = 0; f < nf() * nf(); ++f) {
      sky::fill_facet(sky, tile0(f), tile1(f), facet.view());
      out.push_back(rec.make_prepared_facet());
      rec.prepare_facet(facet.view(), out.back().view());
    }
    return out;
  }

  Array2D predict(const std::vector<Array2D>& prepared, const Tile& s0, const Tile& s1) {
    Array2D column = rec.make_column(), contribution = rec.make_contribution(),
            sum = rec.make_subgrid_sum(), subgrid = rec.make_subgrid();
    for (index_t f = 0; f < nf() * nf(); ++f) {
      rec.prepare_column(prepared[static_cast<size_t>(f)].view(), tile0(f).offset, s0.offset, ws,
                         column.view());
      rec.extract_contribution(column.view(), tile1(f).offset, s1.offset, contribution.view());
      rec.add_contribution(contribution.view(), tile0(f).offset, tile1(f).offset, sum.view());
    }
    rec.finish_subgrid(sum.view(), subgrid.view());
    return subgrid;
  }

  // Image direction from a function giving each (masked) subgrid.
  template <typename SubgridSource>
  std::vector<Array2D> image(SubgridSource source) {
    std::vector<Array2D> facet_sums, out;
    for (index_t f = 0; f < nf() * nf(); ++f) facet_sums.push_back(rec.make_prepared_facet());
    Array2D column_sum = rec.make_column(), contribution = rec.make_contribution(),
            sum = rec.make_subgrid_sum();
    for (const auto& s0 : subgrids) {
      std::vector<Array2D> sums;
      for (const auto& s1 : subgrids) {
        Array2D sub = source(s0, s1);
        sky::apply_subgrid_mask(s0, s1, sub.view());
        sums.push_back(rec.make_subgrid_sum());
        rec.prepare_subgrid(sub.view(), sums.back().view());
      }
      for (index_t f = 0; f < nf() * nf(); ++f) {
        for (size_t i = 0; i < subgrids.size(); ++i) {
          rec.extract_from_subgrid(sums[i].view(), tile0(f).offset, tile1(f).offset,
                                   contribution.view());
          rec.add_to_column(contribution.view(), tile1(f).offset, subgrids[i].offset,
                            column_sum.view());
        }
        rec.finish_column(column_sum.view(), tile0(f).offset, s0.offset, ws,
                          facet_sums[static_cast<size_t>(f)].view());
      }
    }
    for (index_t f = 0; f < nf() * nf(); ++f) {
      out.push_back(rec.make_facet());
      rec.finish_facet(facet_sums[static_cast<size_t>(f)].view(), out.back().view());
    }
    return out;
  }

  Array2D dft(const std::vector<sky::PointSource>& sky, const Tile& s0, const Tile& s1) {
    Array2D out = rec.make_subgrid();
    sky::dft_subgrid(sky, roots, s0.offset, s1.offset, out.view());
    return out;
  }

  const Tile& tile0(index_t f) const { return facets[static_cast<size_t>(f / nf())]; }
  const Tile& tile1(index_t f) const { return facets[static_cast<size_t>(f % nf())]; }

  config::RecombinationParams p;
  Recombination rec;
  std::vector<Tile> facets, subgrids;
  sky::UnitRoots roots;
  ColumnWorkspace ws;
};

double relative_error(CView2D computed, CView2D reference) {
  RelativeError e;
  e.add(computed, reference);
  return e.value();
}

// Sources on the facet borders and at the corners of the used region: where
// the window correction is largest.
std::vector<sky::PointSource> edge_sources(const config::RecombinationParams& p,
                                           const std::vector<Tile>& facets) {
  std::vector<sky::PointSource> sky;
  const index_t h = p.used_size / 2;
  sky.push_back({-h, -h});
  sky.push_back({h - 1, h - 1});
  sky.push_back({-h, h - 1});
  for (const auto& t : facets) {
    sky.push_back({t.offset + t.lo, t.offset + t.hi - 1});
    sky.push_back({t.offset + t.hi - 1, 0});
  }
  return sky;
}

class Swiftly : public ::testing::TestWithParam<const char*> {};

TEST_P(Swiftly, PredictMatchesDirectTransformForRandomAndEdgeSources) {
  Harness h(GetParam());
  for (std::uint64_t seed : {1u, 2u}) {
    std::vector<std::vector<sky::PointSource>> skies = {
        sky::random_sources(20, h.p.used_size, seed), edge_sources(h.p, h.facets)};
    for (const auto& sky : skies) {
      const auto prepared = h.prepare(sky);
      // Several offsets: centre, far edge, and an off-diagonal pair.
      const size_t n = h.subgrids.size();
      for (auto [i, j] :
           {std::pair<size_t, size_t>{0, 0}, {n / 2, n / 2}, {1, n - 1}, {n - 1, 2 % n}}) {
        const auto got = h.predict(prepared, h.subgrids[i], h.subgrids[j]);
        const auto want = h.dft(sky, h.subgrids[i], h.subgrids[j]);
        EXPECT_LT(relative_error(got.view(), want.view()), kTolerance)
            << GetParam() << " subgrid " << i << "," << j << " seed " << seed;
      }
    }
  }
}

TEST_P(Swiftly, ImageMatchesFacetPixels) {
  Harness h(GetParam());
  for (const auto& sky : {sky::random_sources(20, h.p.used_size, 3), edge_sources(h.p, h.facets)}) {
    const auto facets = h.image([&](const Tile& s0, const Tile& s1) { return h.dft(sky, s0, s1); });
    Array2D reference = h.rec.make_facet();
    RelativeError pooled;
    for (index_t f = 0; f < h.nf() * h.nf(); ++f) {
      sky::fill_facet(sky, h.tile0(f), h.tile1(f), reference.view());
      pooled.add(facets[static_cast<size_t>(f)].view(), reference.view());
    }
    EXPECT_LT(pooled.value(), kTolerance) << GetParam();
    EXPECT_GT(pooled.reference_sq, 0);
  }
}

TEST_P(Swiftly, ImageOfPredictReturnsTheFacets) {
  Harness h(GetParam());
  const auto sky = sky::random_sources(15, h.p.used_size, 4);
  const auto prepared = h.prepare(sky);
  const auto facets =
      h.image([&](const Tile& s0, const Tile& s1) { return h.predict(prepared, s0, s1); });
  Array2D reference = h.rec.make_facet();
  RelativeError pooled;
  for (index_t f = 0; f < h.nf() * h.nf(); ++f) {
    sky::fill_facet(sky, h.tile0(f), h.tile1(f), reference.view());
    pooled.add(facets[static_cast<size_t>(f)].view(), reference.view());
  }
  EXPECT_LT(pooled.value(), kTolerance);
}

TEST_P(Swiftly, PredictIsAdditive) {
  Harness h(GetParam());
  const auto a = sky::random_sources(7, h.p.used_size, 5);
  const auto b = sky::random_sources(9, h.p.used_size, 6);
  auto ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  const auto pa = h.prepare(a), pb = h.prepare(b), pab = h.prepare(ab);
  const auto& s0 = h.subgrids[1];
  const auto& s1 = h.subgrids.back();
  const auto ga = h.predict(pa, s0, s1), gb = h.predict(pb, s0, s1), gab = h.predict(pab, s0, s1);
  Array2D sum = h.rec.make_subgrid();
  for (index_t r = 0; r < sum.rows(); ++r)
    for (index_t c = 0; c < sum.cols(); ++c) sum(r, c) = ga(r, c) + gb(r, c);
  // Linear up to rounding: far tighter than the approximation error.
  EXPECT_LT(relative_error(sum.view(), gab.view()), 1e-13);
}

INSTANTIATE_TEST_SUITE_P(Sets, Swiftly, ::testing::Values("T05_", "768-576-128", "1k-256-128"));

TEST(SwiftlyWindowSweep, ErrorFollowsTheWindowWidth) {
  // A sweep of W with a bound for each (about 10x the error measured with
  // tools/window_calibration.py at yB/yN = 1/2): the error must fall with W
  // and stay under its bound, so a narrow window fails the tolerance.
  const std::pair<double, double> sweep[] = {
      {6, 1e-3}, {10, 1e-6}, {14, 1e-8}, {18, 5e-11}, {20, 5e-12}};
  double previous = 1;
  for (const auto& [W, bound] : sweep) {
    commands::Options o;
    o.rec_set = "T05_";
    o.window_width = W;
    o.direction = commands::Direction::predict;
    o.source_count = 20;
    o.check_all = true;
    const double error = commands::run(o).accuracy->subgrid_rmse_max;
    EXPECT_LT(error, bound) << "W=" << W;
    EXPECT_LT(error, previous / 4) << "W=" << W;
    previous = error;
  }
}

TEST(Recombine, WholeRunOnT05MeetsTheAccuracyTarget) {
  commands::Options o;
  o.rec_set = "T05_";
  o.source_count = 10;
  o.check_all = true;
  const auto r = commands::run(o);
  ASSERT_TRUE(r.accuracy);
  EXPECT_LE(r.accuracy->subgrid_rmse_max, 1e-10);
  EXPECT_LE(r.accuracy->facet_rmse_max, 1e-10);
  EXPECT_GT(r.accuracy->subgrid_rmse_max, 0);
  EXPECT_EQ(r.counts.subgrids_processed, r.rec.subgrid_count());
  EXPECT_EQ(r.counts.subgrids_checked, r.rec.subgrid_count());
  EXPECT_GT(r.counts.facets_checked, 0);
  EXPECT_GT(r.rates->predict_subgrids_per_s, 0);
  EXPECT_GT(r.rates->image_subgrids_per_s, 0);
}

TEST(Recombine, WalkVisitsTheSubgridsNearestTheCentre) {
  const auto p = config::resolve_rec_set("T05_");
  const auto walk = commands::plan_walk(p, 5);
  index_t n = 0;
  for (const auto& col : walk) {
    n += static_cast<index_t>(col.t1.size());
    for (const auto& t1 : col.t1)
      EXPECT_LE(col.t0.offset * col.t0.offset + t1.offset * t1.offset,
                2 * p.subgrid_step * p.subgrid_step);
  }
  EXPECT_EQ(n, 5);
  EXPECT_EQ(walk.size(), 3u);  // centre column plus one either side
}

TEST(Recombine, ASubgridFinishedForSomeColumnsHasThemExact) {
  // finish_subgrid_in with columns marked transforms axis 0 only for the
  // blocks holding them: marked columns must be what the whole transform
  // gives, and the pruning must have skipped some (or the test is empty).
  const auto p = config::resolve_rec_set("small");
  const Recombination rec(p);
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  Array2D sum = rec.make_subgrid_sum();
  for (index_t i = 0; i < sum.size(); ++i) sum.data()[i] = {normal(rng), normal(rng)};
  Array2D whole_in = rec.make_subgrid_sum(), pruned_in = rec.make_subgrid_sum();
  std::copy(sum.data(), sum.data() + sum.size(), whole_in.data());
  std::copy(sum.data(), sum.data() + sum.size(), pruned_in.data());
  std::vector<std::uint8_t> columns(static_cast<size_t>(p.xA), 0);
  for (const index_t b : {0L, 5L, 17L, 100L, 101L, p.xA / 2, p.xA - 1})
    columns[static_cast<size_t>(b)] = 1;
  Array2D whole = rec.make_subgrid(), pruned = rec.make_subgrid();
  rec.finish_subgrid_in(whole_in.view(), whole.view());
  rec.finish_subgrid_in(pruned_in.view(), pruned.view(), columns);
  double largest = 0;
  for (index_t i = 0; i < whole.size(); ++i) largest = std::max(largest, std::abs(whole.data()[i]));
  index_t differing = 0;
  for (index_t a = 0; a < p.xA; ++a)
    for (index_t b = 0; b < p.xA; ++b) {
      const double d = std::abs(whole(a, b) - pruned(a, b));
      if (columns[static_cast<size_t>(b)])
        ASSERT_LE(d, 1e-13 * largest) << "row " << a << ", column " << b;
      else if (d > 1e-6 * largest)
        ++differing;
    }
  EXPECT_GT(differing, p.xA * p.xA / 2);  // most columns were not transformed along axis 0
}

TEST(Recombine, OneDirectionsPlansGiveItsSubgridsAndRefuseTheOther) {
  // `iotest run` plans only its direction's transforms: the subgrid must be
  // the one a recombination of both directions gives, and the other
  // direction's steps must fail loudly rather than run an unmade plan.
  const auto p = config::resolve_rec_set("T05_");
  const Recombination both(p, FFTW_ESTIMATE), predict(p, FFTW_ESTIMATE, Direction::predict);
  const Recombination image(p, FFTW_ESTIMATE, Direction::image);
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  Array2D sum = both.make_subgrid_sum(), copy = both.make_subgrid_sum();
  for (index_t i = 0; i < sum.size(); ++i) sum.data()[i] = {normal(rng), normal(rng)};
  std::copy(sum.data(), sum.data() + sum.size(), copy.data());
  Array2D expected = both.make_subgrid(), got = both.make_subgrid();
  both.finish_subgrid(sum.view(), expected.view());
  predict.finish_subgrid(copy.view(), got.view());
  for (index_t i = 0; i < got.size(); ++i) ASSERT_EQ(got.data()[i], expected.data()[i]) << i;
  EXPECT_THROW(predict.prepare_subgrid(got.view(), sum.view()), std::logic_error);
  EXPECT_THROW(image.finish_subgrid(sum.view(), got.view()), std::logic_error);
  EXPECT_NO_THROW(image.prepare_subgrid(got.view(), sum.view()));
}

}  // namespace
}  // namespace iotest::swiftly
