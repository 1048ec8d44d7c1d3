// Outputs begun and not published, to be dropped when a run ends without
// unwinding: a rank that fails calls MPI_Abort, and its peers are killed;
// SIGTERM (a job's time limit) ends a process at once. An object store's
// uploads are invisible but hold space until aborted, so a run's ending
// takes them back (docs/storage.md, "Object stores"). Files need nothing:
// an in-progress file stays .partial, which no reader takes.
#pragma once

#include <chrono>
#include <functional>

namespace iotest::storage {

// Outputs begun (a claim's upload, a run's outputs) and how to take them
// back: at the end of this object's life unless released (a run that ends
// early, unwinding), or by drop_unpublished_outputs (a process ending
// without unwinding). `drop` is called at most once.
class UnpublishedOutput {
 public:
  explicit UnpublishedOutput(std::function<void()> drop);
  ~UnpublishedOutput();
  UnpublishedOutput(const UnpublishedOutput&) = delete;
  UnpublishedOutput& operator=(const UnpublishedOutput&) = delete;
  // Published, or taken back otherwise: nothing left to drop.
  void release();

 private:
  int id_;
};

// Whether any is registered; safe in a signal handler (an atomic load).
bool any_unpublished_outputs();
// Calls every registered drop, on a thread of its own, waiting for them at
// most `bound` (a store that stopped answering does not hold the job's
// end); returns whether they all finished.
bool drop_unpublished_outputs(std::chrono::milliseconds bound);

}  // namespace iotest::storage
