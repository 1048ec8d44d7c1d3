// `iotest read`: an output read back through the storage back-ends, over
// MPI, as the imaging direction will read it: each rank its share of the
// files (file i on rank i mod ranks, as a streamer reads the files its
// writers wrote), each file's chunks in the order they lie in storage
// (the order they were written, the walk's visit order). Reading is
// measured like writing: chunks, bytes, time inside the read calls apart
// from opening, and the rate over the whole reading phase.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::pipeline {

struct ReadOptions {
  std::vector<std::string> files;
  storage::StorageOptions storage;  // the back-ends' read options (--posix.direct)
  bool drop_caches = false;         // root only: empty the page cache first
  bool check = false;               // every value against the synthetic pattern
  // A read (or open) that makes no progress this long ends the job, as a
  // run's storage calls do (RunOptions::storage_stall_timeout_s).
  double storage_stall_timeout_s = 120;
};

// Collective over comm; the report is complete on rank 0. UsageErrors are
// agreed (thrown on every rank); other failures are this rank's alone.
report::Report read(const ReadOptions& options, MPI_Comm comm);

}  // namespace iotest::pipeline
