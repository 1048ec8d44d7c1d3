// `iotest plan`: resolved parameters, counts and memory per role for a
// recombination set, without computing anything heavy; for `--nodes` and a
// memory per node, the job's layout: which ranks land on which node, what
// each node holds by the memory model `run` checks, and whether it fits.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "iotest/device/device.hpp"
#include "iotest/job/job_script.hpp"
#include "iotest/prediction/prediction.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/swiftly/direction.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::commands {

struct PlanOptions {
  std::string rec_set;
  std::optional<double> window_width;
  std::optional<telescope::ObservationOptions> observation;  // with --vis-set
  // The allocation: nodes, ranks on each (the run deals its ranks over the
  // nodes: rank r on node r mod nodes) and the memory of one node.
  index_t nodes = 1;
  std::optional<index_t> ranks_per_node;  // none: enough for one streamer per node
  std::optional<index_t> node_memory;     // bytes; none: available on this machine
  // The run's shape, as `iotest run` takes it (job::check_shape_options,
  // job::run_shape): roles, threads, queues and writers.
  std::optional<int> facet_workers;  // none: one per facet
  bool assigner = false;
  int threads = 0;           // per streamer (0: this machine's cores over a node's ranks)
  int producer_threads = 0;  // per producer (0: as threads)
  index_t send_queue = 8, subgrid_queue = 8, task_queue = 128, bls_per_task = 256;
  std::optional<index_t> visibility_queue;  // none: job::visibility_queue_slots's default
  int writer_count = 1;
  int writer_ranks = 0;  // in transit: the writer group
  index_t transit_queue = 16;
  bool fork_writer = false;
  bool synthetic_vis = false;
  bool synthetic_sequential = false;  // --synthetic-vis=sequential (as `run`)
  std::string synthetic_order;
  std::string output;  // OUT%d.h5 the run would write (empty: a dry run)
  // The run's direction, as `run` takes it: the imaging direction's
  // producers hold their dirty image facets and its streamers grid (the
  // memory model's), reading a predict run's files (`inputs`) or
  // predicting them in memory; only the rows the image takes are counted
  // (job::bins_autocorrelations). Without --vis-set the observation is the
  // first input's, read from its provenance as `run` reads it (through
  // `input_storage`); with it, no file is opened.
  swiftly::Direction direction = swiftly::Direction::predict;
  std::vector<std::string> inputs;
  storage::StorageOptions input_storage;
  bool image_autocorrelations = false;
  std::string image;  // --image: rank 0 writes the dirty image
  bool network_only = false;
  // Its back-end, as the run resolves it (pipeline::check_run_combination):
  // what its writers hold counts in the memory model.
  storage::StorageChoice storage;
  // A run's report whose measured rates size the writer group (in transit).
  std::string rates_from;
  // The cores of a node, which its ranks' threads share (none: this
  // machine's).
  std::optional<int> cores_per_node;
  // --calibration, --link-rate, --storage-rate: the run's stream time and
  // what bounds it, predicted (report::Prediction), on these nodes and on
  // others; with --slurm and no --time-limit (slurm->time_limit empty),
  // the job's limit comes from it.
  prediction::PredictionOptions prediction;
  // --slurm: the job script for this layout (report::Advice::job_script).
  std::optional<job::JobScriptOptions> slurm;
  // --device=cuda: the streamers' GPU memory counted too, a node's
  // --gpus-per-node shared by its streamers round-robin, each GPU of
  // --gpu-memory bytes (none: this machine's, as probed).
  device::Kind device = device::Kind::cpu;
  std::optional<index_t> gpus_per_node;
  std::optional<index_t> gpu_memory;
};
report::Report plan(const PlanOptions& options);

}  // namespace iotest::commands
