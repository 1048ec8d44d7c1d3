// The back-end framework: the accounting, checksums and marks every
// back-end shares (backend.hpp).
#include "iotest/storage/backend.hpp"

#include <isa-l/crc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"

namespace iotest::storage {

void Backend::open(const std::string& partial, const VisibilityLayout& layout) {
  if (layout.time_chunk < 1 || layout.freq_chunk < 1)
    throw std::logic_error("visibility layout without chunk extents");
  layout_ = layout;
  written_.assign(static_cast<size_t>(layout.chunk_count()), false);
  stats_ = {};
  checksums_.clear();
  if (progress_) progress_->name(partial);
  const ProgressMark mark(progress_, StorageStep::opening);
  const auto start = Clock::now();
  do_open(partial);
  do_flush();
  stats_.open_s = seconds_since(start);
}

void Backend::write_chunk(const ChunkKey& key, const cplx* data, index_t visibilities,
                          const PresenceWord* present, const std::uint32_t* crc32, bool stored) {
  if (key.row_chunk < 0 || key.row_chunk >= layout_.row_chunks() || key.freq_chunk < 0 ||
      key.freq_chunk >= layout_.freq_chunks())
    throw std::logic_error("chunk outside the visibility layout");
  const ProgressMark mark(progress_, StorageStep::writing);
  const auto start = Clock::now();
  auto seen = written_[static_cast<size_t>(key.row_chunk * layout_.freq_chunks() + key.freq_chunk)];
  // Of the bytes given: a rewrite's are the sum, and a back-end that
  // rounds the values stores other bytes; both checksummed by the back-end.
  const bool rounds = stored_value_bytes() < static_cast<index_t>(sizeof(cplx));
  given_crc32_ = seen || (rounds && !stored) ? nullptr : crc32;
  if (stored) {  // made whole, once, by the pusher: never a rewrite, never a part
    if (seen || present || !crc32 || !inside_edges(layout_, key))
      throw std::logic_error("a chunk in stored form that is not whole, new and inside");
    do_write_stored(key, data);
  } else {
    do_write_chunk(key, data, seen, present);
  }
  given_crc32_ = nullptr;
  if (seen)
    ++stats_.chunks_rewritten;
  else
    ++stats_.chunks_written;
  seen = true;
  ++stats_.chunk_writes;
  stats_.bytes += layout_.chunk_values() * stored_value_bytes();
  stats_.visibilities += visibilities;
  stats_.seconds += seconds_since(start);
}

void Backend::do_write_stored(const ChunkKey&, const void*) {
  throw std::logic_error(std::string(name()) + " takes no chunk in stored form");
}

void to_single_conjugated(const cplx* values, index_t n, std::complex<float>* cells) {
  for (index_t i = 0; i < n; ++i)  // one pass the compiler vectorises
    cells[i] = std::complex<float>(static_cast<float>(values[i].real()),
                                   static_cast<float>(-values[i].imag()));
}

void Backend::idle() {
  const ProgressMark mark(progress_, StorageStep::writing);  // a collective round
  const auto start = Clock::now();
  do_idle();
  stats_.seconds += seconds_since(start);
}

void Backend::flush() {
  const ProgressMark mark(progress_, StorageStep::syncing);
  const auto start = Clock::now();
  do_flush();
  stats_.sync_s += seconds_since(start);
}

void Backend::complete() {
  const ProgressMark mark(progress_, StorageStep::closing);
  const auto start = Clock::now();
  do_close();
  stats_.sync_s += seconds_since(start);
}

std::uint32_t chunk_crc32(const void* bytes, index_t count, std::uint32_t crc) {
  // ISA-L's gzip CRC: zlib's crc32, value for value.
  return crc32_gzip_refl(crc, static_cast<const unsigned char*>(bytes),
                         static_cast<std::uint64_t>(count));
}

std::runtime_error storage_failure(const std::string& what) {
  for (const char* cause : {"Disk quota exceeded", "No space left on device"})
    if (what.find(cause) != std::string::npos) return std::runtime_error(what);
  return std::runtime_error(what + " (disk full?)");
}

void zero_past_edges(index_t rows, index_t channels, index_t chunk_rows, index_t chunk_channels,
                     const ChunkKey& key, cplx* values) {
  const index_t inside_rows = std::min(chunk_rows, rows - key.row_chunk * chunk_rows);
  const index_t inside_channels =
      std::min(chunk_channels, channels - key.freq_chunk * chunk_channels);
  for (index_t r = 0; r < chunk_rows; ++r)
    for (index_t c = r < inside_rows ? inside_channels : 0; c < chunk_channels; ++c)
      values[r * chunk_channels + c] = cplx{};
}

void Backend::record_checksum(const ChunkKey& key, const void* bytes, bool part) {
  // Of the chunk as readers give it: zero past the observation's edges,
  // whatever the writer left there (a copy only for a chunk on an edge).
  const bool on_edge = (key.row_chunk + 1) * layout_.time_chunk > layout_.rows() ||
                       (key.freq_chunk + 1) * layout_.freq_chunk > layout_.channels;
  std::uint32_t crc = 0;
  if (given_crc32_ && !on_edge) {
    crc = *given_crc32_;  // of the very bytes written (the first write's are write_chunk's)
  } else if (on_edge) {
    const auto* values = static_cast<const cplx*>(bytes);
    std::vector<cplx> inside(values, values + layout_.chunk_values());
    zero_past_edges(layout_.rows(), layout_.channels, layout_.time_chunk, layout_.freq_chunk, key,
                    inside.data());
    crc = chunk_crc32(inside.data(), layout_.chunk_bytes());
  } else {
    crc = chunk_crc32(bytes, layout_.chunk_bytes());
  }
  record_crc32(key, crc, part);
}

void Backend::record_crc32(const ChunkKey& key, std::uint32_t crc, bool part) {
  const std::int64_t chunk = key.row_chunk * layout_.freq_chunks() + key.freq_chunk;
  // A rewrite (rare: split chunks are held until whole) is most likely of a
  // recent chunk: searched from the end.
  if (!part && written_[static_cast<size_t>(chunk)]) {
    const auto it = std::find_if(checksums_.rbegin(), checksums_.rend(),
                                 [&](const ChunkChecksum& c) { return c.chunk == chunk; });
    if (it != checksums_.rend()) {
      it->crc32 = crc;
      return;
    }
  }
  checksums_.push_back({chunk, crc});
}

std::uint32_t combine_part_crc32(const std::vector<std::uint32_t>& parts, index_t bytes) {
  std::uint32_t crc = 0;
  for (const auto c : parts) crc ^= c;
  if (parts.size() % 2 == 0) {  // an even count of affine terms: the constant once more
    const std::vector<char> zeros(static_cast<size_t>(bytes), 0);
    crc ^= chunk_crc32(zeros.data(), bytes);
  }
  return crc;
}

std::uint32_t draw_nonce() {
  std::random_device device;
  std::uint32_t n = 0;
  while (n == 0) n = device();
  return n;
}

std::vector<WrittenPart> merge_written_parts(std::vector<WrittenPart> parts) {
  std::sort(parts.begin(), parts.end());
  std::vector<WrittenPart> merged;
  for (const auto& p : parts) {
    auto* last = merged.empty() ? nullptr : &merged.back();
    if (last && last->w_stack == p.w_stack && last->subgrid == p.subgrid &&
        p.row_chunk_begin <= last->row_chunk_end)
      last->row_chunk_end = std::max(last->row_chunk_end, p.row_chunk_end);
    else
      merged.push_back(p);
  }
  return merged;
}

VisibilityLayout layout_of(const telescope::Observation& obs) {
  VisibilityLayout layout;
  layout.observation = &obs;
  layout.baselines = obs.baseline_count();
  layout.times = obs.time.steps;
  layout.channels = obs.freq.steps;
  layout.time_chunk = obs.time.chunk;
  layout.freq_chunk = obs.freq.chunk;
  return layout;
}

}  // namespace iotest::storage
