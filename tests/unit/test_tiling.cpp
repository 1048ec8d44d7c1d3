// Facets tile the used image and subgrids tile the grid exactly once.
#include <gtest/gtest.h>

#include "iotest/swiftly/tiling.hpp"

namespace iotest::swiftly {
namespace {

class Tiling : public ::testing::TestWithParam<const char*> {};

TEST_P(Tiling, FacetsCoverTheUsedImageExactlyOnce) {
  const auto p = config::resolve_rec_set(GetParam());
  const auto tiles = facet_tiles(p);
  ASSERT_EQ(static_cast<index_t>(tiles.size()), p.facets_per_axis);
  std::vector<int> covered(static_cast<size_t>(p.used_size), 0);
  for (const auto& t : tiles) {
    EXPECT_EQ(t.offset % p.facet_granularity, 0);
    EXPECT_GE(t.lo, -p.yB / 2);
    EXPECT_LE(t.hi, p.yB / 2);
    EXPECT_LT(t.lo, t.hi);
    for (index_t y = t.offset + t.lo; y < t.offset + t.hi; ++y) {
      ASSERT_GE(y, -p.used_size / 2);
      ASSERT_LT(y, p.used_size / 2);
      ++covered[static_cast<size_t>(y + p.used_size / 2)];
    }
  }
  for (int c : covered) ASSERT_EQ(c, 1);
}

TEST_P(Tiling, EveryUsedPixelLiesInTheFacetThatOwnsIt) {
  const auto p = config::resolve_rec_set(GetParam());
  const auto tiles = facet_tiles(p);
  const index_t nf = p.facets_per_axis, half = p.used_size / 2;
  for (index_t y0 = -half; y0 < half; y0 += std::max<index_t>(1, p.used_size / 97))
    for (index_t y1 = -half; y1 < half; y1 += std::max<index_t>(1, p.used_size / 89)) {
      const auto at = locate_pixel(tiles, p.yB, y0, y1);
      ASSERT_GE(at.facet, 0);
      const auto& t0 = tiles[static_cast<size_t>(at.facet / nf)];
      const auto& t1 = tiles[static_cast<size_t>(at.facet % nf)];
      // The pixel's place in the facet array maps back to the image pixel.
      ASSERT_EQ(at.a - p.yB / 2 + t0.offset, y0);
      ASSERT_EQ(at.b - p.yB / 2 + t1.offset, y1);
      ASSERT_GE(at.a - p.yB / 2, t0.lo);
      ASSERT_LT(at.b - p.yB / 2, t1.hi);
    }
  // Outside the used image: no facet.
  EXPECT_EQ(locate_pixel(tiles, p.yB, half + 1, 0).facet, -1);
}

TEST_P(Tiling, SubgridsCoverTheGridExactlyOnce) {
  const auto p = config::resolve_rec_set(GetParam());
  const auto tiles = subgrid_tiles(p);
  ASSERT_EQ(static_cast<index_t>(tiles.size()), p.subgrids_per_axis);
  std::vector<int> covered(static_cast<size_t>(p.N), 0);
  for (const auto& t : tiles) {
    EXPECT_EQ(t.offset % p.subgrid_granularity, 0);
    EXPECT_GE(t.lo, -p.xA / 2);
    EXPECT_LE(t.hi, p.xA / 2);
    for (index_t u = t.offset + t.lo; u < t.offset + t.hi; ++u)
      ++covered[static_cast<size_t>(((u % p.N) + p.N) % p.N)];
  }
  for (int c : covered) ASSERT_EQ(c, 1);
}

INSTANTIATE_TEST_SUITE_P(Sets, Tiling,
                         ::testing::Values("T05_", "8k-8k-256", "16k-12k-256", "small", "8k-192-2k",
                                           "12k-384-1536", "768-576-128", "256k-32k-2k"));

TEST(Tiling, WrapCentred) {
  EXPECT_EQ(wrap_centred(0, 8), 0);
  EXPECT_EQ(wrap_centred(4, 8), -4);
  EXPECT_EQ(wrap_centred(11, 8), 3);
  EXPECT_EQ(wrap_centred(-5, 8), 3);
}

}  // namespace
}  // namespace iotest::swiftly
