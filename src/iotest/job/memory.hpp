// The memory model: every buffer each role of a run holds, from the job,
// the run's shape (roles, threads, queues, writers) and the figures of its
// visits. `plan` prints it, `run` and `degrid` refuse a job it says will
// not fit, and the tests hold it against the measured peak RSS of every
// role. Pools are allocated (and touched) when a role starts, so the
// model is what a rank holds from its first visit on, not only at its
// busiest.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "iotest/binning/binning.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/device/device.hpp"
#include "iotest/image/image_file.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/mpi_library.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/swiftly/direction.hpp"

namespace iotest::job {

// A streamer's visibility queue, in chunks: --visibility-queue if given,
// else as many chunks as kVisibilityQueueBytes holds, 16 to 1024 (1024 at
// 64 KiB, 64 at 1 MiB), and one per writer at least. A budget in bytes,
// not chunks: at 1 MiB chunks 1024 slots (and as many held parts) were
// 2 GiB a streamer, and cold: a queue that large wrote slower than one
// that fits the caches (bench/README.md, large chunks).
inline constexpr index_t kVisibilityQueueBytes = index_t{64} << 20;
inline index_t visibility_queue_slots(std::optional<index_t> given, index_t chunk_bytes,
                                      int writer_count) {
  if (given) return *given;
  const index_t slots = chunk_bytes > 0 ? kVisibilityQueueBytes / chunk_bytes : 1024;
  return std::max<index_t>(writer_count, std::clamp<index_t>(slots, 16, 1024));
}

// What a run's roles are made of (DESIGN.md section 2 defaults).
struct RunShape {
  int producers = 1, streamers = 1;  // 0 producers: streamers get no receive slots
  bool assigner = false;
  int threads = 1, producer_threads = 1;
  index_t send_queue = 8, subgrid_queue = 8, task_queue = 128, bls_per_task = 256,
          visibility_queue = 1024;
  int writer_count = 1;            // per streamer, or in transit per writer rank
  int writer_ranks = 0;            // in transit: the writer group
  index_t transit_queue = 16;      // in transit: messages in flight per streamer and writer rank
  bool writes = false;             // an output (else the null back-end)
  bool fork_writer = false;        // writers in processes of their own (not in the streamer's RSS)
  bool synthetic = false;          // storage only: no towers, no degridding
  // What a writer's back-end holds besides its queue: chunk buffers
  // (phdf5's batches, ms's conversions) and bytes per row chunk of the
  // observation (ms); hold_for_storage sets them.
  index_t writer_held_chunks = 0;
  index_t writer_held_bytes = 0;  // besides chunks (an object store's parts)
  index_t writer_row_chunk_bytes = 0;
  // Outputs split by frequency (ms): in situ, several streamers exchange
  // chunks (a forwarding queue, send and receive slots each).
  bool files_by_frequency = false;
  // One output shared by every writer (phdf5): its first writer makes it
  // alone with HDF5's serial driver before all open it in parallel.
  bool shared_output = false;
  // The imaging direction: producers hold their dirty image facets too;
  // streamers send (not receive) through their slots, grid on one tower a
  // thread and hold the chunks a task reads instead of writers' queues.
  // Both: the producers hold both sides, the streamers a model tower more.
  swiftly::Direction direction = swiftly::Direction::predict;
  // --image (the imaging direction): rank 0, a producer, writes the dirty
  // image, holding a block of a facet and the file library's buffers
  // (image::image_writer_bytes; FITS or HDF5).
  bool image = false, image_fits = false;
  bool network_only = false;  // producers hold no facets, streamers no towers
  // --device=cuda: each streamer holds its GPU's share too (the items of
  // role "streamer GPU", Memory::streamer_gpu_bytes).
  device::Kind device = device::Kind::cpu;
};

// The options a run's shape comes from, checked (UsageError naming the
// option). `run` and `plan` take them alike: the same fields, the same
// names on the command line.
template <class Options>
void check_shape_options(const Options& o) {
  const auto positive = [](index_t v, const char* option) {
    if (v < 1) throw UsageError(option, fmt::format("expected at least 1, got {}", v));
  };
  positive(o.send_queue, "--send-queue");
  positive(o.subgrid_queue, "--subgrid-queue");
  positive(o.task_queue, "--task-queue");
  positive(o.bls_per_task, "--bls-per-task");
  if (o.visibility_queue) positive(*o.visibility_queue, "--visibility-queue");
  positive(o.writer_count, "--writer-count");
  positive(o.transit_queue, "--transit-queue");
  if (o.writer_ranks < 0)
    throw UsageError("--writer-ranks", "expected a count >= 0 (0: the writers in the streamers)");
  if (o.threads < 0) throw UsageError("--threads", "expected a thread count >= 1");
  if (o.producer_threads < 0) throw UsageError("--producer-threads", "expected a count >= 1");
  check_threads("--threads", o.threads);
  check_threads("--producer-threads", o.producer_threads);
  if (o.visibility_queue && *o.visibility_queue < o.writer_count)
    throw UsageError("--visibility-queue", "expected at least one chunk slot per writer");
  bool reads = false;  // the imaging direction's input files give the observation
  if constexpr (requires { o.inputs; }) reads = !o.inputs.empty();
  if (o.synthetic_vis && !o.observation && !reads)
    throw UsageError("--synthetic-vis", "needs a --vis-set: the visibilities to write");
  if (!o.output.empty() && !o.observation)
    throw UsageError("OUTPUT", "writing visibilities needs a --vis-set");
  if (o.synthetic_vis && o.facet_workers.value_or(0) != 0)
    throw UsageError("--facet-workers",
                     "expected 0 with --synthetic-vis (storage only: there are no producers)");
}

// Whether a run's binning makes runs of autocorrelations (`run` and `plan`
// alike): predict writes every row, and storage only (--synthetic-vis)
// reads them all, gridding none; the imaging direction grids them with
// --image-autocorrelations.
template <class Options>
bool bins_autocorrelations(const Options& o) {
  return o.direction == swiftly::Direction::predict || o.synthetic_vis || o.image_autocorrelations;
}

// A run's shape from its (checked) options, its roles, the cores each
// rank gets on its host (the default threads) and the bytes of a storage
// chunk (0 without visibilities; the visibility queue's default). Storage
// only defaults to one thread a streamer: the pattern costs next to
// nothing and the cores are left to the writers, whose copies into the
// page cache are the work.
template <class Options>
RunShape run_shape(const Options& o, int producers, int streamers, bool assigner,
                   int cores_per_rank, index_t chunk_bytes) {
  RunShape s;
  s.producers = producers;
  s.streamers = streamers;
  s.assigner = assigner;
  s.threads = o.threads > 0 ? o.threads : o.synthetic_vis ? 1 : std::max(1, cores_per_rank);
  // Reading it back (the imaging direction's storage-only mode) two threads
  // a streamer overlap one's reads with the other's copies and checks: the
  // reads wait on the disk, not on a core (0.51 -> 0.75 GB/s O_DIRECT here,
  // bench/README.md).
  if constexpr (requires { o.direction; })
    if (o.threads <= 0 && o.synthetic_vis && o.direction != swiftly::Direction::predict)
      s.threads = 2;
  s.producer_threads = o.producer_threads > 0 ? o.producer_threads : s.threads;
  s.send_queue = o.send_queue;
  s.subgrid_queue = o.subgrid_queue;
  s.task_queue = o.task_queue;
  s.bls_per_task = o.bls_per_task;
  s.visibility_queue = visibility_queue_slots(o.visibility_queue, chunk_bytes, o.writer_count);
  s.writer_count = o.writer_count;
  s.writer_ranks = o.writer_ranks;
  s.transit_queue = o.transit_queue;
  s.writes = !o.output.empty();
  s.fork_writer = o.fork_writer;
  s.synthetic = o.synthetic_vis;
  if constexpr (requires { o.direction; }) s.direction = o.direction;
  if constexpr (requires { o.image; }) {
    s.image = !o.image.empty();
    s.image_fits = image::is_fits_path(o.image);
  }
  if constexpr (requires { o.network_only; }) s.network_only = o.network_only;
  if constexpr (requires { o.device; }) s.device = o.device;
  return s;  // what the back-end holds: hold_for_storage
}

// What the output's back-end holds besides a writer's queue, in the
// shape (`run` and `plan` alike: storage::resolve_storage's choice).
inline void hold_for_storage(RunShape& s, const storage::StorageChoice& storage) {
  s.writer_held_chunks = s.writes ? storage.held_chunks : 0;
  s.writer_held_bytes = s.writes ? storage.held_bytes : 0;
  s.writer_row_chunk_bytes = s.writes ? storage.row_chunk_bytes : 0;
  s.files_by_frequency = s.writes && storage.files_by_frequency;
  s.shared_output = s.writes && storage.shared && storage.collective;
}

// Libraries, MPI and FFTW state of one process before any buffer, measured
// on the development machine (HDF5 1.10; see docs/pipeline.md): 45 MiB under
// Open MPI 4.1; 48 MiB under MPICH 4.0.2, whose shared-memory channel each
// process touches. (Open MPI's was 28 MiB until 2026-11-26, when the small
// runs' ranks peaked 8-12 MB above their estimates, at 0.82-0.86 of them,
// at the same commit as before: 0.8 is the tests' floor. Both grew by 11
// MiB the same day with casacore, the MeasurementSet back-end's libraries,
// which every process loads: 10.75 MiB resident.)
inline constexpr index_t kProcessBytes =
    (built_with_mpi() == MpiLibrary::open_mpi ? index_t{45} : index_t{48}) << 20;

// The largest w-tower any visit needs, in planes (from the counts' w ranges).
index_t max_tower_planes(const Job& job, const binning::VisitCounts& counts);

// Per role; `counts` (the visits' figures) may be null without a vis-set.
report::Memory estimate_memory(const Job& job, const RunShape& shape,
                               const binning::VisitCounts* counts);

// The single process of `iotest degrid` (or `recombine`, without a vis-set).
index_t estimate_single_process(const Job& job, int threads, const binning::VisitCounts* counts,
                                bool writes);

// Bytes of one task's buffers at most: its visibilities and runs.
index_t task_visibilities(const Job& job, const binning::VisitCounts& counts, index_t bls_per_task);

// The GPU side (--device=cuda). What one streamer holds on its GPU
// (device::gpu_memory_items): the set's subgrid sizes, the largest tower
// any visit needs, batches of kDefaultBatchSubgrids subgrids whose
// visibilities are at most one task's (task_visibilities) a subgrid, and
// no more than the batch's subgrids with the most visibilities hold; the
// runs as the host's task buffers count them (two a frequency chunk's
// share), and the observation's tables.
inline constexpr index_t kKernelCoefficientBytes = index_t{4} << 10;
device::GpuShape gpu_shape(const Job& job, const binning::VisitCounts& counts,
                           index_t bls_per_task);
// The host's side of one process's GPU path (iotest degrid, grid): the
// pinned staging of the batches in flight, a group's subgrid sums and one
// batch's visibilities (commands/gpu_group.hpp).
index_t gpu_host_bytes(const Job& job, const binning::VisitCounts& counts, index_t bls_per_task);
// The streamers of the busiest GPU when `streamers` on a node share its
// `gpus` round-robin (device::gpu_for_local_rank): ceil(streamers / gpus).
index_t streamers_per_gpu(index_t streamers, index_t gpus);
// The check of run, degrid and grid with --device=cuda: this node's
// `streamers` dealt round-robin over its `gpus` by their index among the
// node's streamers, each GPU's share of `streamer_gpu_bytes` against its
// memory_bytes. A GPU that cannot hold its share: UsageError("--device")
// naming it, the estimate and its memory. No GPU: nothing to check.
void require_gpu_memory(index_t streamer_gpu_bytes, index_t streamers,
                        const std::vector<device::GpuInfo>& gpus);

}  // namespace iotest::job
