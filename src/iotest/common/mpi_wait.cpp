#include "iotest/common/mpi_wait.hpp"

#include <algorithm>
#include <cstdint>
#include <thread>

#include "iotest/common/system.hpp"

namespace iotest {

void Backoff::pause(double& waited) {
  const auto start = Clock::now();
  std::this_thread::sleep_for(delay_);
  waited += seconds_since(start);
  delay_ = std::min(delay_ * 2, std::chrono::microseconds(1000));
}

void wait_for(MPI_Request& request) {
  Backoff backoff;
  double waited = 0;
  for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done;) backoff.pause(waited);
}

void barrier(MPI_Comm comm) {
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  wait_for(request);
}

void broadcast(MPI_Comm comm, int root, std::string& text) {
  std::int64_t size = static_cast<std::int64_t>(text.size());
  MPI_Request request;
  MPI_Ibcast(&size, 1, MPI_INT64_T, root, comm, &request);
  wait_for(request);
  text.resize(static_cast<size_t>(size));
  MPI_Ibcast(text.data(), static_cast<int>(size), MPI_CHAR, root, comm, &request);
  wait_for(request);
}

}  // namespace iotest
