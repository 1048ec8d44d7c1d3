// A producer's imaging side: it receives each facet's contribution of
// every subgrid from the streamers of the visit's parts, in the walk's
// order, with at most `slots` receives posted, and recombines them into
// the dirty image facets (docs/pipeline.md). It never blocks: the imaging
// producer polls it alone, and with --direction=both the predict producer
// polls it wherever it waits, so neither direction holds up the other.
#pragma once

#include <deque>
#include <vector>

#include "iotest/pipeline/roles.hpp"

namespace iotest::pipeline {

class ImageReceiver {
 public:
  // `sums`: a w-stack's facet sums (zeroed); the dirty image goes to
  // ctx.image_facets. `assignments`: the producer's one view of the
  // assigner's messages, shared with its predict side.
  ImageReceiver(Context& ctx, std::vector<Array2D>& sums, index_t slots, Assignments& assignments);
  // Posts receives and recombines what has arrived; false when nothing
  // happened (the caller may sleep).
  bool step(report::RankFigures& stats);
  // Every visit's contributions are in.
  bool done() const { return posted_.empty() && (k_ >= visits_ || own_ == 0); }
  // The last column and w-stack into the dirty image (once done()).
  void finish();

 private:
  // Kept by a failing rank while in flight. Never moved or copied (slots_
  // is sized once and posted_ points into it): a copy of a posted request
  // would make its moved-from owner keep a buffer for nothing.
  struct Slot {
    Array2D buffer;
    MPI_Request request = MPI_REQUEST_NULL;
    index_t visit = -1, facet = -1;  // facet: the index into the producer's facets
    Slot() = default;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { keep_while_in_flight({&request, 1}, buffer); }
  };
  void finish_column();
  void finish_stack();

  Context& ctx_;
  const swiftly::Recombination& rec_;
  std::vector<index_t> facets_;
  index_t own_, visits_;
  int threads_;
  std::vector<Array2D>& sums_;
  std::vector<Array2D> columns_, facet_ws_;
  std::vector<swiftly::ColumnWorkspace> column_ws_;
  std::vector<Slot> slots_;
  std::deque<Slot*> posted_;  // in walk order
  std::vector<Slot*> free_, batch_;
  Assignments& assignments_;
  Progress progress_;
  ExceptionCollector failures_;
  // The receive cursor: visit k, its part j, facet i (the order every
  // streamer sends them in), and the streamers of visit k's parts.
  index_t k_ = 0, j_ = 0, i_ = 0;
  std::vector<int> streamers_;
  bool streamers_known_ = false;
  index_t stack_ = kNoStack, column_ = -1;
};

}  // namespace iotest::pipeline
