// Degridded visibilities come as runs (one baseline, one time step, a few
// channels); storage takes whole chunks. The assembler scatters runs into
// chunk buffers and hands a chunk on once the runs have moved past its row
// chunk, so one degrid task that covers whole row chunks emits each of its
// chunks once. ChunkCover is its bookkeeping alone (which visibilities of
// the open chunks the runs cover), for values made at emit instead of
// carried (--synthetic-vis: the pattern, made in the writer's queue).
#pragma once

#include <functional>
#include <vector>

#include "iotest/storage/backend.hpp"

namespace iotest::chunks {

// The storage layout's terms, which chunks are shaped into.
using storage::ChunkKey;
using storage::PresenceWord;
using storage::StoredForm;
using storage::VisibilityLayout;

// Sets the presence bits of values [begin, end) of a chunk, a word at a
// time (a run is hundreds of values: a bit at a time cost a tenth of the
// synthetic pipeline).
void set_present(PresenceWord* bits, index_t begin, index_t end);

// A chunk made where it goes (a writer's queue slot) rather than copied
// there: writes its layout.chunk_values() values at `values` in `form`
// (as_given: complex doubles; else as the writer's back-end stores them,
// asked only for a whole chunk inside the edges) and returns the CRC-32
// (chunk_crc32's) of the bytes it wrote, taken while they were in cache.
using MakeChunk = std::function<std::uint32_t(void* values, StoredForm form)>;

class ChunkCover {
 public:
  // Receives a chunk the runs have moved past: how many visibilities the
  // runs covered and which (nullptr: every one inside the observation, so
  // the chunk is whole).
  using Emit = std::function<void(const ChunkKey&, index_t, const PresenceWord*)>;
  explicit ChunkCover(const VisibilityLayout& layout);
  // Where a run went: its frequency chunk, its first value's index in the
  // chunk (row-major), and whether the run opened the chunk.
  struct Place {
    index_t freq_chunk = 0, at = 0;
    bool opened = false;
  };
  // Channels [chan_begin, chan_begin + count) of `row` (baseline * times +
  // time), inside one frequency chunk. Rows must not go back to an earlier
  // row chunk before flush(); moving on to a later one emits the open
  // chunks first.
  Place add(index_t row, index_t chan_begin, index_t count, const Emit& emit);
  // Emits every chunk still open, in the order they were opened.
  void flush(const Emit& emit);
  const VisibilityLayout& layout() const { return layout_; }

 private:
  struct Open {
    std::vector<PresenceWord> present;
    index_t visibilities = 0;
  };
  VisibilityLayout layout_;
  index_t row_chunk_ = -1;
  std::vector<Open> open_;        // per frequency chunk of the current row chunk
  std::vector<index_t> touched_;  // frequency chunks with values, in first-touch order
};

class ChunkAssembler {
 public:
  // Receives a finished chunk (layout.chunk_values() values, zero where no
  // run fell), how many visibilities it carries and which.
  using Emit = std::function<void(const ChunkKey&, const cplx*, index_t, const PresenceWord*)>;
  explicit ChunkAssembler(const VisibilityLayout& layout);
  // Channels [chan_begin, chan_begin + count) of `row` (baseline * times +
  // time), inside one frequency chunk. Rows must not go back to an earlier
  // row chunk before flush().
  void add(index_t row, index_t chan_begin, index_t count, const cplx* vis, const Emit& emit);
  // Emits every chunk still open.
  void flush(const Emit& emit);

 private:
  ChunkCover cover_;
  std::vector<std::vector<cplx>> values_;  // per frequency chunk of the current row chunk
};

}  // namespace iotest::chunks
