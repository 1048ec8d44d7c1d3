// The hdf5 back-end's read half: UVH5 files as iotest writes them. The
// axes, (u, v, w), frequencies, provenance, which HDF5 chunks exist, single
// visibilities and whole chunks.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "iotest/storage/reader.hpp"

namespace iotest::storage {

class Uvh5Reader final : public Reader {
 public:
  // Throws UsageError naming the file when it cannot be read as UVH5.
  // Nothing proportional to the observation is read up front: (u, v, w)
  // are read row by row.
  explicit Uvh5Reader(const std::string& path);
  ~Uvh5Reader() override;
  Uvh5Reader(const Uvh5Reader&) = delete;
  Uvh5Reader& operator=(const Uvh5Reader&) = delete;

  std::string_view backend() const override { return "hdf5"; }
  std::array<double, 3> uvw(index_t row) const override;
  std::vector<WrittenPart> written_parts() const override;
  std::vector<ChunkChecksum> checksums() const override;
  index_t chunks_present() const override;  // allocated HDF5 chunks (H5Dget_num_chunks)
  // One lookup per chunk (or one walk of the chunk index where few are
  // allocated), so ~1e6 chunks take well under a second.
  std::vector<bool> chunk_map() const override;
  bool chunk_present(index_t row, index_t channel) const override;
  cplx visibility(index_t row, index_t channel) const override;
  bool read_chunk(const ChunkKey& key, cplx* out) const override;
  std::vector<ChunkKey> stored_chunks() const override;

  // Whether `path` is an HDF5 file (by its signature).
  static bool recognises(const std::string& path);

 private:
  struct Handles;
  std::unique_ptr<Handles> h_;
  std::string path_;
};

}  // namespace iotest::storage
