// The loop a streamer's first thread runs, both directions: the parts it is
// to take (its own from the plan, or granted by the assigner as slots free
// up), one slot per part in flight, each facet's contribution moved by a
// non-blocking receive or send, and the slots the worker threads hand back.
// The roles differ in what a slot goes through between taking a part and
// freeing it; that is theirs (streamer.cpp, image_streamer.cpp), and this
// is the rest, once, so that the messages and their counts are the same.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "iotest/common/mpi_wait.hpp"
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/task_queue.hpp"

namespace iotest::pipeline {

// One part's contributions, one per facet, and their requests (kept by a
// failing rank while in flight).
struct PartBuffers {
  AlignedBuffer contributions;
  std::vector<MPI_Request> requests;
  index_t part = -1;
  PartBuffers() = default;
  PartBuffers(PartBuffers&&) = default;
  PartBuffers& operator=(PartBuffers&&) = default;
  ~PartBuffers() { keep_while_in_flight(requests, contributions); }
};

// The parts still to take, in walk order. Static assignment: this
// streamer's parts of the plan, all known at the start. Dynamic (an
// assigner rank): none at first; each freed slot asks for one more, and an
// empty grant says the walk is over.
class Grants {
 public:
  Grants(const Context& ctx, report::RankStats& stats);
  // Asks the assigner for n more parts (n < 0: goodbye, after its last
  // grant). Without an assigner, or once it said the end, nothing is sent.
  void request(std::int64_t n);
  // Takes a grant if one has come: true if so.
  bool poll();
  // Whether parts may still come from the assigner.
  bool more_coming() const { return more_coming_; }
  // Taken and not yet given a slot (a role may drop some: --duration).
  std::deque<index_t>& todo() { return todo_; }
  // No part left to take, now or later.
  bool done() const { return !more_coming_ && todo_.empty(); }

  // The next parts into the free slots (state kFree), in walk order and
  // slot order; start(i) sets slot i going. True if any was taken.
  template <class Slot>
  bool fill(std::vector<Slot>& slots, const std::function<void(size_t)>& start) {
    bool taken = false;
    for (size_t i = 0; i < slots.size() && !todo_.empty(); ++i) {
      Slot& s = slots[i];
      if (s.state != Slot::State::kFree) continue;
      s.part = todo_.front();
      todo_.pop_front();
      start(i);
      taken = true;
    }
    return taken;
  }

 private:
  const Context& ctx_;
  report::RankStats& stats_;
  std::deque<index_t> todo_;
  bool more_coming_;
};

// A part's facet contributions, one message per facet with the facet as
// its tag, from or to the facet's producer on the data communicator. The
// counts go to stats: messages and bytes when a send is posted or a
// receive completes.
class Contributions {
 public:
  Contributions(const Context& ctx, report::RankStats& stats);
  void post_receives(PartBuffers& b) const;
  // Whether b's receives are all in (then counted).
  bool received(PartBuffers& b) const;
  void post_sends(PartBuffers& b) const;
  // Whether b's sends are all done.
  bool sent(PartBuffers& b) const;

 private:
  const Context& ctx_;
  report::RankStats& stats_;
  index_t facets_, values_;
};

// Slot indices the worker threads hand to the loop's thread (a slot's
// state is the loop thread's alone; the workers only say they are done).
class Handoff {
 public:
  void give(size_t slot) {
    const std::lock_guard<std::mutex> hold(lock_);
    given_.push_back(slot);
  }
  std::vector<size_t> take() {
    std::vector<size_t> taken;
    const std::lock_guard<std::mutex> hold(lock_);
    taken.swap(given_);
    return taken;
  }

 private:
  std::mutex lock_;
  std::vector<size_t> given_;
};

// What either streamer's run holds: the context's parts it reads, its
// result, its tasks and the loop's pieces above. Each role's run derives
// from it and adds its own slots and steps.
struct StreamerRun {
  explicit StreamerRun(Context& c) : ctx(c) {}
  Context& ctx;
  RankResult out;
  report::RankStats& st = out.stats;
  const config::RecombinationParams& p = ctx.job.p;
  const swiftly::Recombination& rec = *ctx.rec;
  const RunOptions& o = ctx.options;
  const int threads = ctx.threads;
  const index_t F = p.facet_count(), values = p.m * p.m;
  const bool dynamic = ctx.roles.assigner_rank >= 0;
  GpuLane* gpu = ctx.gpu.get();  // --device=cuda: towers and taps on this GPU
  TaskQueue tasks;
  Grants grants{ctx, st};  // my parts, in walk order, not yet started
  Contributions contributions{ctx, st};
  double idle_s = 0, wait_s = 0;
};

// What one turn of a role's loop did.
struct LoopTurn {
  bool finished = false;    // all done: leave the loop
  bool progressed = false;  // something moved: turn again at once
  bool waiting = false;     // else: waiting on other ranks (not idle)
};

// Runs a role over `threads` threads: the first turns `turn` until it
// finishes or a task fails, the others serve the task queue. A turn that
// moved nothing runs a queued task itself, or else backs off (sleeping,
// never spinning: the cores are the workers'), the time counted as waiting
// on other ranks or as idle. Rethrows the first failure of either.
void run_loop(TaskQueue& tasks, int threads, double& wait_s, double& idle_s,
              const std::function<LoopTurn()>& turn);

}  // namespace iotest::pipeline
