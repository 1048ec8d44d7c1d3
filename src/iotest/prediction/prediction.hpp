// The predicted run (docs/sizing.md, "Predicting the run"): a predict
// run's stream time and what bounds it, from the pipeline's own stages at
// the per-thread rates one node measured (its report: --calibration) and
// the cluster's links, storage and cores. Pure: no MPI, no storage; `plan`
// and `run` hand it the job's work and where each rank sits.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/common/array.hpp"
#include "iotest/config/rec_set.hpp"
#include "iotest/device/device.hpp"
#include "iotest/report/report.hpp"
#include "iotest/swiftly/direction.hpp"

namespace iotest::prediction {

// --calibration, --link-rate and --storage-rate, as plan and run take
// them (parsed and checked by the command line: rates in bytes a second,
// 0 where not given).
struct PredictionOptions {
  std::string calibration;  // a one-node run's report; empty: no prediction
  double link_bytes_per_s = 0, storage_bytes_per_s = 0;
};

// What a one-node run measured, per thread: the report's path, its host
// and its rates.
struct Calibration {
  std::string source, host;
  report::Prediction::Rates rates;
};

// The rates of a run's JSON report; anything else, or a run that cannot
// give them (a dry imaging run, --synthetic-vis, --network-only, several
// hosts, a GPU), is a UsageError naming --calibration.
Calibration calibration_from(const nlohmann::json& report, const std::string& source);
Calibration read_calibration(const std::string& path);

// What the model covers: the predict direction on CPUs with the writers in
// situ, degridding visibilities. Anything else is a UsageError naming
// --calibration and why.
struct JobKind {
  bool predict = true, observation = true, synthetic = false, network_only = false, gpu = false,
       in_transit = false;
};
void require_predictable(const JobKind& job);
// A job's kind from the options plan and run take (PlanOptions, RunOptions).
template <class Options>
JobKind job_kind_of(const Options& o) {
  return {.predict = o.direction == swiftly::Direction::predict,
          .observation = o.observation.has_value(),
          .synthetic = o.synthetic_vis,
          .network_only = o.network_only,
          .gpu = o.device != device::Kind::cpu,
          .in_transit = o.writer_ranks > 0};
}

// Nodes, cores a node, a node's link each way and the storage in all
// (bytes a second; 0: not a bound).
using Cluster = report::Prediction::Cluster;

// A predict run as the model sees it. Ranks: the producers', then the
// streamers' (pipeline::Roles), each on a node.
struct Work {
  std::vector<index_t> producer_nodes, streamer_nodes;
  int threads = 1, producer_threads = 1, writers_per_streamer = 1;
  index_t facets = 0, stacks = 1, visits = 0;
  struct Part {
    index_t visibilities = 0;
    int streamer = 0;
  };
  std::vector<Part> parts;         // pipeline::plan_work's, assigned
  struct Visit {                   // and its visits: parts [first_part, first_part + parts)
    index_t stack = 0, subgrid = 0, visibilities = 0, first_part = 0, parts = 1;
  };
  std::vector<Visit> visit_parts;
  index_t contribution_bytes = 0;  // a facet's contribution to a subgrid, as sent
  index_t visibilities = 0;
  index_t bytes_written = 0;  // 0: a dry run
  // Each streamer's chunk bytes (empty: its share of bytes_written by its
  // visibilities).
  std::vector<double> streamer_bytes;
};

// The work of a job's visits (binning's counts), split and assigned to
// `streamers` as the run's work plan does (pipeline::plan_work; with an
// assigner, as the least loaded would take them), its ranks on the nodes
// as given, and its chunks' bytes (0: a dry run).
Work work_of(const config::RecombinationParams& p, const binning::VisitCounts& counts,
             std::vector<index_t> producer_nodes, std::vector<index_t> streamer_nodes,
             index_t contribution_bytes, index_t bytes_written);

// What each streamer's writers write, as the run's do: every chunk whole
// (`value_bytes` a visibility), once by each streamer holding any of its
// visibilities, a visit's part holding the row chunks from its share of
// the visit's visibilities on (binning::VisitRuns' cut). A chunk whose
// track crosses subgrids on several streamers is written by each: the
// bytes beyond the observation's. A walk over every baseline's runs on
// `threads` threads, as counting the visits is (and that counting again,
// but for the last range, to start each range); sets w.streamer_bytes and
// w.bytes_written.
void count_chunk_bytes(const binning::Binner& binner, const config::RecombinationParams& p,
                       index_t value_bytes, Work& w, int threads);

// Ranks dealt over the nodes as the run places them (rank r on node r mod
// nodes), roles in rank order: producers, then streamers.
std::pair<std::vector<index_t>, std::vector<index_t>> nodes_dealt(index_t producers,
                                                                  index_t streamers, index_t nodes);

// Each stage alone at its busiest, and the stream time: the longest stage,
// plus the others' share of one part each at the start and the end, when
// the pipeline fills and drains. Leaves by_nodes empty (the caller lays
// the job out on each node count).
report::Prediction predict(const Calibration& c, const Cluster& cluster, const Work& w);

// report::Prediction::bound_moves_at from its by_nodes.
index_t bound_moves_at(const std::vector<report::Prediction::AtNodes>& by_nodes);

// "100Gbit", "12.5GB", "400Mbit/s", "1.2e9": bytes a second (SI prefixes,
// bit or B, /s optional); anything else is a UsageError naming `option`.
double parse_rate(const std::string& text, const std::string& option);

}  // namespace iotest::prediction
