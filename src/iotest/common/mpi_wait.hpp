// Waiting on MPI without spinning (2 cores starve quickly): the pipeline's
// roles and the storage back-ends that share an output wait this way, since
// a blocking call spins and takes a core from a rank at work.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>

namespace iotest {

// After each fruitless test, sleep a little longer, from 20 us up to 1 ms.
class Backoff {
 public:
  void reset() { delay_ = std::chrono::microseconds(20); }
  // Sleeps, adding the time to `waited`.
  void pause(double& waited);

 private:
  std::chrono::microseconds delay_{20};
};

// Waits for a non-blocking operation by test-then-sleep.
void wait_for(MPI_Request& request);
// A barrier over comm, waited for so.
void barrier(MPI_Comm comm);
// Root's text to every rank of comm (waiting without spinning).
void broadcast(MPI_Comm comm, int root, std::string& text);

}  // namespace iotest
