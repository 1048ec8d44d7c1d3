#include "iotest/storage/chunk_assembler.hpp"

#include <algorithm>
#include <stdexcept>

namespace iotest::storage {

ChunkAssembler::ChunkAssembler(const VisibilityLayout& layout)
    : layout_(layout), open_(static_cast<size_t>(layout.freq_chunks())) {}

void ChunkAssembler::add(index_t row, index_t chan_begin, index_t count, const cplx* vis,
                         const Emit& emit) {
  const index_t rc = row / layout_.time_chunk, fc = chan_begin / layout_.freq_chunk;
  if ((chan_begin + count - 1) / layout_.freq_chunk != fc)
    throw std::logic_error("a run crosses a frequency chunk");
  if (rc != row_chunk_) {
    if (rc < row_chunk_) throw std::logic_error("runs went back to an earlier row chunk");
    flush(emit);
    row_chunk_ = rc;
  }
  auto& chunk = open_[static_cast<size_t>(fc)];
  if (chunk.visibilities == 0) {
    chunk.values.assign(static_cast<size_t>(layout_.chunk_values()), cplx{});
    chunk.present.assign(static_cast<size_t>(layout_.presence_words()), 0);
    touched_.push_back(fc);
  }
  const index_t at =
      (row % layout_.time_chunk) * layout_.freq_chunk + (chan_begin - fc * layout_.freq_chunk);
  std::copy(vis, vis + count, chunk.values.data() + at);
  for (index_t v = at; v < at + count; ++v)
    chunk.present[static_cast<size_t>(v / 64)] |= PresenceWord{1} << (v % 64);
  chunk.visibilities += count;
}

void ChunkAssembler::flush(const Emit& emit) {
  for (const index_t fc : touched_) {
    auto& chunk = open_[static_cast<size_t>(fc)];
    const ChunkKey key{row_chunk_, fc};
    // Whole: no presence bits, so the queue checksums it as it copies it in
    // and the writer writes it from there (a part waits for the rest).
    const bool whole = chunk.visibilities >= visibilities_inside(layout_, key);
    emit(key, chunk.values.data(), chunk.visibilities, whole ? nullptr : chunk.present.data());
    chunk.visibilities = 0;
  }
  touched_.clear();
  row_chunk_ = -1;
}

}  // namespace iotest::storage
