#include "iotest/chunks/chunk_gatherer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "iotest/common/errors.hpp"

namespace iotest::chunks {

ChunkGatherer::ChunkGatherer(const std::vector<const Reader*>& files, std::mutex& lock)
    : files_(files),
      lock_(lock),
      rows_(files.at(0)->chunk_rows()),
      channels_(files.at(0)->chunk_channels()),
      freq_chunks_(files.at(0)->channel_chunks()),
      part_(static_cast<size_t>(rows_ * channels_)) {}

const std::vector<cplx>& ChunkGatherer::chunk(const ChunkKey& key) {
  const index_t index = key.row_chunk * freq_chunks_ + key.freq_chunk;
  if (const auto it = cache_.find(index); it != cache_.end()) return it->second;
  std::vector<cplx> sum(static_cast<size_t>(rows_ * channels_));
  bool found = false;
  {
    const std::lock_guard<std::mutex> hold(lock_);
    for (const Reader* file : files_) {
      const auto t0 = std::chrono::steady_clock::now();
      const bool present = file->read_chunk(key, found ? part_.data() : sum.data());
      tally_.seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!present) continue;
      ++tally_.chunks;
      tally_.bytes += rows_ * channels_ * static_cast<index_t>(sizeof(cplx));
      if (found) std::transform(sum.begin(), sum.end(), part_.begin(), sum.begin(), std::plus<>());
      found = true;
    }
  }
  if (!found)
    throw UsageError("FILE", fmt::format("chunk (row chunk {}, frequency chunk {}) is in none of "
                                         "the files: an incomplete output set",
                                         key.row_chunk, key.freq_chunk));
  return cache_.emplace(index, std::move(sum)).first->second;
}

void ChunkGatherer::gather(index_t row, index_t chan_begin, index_t count, cplx* out) {
  const auto& values = chunk({row / rows_, chan_begin / channels_});
  const cplx* first = values.data() + (row % rows_) * channels_ + chan_begin % channels_;
  std::copy(first, first + count, out);
}

}  // namespace iotest::chunks
