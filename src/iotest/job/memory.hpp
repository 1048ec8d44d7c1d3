// The memory model: every buffer each role of a run holds, from the job,
// the run's shape (roles, threads, queues, writers) and the figures of its
// visits. `plan` prints it, `run` and `degrid` refuse a job it says will
// not fit, and the tests hold it against the measured peak RSS of every
// role. Pools are allocated (and touched) when a role starts, so the
// model is what a rank holds from its first visit on, not only at its
// busiest.
#pragma once

#include "iotest/binning/binning.hpp"
#include "iotest/job/job.hpp"
#include "iotest/report/report.hpp"

namespace iotest::job {

// What a run's roles are made of (DESIGN.md section 2 defaults).
struct RunShape {
  int producers = 1, streamers = 1;  // 0 producers: streamers get no receive slots
  bool assigner = false;
  int threads = 1, producer_threads = 1;
  index_t send_queue = 8, subgrid_queue = 32, task_queue = 128, bls_per_task = 256,
          visibility_queue = 1024;
  int writer_count = 1;
  bool writes = false;       // an HDF5 output (else the null back-end)
  bool fork_writer = false;  // writers in processes of their own (not in the streamer's RSS)
  bool synthetic = false;    // storage only: no towers, no degridding
};

// Libraries, MPI and FFTW state of one process before any buffer: measured
// on the development machine (Open MPI 4.1, HDF5 1.10; see docs/pipeline.md).
inline constexpr index_t kProcessBytes = index_t{28} << 20;

// The largest w-tower any visit needs, in planes (from the counts' w ranges).
index_t max_tower_planes(const Job& job, const binning::VisitCounts& counts);

// Per role; `counts` (the visits' figures) may be null without a vis-set.
report::Memory estimate_memory(const Job& job, const RunShape& shape,
                               const binning::VisitCounts* counts);

// The single process of `iotest degrid` (or `recombine`, without a vis-set).
index_t estimate_single_process(const Job& job, int threads, const binning::VisitCounts* counts,
                                bool writes);

// Bytes of one task's buffers at most: its visibilities and runs.
index_t task_visibilities(const Job& job, const binning::VisitCounts& counts,
                          index_t bls_per_task);

}  // namespace iotest::job
