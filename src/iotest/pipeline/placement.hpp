// Where the roles run: the ranks renumbered by node, so that the roles
// (producers first, then streamers, writer ranks, the assigner: Roles) are
// spread over the nodes whatever order the launcher gave the ranks.
#pragma once

#include <mpi.h>

namespace iotest::pipeline {

// A communicator of the same ranks in node-cyclic order (collective): rank
// r is on node r mod nodes while every node has ranks left, as `mpirun
// --map-by node` places them. Nodes are MPI's shared-memory domains,
// ordered by their first rank in `comm`, so rank 0 stays rank 0. Why: the
// producers hold the facets (most of a job's memory) and send the most,
// so one a node spreads both, whether srun placed the ranks in blocks or
// cyclically. `iotest plan` lays the nodes out by the same rule.
MPI_Comm place_by_node(MPI_Comm comm);

}  // namespace iotest::pipeline
