// The dirty image as a file (`iotest grid --image=FILE`, `iotest run
// --direction=image|both --image=FILE`), written one facet at a time by
// one writer (ImageWriter): nothing holds the whole image. FILE.fits (or
// .fit, .fts) is FITS with a celestial WCS, as WSClean writes its images
// and DS9, CARTA and astropy show them; any other name one HDF5 dataset
// that h5py and any HDF5 viewer read. Both lay the pixels out alike, row
// y (from 0, south to north) holding m = y - used/2 pixels north and
// column x (east to west) l = used/2 - x pixels east: the FITS pixel
// array [y][x], the HDF5 dataset [y][x][real, imaginary].
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/storage/output/file_claim.hpp"
#include "iotest/storage/storage_progress.hpp"
#include "iotest/swiftly/tiling.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::image {

using storage::StorageStep;
using storage::WatchedFile;

// The image's unit, its attribute `units`: divided by the sum of the
// weights (degrid::dirty_image_scale), a source of S Jy reads S.
inline constexpr const char* kDirtyImageUnits = "Jy/beam";

// The HDF5 dataset's attribute `layout`, which says how its axes run.
inline constexpr const char* kDirtyImageLayout =
    "[y][x][real, imaginary] as the FITS image's pixel array: row y holds m = y - used/2 "
    "pixels north, column x holds l = used/2 - x pixels east (east left, north up); the "
    "phase centre is [used/2][used/2]";

struct ImageDescription {
  std::string rec_set;
  index_t used_size = 0;     // pixels on each axis
  double pixel_lm = 0;       // pixel size in direction cosines
  index_t visibilities = 0;  // gridded, each of weight 1: the sum of the weights
  // For the FITS WCS: the phase centre (ICRS), the band's centre and
  // width, the telescope (vis-set) and the observation's start (ISO 8601,
  // UTC, and as a modified Julian date).
  double ra_deg = 0, dec_deg = 0, freq_hz = 0, bandwidth_hz = 0;
  // The angle iotest's (u, v) are turned by from the apparent frame's north
  // to ICRS north (pyuvdata's frame_pa, telescope::icrs_frame_pa_rad), in
  // degrees: card IOTFRMPA. With it applied the image's north is ICRS
  // north, as the WCS (no rotation, as WSClean's) takes it.
  double frame_pa_deg = 0;
  std::string telescope, date_obs;
  double mjd_obs = 0;
};
// The image of `obs` on a grid of `pixel_lm`, `gridded` of its
// visibilities gridded: the binning's (binning::Binner::visibility_count),
// which leaves the autocorrelations out unless asked.
ImageDescription describe_image(const std::string& rec_set, index_t used_size, double pixel_lm,
                                const telescope::Observation& obs, index_t gridded);

// Whether `path` names a FITS file (.fits, .fit, .fts).
bool is_fits_path(const std::string& path);

// Before any work: the image's claim (UsageError("--image") unless a file
// can be created there, or if another run is writing it). `nonce`: the
// run's, naming its partial file (none: a run of its own).
storage::FileClaim claim_image_path(const std::string& path);
storage::FileClaim claim_image_path(const std::string& path, std::uint32_t nonce);

// Where one facet's owned pixels lie in the image's pixel array (rows y,
// columns x as above). A facet owns l in [t0.offset + t0.lo, t0.offset +
// t0.hi) and m likewise on t1; l = -used/2 has no column, and column
// x = 0 (l = used/2) no facet: it is NaN, undefined.
struct ImageRegion {
  index_t row = 0, rows = 0, column = 0, columns = 0;
  index_t centre = 0;  // used / 2: the phase centre's row and column
};
ImageRegion facet_region(const swiftly::Tile& t0, const swiftly::Tile& t1, index_t used_size);

// A facet travels and is written in blocks of whole rows of its region, of
// at most this many bytes of complex values (one row at least): the image
// writer holds one block, and one more for FITS's real parts.
inline constexpr index_t kImageBlockBytes = index_t{1} << 20;
index_t block_rows(const ImageRegion& region);
// The bytes the image writer holds besides its facets, for facets of yB
// pixels a side: a block, FITS's real parts of one, and the file
// library's buffers.
index_t image_writer_bytes(bool fits, index_t yB);

// Rows [first, first + rows) of the facet's region, in the file's order:
// block[r * columns + c] is the pixel at row region.row + first + r and
// column region.column + c. `facet` is yB x yB, its centre at yB / 2.
void facet_block(const Array2D& facet, const swiftly::Tile& t0, const swiftly::Tile& t1, index_t yB,
                 const ImageRegion& region, index_t first, index_t rows, cplx* block);

// The one writer of image files: created under the claim's partial name
// with its header (every pixel 0), written a block or a facet at a time in
// any order, complete on disk (flushed and synced) once finish() returns;
// the caller then publishes the claim. Destroyed unfinished (a failure),
// it closes what it opened and leaves the partial file to the claim,
// which removes it.
class ImageWriter {
 public:
  ImageWriter(const storage::FileClaim& claim, const ImageDescription& what);
  ~ImageWriter();
  ImageWriter(const ImageWriter&) = delete;
  ImageWriter& operator=(const ImageWriter&) = delete;

  void write_block(const ImageRegion& region, index_t first, index_t rows, const cplx* block);
  // A whole facet, one block at a time.
  void write_facet(const Array2D& facet, const swiftly::Tile& t0, const swiftly::Tile& t1,
                   index_t yB);
  void finish();

  bool fits() const { return fits_; }
  index_t bytes() const { return bytes_; }     // of the file, once finished
  double write_s() const { return write_s_; }  // creating, writing, closing and syncing

 private:
  struct Fits;
  struct Hdf5;
  void create_file(const ImageDescription& what);
  void write_undefined_column();
  WatchedFile watched_;  // its calls, for the stall watchdog: first in, last out
  std::string partial_;
  bool fits_ = false;
  index_t used_ = 0;
  std::unique_ptr<Fits> fits_file_;
  std::unique_ptr<Hdf5> hdf5_file_;
  std::vector<cplx> block_;
  std::vector<double> real_;
  double write_s_ = 0;
  index_t bytes_ = 0;
};

}  // namespace iotest::image
