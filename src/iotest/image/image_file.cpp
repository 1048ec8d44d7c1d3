#include "iotest/image/image_file.hpp"

#include <fcntl.h>
#include <fitsio.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <utility>

#include "iotest/common/system.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5/hdf5_handles.hpp"
#include "iotest/telescope/catalog_frame.hpp"

namespace iotest::image {

namespace hdf5 = storage::hdf5;  // the handles its HDF5 image is written with
namespace {

// CFITSIO's status, thrown with its text.
void check_fits(int status, const char* what) {
  if (status == 0) return;
  char text[FLEN_STATUS] = {};
  fits_get_errstatus(status, text);
  throw std::runtime_error(fmt::format("{} (dirty image): {}", what, text));
}

std::runtime_error system_error(const std::string& what, const std::string& path) {
  return std::runtime_error(fmt::format("{} '{}': {}", what, path, std::strerror(errno)));
}

// The file's contents on the device before it is published: a crash after
// the rename never leaves a name on a file half there.
void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error("opening", path);
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) throw system_error("syncing", path);
}

// The FITS header of the image, as WSClean writes its images: 4 axes (RA,
// DEC, FREQ, STOKES), a SIN projection at the phase centre, float64. East
// is left and north up: column x (from 0) holds l = (used/2 - x) pixels
// east (RA's CDELT1 negative), row y holds m = (y - used/2) pixels north,
// so the phase centre is pixel used/2 + 1 on both axes counted from 1,
// where WSClean puts it. CDELT is the pixel's direction cosine in degrees
// (SIN's intermediate coordinates are (180/pi) l, (180/pi) m).
//
// CFITSIO formats every card, in memory: an image of 1 x 1 pixels whose
// NAXIS1 and NAXIS2 are then set to the image's size (a header of the
// real size would have CFITSIO reserve the whole data unit in memory).
// The claim's partial file then takes the header where it is (the claim
// holds that file, its inode and its lock: CFITSIO's own creation would
// replace it with another file).
std::string fits_header(const ImageDescription& what) {
  struct Memory {
    void* data = std::malloc(2880);
    size_t size = 2880;
    ~Memory() { std::free(data); }
  } memory;
  if (!memory.data) throw std::bad_alloc();
  int status = 0;
  fitsfile* file = nullptr;
  check_fits(fits_create_memfile(&file, &memory.data, &memory.size, 2880, std::realloc, &status),
             "fits_create_memfile");
  std::string header;
  try {
    long axes[4] = {1, 1, 1, 1};
    check_fits(fits_create_img(file, DOUBLE_IMG, 4, axes, &status), "fits_create_img");
    const double deg = 180 / std::numbers::pi, centre = static_cast<double>(what.used_size / 2 + 1);
    const auto text = [&](const char* key, const std::string& value, const char* comment) {
      check_fits(fits_update_key_str(file, key, value.c_str(), comment, &status), key);
    };
    const auto number = [&](const char* key, double value, const char* comment) {
      check_fits(fits_update_key_dbl(file, key, value, -15, comment, &status), key);
    };
    text("BUNIT", "JY/BEAM", "the dirty image over the sum of weights");
    text("BTYPE", "Intensity", nullptr);
    text("TELESCOP", what.telescope, "iotest's visibility set");
    text("OBJECT", fmt::format("iotest {}", what.rec_set), nullptr);
    text("RADESYS", "ICRS", nullptr);
    number("EQUINOX", 2000, nullptr);
    number("LONPOLE", 180, nullptr);
    if (!what.date_obs.empty()) {
      text("DATE-OBS", what.date_obs, nullptr);
      number("MJD-OBS", what.mjd_obs, nullptr);
    }
    text("SPECSYS", "TOPOCENT", nullptr);
    const struct {
      const char* type;
      double pixel, value, step;
      const char* unit;
    } wcs[4] = {{"RA---SIN", centre, what.ra_deg, -what.pixel_lm * deg, "deg"},
                {"DEC--SIN", centre, what.dec_deg, what.pixel_lm * deg, "deg"},
                {"FREQ", 1, what.freq_hz, what.bandwidth_hz, "Hz"},
                {"STOKES", 1, 1, 1, ""}};
    for (int k = 0; k < 4; ++k) {
      const std::string n = std::to_string(k + 1);
      text(("CTYPE" + n).c_str(), wcs[k].type, nullptr);
      number(("CRPIX" + n).c_str(), wcs[k].pixel, nullptr);
      number(("CRVAL" + n).c_str(), wcs[k].value, nullptr);
      number(("CDELT" + n).c_str(), wcs[k].step, nullptr);
      if (*wcs[k].unit) text(("CUNIT" + n).c_str(), wcs[k].unit, nullptr);
    }
    number("IOTPIXLM", what.pixel_lm, "pixel in direction cosines");
    number("IOTFRMPA", what.frame_pa_deg, "[deg] uvw turned by it: v to ICRS north");
    check_fits(fits_update_key_lng(file, "IOTNVIS", static_cast<LONGLONG>(what.visibilities),
                                   "visibilities gridded", &status),
               "IOTNVIS");
    check_fits(fits_flush_file(file, &status), "fits_flush_file");
    LONGLONG head = 0, data = 0, end = 0;
    check_fits(fits_get_hduaddrll(file, &head, &data, &end, &status), "fits_get_hduaddrll");
    header.assign(static_cast<const char*>(memory.data), static_cast<size_t>(data));
    check_fits(fits_close_file(file, &status), "fits_close_file");
    file = nullptr;
  } catch (...) {
    int ignored = 0;
    if (file) fits_close_file(file, &ignored);
    throw;
  }
  // The axes' lengths: an integer card's value is right-justified in
  // columns 11 to 30 (the FITS standard's fixed format).
  for (const char* key : {"NAXIS1  = ", "NAXIS2  = "}) {
    size_t at = 0;
    while (at < header.size() && header.compare(at, 10, key) != 0) at += 80;
    if (at >= header.size()) throw std::logic_error(fmt::format("no {} card", key));
    header.replace(at + 10, 20, fmt::format("{:>20}", what.used_size));
  }
  return header;
}

}  // namespace

ImageDescription describe_image(const std::string& rec_set, index_t used_size, double pixel_lm,
                                const telescope::Observation& obs, index_t gridded) {
  ImageDescription d;
  d.rec_set = rec_set;
  d.used_size = used_size;
  d.pixel_lm = pixel_lm;
  d.visibilities = gridded;
  const auto centre = telescope::phase_centre(obs);
  d.ra_deg = centre.icrs.ra_rad * 180 / std::numbers::pi;
  d.dec_deg = centre.icrs.dec_rad * 180 / std::numbers::pi;
  d.frame_pa_deg = centre.frame_pa_rad * 180 / std::numbers::pi;
  d.freq_hz = telescope::band_centre_hz(obs);
  d.bandwidth_hz = telescope::bandwidth_hz(obs);
  d.telescope = obs.vis_set;
  d.date_obs = telescope::start_utc(obs);
  d.mjd_obs = telescope::start_mjd(obs);
  return d;
}

bool is_fits_path(const std::string& path) {
  for (const char* suffix : {".fits", ".fit", ".fts"}) {
    const std::string_view s(suffix);
    if (path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return false;
}

storage::FileClaim claim_image_path(const std::string& path) {
  return claim_image_path(path, storage::draw_nonce());
}

storage::FileClaim claim_image_path(const std::string& path, std::uint32_t nonce) {
  return storage::FileClaim(path, nonce, "--image");
}

ImageRegion facet_region(const swiftly::Tile& t0, const swiftly::Tile& t1, index_t used_size) {
  const index_t half = used_size / 2;
  ImageRegion r;
  r.centre = half;
  r.row = t1.offset + t1.lo + half;
  r.rows = t1.hi - t1.lo;
  // x = half - l for l from t0.offset + t0.hi - 1 down to t0.offset + t0.lo,
  // within [0, used).
  r.column = std::max<index_t>(0, half - (t0.offset + t0.hi - 1));
  r.columns = std::min(used_size, half - (t0.offset + t0.lo) + 1) - r.column;
  if (r.row < 0 || r.row + r.rows > used_size || r.columns < 0)
    throw std::logic_error("a facet outside the used image");
  return r;
}

index_t block_rows(const ImageRegion& region) {
  const index_t row_bytes = std::max<index_t>(1, region.columns) * sizeof(cplx);
  return std::clamp<index_t>(kImageBlockBytes / row_bytes, 1, std::max<index_t>(1, region.rows));
}

index_t image_writer_bytes(bool fits, index_t yB) {
  // CFITSIO's 40 record buffers of 2880 bytes; HDF5's metadata cache
  // (2 MiB at first) and sieve buffer for one dataset.
  const index_t library = fits ? 40 * 2880 : index_t{2} << 20;
  const index_t block = std::max<index_t>(kImageBlockBytes, yB * sizeof(cplx));
  return block + (fits ? block / 2 : 0) + library;
}

void facet_block(const Array2D& facet, const swiftly::Tile& t0, const swiftly::Tile& t1, index_t yB,
                 const ImageRegion& region, index_t first, index_t rows, cplx* block) {
  const index_t half = region.centre;
  // Column by column: a facet's row a (one l) holds the m of a block's
  // rows next to each other.
  for (index_t c = 0; c < region.columns; ++c) {
    const index_t a = half - (region.column + c) - t0.offset + yB / 2;
    const cplx* from = &facet(a, region.row + first - half - t1.offset + yB / 2);
    for (index_t r = 0; r < rows; ++r) block[r * region.columns + c] = from[r];
  }
}

struct ImageWriter::Fits {
  fitsfile* file = nullptr;
  ~Fits() {
    int ignored = 0;
    if (file) fits_close_file(file, &ignored);
  }
};

struct ImageWriter::Hdf5 {
  hdf5::Id file, space, set;
};

ImageWriter::ImageWriter(const storage::FileClaim& claim, const ImageDescription& what)
    : watched_(claim.partial()),
      partial_(claim.partial()),
      fits_(is_fits_path(claim.path())),
      used_(what.used_size) {
  const auto t0 = Clock::now();
  {
    const auto opening = watched_.mark(StorageStep::opening);
    create_file(what);
  }
  write_undefined_column();
  write_s_ += seconds_since(t0);
}

// The claim's file with its header: every pixel 0.
void ImageWriter::create_file(const ImageDescription& what) {
  if (fits_) {
    const std::string header = fits_header(what);
    {
      // The claim's file, truncated where it is (the same inode).
      const int fd = ::open(partial_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
      if (fd < 0) throw system_error("opening", partial_);
      const bool written =
          ::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size());
      const int saved = errno;
      ::close(fd);
      errno = saved;
      if (!written) throw system_error("writing the header of", partial_);
    }
    fits_file_ = std::make_unique<Fits>();
    int status = 0;
    // No extended file name syntax: the name is the file's.
    check_fits(fits_open_diskfile(&fits_file_->file, partial_.c_str(), READWRITE, &status),
               "fits_open_diskfile");
  } else {
    using hdf5::check;
    using hdf5::check_id;
    using hdf5::Id;
    auto h = std::make_unique<Hdf5>();
    // H5F_ACC_TRUNC truncates the claim's file where it is.
    h->file =
        Id(check_id(H5Fcreate(partial_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, hdf5::output_access()),
                    "H5Fcreate (dirty image)"),
           H5Fclose);
    const hsize_t dims[3] = {static_cast<hsize_t>(used_), static_cast<hsize_t>(used_), 2};
    h->space = Id(check_id(H5Screate_simple(3, dims, nullptr), "H5Screate_simple"), H5Sclose);
    h->set = Id(check_id(H5Dcreate2(h->file, "dirty_image", H5T_NATIVE_DOUBLE, h->space,
                                    H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         "H5Dcreate2 (dirty_image)"),
                H5Dclose);
    const auto attribute = [&](const char* name, hid_t type, const void* value) {
      const Id scalar(check_id(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
      const Id a(
          check_id(H5Acreate2(h->set, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2"),
          H5Aclose);
      check(H5Awrite(a, type, value), "H5Awrite");
    };
    attribute("pixel_lm", H5T_NATIVE_DOUBLE, &what.pixel_lm);
    const long long vis = what.visibilities, centre = used_ / 2;
    attribute("visibilities", H5T_NATIVE_LLONG, &vis);
    attribute("phase_centre_pixel", H5T_NATIVE_LLONG, &centre);
    const auto text_attribute = [&](const char* name, const std::string& value) {
      const Id text(check_id(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
      check(H5Tset_size(text, std::max<size_t>(1, value.size())), "H5Tset_size");
      attribute(name, text, value.c_str());
    };
    text_attribute("rec_set", what.rec_set);
    text_attribute("units", kDirtyImageUnits);
    text_attribute("layout", kDirtyImageLayout);
    hdf5_file_ = std::move(h);
  }
}

// Column 0 (l = used/2, the image's east edge as WSClean lays it out, its
// phase centre at pixel used/2) lies outside the facets, which cover l in
// [-used/2, used/2): NaN, the FITS way to say a pixel is undefined, rather
// than a 0 that reads as a value.
void ImageWriter::write_undefined_column() {
  const std::vector<cplx> nan(static_cast<size_t>(used_),
                              cplx(std::numeric_limits<double>::quiet_NaN(),
                                   std::numeric_limits<double>::quiet_NaN()));
  write_block(ImageRegion{0, used_, 0, 1, used_ / 2}, 0, used_, nan.data());
}

ImageWriter::~ImageWriter() = default;

void ImageWriter::write_block(const ImageRegion& region, index_t first, index_t rows,
                              const cplx* block) {
  if (rows <= 0 || region.columns <= 0) return;
  const auto t0 = Clock::now();
  const auto writing = watched_.mark(StorageStep::writing);
  const index_t values = rows * region.columns;
  if (fits_) {
    real_.resize(static_cast<size_t>(values));
    for (index_t i = 0; i < values; ++i) real_[static_cast<size_t>(i)] = block[i].real();
    // Counted from 1, both corners inclusive.
    long lower[4] = {static_cast<long>(region.column + 1),
                     static_cast<long>(region.row + first + 1), 1, 1};
    long upper[4] = {static_cast<long>(region.column + region.columns),
                     static_cast<long>(region.row + first + rows), 1, 1};
    int status = 0;
    check_fits(fits_write_subset(fits_file_->file, TDOUBLE, lower, upper, real_.data(), &status),
               "fits_write_subset");
  } else {
    using hdf5::check;
    const hsize_t start[3] = {static_cast<hsize_t>(region.row + first),
                              static_cast<hsize_t>(region.column), 0};
    const hsize_t count[3] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(region.columns), 2};
    const hdf5::Id memory(hdf5::check_id(H5Screate_simple(3, count, nullptr), "H5Screate_simple"),
                          H5Sclose);
    check(H5Sselect_hyperslab(hdf5_file_->space, H5S_SELECT_SET, start, nullptr, count, nullptr),
          "H5Sselect_hyperslab");
    check(
        H5Dwrite(hdf5_file_->set, H5T_NATIVE_DOUBLE, memory, hdf5_file_->space, H5P_DEFAULT, block),
        "H5Dwrite (dirty_image)");
  }
  write_s_ += seconds_since(t0);
}

void ImageWriter::write_facet(const Array2D& facet, const swiftly::Tile& t0,
                              const swiftly::Tile& t1, index_t yB) {
  const ImageRegion region = facet_region(t0, t1, used_);
  const index_t step = block_rows(region);
  block_.resize(static_cast<size_t>(step * region.columns));
  for (index_t first = 0; first < region.rows; first += step) {
    const index_t rows = std::min(step, region.rows - first);
    facet_block(facet, t0, t1, yB, region, first, rows, block_.data());
    write_block(region, first, rows, block_.data());
  }
}

void ImageWriter::finish() {
  const auto t0 = Clock::now();
  const auto closing = watched_.mark(StorageStep::closing);
  if (fits_) {
    int status = 0;
    fitsfile* file = std::exchange(fits_file_->file, nullptr);
    // Closing pads the data unit to whole records of zeros.
    check_fits(fits_close_file(file, &status), "fits_close_file");
  } else {
    auto& h = *hdf5_file_;
    h.set.reset();
    h.space.reset();
    const hid_t file = h.file;
    h.file.release();
    hdf5_file_.reset();
    hdf5::check(H5Fclose(file), "H5Fclose (dirty image)");  // complete on disk
  }
  sync_file(partial_);
  struct stat st {};
  if (::stat(partial_.c_str(), &st) != 0) throw system_error("looking at", partial_);
  bytes_ = static_cast<index_t>(st.st_size);
  write_s_ += seconds_since(t0);
}

}  // namespace iotest::image
