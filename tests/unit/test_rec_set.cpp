// Recombination sets: every published set resolves with its published facet
// count and satisfies the constraints of DESIGN.md section 7.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "iotest/common/errors.hpp"
#include "iotest/config/rec_set.hpp"

namespace iotest::config {
namespace {

struct Published {
  std::string name;
  index_t facets;
};

std::vector<Published> published_sets() {
  std::ifstream csv(std::string(IOTEST_TEST_DATA) + "/rec-sets.csv");
  std::vector<Published> sets;
  std::string line;
  std::getline(csv, line);  // header
  while (std::getline(csv, line)) {
    const auto comma = line.find(',');
    sets.push_back({line.substr(0, comma), std::stoll(line.substr(comma + 1))});
  }
  return sets;
}

void expect_constraints(const RecombinationParams& p) {
  SCOPED_TRACE(p.canonical);
  EXPECT_EQ(p.N % p.xM, 0);
  EXPECT_EQ(p.m * p.N, p.xM * p.yN);
  EXPECT_EQ(p.m % 2, 0);
  EXPECT_EQ(p.xA % 2, 0);
  EXPECT_LE(static_cast<double>(p.xA), static_cast<double>(p.xM) - p.W * p.N / p.yN);
  EXPECT_LT(p.yB, p.yN);
  // The facet count formula ceil(f N / yB) per axis.
  EXPECT_EQ(static_cast<index_t>(std::ceil(p.f * p.N / p.yB)), p.facets_per_axis);
  EXPECT_EQ(p.used_size, p.N * 3 / 4);
  // Steps on the position grids, covering what they must.
  EXPECT_EQ(p.subgrid_step % p.subgrid_granularity, 0);
  EXPECT_LE(p.subgrid_step, p.xA);
  EXPECT_GE(p.subgrid_step * p.subgrids_per_axis, p.N);
  EXPECT_LT(p.subgrid_step * (p.subgrids_per_axis - 1), p.N);
  EXPECT_EQ(p.facet_step % p.facet_granularity, 0);
  EXPECT_GE(p.facet_step * p.facets_per_axis, p.used_size);
  EXPECT_EQ((p.subgrid_step * p.yN) % p.N, 0) << "subgrid offsets must be integral at yN";
  EXPECT_EQ((p.facet_granularity * p.xM) % p.N, 0) << "facet offsets must be integral at xM";
}

TEST(RecSet, EveryPublishedSetHasItsPublishedFacetCount) {
  const auto sets = published_sets();
  ASSERT_EQ(sets.size(), 420u);
  for (const auto& s : sets) {
    const auto p = resolve_rec_set(s.name);
    EXPECT_EQ(p.facet_count(), s.facets) << s.name;
    EXPECT_EQ(p.canonical, s.name);
    expect_constraints(p);
  }
}

TEST(RecSet, EveryPublishedSetIsAccurate) {
  // Facet fill at most 1/2 and the window at the calibrated floor width.
  for (const auto& s : published_sets()) {
    const auto p = resolve_rec_set(s.name);
    EXPECT_LE(static_cast<double>(p.yB) / p.yN, 0.5 + 1e-12) << s.name;
    EXPECT_GE(p.W, 18.0) << s.name;
  }
}

TEST(RecSet, AliasesResolveToTheirSets) {
  const std::pair<const char*, index_t> expected[] = {
      {"tiny", 64},
      {"small", 9},
      {"smallish", 36},
      {"medium", 36},
      {"large", 256},
      {"huge", 144},
      // 128k-32k-2k is outside the published families: the default rule.
      {"tremendous", 36}};
  for (const auto& [name, facets] : expected) {
    const auto p = resolve_rec_set(name);
    EXPECT_EQ(p.facet_count(), facets) << name;
    EXPECT_EQ(p.name, name);
    expect_constraints(p);
  }
  EXPECT_EQ(resolve_rec_set("small").canonical, "16k-8k-512");
  EXPECT_EQ(resolve_rec_set("huge").canonical, "256k-32k-2k");
}

TEST(RecSet, TestSetIsSmall) {
  const auto p = resolve_rec_set("T05_");
  expect_constraints(p);
  EXPECT_EQ(p.N, 512);
  EXPECT_EQ(p.facet_count(), 9);
  EXPECT_GE(p.xA, 24);
  EXPECT_LE(p.xA, 96);
}

TEST(RecSet, ReferenceSetMatchesTheModernImplementationsSubgridCount) {
  // 8k-8k-256: the C++ reference used xA = 236 and 35 x 35 subgrids.
  const auto p = resolve_rec_set("8k-8k-256");
  EXPECT_EQ(p.facet_count(), 4);
  EXPECT_EQ(p.subgrid_count(), 1225);
}

TEST(RecSet, RejectsBadNamesWithTheOptionNamed) {
  const char* bad[] = {"",           "foo",         "16k-8k",   "16k-8k-512-1", "16x-8k-512",
                       "16k-8k-300", "8k-5000-256", "0-8k-512", "16k-32k-512",  "8k--256",
                       "-8k-256",    "16k-8k-512k", "T05",      "12-8-4"};
  for (const char* name : bad) {
    try {
      resolve_rec_set(name);
      ADD_FAILURE() << "accepted '" << name << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--rec-set") << name;
      EXPECT_EQ(std::string(e.one_line()).find('\n'), std::string::npos);
    }
  }
}

TEST(RecSet, UnpublishedFamiliesGetHalfFilledFacets) {
  EXPECT_FALSE(published_facets_per_axis(8192, 4096, 128));
  const auto p = resolve_rec_set("8k-4k-128");
  expect_constraints(p);
  EXPECT_EQ(p.facets_per_axis, 3);
  EXPECT_EQ(published_facets_per_axis(16384, 8192, 512), 3);
}

TEST(RecSet, ParsesAndFormatsSizes) {
  EXPECT_EQ(parse_size("16k"), 16384);
  EXPECT_EQ(parse_size("7680"), 7680);
  EXPECT_FALSE(parse_size("k"));
  EXPECT_FALSE(parse_size("1.5k"));
  EXPECT_FALSE(parse_size("-4"));
  EXPECT_EQ(format_size(16384), "16k");
  EXPECT_EQ(format_size(7680), "7680");
}

TEST(RecSet, WindowWidthFollowsTheCalibration) {
  EXPECT_DOUBLE_EQ(window_width_for(0.5), 20.0);
  EXPECT_DOUBLE_EQ(window_width_for(0.375), 18.5);
  EXPECT_DOUBLE_EQ(window_width_for(1.0 / 3), 18.0);
}

}  // namespace
}  // namespace iotest::config
