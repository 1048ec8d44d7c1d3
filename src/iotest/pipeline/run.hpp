// `iotest [run]`: the predict pipeline distributed over MPI ranks.
// Producers (facet workers) hold facets and send each subgrid's
// contributions to the streamer that owns it; streamers sum them, degrid
// and hand whole chunks to writers. docs/pipeline.md describes the roles,
// the message protocol and why it cannot deadlock.
#pragma once

#include <mpi.h>

#include "iotest/pipeline/run_options.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::pipeline {

// Runs the job on `comm`; the report is complete on rank 0 only. A
// UsageError is thrown on every rank alike (agreed); any other exception
// leaves this rank alone, with peers that may be waiting on it: the caller
// must end the job (MPI_Abort).
report::Report run(const RunOptions& options, MPI_Comm comm);

// How a run's options combine, checked as `run` checks them before any
// work, but for the ranks (no MPI): UsageError naming the option. `plan
// --slurm` checks the run it writes with it. Returns the output's back-end.
storage::StorageChoice check_run_combination(const RunOptions& options);

}  // namespace iotest::pipeline
