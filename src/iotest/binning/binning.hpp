// Work binning: which visibilities each subgrid degrids. The grid is laid
// over the uv plane (cell size from the image's pixel size), every
// visibility belongs to the subgrid whose tile holds its nearest grid cell,
// so each visibility is degridded from exactly one subgrid, and subgrids
// that hold none are skipped.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "iotest/config/rec_set.hpp"
#include "iotest/swiftly/tiling.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::binning {

// How the image and grid sit on the sky and the uv plane.
struct GridGeometry {
  double max_uv = 0;    // bound on |(u, v)| in wavelengths: longest baseline at the top frequency
  double pixel_lm = 0;  // image pixel in direction cosines: 1 / (2 max_uv), Nyquist
  double cell_uv = 0;   // grid cell in wavelengths: 1 / (N pixel_lm)
  double field_lm = 0;  // the used field f N pixel_lm
};
// Throws UsageError("--vis-set") when the used field would reach past the
// horizon (l^2 + m^2 >= 1 at its corners).
GridGeometry grid_geometry(const config::RecombinationParams& p, const telescope::Observation& obs);

// A run of consecutive channels of one baseline at one time step that falls
// into one subgrid and one frequency chunk: the unit the degridder works on.
struct VisRun {
  std::int32_t baseline = 0;
  std::int32_t time = 0;
  std::int32_t chan_begin = 0, chan_end = 0;  // [begin, end)
  std::int32_t w_stack = 0;                   // w-stacking plane: nearest w / stack step
  index_t count() const { return chan_end - chan_begin; }
};

// Subgrid index i0 * subgrids_per_axis + i1 of tiles (i0, i1).
class SubgridLocator {
 public:
  explicit SubgridLocator(const config::RecombinationParams& p);
  // Tile owning grid cell c (any integer, periodic).
  index_t tile_of(index_t cell) const { return owner_[static_cast<size_t>(wrap(cell))]; }
  index_t per_axis() const { return static_cast<index_t>(tiles_.size()); }
  // First and one-past-last cell of `tile` in the unwrapped neighbourhood of `cell`.
  std::pair<index_t, index_t> tile_span(index_t tile, index_t cell) const;

 private:
  index_t wrap(index_t c) const { return ((c % N_) + N_) % N_; }
  index_t N_;
  std::vector<swiftly::Tile> tiles_;
  std::vector<std::int32_t> owner_;
};

// Grid cell of a position in cells (round half up; one rule for binning
// and degridding alike).
inline index_t nearest_cell(double position) {
  return static_cast<index_t>(std::floor(position + 0.5));
}

// How runs are cut.
struct RunSplit {
  bool chunks = true;       // at frequency chunk borders (false: for counting only)
  double w_stack_step = 0;  // at w-stacking plane borders, planes this far apart (0: none)
};

// Calls visit(subgrid, run) for every run of time steps [t_begin, t_end),
// in order, from the calling thread. Runs never straddle a subgrid tile, nor
// what `split` asks for.
void for_each_run(const config::RecombinationParams& p, const telescope::Observation& obs,
                  const GridGeometry& g, index_t t_begin, index_t t_end,
                  const std::function<void(index_t, const VisRun&)>& visit,
                  const RunSplit& split = {});

// Visibilities per subgrid over the whole observation.
struct Distribution {
  index_t subgrids_used = 0;
  index_t visibilities = 0;
  index_t min = 0, max = 0;  // over used subgrids
  double mean = 0;
  std::vector<index_t> per_subgrid;  // index i0 * per_axis + i1
};
Distribution distribution(const config::RecombinationParams& p, const telescope::Observation& obs,
                          const GridGeometry& g);
// The figures of a distribution from its counts per subgrid.
Distribution summarise(std::vector<index_t> per_subgrid);

}  // namespace iotest::binning
