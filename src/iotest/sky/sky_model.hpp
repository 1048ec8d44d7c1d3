// The test sky: unit point sources on pixel centres inside the used region
// of the image, the facets cut from it, and the direct Fourier transform that
// serves as the exact reference for subgrids.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::sky {

struct PointSource {
  index_t y0 = 0, y1 = 0;  // pixel position (axis 0, axis 1), centred on the image
};

// `count` distinct positions, uniform over [-used/2, used/2)^2, reproducible
// for a given seed on every platform.
std::vector<PointSource> random_sources(index_t count, index_t used_size, std::uint64_t seed);

// The facet with tiles (t0, t1): unit pixels for the sources it owns (its
// mask), zero elsewhere. `facet` is yB x yB in natural order.
void fill_facet(const std::vector<PointSource>& sources, const swiftly::Tile& t0,
                const swiftly::Tile& t1, MView2D facet);

// exp(2 pi i k / N) for k in [0, N): exact phases for integer positions.
class UnitRoots {
 public:
  explicit UnitRoots(index_t N);
  cplx operator()(index_t k) const {  // any integer k
    k %= N_;
    return table_[static_cast<size_t>(k < 0 ? k + N_ : k)];
  }
  index_t N() const { return N_; }

 private:
  index_t N_;
  std::vector<cplx> table_;
};

// Direct Fourier transform of the sources on the xA x xA cells around the
// subgrid offsets: (1/N^2) sum a_s exp(2 pi i (u0 y0 + u1 y1) / N), natural
// order, with amplitudes a_s = 1 or `amplitudes[s]` when given.
void dft_subgrid(const std::vector<PointSource>& sources, const UnitRoots& roots,
                 index_t subgrid_off0, index_t subgrid_off1, MView2D subgrid,
                 std::span<const cplx> amplitudes = {});

// The exact visibility of the sources at (u, v, w) wavelengths for an image
// of N pixels of `pixel_lm` (direction cosines), with the recombination's
// normalisation: (1/N^2) sum exp(2 pi i (u l + v m + w (n - 1))).
cplx direct_visibility(const std::vector<PointSource>& sources, double pixel_lm, index_t N,
                       double u, double v, double w);

// Zero every cell of `subgrid` (natural order, xA x xA) outside the tiles' masks.
void apply_subgrid_mask(const swiftly::Tile& t0, const swiftly::Tile& t1, MView2D subgrid);

}  // namespace iotest::sky
