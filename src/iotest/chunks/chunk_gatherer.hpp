// The read side's twin of ChunkAssembler: the imaging direction asks for
// runs (one baseline, one time step, a few channels) and storage gives
// whole chunks. The gatherer reads each chunk a task needs once, sums it
// over the files of the output set (a chunk split between writers lies in
// each of their files, zero where another holds the value), and copies the
// runs out. Tasks cover whole row chunks, so the chunks one task reads are
// dropped at its end (clear()).
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include "iotest/storage/reader.hpp"

namespace iotest::chunks {

// The storage layout's terms, which chunks are shaped into.
using storage::ChunkKey;
using storage::Reader;

// What a reader side did, measured as the write side is.
struct ReadTally {
  index_t chunks = 0;  // chunk reads that found data (per file)
  index_t bytes = 0;   // bytes of those chunks
  double seconds = 0;  // inside read calls
  void add(const ReadTally& o) {
    chunks += o.chunks;
    bytes += o.bytes;
    seconds += o.seconds;
  }
};

class ChunkGatherer {
 public:
  // `files`: one output set (same shape; verify's checks); `lock` guards
  // them, as a Reader takes one thread at a time.
  ChunkGatherer(const std::vector<const Reader*>& files, std::mutex& lock);
  // Channels [chan_begin, chan_begin + count) of `row` (baseline * times +
  // time), inside one frequency chunk, into `out`. Throws UsageError when
  // no file holds the chunk.
  void gather(index_t row, index_t chan_begin, index_t count, cplx* out);
  // Drops the chunks read so far (the end of a task).
  void clear() { cache_.clear(); }
  const ReadTally& tally() const { return tally_; }

 private:
  const std::vector<cplx>& chunk(const ChunkKey& key);
  std::vector<const Reader*> files_;
  std::mutex& lock_;
  index_t rows_, channels_, freq_chunks_;
  std::unordered_map<index_t, std::vector<cplx>> cache_;  // by row_chunk * freq_chunks + freq_chunk
  std::vector<cplx> part_;                                // one file's part of a chunk
  ReadTally tally_;
};

}  // namespace iotest::chunks
