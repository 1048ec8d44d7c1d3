// `iotest h5`: the checkpoint kernel of seism-core (DESIGN.md section 6),
// the storage kernel of parallel HDF5 on its own. A 3-D process grid
// writes a 4-D dataset (steps x global domain) one 3-D slice per time
// step, each rank its block, through one shared file with parallel HDF5
// and its knobs. It reports creation, each step's write and closing apart,
// and raw (bytes over write time) and aggregate (bytes over everything)
// rates, as seism-core and IOR do.
#pragma once

#include <mpi.h>

#include <array>
#include <string>
#include <vector>

#include "iotest/report/report.hpp"

namespace iotest::checkpoint {

struct H5Options {
  std::string path;                             // the shared file (removed at the end unless keep)
  std::array<int, 3> grid{};                    // process grid (0: from MPI_Dims_create)
  std::array<long long, 3> domain{64, 64, 64};  // values per rank and axis (doubles)
  std::array<long long, 3> chunk{};             // HDF5 chunk per step (0: the domain)
  int steps = 8;
  bool collective = true;            // collective or independent transfers
  bool collective_metadata = false;  // collective metadata reads and writes
  bool never_fill = true;            // H5D_FILL_TIME_NEVER
  std::string alloc = "early";       // allocation time: early, late, incremental
  bool precreate = false;            // rank 0 creates and allocates the file alone first
  long long alignment = 0;           // H5Pset_alignment (bytes; 0: none)
  long long chunk_cache = 0;         // H5Pset_chunk_cache bytes (0: HDF5's default)
  std::vector<std::string> hints;    // MPI-IO hints KEY=VALUE (striping_factor, cb_nodes...)
  bool check = false;                // read every value back
  bool keep = false;                 // keep the file
};

// Collective over comm; the report is complete on rank 0. UsageErrors are
// agreed (thrown on every rank).
report::Report h5(const H5Options& options, MPI_Comm comm);

}  // namespace iotest::checkpoint
