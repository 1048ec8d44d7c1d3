#include "iotest/common/mpi_agree.hpp"

#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_wait.hpp"

namespace iotest {

std::string agree_on_error(MPI_Comm comm, const std::string& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int first = mine.empty() ? size : rank, agreed = size;
  MPI_Request request;
  MPI_Iallreduce(&first, &agreed, 1, MPI_INT, MPI_MIN, comm, &request);
  wait_for(request);
  if (agreed == size) return {};
  std::string text = rank == agreed ? mine : std::string();
  broadcast(comm, agreed, text);
  return text;
}

void agree_on_usage(MPI_Comm comm, const std::function<void()>& check) {
  std::string mine;  // OPTION '\n' MESSAGE
  try {
    check();
  } catch (const UsageError& e) {
    mine = e.option() + '\n' + e.what();
  }
  const std::string agreed = agree_on_error(comm, mine);
  if (agreed.empty()) return;
  const auto cut = agreed.find('\n');
  throw UsageError(agreed.substr(0, cut), agreed.substr(cut + 1));
}

}  // namespace iotest
