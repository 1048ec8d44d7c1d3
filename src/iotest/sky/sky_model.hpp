// The test sky: point sources of 1 Jy on pixel centres inside the used
// region of the image, the facets cut from it, and the direct Fourier
// transforms that serve as the exact references: for subgrids in the
// recombination's own scale (dft_subgrid), for visibilities in Jy
// (direct_visibility).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::sky {

// Every source's flux density, in Jy: a visibility of one source has this
// amplitude, and its pixel of the dirty image reads this in Jy/beam.
inline constexpr double kSourceFluxJy = 1.0;

struct PointSource {
  index_t y0 = 0, y1 = 0;  // pixel position (axis 0, axis 1), centred on the image
};

// `count` distinct positions, uniform over [-used/2, used/2)^2, reproducible
// for a given seed on every platform.
std::vector<PointSource> random_sources(index_t count, index_t used_size, std::uint64_t seed);

// The facet with tiles (t0, t1): kSourceFluxJy at the sources it owns (its
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
// order, with amplitudes a_s = kSourceFluxJy or `amplitudes[s]` when given.
// The 1/N^2 is the recombination's (SwiFTly's DFT): what a facet pixel of
// value a_s gives a subgrid. The degridder's facet correction carries N^2
// (Degridder::facet_correction), so its amplitudes make subgrids in Jy.
void dft_subgrid(const std::vector<PointSource>& sources, const UnitRoots& roots,
                 index_t subgrid_off0, index_t subgrid_off1, MView2D subgrid,
                 std::span<const cplx> amplitudes = {});

// The exact visibility of the sources at (u, v, w) wavelengths for pixels
// of `pixel_lm` (direction cosines), in Jy:
// sum kSourceFluxJy exp(2 pi i (u l + v m + w (n - 1))).
cplx direct_visibility(const std::vector<PointSource>& sources, double pixel_lm, double u, double v,
                       double w);

// Zero every cell of `subgrid` (natural order, xA x xA) outside the tiles' masks.
void apply_subgrid_mask(const swiftly::Tile& t0, const swiftly::Tile& t1, MView2D subgrid);

}  // namespace iotest::sky
