// In-transit writers (issue 12; the Nyx/BoxLib "sidecar"): with
// --writer-ranks=K the streamers do not write. Each streamer's one
// forwarding thread empties its chunk queue (the same ChunkQueue an in
// situ writer empties, so degridding sees the same back-pressure) into
// MPI_Issend's to the writer group, at most --transit-queue in flight; a
// writer rank keeps --transit-queue receives posted and hands each chunk to
// its own writers (writers.hpp), which write through the storage
// back-ends. Chunk (r, f) always goes to writer rank (r * F + f) mod K, so
// a chunk's parts from several streamers meet in one place and are written
// once, whole.
//
// Why it cannot deadlock: a forwarder waits only for a writer rank to
// match its send; a writer rank re-posts a receive as soon as it has
// handed a chunk to its writers, whose queues drain into storage without
// waiting on any rank. Synchronous sends (Issend) make the bound real:
// a send completes only once a posted receive has taken it, so no MPI
// buffer grows behind the slots.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "iotest/pipeline/time_series.hpp"
#include "iotest/pipeline/writers.hpp"

namespace iotest::pipeline {

// Streamer -> writer rank, on the run's transit communicator: a
// TransitHeader and what it announces; an empty message ends the
// streamer's chunks.
inline constexpr int kTagChunk = 1;

// What one message announces; its payload follows it in the same message.
struct TransitHeader {
  enum Kind : std::int64_t { whole_chunk = 0, chunk_part = 1, written_parts = 2 };
  std::int64_t kind = whole_chunk;
  std::int64_t row_chunk = 0, freq_chunk = 0;
  // Visibilities the chunk carries (written_parts: payload bytes).
  std::int64_t visibilities = 0;
};

// Bytes of the largest message: a header, a chunk's values, its presence
// bits. The memory model counts slots of this size.
index_t transit_message_bytes(const storage::VisibilityLayout& layout);

// A streamer's side, measured by its forwarding thread.
struct TransitTally {
  index_t chunks = 0, bytes = 0;  // messages and payload bytes sent
  index_t kept_chunks = 0;        // the exchange: chunks for its own files, handed over
  double send_wait_s = 0;         // every slot in flight: waiting for the writer group
};

// Which writer rank a chunk goes to: by row chunk, as a streamer's own
// writers are chosen; or, outputs split by frequency, the rank holding its
// file (files_per_rank outputs each, numbered in rank order).
struct ChunkRoute {
  std::vector<int> ranks;  // the writer group (in situ exchange: the streamers)
  storage::FileSplit split;
  index_t files_per_rank = 1;
  int rank_of(const storage::ChunkKey& key) const {
    const index_t k = split.by_frequency()
                          ? split.file_of(key.freq_chunk) / files_per_rank
                          : key.row_chunk % static_cast<index_t>(ranks.size());
    return ranks[static_cast<size_t>(k)];
  }
};

// The body of a streamer's forwarding thread (WriterOptions::consumer):
// sends what the queue holds to the route's ranks on `comm`, then an empty
// message to each to say this streamer is done. `tally` is written by the
// thread and read once Writers::finish() has joined it. It gives up once
// the queue has failed (the streamer, or its exchange, is failing).
// `own`: this rank's writers where it is in the route (the in situ
// exchange): its own chunks go to them directly, not through MPI (one copy
// instead of three), and are counted in `tally.kept_chunks`.
std::function<void(ChunkQueue&)> forward_to_writer_group(MPI_Comm comm, ChunkRoute route,
                                                         index_t slots,
                                                         const storage::VisibilityLayout& layout,
                                                         TransitTally& tally,
                                                         Writers* own = nullptr);

// A writer rank's receiving side: until `senders` empty messages have
// come, takes every message on `comm` (kTagChunk) with `slots` receives
// posted and gives its chunk to `writers`; written parts are gathered,
// merged and recorded with the outputs at the end.
struct TransitReceived {
  index_t chunks = 0, bytes = 0;
  double idle_s = 0;  // no message in: waiting for the streamers
};
TransitReceived receive_from_streamers(MPI_Comm comm, int senders, index_t slots,
                                       const storage::VisibilityLayout& layout, Writers& writers,
                                       TimeSeries& timeline);

}  // namespace iotest::pipeline
