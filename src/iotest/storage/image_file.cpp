#include "iotest/storage/image_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

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

}  // namespace

OutputClaim claim_image_path(const std::string& path) {
  return OutputClaim(path, draw_nonce(), "--image");
}

void write_dirty_image(OutputClaim& claim, const std::vector<Array2D>& facets,
                       const std::vector<swiftly::Tile>& tiles, index_t yB, index_t used_size,
                       const ImageDescription& what) {
  // A failure leaves the partial file to the claim, which removes it.
  write_to(claim.partial(), facets, tiles, yB, used_size, what);
  publish(claim);
}

}  // namespace iotest::storage
