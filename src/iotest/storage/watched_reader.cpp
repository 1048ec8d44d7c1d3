#include "iotest/storage/watched_reader.hpp"

namespace iotest::storage {

WatchedReader::WatchedReader(std::unique_ptr<Reader> reader, const std::string& path)
    : reader_(std::move(reader)), watched_(path) {
  nbls_ = reader_->baselines();
  ntimes_ = reader_->times();
  nfreqs_ = reader_->channels();
  chunk_rows_ = reader_->chunk_rows();
  chunk_channels_ = reader_->chunk_channels();
  freq_ = reader_->frequencies();
  provenance_ = reader_->provenance();
}

std::array<double, 3> WatchedReader::uvw(index_t row) const {
  const auto m = mark();
  return reader_->uvw(row);
}

std::vector<WrittenPart> WatchedReader::written_parts() const {
  const auto m = mark();
  return reader_->written_parts();
}

std::vector<ChunkChecksum> WatchedReader::checksums() const {
  const auto m = mark();
  return reader_->checksums();
}

index_t WatchedReader::chunks_present() const {
  const auto m = mark();
  return reader_->chunks_present();
}

std::vector<bool> WatchedReader::chunk_map() const {
  const auto m = mark();
  return reader_->chunk_map();
}

bool WatchedReader::chunk_present(index_t row, index_t channel) const {
  const auto m = mark();
  return reader_->chunk_present(row, channel);
}

cplx WatchedReader::visibility(index_t row, index_t channel) const {
  const auto m = mark();
  return reader_->visibility(row, channel);
}

bool WatchedReader::read_chunk(const ChunkKey& key, cplx* out) const {
  const auto m = mark();
  return reader_->read_chunk(key, out);
}

std::uint32_t WatchedReader::chunk_checksum(const ChunkKey& key, const cplx* chunk) const {
  return reader_->chunk_checksum(key, chunk);  // a sum over memory: no storage call
}

std::vector<ChunkKey> WatchedReader::stored_chunks() const {
  const auto m = mark();
  return reader_->stored_chunks();
}

}  // namespace iotest::storage
