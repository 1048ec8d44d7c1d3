// Every read of an output watched as its writes are (docs/pipeline.md, "A
// stalled file system"). A read through a client whose link to the
// storage servers is cut blocks in the kernel as a write does, and verify,
// grid and the imaging direction would wait for ever without a word. So
// open_reader hands out each back-end's reader inside a WatchedReader:
// every call on it is a ProgressMark ("reading" the file) in the rank's
// ProgressTable, which the process's StallWatch looks at. One place for
// every back-end, the ones to come included.
#pragma once

#include <memory>
#include <string>

#include "iotest/storage/reader.hpp"
#include "iotest/storage/storage_progress.hpp"

namespace iotest::storage {

class WatchedReader final : public Reader {
 public:
  // `reader` was opened from `path`; its marks enter rank_progress() for
  // the WatchedReader's lifetime.
  WatchedReader(std::unique_ptr<Reader> reader, const std::string& path);
  WatchedReader(const WatchedReader&) = delete;
  WatchedReader& operator=(const WatchedReader&) = delete;

  std::string_view backend() const override { return reader_->backend(); }
  bool direct() const override { return reader_->direct(); }
  cplx as_stored(cplx v) const override { return reader_->as_stored(v); }
  std::array<double, 3> uvw(index_t row) const override;
  std::vector<WrittenPart> written_parts() const override;
  std::vector<ChunkChecksum> checksums() const override;
  index_t chunks_present() const override;
  std::vector<bool> chunk_map() const override;
  bool chunk_present(index_t row, index_t channel) const override;
  cplx visibility(index_t row, index_t channel) const override;
  bool read_chunk(const ChunkKey& key, cplx* out) const override;
  std::uint32_t chunk_checksum(const ChunkKey& key, const cplx* chunk) const override;
  std::vector<ChunkKey> stored_chunks() const override;

 private:
  // A call on the reader, marked: one at a time (a Reader takes one
  // thread at a time), so one file's marks serve them all.
  ProgressMark mark() const { return watched_.mark(StorageStep::reading); }
  std::unique_ptr<Reader> reader_;
  WatchedFile watched_;
};

}  // namespace iotest::storage
