#include "iotest/pipeline/placement.hpp"

#include <algorithm>
#include <vector>

#include "iotest/common/mpi_wait.hpp"

namespace iotest::pipeline {

MPI_Comm place_by_node(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = 0, first = rank;
  MPI_Comm_rank(node, &local_rank);
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node, &request);
  wait_for(request);
  MPI_Comm_free(&node);
  // Every rank's node, named by the node's first rank.
  std::vector<int> firsts(static_cast<size_t>(size));
  MPI_Iallgather(&first, 1, MPI_INT, firsts.data(), 1, MPI_INT, comm, &request);
  wait_for(request);
  std::sort(firsts.begin(), firsts.end());
  firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
  const int nodes = static_cast<int>(firsts.size());
  const int node_index =
      static_cast<int>(std::lower_bound(firsts.begin(), firsts.end(), first) - firsts.begin());
  // The k-th rank of every node before the (k+1)-th of any: node-cyclic.
  MPI_Comm placed;
  MPI_Comm_split(comm, 0, local_rank * nodes + node_index, &placed);
  return placed;
}

}  // namespace iotest::pipeline
