#include "iotest/storage/hdf5/uvh5_reader.hpp"

#include <hdf5.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "iotest/common/errors.hpp"

namespace iotest::storage {

struct Uvh5Reader::Handles {
  hid_t file = -1, visdata = -1, complex = -1;
  ~Handles() {
    if (complex >= 0) H5Tclose(complex);
    if (visdata >= 0) H5Dclose(visdata);
    if (file >= 0) H5Fclose(file);
  }
};

namespace {

bool exists(hid_t loc, const char* name) {
  return H5Lexists(loc, name, H5P_DEFAULT) > 0;
}

template <typename T>
std::vector<T> read_all(hid_t file, const char* name, hid_t type, const std::string& path) {
  const hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  if (set < 0) throw UsageError(path, std::string("not a UVH5 file from iotest: no ") + name);
  const hid_t space = H5Dget_space(set);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<T> out(static_cast<size_t>(std::max<hssize_t>(n, 0)));
  const herr_t status = H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Sclose(space);
  H5Dclose(set);
  if (status < 0) throw UsageError(path, std::string("cannot read ") + name);
  return out;
}

// The number of elements of a dataset, without reading it.
index_t points(hid_t file, const char* name, const std::string& path) {
  const hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  if (set < 0) throw UsageError(path, std::string("not a UVH5 file from iotest: no ") + name);
  const hid_t space = H5Dget_space(set);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  H5Dclose(set);
  return static_cast<index_t>(n);
}

std::string read_string(hid_t file, const char* name) {
  const hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  if (set < 0) return {};
  const hid_t type = H5Dget_type(set);
  std::string s(H5Tget_size(type), '\0');
  H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data());
  H5Tclose(type);
  H5Dclose(set);
  return s.substr(0, s.find('\0'));
}

}  // namespace

Uvh5Reader::Uvh5Reader(const std::string& path) : h_(std::make_unique<Handles>()), path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  h_->file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (h_->file < 0) throw UsageError(path, "cannot open as HDF5");
  const auto scalar = [&](const char* name) {
    return read_all<long long>(h_->file, name, H5T_NATIVE_LLONG, path).at(0);
  };
  const auto real = [&](const char* name) {
    return read_all<double>(h_->file, name, H5T_NATIVE_DOUBLE, path).at(0);
  };
  const auto present = [&](const char* name) { return exists(h_->file, name); };
  nbls_ = scalar("Header/Nbls");
  ntimes_ = scalar("Header/Ntimes");
  nfreqs_ = scalar("Header/Nfreqs");
  freq_ = read_all<double>(h_->file, "Header/freq_array", H5T_NATIVE_DOUBLE, path);
  if (points(h_->file, "Header/uvw_array", path) != 3 * nbls_ * ntimes_ ||
      static_cast<index_t>(freq_.size()) != nfreqs_)
    throw UsageError(path, "header arrays do not match Nbls, Ntimes and Nfreqs");
  if (present("Header/extra_keywords") && present("Header/extra_keywords/iotest_rec_set")) {
    Provenance pv;
    pv.rec_set = read_string(h_->file, "Header/extra_keywords/iotest_rec_set");
    pv.pixel_lm = real("Header/extra_keywords/iotest_pixel_lm");
    pv.source_count = scalar("Header/extra_keywords/iotest_source_count");
    pv.seed = static_cast<std::uint64_t>(scalar("Header/extra_keywords/iotest_seed"));
    // Absent in files from before the storage-only mode: a sky.
    pv.synthetic = present("Header/extra_keywords/iotest_synthetic_vis") &&
                   scalar("Header/extra_keywords/iotest_synthetic_vis") != 0;
    // Absent in files from before stonewalling: a whole observation.
    if (present("Header/extra_keywords/iotest_vis_set")) {
      pv.observation.vis_set = read_string(h_->file, "Header/extra_keywords/iotest_vis_set");
      pv.observation.time = read_string(h_->file, "Header/extra_keywords/iotest_time");
      pv.observation.freq = read_string(h_->file, "Header/extra_keywords/iotest_freq");
      pv.observation.dec_deg = real("Header/extra_keywords/iotest_dec");
      pv.margin = scalar("Header/extra_keywords/iotest_margin");
      pv.w_stack_step = real("Header/extra_keywords/iotest_w_stack_step");
    }
    // Absent in files from before run nonces: 0.
    if (present("Header/extra_keywords/iotest_nonce"))
      pv.nonce = static_cast<std::uint32_t>(scalar("Header/extra_keywords/iotest_nonce"));
    // Absent in files from before the run was recorded: empty.
    for (auto [name, field] :
         {std::pair{"Header/extra_keywords/iotest_command_line", &pv.command_line},
          {"Header/extra_keywords/iotest_started", &pv.started},
          {"Header/extra_keywords/iotest_host", &pv.host}})
      if (present(name)) *field = read_string(h_->file, name);
    // Files from before visibilities were in Jy say "uncalib" (or, older
    // still, nothing): provenance_of refuses a sky's.
    pv.vis_units = present("Header/vis_units") ? read_string(h_->file, "Header/vis_units") : "";
    pv.stonewalled = present("Header/extra_keywords/iotest_stonewalled") &&
                     scalar("Header/extra_keywords/iotest_stonewalled") != 0;
    if (pv.stonewalled && !present("iotest/written_parts"))
      throw UsageError(path,
                       "is from a stonewalled run (--duration) but lists no written parts: "
                       "not completely written");
    provenance_ = pv;
  }
  h_->visdata = H5Dopen2(h_->file, "Data/visdata", H5P_DEFAULT);
  if (h_->visdata < 0) throw UsageError(path, "not a UVH5 file: no Data/visdata");
  const hid_t plist = H5Dget_create_plist(h_->visdata);
  hsize_t chunk[3] = {1, 1, 1};
  if (H5Pget_layout(plist) == H5D_CHUNKED) H5Pget_chunk(plist, 3, chunk);
  H5Pclose(plist);
  chunk_rows_ = static_cast<index_t>(chunk[0]);
  chunk_channels_ = static_cast<index_t>(chunk[1]);
  h_->complex = H5Tcreate(H5T_COMPOUND, sizeof(cplx));
  H5Tinsert(h_->complex, "r", 0, H5T_NATIVE_DOUBLE);
  H5Tinsert(h_->complex, "i", sizeof(double), H5T_NATIVE_DOUBLE);
}

Uvh5Reader::~Uvh5Reader() = default;

std::array<double, 3> Uvh5Reader::uvw(index_t row) const {
  const hid_t set = H5Dopen2(h_->file, "Header/uvw_array", H5P_DEFAULT);
  const hsize_t offset[2] = {static_cast<hsize_t>(row), 0}, count[2] = {1, 3};
  const hid_t file_space = H5Dget_space(set);
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, nullptr, count, nullptr);
  const hid_t memory = H5Screate_simple(2, count, nullptr);
  std::array<double, 3> out{};
  const herr_t status =
      H5Dread(set, H5T_NATIVE_DOUBLE, memory, file_space, H5P_DEFAULT, out.data());
  H5Sclose(memory);
  H5Sclose(file_space);
  H5Dclose(set);
  if (status < 0) throw std::runtime_error(path_ + ": reading (u, v, w) failed");
  return out;
}

std::vector<WrittenPart> Uvh5Reader::written_parts() const {
  if (!exists(h_->file, "iotest/written_parts") ||
      points(h_->file, "iotest/written_parts", path_) == 0)
    return {};
  const auto flat = read_all<long long>(h_->file, "iotest/written_parts", H5T_NATIVE_LLONG, path_);
  if (flat.size() % 4) throw UsageError(path_, "iotest/written_parts is not N x 4");
  std::vector<WrittenPart> parts;
  for (size_t i = 0; i < flat.size(); i += 4)
    parts.push_back({flat[i], flat[i + 1], flat[i + 2], flat[i + 3]});
  return parts;
}

std::vector<ChunkChecksum> Uvh5Reader::checksums() const {
  if (!exists(h_->file, "iotest/chunk_crc32")) return {};
  const auto flat = read_all<long long>(h_->file, "iotest/chunk_crc32", H5T_NATIVE_LLONG, path_);
  if (flat.size() % 2) throw UsageError(path_, "iotest/chunk_crc32 is not N x 2");
  std::vector<ChunkChecksum> out;
  for (size_t i = 0; i < flat.size(); i += 2)
    out.push_back({flat[i], static_cast<std::uint32_t>(flat[i + 1])});
  return out;
}

index_t Uvh5Reader::chunks_present() const {
  hsize_t n = 0;
  const hid_t space = H5Dget_space(h_->visdata);
  H5Dget_num_chunks(h_->visdata, space, &n);
  H5Sclose(space);
  return static_cast<index_t>(n);
}

std::vector<bool> Uvh5Reader::chunk_map() const {
  const index_t expected = chunks_expected(), n = chunks_present();
  std::vector<bool> map(static_cast<size_t>(expected), n >= expected);
  if (n <= 0 || n >= expected) return map;
  const auto index = [&](const hsize_t* offset) {
    return static_cast<size_t>(static_cast<index_t>(offset[0]) / chunk_rows_ * channel_chunks() +
                               static_cast<index_t>(offset[1]) / chunk_channels_);
  };
  if (n * n < 64 * expected) {
    // Few chunks: walk the chunk index. H5Dget_chunk_info(i) steps through the
    // index up to i in HDF5 1.10 (no H5Dchunk_iter), so n^2 / 2 steps in all,
    // each much cheaper than a lookup.
    const hid_t space = H5Dget_space(h_->visdata);
    for (index_t i = 0; i < n; ++i) {
      hsize_t offset[3] = {0, 0, 0}, bytes = 0;
      unsigned filters = 0;
      haddr_t address = 0;
      if (H5Dget_chunk_info(h_->visdata, space, static_cast<hsize_t>(i), offset, &filters, &address,
                            &bytes) < 0) {
        H5Sclose(space);
        throw std::runtime_error(path_ + ": reading the chunk index failed");
      }
      map[index(offset)] = true;
    }
    H5Sclose(space);
    return map;
  }
  // Otherwise one lookup per chunk (~0.5 us), until all n are found.
  index_t found = 0;
  for (index_t rc = 0; rc < row_chunks() && found < n; ++rc)
    for (index_t fc = 0; fc < channel_chunks(); ++fc) {
      const hsize_t offset[3] = {static_cast<hsize_t>(rc * chunk_rows_),
                                 static_cast<hsize_t>(fc * chunk_channels_), 0};
      hsize_t bytes = 0;
      if (H5Dget_chunk_storage_size(h_->visdata, offset, &bytes) >= 0 && bytes > 0) {
        map[index(offset)] = true;
        ++found;
      }
    }
  return map;
}

bool Uvh5Reader::chunk_present(index_t row, index_t channel) const {
  const hsize_t offset[3] = {static_cast<hsize_t>(row / chunk_rows_ * chunk_rows_),
                             static_cast<hsize_t>(channel / chunk_channels_ * chunk_channels_), 0};
  hsize_t bytes = 0;
  return H5Dget_chunk_storage_size(h_->visdata, offset, &bytes) >= 0 && bytes > 0;
}

bool Uvh5Reader::recognises(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return H5Fis_hdf5(path.c_str()) > 0;
}

bool Uvh5Reader::read_chunk(const ChunkKey& key, cplx* out) const {
  const index_t row0 = key.row_chunk * chunk_rows_, chan0 = key.freq_chunk * chunk_channels_;
  const hsize_t offset[3] = {static_cast<hsize_t>(row0), static_cast<hsize_t>(chan0), 0};
  hsize_t bytes = 0;
  if (H5Dget_chunk_storage_size(h_->visdata, offset, &bytes) < 0 || bytes == 0) return false;
  if (bytes != static_cast<hsize_t>(chunk_rows_ * chunk_channels_) * sizeof(cplx))
    throw std::runtime_error(path_ + ": a chunk of Data/visdata is not iotest's (filtered?)");
  // The chunk's bytes as stored (iotest writes no filters, and the {r, i}
  // compound is a complex double's layout): no type conversion and no chunk
  // cache, as fast as the file system gives them.
  std::uint32_t filters = 0;
  if (H5Dread_chunk(h_->visdata, H5P_DEFAULT, offset, &filters, out) < 0)
    throw std::runtime_error(path_ + ": reading a chunk failed");
  zero_past_edges(key, out);  // the chunk holds the fill value there
  return true;
}

std::vector<ChunkKey> Uvh5Reader::stored_chunks() const {
  // By file address: the order the writer allocated them (its visit
  // order), so reading them is sequential.
  if (chunks_present() >= chunks_expected()) {
    // Every chunk allocated at once (a shared phdf5 file): HDF5 placed
    // them in index order. (Asking each chunk's address costs a walk of
    // the index in HDF5 1.10: minutes for 1e5 chunks.)
    std::vector<ChunkKey> keys;
    keys.reserve(static_cast<size_t>(chunks_expected()));
    for (index_t i = 0; i < chunks_expected(); ++i)
      keys.push_back({i / channel_chunks(), i % channel_chunks()});
    return keys;
  }
  std::vector<std::pair<haddr_t, ChunkKey>> placed;
  const auto map = chunk_map();
  for (index_t i = 0; i < static_cast<index_t>(map.size()); ++i) {
    if (!map[static_cast<size_t>(i)]) continue;
    const ChunkKey key{i / channel_chunks(), i % channel_chunks()};
    const hsize_t offset[3] = {static_cast<hsize_t>(key.row_chunk * chunk_rows_),
                               static_cast<hsize_t>(key.freq_chunk * chunk_channels_), 0};
    unsigned filters = 0;
    haddr_t address = 0;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info_by_coord(h_->visdata, offset, &filters, &address, &bytes) < 0)
      throw std::runtime_error(path_ + ": reading the chunk index failed");
    placed.emplace_back(address, key);
  }
  std::sort(placed.begin(), placed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ChunkKey> keys;
  keys.reserve(placed.size());
  for (const auto& p : placed) keys.push_back(p.second);
  return keys;
}

cplx Uvh5Reader::visibility(index_t row, index_t channel) const {
  const hsize_t offset[3] = {static_cast<hsize_t>(row), static_cast<hsize_t>(channel), 0};
  const hsize_t count[3] = {1, 1, 1};
  const hid_t file_space = H5Dget_space(h_->visdata);
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, nullptr, count, nullptr);
  const hid_t memory = H5Screate_simple(3, count, nullptr);
  cplx v;
  const herr_t status = H5Dread(h_->visdata, h_->complex, memory, file_space, H5P_DEFAULT, &v);
  H5Sclose(memory);
  H5Sclose(file_space);
  if (status < 0) throw std::runtime_error(path_ + ": reading a visibility failed");
  return v;
}

}  // namespace iotest::storage
