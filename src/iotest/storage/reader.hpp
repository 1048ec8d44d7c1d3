// The read half of a storage back-end: what `iotest verify` (and later
// `iotest read` and the imaging direction) need from an output, whatever
// wrote it. A multi-file output set has the full observation's shape in
// every file, each holding only the chunks its writer wrote.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "iotest/storage/backend.hpp"

namespace iotest::storage {

class Reader {
 public:
  virtual ~Reader() = default;
  virtual std::string_view backend() const = 0;  // the back-end that wrote it
  // Whether reads bypass the page cache (O_DIRECT, as opened).
  virtual bool direct() const { return false; }
  // A value as this output stores it (ms: rounded to single precision):
  // what an exact comparison with the synthetic pattern must expect.
  virtual cplx as_stored(cplx v) const { return v; }

  index_t baselines() const { return nbls_; }
  index_t times() const { return ntimes_; }
  index_t channels() const { return nfreqs_; }
  const std::vector<double>& frequencies() const { return freq_; }  // Hz
  const std::optional<Provenance>& provenance() const { return provenance_; }
  index_t chunk_rows() const { return chunk_rows_; }  // baseline-times per storage chunk
  index_t chunk_channels() const { return chunk_channels_; }
  index_t row_chunks() const { return (nbls_ * ntimes_ + chunk_rows_ - 1) / chunk_rows_; }
  index_t channel_chunks() const { return (nfreqs_ + chunk_channels_ - 1) / chunk_channels_; }
  index_t chunks_expected() const { return row_chunks() * channel_chunks(); }

  // (u, v, w) in metres; row = baseline * times + time.
  virtual std::array<double, 3> uvw(index_t row) const = 0;
  // A stonewalled output's written parts (empty otherwise).
  virtual std::vector<WrittenPart> written_parts() const = 0;
  // Every chunk's checksum as its writer wrote it (empty for outputs from
  // before checksums).
  virtual std::vector<ChunkChecksum> checksums() const = 0;
  virtual index_t chunks_present() const = 0;
  // Per chunk (row_chunk * channel_chunks() + channel_chunk): present or
  // not, without reading any visibility.
  virtual std::vector<bool> chunk_map() const = 0;
  // Whether the chunk holding this visibility is present.
  virtual bool chunk_present(index_t row, index_t channel) const = 0;
  virtual cplx visibility(index_t row, index_t channel) const = 0;
  // A whole chunk, chunk_rows() x chunk_channels() row-major, zero past the
  // observation's edges; false (and `out` untouched) if it is absent.
  // Readers are used by one thread at a time.
  virtual bool read_chunk(const ChunkKey& key, cplx* out) const = 0;
  // The CRC-32 its writer recorded for a chunk read_chunk gave (checksums()),
  // taken again: by default of those values as they are.
  virtual std::uint32_t chunk_checksum(const ChunkKey& key, const cplx* chunk) const;
  // The chunks present, in the order they lie in storage (the order they
  // were written, which is the imaging direction's visit order): by
  // default the chunk order.
  virtual std::vector<ChunkKey> stored_chunks() const;

 protected:
  // read_chunk's last step: zero past the observation's edges.
  void zero_past_edges(const ChunkKey& key, cplx* out) const {
    storage::zero_past_edges(nbls_ * ntimes_, nfreqs_, chunk_rows_, chunk_channels_, key, out);
  }
  index_t nbls_ = 0, ntimes_ = 0, nfreqs_ = 0, chunk_rows_ = 1, chunk_channels_ = 1;
  std::vector<double> freq_;
  std::optional<Provenance> provenance_;
};

}  // namespace iotest::storage
