// Reading back what the hdf5 back-end wrote, for `iotest verify`: the axes,
// (u, v, w), frequencies, provenance, which HDF5 chunks exist, and single
// visibilities. A multi-file output set has the full observation's shape in
// every file, each holding only the chunks its writer wrote.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "iotest/storage/backend.hpp"

namespace iotest::storage {

class Uvh5Reader {
 public:
  // Throws UsageError naming the file when it cannot be read as UVH5.
  // Nothing proportional to the observation is read up front: (u, v, w)
  // are read row by row.
  explicit Uvh5Reader(const std::string& path);
  ~Uvh5Reader();
  Uvh5Reader(const Uvh5Reader&) = delete;
  Uvh5Reader& operator=(const Uvh5Reader&) = delete;

  index_t baselines() const { return nbls_; }
  index_t times() const { return ntimes_; }
  index_t channels() const { return nfreqs_; }
  std::array<double, 3> uvw(index_t row) const;  // metres; row = baseline * times + time
  const std::vector<double>& frequencies() const { return freq_; }
  const std::optional<Provenance>& provenance() const { return provenance_; }
  // A stonewalled file's written parts (/iotest/written_parts).
  std::vector<WrittenPart> written_parts() const;
  index_t chunk_rows() const { return chunk_rows_; }  // baseline-times per HDF5 chunk
  index_t chunk_channels() const { return chunk_channels_; }
  index_t row_chunks() const { return (nbls_ * ntimes_ + chunk_rows_ - 1) / chunk_rows_; }
  index_t channel_chunks() const { return (nfreqs_ + chunk_channels_ - 1) / chunk_channels_; }
  index_t chunks_expected() const { return row_chunks() * channel_chunks(); }
  index_t chunks_present() const;  // allocated HDF5 chunks (H5Dget_num_chunks)
  // Per chunk (row_chunk * channel_chunks() + channel_chunk): allocated or
  // not. One lookup per chunk (or one walk of the chunk index where few are
  // allocated), so ~1e6 chunks take well under a second.
  std::vector<bool> chunk_map() const;
  bool chunk_present(index_t row, index_t channel) const;  // the chunk holding this visibility
  cplx visibility(index_t row, index_t channel) const;     // row = baseline * times + time

 private:
  struct Handles;
  std::unique_ptr<Handles> h_;
  std::string path_;
  index_t nbls_ = 0, ntimes_ = 0, nfreqs_ = 0, chunk_rows_ = 1, chunk_channels_ = 1;
  std::vector<double> freq_;
  std::optional<Provenance> provenance_;
};

}  // namespace iotest::storage
