// The dirty image as a file (`iotest grid --image=FILE`): the facets'
// owned pixels assembled into the used image, written row by row (no
// process holds a second copy of the image). FILE.fits (or .fit, .fts) is
// FITS with a celestial WCS, as WSClean writes its images and DS9, CARTA
// and astropy show them; any other name one HDF5 dataset that h5py and
// any HDF5 viewer read.
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
  // For the FITS WCS: the phase centre, the band's centre and width, the
  // telescope (vis-set) and the observation's start (ISO 8601, UTC, and
  // as a modified Julian date).
  double ra_deg = 0, dec_deg = 0, freq_hz = 0, bandwidth_hz = 0;
  std::string telescope, date_obs;
  double mjd_obs = 0;
};
// Whether `path` names a FITS file (.fits, .fit, .fts).
bool is_fits_path(const std::string& path);

// Before any work: the image's claim, of a run of its own (UsageError
// ("--image") unless a file can be created there, or if another run is
// writing it).
OutputClaim claim_image_path(const std::string& path);

// Writes `facets` (yB x yB each, facet f at tiles (f / nf, f % nf)) to the
// claim's path, under its partial name, published once complete. HDF5:
// the dataset /dirty_image, float64 [used, used, 2] (real, imaginary),
// axis 0 the image's first axis (l) from -used/2, with `what` as
// attributes. FITS: the real part, east left and north up (image_file.cpp).
void write_dirty_image(OutputClaim& claim, const std::vector<Array2D>& facets,
                       const std::vector<swiftly::Tile>& facet_tiles, index_t yB, index_t used_size,
                       const ImageDescription& what);

}  // namespace iotest::storage
