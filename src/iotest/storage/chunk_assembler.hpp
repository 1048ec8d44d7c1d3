// Degridded visibilities come as runs (one baseline, one time step, a few
// channels); storage takes whole chunks. The assembler scatters runs into
// chunk buffers and hands a chunk on once the runs have moved past its row
// chunk, so one degrid task that covers whole row chunks emits each of its
// chunks once.
#pragma once

#include <functional>
#include <vector>

#include "iotest/storage/backend.hpp"

namespace iotest::storage {

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
  struct Open {
    std::vector<cplx> values;
    std::vector<PresenceWord> present;
    index_t visibilities = 0;
  };
  VisibilityLayout layout_;
  index_t row_chunk_ = -1;
  std::vector<Open> open_;        // per frequency chunk of the current row chunk
  std::vector<index_t> touched_;  // frequency chunks with values, in first-touch order
};

}  // namespace iotest::storage
