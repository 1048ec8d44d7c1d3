// Work binning puts every visibility into exactly one subgrid: the one whose
// tile holds its nearest grid cell.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

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
  const Binner binner(p, obs, g, {});
  index_t runs = 0;
  for (index_t b = 0; b < nb; ++b)
    binner.runs(b, 0, nt, [&](index_t subgrid, const VisRun& run) {
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
  // The counts agree with the runs, on any split of the baselines.
  auto counts = binner.count_visits(0, nb / 3, 2);
  const auto rest = binner.count_visits(nb / 3, nb, 1);
  for (size_t i = 0; i < counts.visibilities.size(); ++i) {
    counts.visibilities[i] += rest.visibilities[i];
    counts.pieces[i] += rest.pieces[i];
  }
  const auto d = summarise(counts);
  EXPECT_EQ(d.visibilities, obs.visibility_count());
  EXPECT_EQ(d.per_subgrid, per_subgrid);
  EXPECT_GT(d.subgrids_used, 1);
  EXPECT_LE(d.min, d.max);
}

// The visits' runs, made per visit from the tracks (bounded candidate
// pieces, then exact runs), hold every visibility exactly once, in storage
// order, and agree with the counts; parts of a visit split it at row chunks.
TEST_P(Binning, VisitRunsCoverTheObservationExactlyOnce) {
  const auto& c = GetParam();
  const auto p = config::resolve_rec_set(c.rec_set);
  const auto obs = telescope::make_observation({c.vis_set, c.time, c.freq, c.dec});
  const auto g = grid_geometry(p, obs);
  // w-stacking planes a few hundred wavelengths apart: visits on several stacks.
  const Binner binner(p, obs, g, {true, g.max_uv / 7});
  const auto counts = binner.count_visits(0, obs.baseline_count(), 2);
  EXPECT_GT(binner.stacks(), 1);
  const index_t nt = obs.time.steps, nf = obs.freq.steps;
  std::vector<int> seen(static_cast<size_t>(obs.visibility_count()), 0);
  std::vector<VisRun> runs;
  index_t visits = 0;
  for (index_t s = binner.first_stack(); s < binner.first_stack() + binner.stacks(); ++s)
    for (index_t sg = 0; sg < p.subgrid_count(); ++sg) {
      const index_t expected = counts.visibilities[static_cast<size_t>(counts.at(s, sg))];
      const index_t parts = expected > 0 ? 1 + ((s + sg) % 3 + 3) % 3 : 1;
      index_t total = 0, row_chunk_before = -1;
      for (index_t part = 0; part < parts; ++part) {
        const VisitRuns visit(binner, s, sg, part, parts);
        total += visit.visibilities();
        if (!visit.pieces().empty()) {
          // Parts follow each other in storage order, never sharing a row chunk.
          EXPECT_GT(visit.row_chunk(0), row_chunk_before);
          row_chunk_before = visit.row_chunk(visit.pieces().size() - 1);
        }
        for (const auto& [first, last] : visit.tasks(2, 1000)) {
          visit.runs(first, last, runs);
          index_t key_before = -1;
          for (const auto& run : runs) {
            EXPECT_EQ(run.w_stack, s);
            const index_t key = (index_t{run.baseline} * nt + run.time) * nf + run.chan_begin;
            EXPECT_GT(key, key_before);  // storage order
            key_before = key;
            for (index_t k = run.chan_begin; k < run.chan_end; ++k)
              ++seen[static_cast<size_t>((index_t{run.baseline} * nt + run.time) * nf + k)];
          }
        }
      }
      EXPECT_EQ(total, expected) << "stack " << s << " subgrid " << sg;
      visits += expected > 0;
    }
  for (int n : seen) ASSERT_EQ(n, 1);
  EXPECT_GT(visits, 2);
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

// The imaging direction's split leaves the autocorrelations out (as
// WSClean and CASA do): no run, count or visit of theirs, and every other
// row's runs exactly as predict's, so the image's sum of the weights is
// the rows left.
TEST(Binning, AutocorrelationsLeftOutMakeNoRunsAndTheRestAsBefore) {
  const auto p = config::resolve_rec_set("1k-512-128");
  const auto obs =
      telescope::make_observation({"lowbd2-core", "-460:460/6/3", "260e6:300e6/50/32", -30});
  ASSERT_TRUE(obs.autocorrelations);
  const auto g = grid_geometry(p, obs);
  const Binner all(p, obs, g, {true, g.max_uv / 7});
  const Binner imaged(p, obs, g, {true, g.max_uv / 7, false});
  const auto baselines = obs.baselines();
  const index_t nb = obs.baseline_count(), nt = obs.time.steps;
  const index_t autos = obs.antenna_count() * nt * obs.freq.steps;
  EXPECT_EQ(all.visibility_count(), obs.visibility_count());
  EXPECT_EQ(imaged.visibility_count(), obs.visibility_count() - autos);
  const auto key = [](const VisRun& r) {
    return std::tuple{r.baseline, r.time, r.chan_begin, r.chan_end, r.w_stack};
  };
  for (index_t b = 0; b < nb; ++b) {
    const bool auto_row = baselines[static_cast<size_t>(b)].first ==
                          baselines[static_cast<size_t>(b)].second;
    EXPECT_EQ(imaged.leaves_out(b), auto_row);
    EXPECT_FALSE(all.leaves_out(b));
    std::vector<std::tuple<int, int, int, int, int>> want, got;
    all.runs(b, 0, nt, [&](index_t, const VisRun& r) { want.push_back(key(r)); });
    imaged.runs(b, 0, nt, [&](index_t, const VisRun& r) { got.push_back(key(r)); });
    EXPECT_EQ(got, auto_row ? decltype(want){} : want) << "baseline " << b;
  }
  // The counts and the visits' runs agree with the rule.
  const auto counts = imaged.count_visits(0, nb, 2);
  EXPECT_EQ(summarise(counts).visibilities, imaged.visibility_count());
  index_t visited = 0;
  std::vector<VisRun> runs;
  for (index_t s = imaged.first_stack(); s < imaged.first_stack() + imaged.stacks(); ++s)
    for (index_t sg = 0; sg < p.subgrid_count(); ++sg) {
      const VisitRuns visit(imaged, s, sg);
      EXPECT_EQ(visit.visibilities(), counts.visibilities[static_cast<size_t>(counts.at(s, sg))]);
      for (const auto& [first, last] : visit.tasks(4, 1000)) {
        visit.runs(first, last, runs);
        for (const auto& r : runs) {
          const auto [a1, a2] = baselines[static_cast<size_t>(r.baseline)];
          EXPECT_NE(a1, a2);
          visited += r.count();
        }
      }
    }
  EXPECT_EQ(visited, imaged.visibility_count());
}

}  // namespace
}  // namespace iotest::binning
