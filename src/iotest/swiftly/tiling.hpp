// Covering: facet and subgrid offsets on regular steps, with 0/1 masks whose
// borders lie midway between neighbours, so facets tile the used image and
// subgrids tile the (periodic) grid exactly once. Per axis; 2-D takes the
// product of two axes.
#pragma once

#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/config/rec_set.hpp"

namespace iotest::swiftly {

// One tile of an axis: its centre and the half-open range [lo, hi) it owns,
// relative to the centre.
struct Tile {
  index_t offset = 0;
  index_t lo = 0;
  index_t hi = 0;
};

// Facets along one axis: centres (j - (nf-1)/2) * step, owning the used
// region [-f*N/2, f*N/2) between them.
std::vector<Tile> facet_tiles(const config::RecombinationParams& p);

// Subgrids along one axis: centres i * step for i in [0, count), wrapping
// around the periodic grid of size N.
std::vector<Tile> subgrid_tiles(const config::RecombinationParams& p);

// Where image pixel (y0, y1) (centred) lies: its facet (-1: in none) and
// the pixel (a, b) in that facet's yB x yB array.
struct FacetPixel {
  index_t facet = -1, a = 0, b = 0;
};
FacetPixel locate_pixel(const std::vector<Tile>& facet_tiles, index_t yB, index_t y0, index_t y1);

// Offset in [-N/2, N/2) equal to `offset` modulo N (grid positions are periodic).
inline index_t wrap_centred(index_t offset, index_t N) {
  index_t r = ((offset % N) + N) % N;
  return r >= N / 2 ? r - N : r;
}

}  // namespace iotest::swiftly
