// The msv4 back-end's read half: a processing set as iotest writes it
// (msv4_layout.hpp), on a folder or under an S3 prefix, through its zarr
// store. The whole set is one output: its MSv4s, one per frequency range,
// together hold the observation's channels.
//
// What it reads up front is what MsReader reads: the root's consolidated
// metadata (every node's description), each MSv4's list of VISIBILITY
// chunks and its bookkeeping key (checksums, written parts); chunks and
// UVW are got as asked, the last of each kept.
#pragma once

#include <array>
#include <complex>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "iotest/storage/msv4/msv4_layout.hpp"
#include "iotest/storage/msv4/zarr_store.hpp"
#include "iotest/storage/reader.hpp"

namespace iotest::storage::msv4 {

class Msv4Reader final : public Reader {
 public:
  // Throws UsageError naming `path` when it is not a complete processing
  // set written by iotest (no root zarr.json, no consolidated metadata, no
  // MSv4 with an "iotest" attribute, MSv4s that disagree or overlap).
  explicit Msv4Reader(const std::string& path);
  ~Msv4Reader() override;
  Msv4Reader(const Msv4Reader&) = delete;
  Msv4Reader& operator=(const Msv4Reader&) = delete;

  std::string_view backend() const override { return "msv4"; }
  // VISIBILITY is complex64, as an MS's DATA.
  cplx as_stored(cplx v) const override { return {to_single(v.real()), to_single(v.imag())}; }
  std::array<double, 3> uvw(index_t row) const override;
  std::vector<WrittenPart> written_parts() const override { return parts_; }
  std::vector<ChunkChecksum> checksums() const override { return checksums_; }
  index_t chunks_present() const override { return present_count_; }
  std::vector<bool> chunk_map() const override { return present_; }
  bool chunk_present(index_t row, index_t channel) const override;
  cplx visibility(index_t row, index_t channel) const override;
  bool read_chunk(const ChunkKey& key, cplx* out) const override;
  std::uint32_t chunk_checksum(const ChunkKey& key, const cplx* chunk) const override;
  std::vector<ChunkKey> stored_chunks() const override;

  // Whether `path` (a folder or an s3:// URL) holds a processing set: a
  // root zarr.json whose attributes say "processing_set". Never throws.
  static bool recognises(const std::string& path);

 private:
  // One MSv4 of the set: its own frequency chunks of the observation's.
  struct Msv4 {
    std::string name;  // its group's path in the store ("vis_0")
    Msv4Grid grid;
    index_t file = 0;
    index_t first_freq_chunk = 0, freq_chunk_end = 0;
  };
  // UVW's zarr chunk shape (time, baseline, uvw_label) and the last chunk got.
  struct UvwCache {
    std::string array;  // "vis_0/UVW"
    index_t chunk_times = 1, chunk_baselines = 1, chunk_labels = 3;
    std::array<index_t, 2> chunk{-1, -1};  // (time, baseline) chunk indices held
    std::vector<double> values;
  };

  void read_layouts(const nlohmann::json& metadata);
  void take_axes(const nlohmann::json& layout);
  void check_same_set(const std::string& name, const nlohmann::json& layout,
                      const nlohmann::json& first) const;
  Msv4 msv4_from(const std::string& name, const nlohmann::json& layout) const;
  void check_arrays(const nlohmann::json& metadata);
  void check_coverage();
  void list_chunks(const Msv4& m);
  void read_bookkeeping(const Msv4& m);
  const Msv4& msv4_of(index_t freq_chunk) const;
  index_t chunk_index(const ChunkKey& key) const {
    return key.row_chunk * channel_chunks() + key.freq_chunk;
  }
  // Gets chunk `key` into cells_ in iotest's row order (unless it is there
  // already); false where it is absent.
  bool load(const ChunkKey& key) const;

  std::string path_;
  std::unique_ptr<ZarrStore> store_;
  std::vector<Msv4> msv4s_;            // by first frequency chunk
  std::vector<index_t> msv4_of_freq_;  // per frequency chunk: its MSv4's index
  std::vector<bool> present_;          // per chunk
  index_t present_count_ = 0;
  std::vector<ChunkChecksum> checksums_;  // every MSv4's, in its write order
  std::vector<WrittenPart> parts_;
  // The last chunk got (its values as stored, complex64, in iotest's row
  // order) and which it is (-1: none): a reader serves one thread at a
  // time, visibility() samples neighbours, read_chunk converts from it.
  mutable std::vector<std::complex<float>> cells_;
  mutable index_t cells_chunk_ = -1;
  mutable std::vector<std::complex<float>> checksum_cells_;
  mutable UvwCache uvw_;
};

}  // namespace iotest::storage::msv4
