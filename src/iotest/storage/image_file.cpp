#include "iotest/storage/image_file.hpp"

#include <fitsio.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5_handles.hpp"

namespace iotest::storage {
namespace {

// Every handle closed on return, so that the file is complete on disk.
void write_to(const std::string& temp, const std::vector<Array2D>& facets,
              const std::vector<swiftly::Tile>& tiles, index_t yB, index_t used_size,
              const ImageDescription& what) {
  using hdf5::check;
  using hdf5::check_id;
  using hdf5::Id;
  const Id file(check_id(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, hdf5::output_access()),
                         "H5Fcreate (dirty image)"),
                H5Fclose);
  const hsize_t dims[3] = {static_cast<hsize_t>(used_size), static_cast<hsize_t>(used_size), 2};
  const Id space(check_id(H5Screate_simple(3, dims, nullptr), "H5Screate_simple"), H5Sclose);
  const Id set(check_id(H5Dcreate2(file, "dirty_image", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT,
                                   H5P_DEFAULT, H5P_DEFAULT),
                        "H5Dcreate2 (dirty_image)"),
               H5Dclose);
  const auto attribute = [&](const char* name, hid_t type, const void* value) {
    const Id scalar(check_id(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
    const Id a(
        check_id(H5Acreate2(set, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2"),
        H5Aclose);
    check(H5Awrite(a, type, value), "H5Awrite");
  };
  attribute("pixel_lm", H5T_NATIVE_DOUBLE, &what.pixel_lm);
  const long long vis = what.visibilities;
  attribute("visibilities", H5T_NATIVE_LLONG, &vis);
  const auto text_attribute = [&](const char* name, const std::string& value) {
    const Id text(check_id(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
    check(H5Tset_size(text, std::max<size_t>(1, value.size())), "H5Tset_size");
    attribute(name, text, value.c_str());
  };
  text_attribute("rec_set", what.rec_set);
  text_attribute("units", kDirtyImageUnits);
  // Row by row: the facets of one tile row give one image row each.
  const index_t nf = static_cast<index_t>(tiles.size()), half = used_size / 2;
  std::vector<double> row(static_cast<size_t>(2 * used_size));
  const hsize_t count[3] = {1, static_cast<hsize_t>(used_size), 2};
  const Id memory(check_id(H5Screate_simple(3, count, nullptr), "H5Screate_simple"), H5Sclose);
  for (index_t j0 = 0; j0 < nf; ++j0) {
    const auto& t0 = tiles[static_cast<size_t>(j0)];
    for (index_t y0 = t0.offset + t0.lo; y0 < t0.offset + t0.hi; ++y0) {
      const index_t a = y0 - t0.offset + yB / 2;
      for (index_t j1 = 0; j1 < nf; ++j1) {
        const auto& t1 = tiles[static_cast<size_t>(j1)];
        const Array2D& facet = facets[static_cast<size_t>(j0 * nf + j1)];
        for (index_t y1 = t1.offset + t1.lo; y1 < t1.offset + t1.hi; ++y1) {
          const cplx v = facet(a, y1 - t1.offset + yB / 2);
          row[static_cast<size_t>(2 * (y1 + half))] = v.real();
          row[static_cast<size_t>(2 * (y1 + half) + 1)] = v.imag();
        }
      }
      const hsize_t start[3] = {static_cast<hsize_t>(y0 + half), 0, 0};
      check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr),
            "H5Sselect_hyperslab");
      check(H5Dwrite(set, H5T_NATIVE_DOUBLE, memory, space, H5P_DEFAULT, row.data()),
            "H5Dwrite (dirty_image)");
    }
  }
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush");
}

// CFITSIO's status, thrown with its text.
void check_fits(int status, const char* what) {
  if (status == 0) return;
  char text[FLEN_STATUS] = {};
  fits_get_errstatus(status, text);
  throw std::runtime_error(fmt::format("{} (dirty image): {}", what, text));
}

// The dirty image's real part as WSClean writes its images: 4 axes (RA,
// DEC, FREQ, STOKES), a SIN projection at the phase centre, float64.
// East is left and north up: column x (from 0) holds l = (used/2 - x)
// pixels east (RA's CDELT1 negative), row y holds m = (y - used/2) pixels
// north, so the phase centre is pixel used/2 + 1 on both axes counted
// from 1, where WSClean puts it. The image iotest makes spans l in
// [-used/2, used/2): column 0 (l = used/2) lies outside it and holds 0,
// and l = -used/2 has no column. CDELT is the pixel's direction cosine in
// degrees (SIN's intermediate coordinates are (180/pi) l, (180/pi) m).
void write_fits(const std::string& temp, const std::vector<Array2D>& facets,
                const std::vector<swiftly::Tile>& tiles, index_t yB, index_t used_size,
                const ImageDescription& what) {
  int status = 0;
  fitsfile* file = nullptr;
  check_fits(fits_create_file(&file, fmt::format("!{}", temp).c_str(), &status),
             "fits_create_file");
  const auto close = [&] {
    int ignored = 0;
    if (file) fits_close_file(file, &ignored);
    file = nullptr;
  };
  try {
    long axes[4] = {static_cast<long>(used_size), static_cast<long>(used_size), 1, 1};
    check_fits(fits_create_img(file, DOUBLE_IMG, 4, axes, &status), "fits_create_img");
    const double deg = 180 / std::numbers::pi, centre = static_cast<double>(used_size / 2 + 1);
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
    check_fits(fits_update_key_lng(file, "IOTNVIS", static_cast<LONGLONG>(what.visibilities),
                                   "visibilities gridded", &status),
               "IOTNVIS");
    // Row by row (north from the bottom): row y is the image's column
    // y1 = y - used/2, gathered across the facets of that column.
    const index_t nf = static_cast<index_t>(tiles.size()), half = used_size / 2;
    const auto tile_of = [&](index_t y) -> index_t {
      for (index_t j = 0; j < nf; ++j) {
        const auto& t = tiles[static_cast<size_t>(j)];
        if (y >= t.offset + t.lo && y < t.offset + t.hi) return j;
      }
      return -1;
    };
    std::vector<double> row(static_cast<size_t>(used_size));
    for (index_t y = 0; y < used_size; ++y) {
      const index_t y1 = y - half, j1 = tile_of(y1);
      std::fill(row.begin(), row.end(), 0.0);
      for (index_t x = 1; x < used_size && j1 >= 0; ++x) {
        const index_t y0 = half - x, j0 = tile_of(y0);
        if (j0 < 0) continue;
        const Array2D& facet = facets[static_cast<size_t>(j0 * nf + j1)];
        const auto& t0 = tiles[static_cast<size_t>(j0)];
        const auto& t1 = tiles[static_cast<size_t>(j1)];
        row[static_cast<size_t>(x)] =
            facet(y0 - t0.offset + yB / 2, y1 - t1.offset + yB / 2).real();
      }
      long first[4] = {1, static_cast<long>(y + 1), 1, 1};
      check_fits(fits_write_pix(file, TDOUBLE, first, static_cast<LONGLONG>(used_size), row.data(),
                                &status),
                 "fits_write_pix");
    }
    check_fits(fits_flush_file(file, &status), "fits_flush_file");
    check_fits(fits_close_file(file, &status), "fits_close_file");
    file = nullptr;
  } catch (...) {
    close();
    throw;
  }
}

}  // namespace

bool is_fits_path(const std::string& path) {
  for (const char* suffix : {".fits", ".fit", ".fts"}) {
    const std::string_view s(suffix);
    if (path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return false;
}

OutputClaim claim_image_path(const std::string& path) {
  return OutputClaim(path, draw_nonce(), "--image");
}

void write_dirty_image(OutputClaim& claim, const std::vector<Array2D>& facets,
                       const std::vector<swiftly::Tile>& tiles, index_t yB, index_t used_size,
                       const ImageDescription& what) {
  // A failure leaves the partial file to the claim, which removes it.
  if (is_fits_path(claim.path()))
    write_fits(claim.partial(), facets, tiles, yB, used_size, what);
  else
    write_to(claim.partial(), facets, tiles, yB, used_size, what);
  publish(claim);
}

}  // namespace iotest::storage
