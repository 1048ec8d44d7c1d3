// Waiting on MPI without spinning (2 cores starve quickly): the pipeline's
// roles and the storage back-ends that share an output wait this way, since
// a blocking call spins and takes a core from a rank at work.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <utility>

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

// Whether any of the requests is still in flight (not MPI_REQUEST_NULL).
inline bool in_flight(std::span<const MPI_Request> requests) {
  return std::any_of(requests.begin(), requests.end(),
                     [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
}

// For the destructor of a buffer's owner: a rank that fails leaves with
// requests on its buffers in flight (its job is ending), and MPI may still
// write a message it matches into one (a receive) or read one from it (a
// send). Such a buffer is kept, not freed: freed, it took other ranks'
// messages into reused memory (a writer rank's false "frequency chunk
// 139672068037952") or, unmapped, faulted in another thread, which under
// MPICH hung the job's abort.
template <class Buffer>
void keep_while_in_flight(std::span<const MPI_Request> requests, Buffer& buffer) {
  if (in_flight(requests)) (void)new Buffer(std::move(buffer));
}

}  // namespace iotest
