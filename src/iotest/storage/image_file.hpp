// The dirty image as a file (`iotest grid --image=FILE.h5`): the facets'
// owned pixels assembled into the used image, written row by row (no
// process holds a second copy of the image), one HDF5 dataset that h5py
// and any HDF5 viewer read.
#pragma once

#include <string>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/storage/output_claim.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::storage {

// The image's unit, its attribute `units`: divided by the sum of the
// weights (degrid::dirty_image_scale), a source of S Jy reads S.
inline constexpr const char* kDirtyImageUnits = "Jy/beam";

struct ImageDescription {
  std::string rec_set;
  double pixel_lm = 0;       // pixel size in direction cosines
  index_t visibilities = 0;  // gridded, each of weight 1: the sum of the weights
};

// Before any work: the image's claim, of a run of its own (UsageError
// ("--image") unless a file can be created there, or if another run is
// writing it).
OutputClaim claim_image_path(const std::string& path);

// Writes `facets` (yB x yB each, facet f at tiles (f / nf, f % nf)) as the
// dataset /dirty_image, float64 [used, used, 2] (real, imaginary), axis 0
// the image's first axis from -used/2, with `what` as attributes. Written
// under the claim's partial name and published once complete.
void write_dirty_image(OutputClaim& claim, const std::vector<Array2D>& facets,
                       const std::vector<swiftly::Tile>& facet_tiles, index_t yB, index_t used_size,
                       const ImageDescription& what);

}  // namespace iotest::storage
