// The options of `iotest [run]`, the predict and imaging pipeline over MPI
// ranks: a header of their own, so that the roles (roles.hpp), the job
// script (`plan --slurm`) and the command line can name them without the
// run's entry points and the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/common/file_layout.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/device/device.hpp"
#include "iotest/prediction/prediction.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/swiftly/direction.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::pipeline {

struct RunOptions {
  std::string rec_set;
  std::string command_line;  // as typed: every output file records it
  // An output's file system with less free space than its rank will write
  // there: a usage error (else a warning).
  bool require_space = false;
  // A storage call (open, write, sync, close, publish) in progress this
  // many seconds with no other ending meanwhile ends the job: a shared
  // file system that stopped answering (docs/pipeline.md, "A stalled file
  // system"). 0: no bound.
  double storage_stall_timeout_s = 120;
  // --file-layout: the layout each output is made with (CephFS; set on
  // its file in progress before any byte, common/file_layout.hpp). Where
  // it cannot be set, one warning and the file system's own layout.
  std::optional<FileLayout> file_layout;
  std::optional<telescope::ObservationOptions> observation;  // with --vis-set
  index_t source_count = 10;
  std::uint64_t seed = 1;
  index_t check_subgrids = 16;  // subgrids checked against the direct transform
  index_t vis_samples = 1000;   // visibilities checked against the direct transform
  degrid::DegridOptions kernel;
  std::optional<index_t> margin;
  std::optional<double> target_err;
  // Roles: producers first, then streamers, then (with `assigner`) one rank
  // handing out work. Nothing: about half the ranks, at most one per facet.
  std::optional<int> facet_workers;
  bool assigner = false;
  int threads = 0;           // per streamer (0: this host's cores over its ranks)
  int producer_threads = 0;  // per producer (0: as threads)
  // Queues (DESIGN.md section 2).
  index_t send_queue = 8;      // contributions in flight per producer thread
  // Subgrids a streamer receives at once. The reference's 32 is not kept:
  // a slot is freed when its subgrid is assembled, so slots only absorb the
  // producers' jitter, and each one is a contribution per facet that the
  // node must zero (9 MiB for small, about 1-2 s a GiB on a VM). With 8,
  // small + vlaa at dec 34 took 23.4 s against 24.9 s (bench/README.md).
  index_t subgrid_queue = 8;
  index_t task_queue = 128;    // degrid tasks outstanding per streamer
  index_t bls_per_task = 256;  // baselines' time chunks per degrid task
  // Chunks waiting for a streamer's writers (and as many parts held); none:
  // job::visibility_queue_slots's default, resolved by run() into it.
  std::optional<index_t> visibility_queue;
  int writer_count = 1;      // writers per streamer (in transit: per writer rank)
  bool fork_writer = false;  // writers as processes
  // In transit (the Nyx sidecar): this many ranks, after the streamers,
  // form a writer group; streamers send them whole chunks over MPI
  // (--transit-queue messages in flight each way) and go on degridding.
  // 0: in situ, the writers inside each streamer.
  // 16: at 4, 64 KiB chunks over shared memory stalled on the handshakes
  // of synchronous sends (bench/README.md, in situ vs in transit).
  int writer_ranks = 0;
  index_t transit_queue = 16;
  std::string output;               // OUT%d.h5; empty: dry run (null back-end)
  storage::StorageOptions storage;  // --storage and its options
  // Storage only (DESIGN.md section 9): no producers, no towers, no
  // degridding; the streamers walk their parts as ever and write a pattern
  // (degrid::synthetic_visibility) in the same chunks.
  bool synthetic_vis = false;
  // --synthetic-vis=sequential: no walk; each streamer writes its share of
  // the chunks whole, in file order (the storage ceiling, as IOR writes).
  bool synthetic_sequential = false;
  std::string synthetic_order;  // as given: walk or sequential
  bool progress = true;         // rank 0 shows progress on stderr
  bool print_plan = true;       // rank 0 prints the plan before the start (once for repetitions)
  // The report's time line: every rank's waits and rates per interval of
  // this many seconds (0: none).
  double timeline_s = 1.0;
  // Stonewalling (as IOR calls it): after this many seconds no new work is
  // started, what is in flight drains and the run ends normally, reporting
  // the fraction done and a projection for the whole observation.
  std::optional<double> duration;
  // The imaging direction (--direction=image): streamers read the
  // visibilities of a predict run's `inputs` (none: they predict the sky's
  // themselves), grid them and send each facet's contribution of every
  // subgrid to its producer, which recombines them into the dirty image;
  // `pixel_samples` of its pixels are checked against the direct adjoint
  // transform.
  swiftly::Direction direction = swiftly::Direction::predict;
  std::vector<std::string> inputs;
  index_t pixel_samples = 64;
  // --image-autocorrelations: the imaging direction grids the rows whose
  // two antennas are the same too; by default it leaves them out, as
  // WSClean and CASA do (docs/imaging.md, "Autocorrelations").
  bool image_autocorrelations = false;
  // --image=FILE (the imaging direction): the dirty image written to FILE
  // after the walk, by rank 0 (the first producer), which takes the other
  // producers' facets a block of rows at a time (FILE.fits: FITS, else
  // HDF5; storage/image_file.hpp). Empty: the image stays on the producers.
  std::string image;
  // The network alone (issue 12's collective pattern): the walk's
  // contributions sent and received with the same slots and
  // back-pressure, nothing computed (no facets, transforms, assembly or
  // degridding): the contribution rate the network allows.
  bool network_only = false;
  // --device: where the streamers degrid and grid. cuda needs a build with
  // the CUDA path and a GPU on every streamer's node (job::require_device),
  // and each GPU room for its streamers' share (job::require_gpu_memory).
  device::Kind device = device::Kind::cpu;
  // --calibration, --link-rate, --storage-rate: the report gives the
  // stream time the model predicts for this run beside the measured one
  // (report::Prediction).
  prediction::PredictionOptions prediction;
};

}  // namespace iotest::pipeline
