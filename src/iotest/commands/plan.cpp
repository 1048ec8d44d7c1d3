#include "iotest/commands/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/common/system.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/storage/output/file_claim.hpp"
#include "iotest/storage/output_set.hpp"

namespace iotest::commands {

namespace {

// A job script's time limit from a predicted stream time: this many times
// it for each run (docs/sizing.md, "Predicting the run": the model is
// held to 15 % on the virtual cluster, bench/predict.sh; a calibration
// from a node less like the cluster's, or a busier file system, needs
// more room).
constexpr double kTimeLimitMargin = 1.5;

// The nodes' ranks by role, consecutive nodes alike in one group. The run
// places its ranks node-cyclically (pipeline::place_by_node): rank r on
// node r mod nodes, so the roles in rank order (producers, streamers, the
// writer ranks, the assigner last: pipeline::Roles) are dealt over the
// nodes as cards are.
std::vector<report::Advice::NodeGroup> node_layout(const report::Advice& a,
                                                   const report::Memory& m) {
  const index_t n = a.nodes;
  const index_t producers_end = a.producers, streamers_end = a.producers + a.streamers,
                writers_end = streamers_end + a.writer_ranks;
  // Ranks r in [lo, hi) with r mod n == node.
  const auto dealt = [n](index_t node, index_t lo, index_t hi) {
    const auto below = [&](index_t x) { return x / n + (x % n > node ? 1 : 0); };
    return below(hi) - below(lo);
  };
  std::vector<report::Advice::NodeGroup> groups;
  for (index_t node = 0; node < n; ++node) {
    report::Advice::NodeGroup g;
    g.first_node = node;
    g.node_count = 1;
    g.producers = dealt(node, 0, producers_end);
    g.streamers = dealt(node, producers_end, streamers_end);
    g.writers = dealt(node, streamers_end, writers_end);
    g.assigners = dealt(node, writers_end, a.recommended_ranks);
    g.bytes = g.producers * m.producer_bytes + g.streamers * m.streamer_bytes +
              g.writers * m.writer_bytes + g.assigners * m.assigner_bytes;
    g.fits = g.bytes <= a.node_memory_bytes;
    g.streamers_per_gpu = job::streamers_per_gpu(g.streamers, a.gpus_per_node);
    g.gpu_bytes = g.streamers_per_gpu * m.streamer_gpu_bytes;
    const auto alike = [&](const report::Advice::NodeGroup& h) {
      return h.producers == g.producers && h.streamers == g.streamers && h.writers == g.writers &&
             h.assigners == g.assigners;
    };
    if (!groups.empty() && alike(groups.back()))
      groups.back().node_count += 1;
    else
      groups.push_back(g);
  }
  return groups;
}

std::string gib(index_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

// Why a group does not fit, in its figures, and what would help.
std::string overflow_warning(const report::Advice& a, const report::Advice::NodeGroup& g,
                             const report::Memory& m, index_t facets) {
  std::string ranks, largest;
  index_t largest_bytes = 0;
  for (const auto& [count, role, bytes] : {std::tuple{g.producers, "producer", m.producer_bytes},
                                           {g.streamers, "streamer", m.streamer_bytes},
                                           {g.writers, "writer rank", m.writer_bytes},
                                           {g.assigners, "assigner", m.assigner_bytes}}) {
    if (count == 0) continue;
    ranks += fmt::format("{}{} {}(s) x {}", ranks.empty() ? "" : " + ", count, role, gib(bytes));
    if (bytes > largest_bytes) largest_bytes = bytes, largest = role;
  }
  // A producer's facets are most of it; a streamer's queues and threads.
  std::string help = "use fewer --ranks-per-node or more --nodes";
  if (largest_bytes > a.node_memory_bytes && largest == "producer")
    help = a.producers < facets ? "a producer alone does not fit: more --facet-workers (fewer "
                                  "facets each) or more memory per node"
                                : "a producer alone does not fit, holding one facet: more memory "
                                  "per node or a set of smaller facets";
  else if (largest_bytes > a.node_memory_bytes)
    help = fmt::format(
        "a {} alone does not fit: shorter queues, fewer --threads or more memory per node",
        largest);
  return fmt::format("{}: {} = {} estimated, more than the {} of a node ({}); {}", g.nodes_text(),
                     ranks, gib(g.bytes), gib(a.node_memory_bytes), a.node_memory_source, help);
}

// The memory of one node and where it comes from.
std::pair<index_t, std::string> node_memory(const PlanOptions& o) {
  if (o.node_memory) {  // parsed by CLI11 (CLI::AsSizeValue)
    if (*o.node_memory < 1) throw UsageError("--node-memory", "expected a size of at least 1 byte");
    return {*o.node_memory, "--node-memory"};
  }
  // What `run` checks each node's ranks against (require_node_memory).
  const index_t available = available_memory_bytes();
  if (available <= 0)
    throw UsageError("--node-memory", "this machine does not tell its memory; give one");
  return {available, "available on this machine"};
}

// --device=cuda: a node's GPUs and the memory of one, and where it comes
// from: the options, else this machine's GPUs as probed.
struct GpuAllocation {
  index_t gpus = 0, memory = 0;
  std::string source;
};
GpuAllocation gpu_allocation(const PlanOptions& o) {
  if (o.device != device::Kind::cuda) {
    if (o.gpus_per_node || o.gpu_memory)
      throw UsageError(o.gpus_per_node ? "--gpus-per-node" : "--gpu-memory",
                       "applies to --device=cuda (the GPU streamers' memory)");
    return {};
  }
  if (!o.observation)
    throw UsageError("--device",
                     "cuda: expected a --vis-set: the GPU streamers degrid visibilities");
  if (o.synthetic_vis)
    throw UsageError("--device", "cuda: does not apply to --synthetic-vis (nothing is degridded)");
  if (o.gpus_per_node && *o.gpus_per_node < 1)
    throw UsageError("--gpus-per-node",
                     fmt::format("expected a GPU count >= 1, got {}", *o.gpus_per_node));
  if (o.gpu_memory && *o.gpu_memory < 1)
    throw UsageError("--gpu-memory", "expected a size of at least 1 byte");
  GpuAllocation g;
  std::optional<device::Probe> probe;
  if (!o.gpus_per_node || !o.gpu_memory) probe = device::probe();
  g.gpus = o.gpus_per_node.value_or(
      probe && !probe->gpus.empty() ? static_cast<index_t>(probe->gpus.size()) : 1);
  if (o.gpu_memory) {
    g.memory = *o.gpu_memory;
    g.source = "--gpu-memory";
  } else if (!probe->gpus.empty()) {
    const auto& first = probe->gpus.front();
    g.memory = first.memory_bytes;
    g.source = fmt::format("GPU {} of this machine, {}", first.index, first.name);
  } else {
    throw UsageError("--gpu-memory", "this machine has no GPU to take it from (" + probe->missing +
                                         "); give the memory of one GPU");
  }
  return g;
}

// A node whose busiest GPU cannot hold its streamers' share: the job is
// refused (a GPU, unlike a node, has no swap to slow down into).
void require_gpus_fit(const report::Advice& a, const report::Memory& m, bool given) {
  for (const auto& g : a.layout) {
    if (g.gpu_bytes <= a.gpu_memory_bytes) continue;
    throw UsageError(
        given ? "--gpu-memory" : "--device",
        fmt::format("{}: {} streamer(s) on {} GPU(s), {} on the busiest x {} = {} estimated, more "
                    "than the {} of a GPU ({}); use more --gpus-per-node, fewer "
                    "--ranks-per-node, or a smaller --rec-set or --bls-per-task",
                    g.nodes_text(), g.streamers, a.gpus_per_node, g.streamers_per_gpu,
                    gib(m.streamer_gpu_bytes), gib(g.gpu_bytes), gib(a.gpu_memory_bytes),
                    a.gpu_memory_source));
  }
}

// The writer ranks that keep pace with `streamers` at the rates a run
// measured (its report's transit section).
index_t writer_ranks_from(const std::string& path, index_t streamers, int writers_per_rank) {
  const auto report = report::read_json(path, "--rates-from");
  const auto t = report.find("transit");
  if (t == report.end() || !t->contains("compute_bytes_per_s") ||
      !t->contains("write_bytes_per_s") || (*t)["write_bytes_per_s"].get<double>() <= 0)
    throw UsageError("--rates-from",
                     "expected the report of an `iotest run` that wrote "
                     "visibilities (its transit section), got '" +
                         path + "'");
  return report::writer_ranks_for(streamers, (*t)["compute_bytes_per_s"].get<double>(),
                                  (*t)["write_bytes_per_s"].get<double>(), writers_per_rank);
}

void check_role_options(const PlanOptions& o) {
  if (o.nodes < 1) throw UsageError("--nodes", "expected a node count >= 1");
  if (o.ranks_per_node && *o.ranks_per_node < 1)
    throw UsageError("--ranks-per-node", "expected a rank count >= 1");
  // As `run`: more producers than facets is allowed (DESIGN.md's SKA1-Low
  // run has 10 for small's 9), the extra ones hold no facet.
  if (o.facet_workers && *o.facet_workers < 0)
    throw UsageError("--facet-workers",
                     fmt::format("expected a producer count >= 0, got {}", *o.facet_workers));
}

// The ranks a node: as given, or by default one streamer per node (one
// NUMA domain each, DESIGN.md 2), or on GPUs one per GPU, the producers
// and the assigner spread over the nodes' slots.
index_t ranks_per_node(const PlanOptions& o, const report::Advice& a, index_t assigners,
                       index_t gpus) {
  const index_t nodes = o.nodes;
  const index_t streamers_per_node = std::max<index_t>(1, gpus);
  const index_t ranks = o.ranks_per_node.value_or(
      (a.producers + assigners + a.writer_ranks + nodes * streamers_per_node + nodes - 1) / nodes);
  // MPI counts ranks in an int.
  if (ranks > std::numeric_limits<int>::max() / nodes)
    throw UsageError(o.ranks_per_node ? "--ranks-per-node" : "--nodes",
                     fmt::format("expected at most {} ranks in all, got {} node(s) x {}",
                                 std::numeric_limits<int>::max(), nodes, ranks));
  return ranks;
}

// On GPUs, by default no node more streamers than GPUs: the roles dealt
// over the nodes can leave one node a streamer more than another, so
// fewer ranks a node until every GPU holds one streamer at most.
void fewer_ranks_for_gpus(report::Advice& a, index_t assigners, index_t needed, index_t gpus) {
  const auto busiest = [&] {
    index_t most = 0;
    for (const auto& g : node_layout(a, report::Memory{})) most = std::max(most, g.streamers);
    return most;
  };
  while (busiest() > gpus && (a.ranks_per_node - 1) * a.nodes >= needed) {
    a.ranks_per_node -= 1;
    a.recommended_ranks = a.nodes * a.ranks_per_node;
    a.streamers = a.recommended_ranks - a.producers - assigners - a.writer_ranks;
  }
}

// The rule the layout followed, in words, for the plan's reader.
std::string layout_rule(const PlanOptions& o, const report::Advice& a, int cores, index_t gpus) {
  return fmt::format("{}, streamers in the remaining slots{}; {} rank(s) per node{}{}",
                     o.facet_workers   ? "producers as --facet-workers"
                     : o.synthetic_vis ? "no producers (--synthetic-vis)"
                                       : "one producer per facet",
                     o.assigner ? ", the assigner last" : "", a.ranks_per_node,
                     o.ranks_per_node ? " as given"
                     : gpus > 0       ? ": enough for one streamer per GPU"
                                      : ": enough for one streamer per node (one NUMA domain)",
                     o.threads > 0 ? ""
                     : o.cores_per_node
                         ? fmt::format("; threads: a node's {} core(s) over its ranks", cores)
                         : fmt::format("; threads: this machine's {} core(s) over a node's ranks "
                                       "(--cores-per-node or --threads for other nodes)",
                                       cores));
}

// The roles on the nodes' slots, as `run` makes them from the rank count
// this plan gives it.
report::Advice lay_out_roles(const PlanOptions& o, index_t facets, int cores, index_t gpus) {
  check_role_options(o);
  const index_t nodes = o.nodes;
  report::Advice a;
  a.nodes = nodes;
  a.assigner = o.assigner;
  a.producers = o.facet_workers ? *o.facet_workers : o.synthetic_vis ? 0 : facets;
  const index_t assigners = o.assigner ? 1 : 0;
  a.writer_ranks = o.writer_ranks;
  // Streamers degrid (with a vis-set) and take work from the assigner.
  const index_t min_streamers = o.observation || o.assigner ? 1 : 0;
  a.ranks_per_node = ranks_per_node(o, a, assigners, gpus);
  a.recommended_ranks = nodes * a.ranks_per_node;
  const index_t needed = a.producers + assigners + a.writer_ranks + min_streamers;
  if (a.recommended_ranks < needed)
    throw UsageError(
        "--ranks-per-node",
        fmt::format("{} node(s) x {} rank(s) are fewer than the {} ranks the roles "
                    "need ({} producer(s){}{}{})",
                    nodes, a.ranks_per_node, needed, a.producers,
                    min_streamers > 0 ? " + 1 streamer" : "",
                    a.writer_ranks > 0 ? fmt::format(" + {} writer rank(s)", a.writer_ranks) : "",
                    o.assigner ? " + the assigner" : ""));
  // Every slot is used: the ranks left after the producers, the writer
  // ranks and the assigner stream, so with mpirun's mapping by slot no
  // node stays empty.
  a.streamers = a.recommended_ranks - a.producers - assigners - a.writer_ranks;
  if (gpus > 0 && !o.ranks_per_node) fewer_ranks_for_gpus(a, assigners, needed, gpus);
  a.rule = layout_rule(o, a, cores, gpus);
  return a;
}

// The options checked before any work, and the job's outputs from here:
// a folder missing or read-only is found now, not when the job starts
// after its wait in the queue. A %h path is each compute node's own, out
// of sight here.
void check_plan_options(const PlanOptions& o) {
  job::check_shape_options(o);
  if (o.slurm) job::check_job_script_options(*o.slurm);
  if (o.slurm && !o.output.empty() && o.output.find("%h") == std::string::npos && o.storage.store())
    o.storage.store()->check_name(o.output, "OUTPUT");
}

// With visibilities the subgrids keep the margin degridding needs
// (default kernels and w layout), so the counts are those of the real job.
job::Job job_to_plan(const PlanOptions& o) {
  job::JobOptions jo;
  jo.rec_set = o.rec_set;
  jo.window_width = o.window_width;
  jo.observation = o.observation;
  jo.source_count = 0;
  jo.bin_autocorrelations = job::bins_autocorrelations(o);
  if (!o.inputs.empty() && !o.observation) {
    // As `run` takes them: the observation and sky of the files it would
    // read, which may be out of sight here (on compute nodes' disks).
    try {
      const auto first = storage::open_reader(o.inputs[0], o.input_storage);
      job::use_files_observation(jo, storage::provenance_of(*first, o.inputs[0]), o.inputs[0]);
    } catch (const UsageError& e) {
      throw UsageError(e.option(), std::string(e.what()) +
                                       " (plan reads the observation from the first file; "
                                       "elsewhere, give the --vis-set, --time, --freq and --dec "
                                       "it was written with)");
    }
  }
  return job::resolve(jo);
}

int cores_per_node(const PlanOptions& o) {
  if (o.cores_per_node && *o.cores_per_node < 1)
    throw UsageError("--cores-per-node",
                     fmt::format("expected a core count >= 1, got {}", *o.cores_per_node));
  return o.cores_per_node.value_or(
      std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

// A node's memory and GPUs, and where their figures come from.
void add_node_resources(report::Advice& a, index_t memory, const std::string& memory_source,
                        const GpuAllocation& gpus) {
  a.node_memory_bytes = memory;
  a.node_memory_source = memory_source;
  a.gpus_per_node = gpus.gpus;
  a.gpu_memory_bytes = gpus.memory;
  a.gpu_memory_source = gpus.source;
}

// Each rank's threads: a node's cores over its ranks, as `run` gives them.
job::RunShape shape_on_nodes(const PlanOptions& o, report::Advice& a, int cores,
                             const job::Job& job) {
  auto shape =
      job::run_shape(o, static_cast<int>(a.producers), static_cast<int>(a.streamers), o.assigner,
                     threads_available(static_cast<int>(cores / a.ranks_per_node)),
                     job.obs ? storage::layout_of(*job.obs).chunk_bytes() : 0);
  job::hold_for_storage(shape, o.storage);
  a.threads = shape.threads;
  a.producer_threads = shape.producer_threads;
  return shape;
}

// The visits of the job's observation, counted as `run` counts them, and
// the observation into the report (an image's rule too, `images`).
std::optional<binning::VisitCounts> count_plan_visits(const job::Job& job, bool images,
                                                      report::Report& r) {
  if (!job.obs) return std::nullopt;
  const binning::Binner binner(job.p, *job.obs, *job.geometry, job.split());
  auto counts = binner.count_visits(0, job.obs->baseline_count(), omp_get_max_threads());
  job::add_observation(r, *job.obs, *job.geometry, binning::summarise(counts));
  if (images) job::add_imaging_rule(r, job, binner);
  return counts;
}

// The job's chunk bytes as its back-end stores them (0: a dry run).
index_t bytes_to_write(const PlanOptions& o, const report::Report& r) {
  if (o.output.empty() || !r.observation) return 0;
  return r.observation->visibility_bytes * o.storage.value_bytes / 16;
}

// What the model predicts (prediction::require_predictable), and the
// links it needs between nodes.
void check_predictable(const PlanOptions& o) {
  prediction::require_predictable(prediction::job_kind_of(o));
  if (o.nodes > 1 && o.prediction.link_bytes_per_s <= 0)
    throw UsageError("--link-rate", fmt::format("expected a node's link rate (e.g. 100Gbit) to "
                                                "predict a run on {} nodes",
                                                o.nodes));
}

// The run on `nodes` nodes as plan would lay it out there (ranks per node
// as given, else its default), predicted. Its chunk bytes: counted, with
// `binner` (the visibilities' bytes times what that count found for the
// plan's nodes, `rewrite`, without).
report::Prediction predict_on(const PlanOptions& o, index_t nodes, const prediction::Calibration& c,
                              const job::Job& job, const binning::VisitCounts& counts,
                              const report::Report& r, int cores, const binning::Binner* binner,
                              double& rewrite, report::Advice* laid_out) {
  auto on = o;
  on.nodes = nodes;
  auto a = lay_out_roles(on, r.counts.facets, cores, 0);
  shape_on_nodes(on, a, cores, job);
  auto [producer_nodes, streamer_nodes] = prediction::nodes_dealt(a.producers, a.streamers, nodes);
  const index_t bytes = bytes_to_write(o, r);
  auto w = prediction::work_of(job.p, counts, std::move(producer_nodes), std::move(streamer_nodes),
                               r.memory.contribution_bytes, bytes);
  if (bytes > 0 && binner) {
    prediction::count_chunk_bytes(*binner, job.p, o.storage.value_bytes, w, omp_get_max_threads());
    rewrite = static_cast<double>(w.bytes_written) / static_cast<double>(bytes);
  } else {
    w.bytes_written = static_cast<index_t>(static_cast<double>(bytes) * rewrite);
  }
  w.threads = a.threads;
  w.producer_threads = a.producer_threads;
  w.writers_per_streamer = o.writer_count;
  const prediction::Cluster cluster{nodes, cores, o.prediction.link_bytes_per_s,
                                    o.prediction.storage_bytes_per_s};
  if (laid_out) *laid_out = a;
  return prediction::predict(c, cluster, w);
}

// --calibration: the prediction on the plan's nodes, and a row for each
// other count, doubling from 1 to four times the plan's (at least 8),
// their chunks rewritten as much as on the plan's nodes.
report::Prediction predict_plan(const PlanOptions& o, const job::Job& job,
                                const binning::VisitCounts& counts, const report::Report& r,
                                int cores) {
  check_predictable(o);
  const auto c = prediction::read_calibration(o.prediction.calibration);
  const binning::Binner binner(job.p, *job.obs, *job.geometry, job.split());
  double rewrite = 1;
  report::Advice laid_out;
  auto p = predict_on(o, o.nodes, c, job, counts, r, cores, &binner, rewrite, &laid_out);
  std::vector<index_t> nodes;
  for (index_t n = 1; n <= std::max<index_t>(8, 4 * o.nodes); n *= 2) nodes.push_back(n);
  nodes.push_back(o.nodes);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (const index_t n : nodes) {
    if (n == o.nodes) {
      p.by_nodes.push_back(
          {n, laid_out.producers, laid_out.streamers, laid_out.threads, p.stream_s, p.bound});
      continue;
    }
    report::Advice a;
    try {
      const auto q = predict_on(o, n, c, job, counts, r, cores, nullptr, rewrite, &a);
      p.by_nodes.push_back({n, a.producers, a.streamers, a.threads, q.stream_s, q.bound});
    } catch (const UsageError&) {
      // A count the roles do not fit (--ranks-per-node given): no row.
    }
  }
  p.bound_moves_at = prediction::bound_moves_at(p.by_nodes);
  return p;
}

// What the advice adds to the layout: the writer ranks a run's rates
// suggest, the warnings of nodes that do not fit, the job script.
void advise(const PlanOptions& o, const report::Report& r, int cores, report::Advice& a) {
  if (!o.rates_from.empty()) {
    a.suggested_writer_ranks = writer_ranks_from(o.rates_from, a.streamers, o.writer_count);
    a.rates_from = o.rates_from;
  }
  for (const auto& g : a.layout)
    if (!g.fits) a.warnings.push_back(overflow_warning(a, g, r.memory, r.counts.facets));
  if (o.slurm) {
    auto script = *o.slurm;
    script.cores_per_node = cores;
    if (script.time_limit.empty()) {  // plan --calibration without --time-limit
      if (!r.prediction)
        throw UsageError("--time-limit",
                         "expected a time limit, or a --calibration to predict one");
      script.time_limit =
          job::time_limit_for(r.prediction->stream_s, script.repetitions, kTimeLimitMargin);
      a.time_limit_from_prediction = script.time_limit;
      a.time_limit_margin = kTimeLimitMargin;
    }
    a.job_script = job::slurm_script(a, script);
  }
}

// A back-end that writes an output per frequency range (ms) takes no more
// outputs than the observation has frequency chunks: `run` refuses such a
// job with this line, so the plan refuses it too, and writes no script a
// queue would only fail later.
void require_outputs_fit_frequency_chunks(const PlanOptions& o, const job::Job& job,
                                          const report::Advice& a) {
  if (!o.output.empty() && job.obs) job::require_storable_time_chunk(o.storage, *job.obs);
  if (o.output.empty() || !o.storage.files_by_frequency || !job.obs) return;
  job::require_frequency_chunk_per_output(
      (a.writer_ranks > 0 ? a.writer_ranks : a.streamers) * o.writer_count,
      storage::layout_of(*job.obs).freq_chunks(), o.storage.backend, a.writer_ranks > 0);
}

}  // namespace

report::Report plan(const PlanOptions& o) {
  check_plan_options(o);
  const auto [memory, memory_source] = node_memory(o);
  const auto gpus = gpu_allocation(o);
  const auto job = job_to_plan(o);
  report::Report r;
  r.mode = "plan";
  r.rec = job.p;
  r.counts.facets = r.rec.facet_count();
  r.counts.subgrids = r.rec.subgrid_count();

  const int cores = cores_per_node(o);
  auto a = lay_out_roles(o, r.counts.facets, cores, gpus.gpus);
  add_node_resources(a, memory, memory_source, gpus);
  const auto shape = shape_on_nodes(o, a, cores, job);
  const auto counts =
      count_plan_visits(job, o.direction != swiftly::Direction::predict && !o.synthetic_vis, r);
  r.memory = job::estimate_memory(job, shape, counts ? &*counts : nullptr);
  a.layout = node_layout(a, r.memory);
  if (o.device == device::Kind::cuda) {
    require_gpus_fit(a, r.memory, o.gpu_memory.has_value());
    r.device = job::device_section(o.device, {});
  }
  require_outputs_fit_frequency_chunks(o, job, a);
  if (!o.prediction.calibration.empty()) {
    if (!counts) check_predictable(o);  // refuses it, naming why
    r.prediction = predict_plan(o, job, *counts, r, cores);
  }
  advise(o, r, cores, a);
  a.direction = swiftly::to_string(o.direction);
  a.reads_files = o.direction != swiftly::Direction::predict && !o.inputs.empty();
  r.advice = a;
  return r;
}

}  // namespace iotest::commands
