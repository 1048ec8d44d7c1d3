#include "iotest/swiftly/tiling.hpp"

namespace iotest::swiftly {

std::vector<Tile> facet_tiles(const config::RecombinationParams& p) {
  const index_t nf = p.facets_per_axis, t = p.facet_step, half_used = p.used_size / 2;
  std::vector<Tile> tiles(static_cast<size_t>(nf));
  for (index_t j = 0; j < nf; ++j) {
    auto& tile = tiles[static_cast<size_t>(j)];
    tile.offset = (2 * j - (nf - 1)) * t / 2;
    // Borders midway between neighbouring centres; the outer ones at the edge
    // of the used region.
    tile.lo = j == 0 ? -half_used - tile.offset : -t / 2;
    tile.hi = j == nf - 1 ? half_used - tile.offset : t / 2;
  }
  return tiles;
}

std::vector<Tile> subgrid_tiles(const config::RecombinationParams& p) {
  const index_t ns = p.subgrids_per_axis, s = p.subgrid_step;
  std::vector<Tile> tiles(static_cast<size_t>(ns));
  for (index_t i = 0; i < ns; ++i) {
    // Gaps to the neighbours; the last gap closes the circle (<= step).
    const index_t gap_next = i + 1 < ns ? s : p.N - (ns - 1) * s;
    const index_t gap_prev = i > 0 ? s : p.N - (ns - 1) * s;
    auto& tile = tiles[static_cast<size_t>(i)];
    tile.offset = wrap_centred(i * s, p.N);
    tile.lo = -(gap_prev - gap_prev / 2);
    tile.hi = gap_next / 2;
  }
  return tiles;
}

FacetPixel locate_pixel(const std::vector<Tile>& tiles, index_t yB, index_t y0, index_t y1) {
  const auto axis = [&](index_t y, index_t& j, index_t& at) {
    for (j = 0; j < static_cast<index_t>(tiles.size()); ++j) {
      const auto& t = tiles[static_cast<size_t>(j)];
      if (y - t.offset >= t.lo && y - t.offset < t.hi) {
        at = y - t.offset + yB / 2;
        return true;
      }
    }
    return false;
  };
  FacetPixel fp;
  index_t j0 = 0, j1 = 0;
  if (axis(y0, j0, fp.a) && axis(y1, j1, fp.b))
    fp.facet = j0 * static_cast<index_t>(tiles.size()) + j1;
  return fp;
}

}  // namespace iotest::swiftly
