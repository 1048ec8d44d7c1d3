#include "iotest/chunks/chunk_assembler.hpp"

#include <algorithm>
#include <stdexcept>

namespace iotest::chunks {

void set_present(PresenceWord* bits, index_t begin, index_t end) {
  if (begin >= end) return;
  constexpr PresenceWord kAll = ~PresenceWord{0};
  const index_t first = begin / 64, last = (end - 1) / 64;
  const PresenceWord head = kAll << (begin % 64);        // bits from begin in its word
  const PresenceWord tail = kAll >> (63 - (end - 1) % 64);  // bits up to end - 1 in its word
  if (first == last) {
    bits[first] |= head & tail;
    return;
  }
  bits[first] |= head;
  std::fill(bits + first + 1, bits + last, kAll);
  bits[last] |= tail;
}

ChunkCover::ChunkCover(const VisibilityLayout& layout)
    : layout_(layout), open_(static_cast<size_t>(layout.freq_chunks())) {}

ChunkCover::Place ChunkCover::add(index_t row, index_t chan_begin, index_t count,
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
  const bool opened = chunk.visibilities == 0;
  if (opened) {
    chunk.present.assign(static_cast<size_t>(layout_.presence_words()), 0);
    touched_.push_back(fc);
  }
  const index_t at =
      (row % layout_.time_chunk) * layout_.freq_chunk + (chan_begin - fc * layout_.freq_chunk);
  set_present(chunk.present.data(), at, at + count);
  chunk.visibilities += count;
  return {fc, at, opened};
}

void ChunkCover::flush(const Emit& emit) {
  for (const index_t fc : touched_) {
    auto& chunk = open_[static_cast<size_t>(fc)];
    const ChunkKey key{row_chunk_, fc};
    // Whole: no presence bits, so the queue checksums it as it takes it in
    // and the writer writes it from there (a part waits for the rest).
    const bool whole = chunk.visibilities >= visibilities_inside(layout_, key);
    emit(key, chunk.visibilities, whole ? nullptr : chunk.present.data());
    chunk.visibilities = 0;
  }
  touched_.clear();
  row_chunk_ = -1;
}

ChunkAssembler::ChunkAssembler(const VisibilityLayout& layout)
    : cover_(layout), values_(static_cast<size_t>(layout.freq_chunks())) {}

void ChunkAssembler::add(index_t row, index_t chan_begin, index_t count, const cplx* vis,
                         const Emit& emit) {
  const auto place = cover_.add(row, chan_begin, count,
                                [&](const ChunkKey& key, index_t n, const PresenceWord* present) {
                                  emit(key, values_[static_cast<size_t>(key.freq_chunk)].data(), n,
                                       present);
                                });
  auto& values = values_[static_cast<size_t>(place.freq_chunk)];
  if (place.opened) values.assign(static_cast<size_t>(cover_.layout().chunk_values()), cplx{});
  std::copy(vis, vis + count, values.data() + place.at);
}

void ChunkAssembler::flush(const Emit& emit) {
  cover_.flush([&](const ChunkKey& key, index_t n, const PresenceWord* present) {
    emit(key, values_[static_cast<size_t>(key.freq_chunk)].data(), n, present);
  });
}

}  // namespace iotest::chunks
