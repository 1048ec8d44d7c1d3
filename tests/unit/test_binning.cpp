// Work binning puts every visibility into exactly one subgrid: the one whose
// tile holds its nearest grid cell.
#include <gtest/gtest.h>

#include "iotest/binning/binning.hpp"
#include "iotest/common/errors.hpp"

namespace iotest::binning {
namespace {

struct Case {
  const char* rec_set;
  const char* vis_set;
  const char* time;
  const char* freq;
  double dec;
};

class Binning : public ::testing::TestWithParam<Case> {};

TEST_P(Binning, EveryVisibilityLandsInExactlyOneSubgridAndChunk) {
  const auto& c = GetParam();
  const auto p = config::resolve_rec_set(c.rec_set);
  const auto obs = telescope::make_observation({c.vis_set, c.time, c.freq, c.dec});
  const auto g = grid_geometry(p, obs);
  const SubgridLocator locate(p);
  const index_t nb = obs.baseline_count(), nt = obs.time.steps, nf = obs.freq.steps;
  std::vector<int> seen(static_cast<size_t>(nb * nt * nf), 0);
  std::vector<index_t> per_subgrid(static_cast<size_t>(p.subgrid_count()), 0);
  const auto baselines = obs.baselines();
  std::vector<std::vector<telescope::Uvw>> uvw;
  for (index_t t = 0; t < nt; ++t) uvw.push_back(obs.antenna_uvw(t));
  index_t runs = 0;
  for_each_run(p, obs, g, 0, nt, [&](index_t subgrid, const VisRun& run) {
    ++runs;
    ASSERT_LT(run.chan_begin, run.chan_end);
    // A run stays inside one frequency chunk.
    EXPECT_EQ(run.chan_begin / obs.freq.chunk, (run.chan_end - 1) / obs.freq.chunk);
    const auto [a1, a2] = baselines[static_cast<size_t>(run.baseline)];
    const auto& p1 = uvw[static_cast<size_t>(run.time)][static_cast<size_t>(a1)];
    const auto& p2 = uvw[static_cast<size_t>(run.time)][static_cast<size_t>(a2)];
    for (index_t k = run.chan_begin; k < run.chan_end; ++k) {
      ++seen[static_cast<size_t>((run.baseline * nt + run.time) * nf + k)];
      // Recompute the cell directly from the frequency.
      const double scale = obs.freq.at(k) / telescope::kSpeedOfLight / g.cell_uv;
      const index_t cu = nearest_cell((p2.u - p1.u) * scale),
                    cv = nearest_cell((p2.v - p1.v) * scale);
      EXPECT_EQ(locate.tile_of(cu) * locate.per_axis() + locate.tile_of(cv), subgrid);
    }
    per_subgrid[static_cast<size_t>(subgrid)] += run.count();
  });
  for (int n : seen) ASSERT_EQ(n, 1);
  EXPECT_GE(runs, nb * nt * obs.freq.chunks());
  // The distribution agrees with the runs.
  const auto d = distribution(p, obs, g);
  EXPECT_EQ(d.visibilities, obs.visibility_count());
  EXPECT_EQ(d.per_subgrid, per_subgrid);
  EXPECT_GT(d.subgrids_used, 1);
  EXPECT_LE(d.min, d.max);
}

INSTANTIATE_TEST_SUITE_P(
    Sets, Binning,
    ::testing::Values(Case{"T05_", "vlaa", "-3600:3600/24/8", "260e6:300e6/40/16", 10},
                      Case{"1k-512-128", "lowbd2-core", "-460:460/6/3", "260e6:300e6/50/32", -30},
                      Case{"T05_", "midr5", "-290:290/4/4", "0.35e9:0.4725e9/64/64", -60}));

TEST(Binning, FieldBeyondTheHorizonIsRejected) {
  // The core's short baselines need few pixels: an 8k image would reach
  // past the horizon.
  const auto core = telescope::make_observation({"lowbd2-core", {}, {}, {}});
  EXPECT_THROW(grid_geometry(config::resolve_rec_set("8k-8k-256"), core), UsageError);
  EXPECT_NO_THROW(grid_geometry(config::resolve_rec_set("T05_"), core));
  // huge with lowbd2 is wide (DESIGN.md: ~40 % of the sky) but possible.
  const auto g = grid_geometry(config::resolve_rec_set("huge"),
                               telescope::make_observation({"lowbd2", {}, {}, {}}));
  EXPECT_GT(g.field_lm, 1.0);
}

TEST(Binning, GridCoversTheLongestBaseline) {
  const auto p = config::resolve_rec_set("small");
  const auto obs = telescope::make_observation({"vlaa", {}, {}, {}});
  const auto g = grid_geometry(p, obs);
  EXPECT_NEAR(g.cell_uv * static_cast<double>(p.N) / 2, g.max_uv, 1e-6 * g.max_uv);
  EXPECT_NEAR(g.pixel_lm * g.cell_uv * static_cast<double>(p.N), 1.0, 1e-12);
}

}  // namespace
}  // namespace iotest::binning
