// `iotest run`: sets up what every rank needs (the same on all of them),
// runs this rank's role and gathers the measurements into one report on
// rank 0.
#include "iotest/pipeline/run.hpp"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <type_traits>

#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/pipeline/placement.hpp"
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/image_file.hpp"
#include "iotest/storage/output_set.hpp"
#include "iotest/swiftly/fft.hpp"

namespace iotest::pipeline {

std::vector<std::string> Context::outputs() const {
  std::vector<std::string> paths;
  const auto& o = options;
  const bool in_transit = roles.writers > 0;
  const index_t in_all = (in_transit ? roles.writers : roles.streamers) * o.writer_count,
                first =
                    (in_transit ? roles.writer_index() : roles.streamer_index()) * o.writer_count;
  if (shared_output != MPI_COMM_NULL) return {o.output};  // every writing rank's one writer
  for (int w = 0; roles.writes_outputs() && w < o.writer_count; ++w)
    paths.push_back(o.output.empty() ? std::string() : output_path(o.output, first + w, in_all));
  return paths;
}

Progress::Progress(bool enabled, index_t total, const char* what)
    : enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) != 0),
      total_(total),
      what_(what),
      start_(MPI_Wtime()) {}

void Progress::update(index_t done) {
  if (!enabled_) return;
  const double now = MPI_Wtime();
  if (now - last_ < (tty_ ? 0.5 : 10.0)) return;
  last_ = now;
  const double rate = done / std::max(now - start_, 1e-9);
  std::string line = fmt::format("iotest: {} {}", done, what_);
  if (total_ > 0)
    line += fmt::format(" of {} ({:.0f}%), {:.1f}/s, ETA {:.0f} s", total_, 100.0 * done / total_,
                        rate, rate > 0 ? (total_ - done) / rate : 0.0);
  else
    line += fmt::format(", {:.1f}/s", rate);
  std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", line.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_ && last_ > -1e9) std::fputs("\r\033[K", stderr);
}

namespace {

// What ranks send to rank 0 at the end: plain numbers, one MPI_BYTE block.
struct Wire {
  report::RankFigures figures;
  int rank = 0, role = 0;
  char host[64] = {};
  RelativeError subgrid_error, vis_error;
  double subgrid_worst = -1;
  index_t subgrids_checked = 0, vis_checked = 0, visibilities_written = 0;
  index_t parts_done = 0, tasks_skipped = 0, walk_end = -1;
  storage::ReadTally read;  // the imaging direction's streamers
  double input_s = 0, check_s = 0, degrid_s = 0, grid_s = 0, observed2 = 0, residual2 = 0;
  index_t values_checked = 0, values_wrong = 0;
  double queue_wait_s = 0, send_wait_s = 0, transit_idle_s = 0;
  index_t transit_chunks = 0, transit_bytes = 0;
  device::GpuTiming gpu;
};
static_assert(std::is_trivially_copyable_v<Wire>);
constexpr const char* kRoleNames[] = {"producer", "streamer", "assigner", "writer"};

Wire to_wire(const RankResult& r, int rank, int role) {
  Wire w;
  w.figures = r.stats;
  w.figures.peak_rss_bytes = peak_rss_bytes();
  w.rank = rank;
  w.role = role;
  ::gethostname(w.host, sizeof(w.host) - 1);
  w.subgrid_error = r.subgrid_error;
  w.vis_error = r.vis_error;
  w.subgrid_worst = r.subgrid_error_worst;
  w.subgrids_checked = r.subgrids_checked;
  w.vis_checked = r.vis_checked;
  w.visibilities_written = r.visibilities_written;
  w.parts_done = r.parts_done;
  w.tasks_skipped = r.tasks_skipped;
  w.walk_end = r.walk_end;
  w.read = r.read;
  w.input_s = r.input_s;
  w.check_s = r.check_s;
  w.degrid_s = r.degrid_s;
  w.grid_s = r.grid_s;
  w.observed2 = r.observed2;
  w.residual2 = r.residual2;
  w.values_checked = r.values_checked;
  w.values_wrong = r.values_wrong;
  w.queue_wait_s = r.queue_wait_s;
  w.send_wait_s = r.send_wait_s;
  w.transit_idle_s = r.transit_idle_s;
  w.transit_chunks = r.transit_chunks;
  w.transit_bytes = r.transit_bytes;
  w.gpu = r.gpu;
  return w;
}

// Every rank's time series on rank 0 (elsewhere: nothing).
std::vector<std::vector<TimeSample>> gather_samples(const std::vector<TimeSample>& mine,
                                                    MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  static_assert(std::is_trivially_copyable_v<TimeSample>);
  const int bytes = static_cast<int>(mine.size() * sizeof(TimeSample));
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Gather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  for (int i = 1; i < size; ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  std::vector<TimeSample> all(
      rank == 0 ? static_cast<size_t>(offsets.back() + counts.back()) / sizeof(TimeSample) : 0);
  MPI_Gatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0,
              comm);
  std::vector<std::vector<TimeSample>> out;
  for (int i = 0; rank == 0 && i < size; ++i) {
    const auto* first = all.data() + offsets[i] / static_cast<int>(sizeof(TimeSample));
    out.emplace_back(first, first + counts[i] / static_cast<int>(sizeof(TimeSample)));
  }
  return out;
}

// The time line on a common grid of intervals (widened to keep it within
// TimeSeries::kMaxSamples intervals); roles that keep no series are left out.
report::Timeline timeline_of(const std::vector<Wire>& all,
                             const std::vector<std::vector<TimeSample>>& samples,
                             double interval_s) {
  double end = 0;
  for (const auto& s : samples)
    if (!s.empty()) end = std::max(end, s.back().t);
  const double needed = end / static_cast<double>(TimeSeries::kMaxSamples);
  while (interval_s < needed) interval_s *= 2;
  report::Timeline t;
  t.interval_s = interval_s;
  for (size_t i = 0; i < all.size(); ++i) {
    if (samples[i].size() < 2) continue;
    const auto f = per_interval(samples[i], interval_s);
    t.ranks.push_back({all[i].rank, kRoleNames[all[i].role], all[i].host, f.busy_s, f.wait_s,
                       f.visibilities, f.bytes_sent, f.bytes_written});
  }
  return t;
}

// In situ or in transit: both sides' waits, what bound the run and the
// writer ranks that would keep pace with the streamers (report::Transit).
report::Transit transit_figures(const std::vector<Wire>& all, const RunOptions& o,
                                const Roles& roles, int threads, double stream_s) {
  report::Transit t;
  t.placement = roles.writers > 0 ? "in transit" : "in situ";
  t.writer_ranks = roles.writers;
  t.writers_per_rank = o.writer_count;
  t.transit_queue = roles.writers > 0 ? o.transit_queue : 0;
  double compute = 0, written = 0, writing_s = 0;
  for (const auto& w : all) {
    const auto& f = w.figures;
    written += static_cast<double>(f.bytes_written);
    writing_s += f.write_s + f.sync_s;
    if (w.role == 1) {
      t.chunks_sent += w.transit_chunks;
      t.bytes_sent += w.transit_bytes;
      t.streamer_queue_wait_s = std::max(t.streamer_queue_wait_s, w.queue_wait_s);
      t.send_wait_s = std::max(t.send_wait_s, w.send_wait_s);
      // What it made while writing did not hold it. The waits are its
      // threads' (thread-seconds: GPU streamers' threads mostly wait).
      compute += static_cast<double>(f.visibilities) * static_cast<double>(sizeof(cplx)) /
                 std::max(1e-3 * stream_s, stream_s - w.queue_wait_s / std::max(1, threads));
    } else if (w.role == 3) {
      t.writer_idle_s = std::max(t.writer_idle_s, w.transit_idle_s);
      t.writer_queue_wait_s = std::max(t.writer_queue_wait_s, w.queue_wait_s);
    }
  }
  t.bytes_per_s = static_cast<double>(t.bytes_sent) / std::max(1e-9, stream_s);
  t.compute_bytes_per_s = compute / std::max(1, roles.streamers);
  t.write_bytes_per_s = writing_s > 0 ? written / writing_s : 0;
  // Degridding held by full queues for a tenth of the run: the writing
  // side set the pace; in transit, if the writer ranks mostly waited for
  // messages meanwhile, the transfer itself did (messages too few in
  // flight for the latency, or a slow network).
  if (t.streamer_queue_wait_s <= 0.1 * stream_s)
    t.bound = "streamers";
  else if (roles.writers > 0 && t.writer_idle_s > 0.5 * stream_s)
    t.bound = "transfer";
  else
    t.bound = "writers";
  t.suggested_writer_ranks = report::writer_ranks_for(roles.streamers, t.compute_bytes_per_s,
                                                      t.write_bytes_per_s, o.writer_count);
  return t;
}

report::RankStats from_wire(const Wire& w) {
  report::RankStats s;
  static_cast<report::RankFigures&>(s) = w.figures;
  s.rank = w.rank;
  s.role = kRoleNames[w.role];
  s.host = w.host;
  return s;
}

// Cores of this host shared by its ranks.
int default_threads(MPI_Comm comm) {
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int ranks_here = 1;
  MPI_Comm_size(local, &ranks_here);
  MPI_Comm_free(&local);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return threads_available(std::max(1, cores / ranks_here));
}

// Threads for a producer's first touch of its prepared facets, and their
// first preparation: this host's cores over its producers, since the
// streamers only wait at that point (for the FFT plans, then for the first
// contributions). On the development VM a
// cold first touch runs at ~0.37 GB/s per thread: 4.5 GiB took 13.0 s on
// one thread and 7.2 s on two. Collective over comm.
int first_touch_threads(MPI_Comm comm, bool producer) {
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int mine = producer ? 1 : 0, producers_here = 0;
  MPI_Allreduce(&mine, &producers_here, 1, MPI_INT, MPI_SUM, local);
  MPI_Comm_free(&local);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return threads_available(std::max(1, cores / std::max(1, producers_here)));
}

// One output shared by every streamer (phdf5): one writer each, threads,
// one file name.
void check_shared_output(const RunOptions& o, const storage::StorageChoice& storage) {
  if (!storage.shared) return;
  const std::string& name = storage.backend;
  if (o.writer_count != 1)
    throw UsageError("--writer-count",
                     fmt::format("expected 1 with --storage={}: each streamer has one writer "
                                 "of the one shared file, got {}",
                                 name, o.writer_count));
  if (o.fork_writer)
    throw UsageError("--fork-writer", fmt::format("does not apply to --storage={}: its writers "
                                                  "call MPI, so they are threads",
                                                  name));
  if (o.output.find("%d") != std::string::npos || o.output.find("%h") != std::string::npos)
    throw UsageError("OUTPUT", fmt::format("expected one file name without %d or %h: --storage={} "
                                           "writes one file shared by every streamer",
                                           name));
}

void check_writer_ranks(const RunOptions& o) {
  if (o.writer_ranks == 0) return;
  const auto refuse = [](bool given, const std::string& what) {
    if (given)
      throw UsageError("--writer-ranks",
                       "expected 0 with " + what + ": the writer group writes predicted chunks");
  };
  refuse(!o.observation, "no --vis-set");
  refuse(o.network_only, "--network-only");
  refuse(o.direction != swiftly::Direction::predict,
         "--direction=" + swiftly::to_string(o.direction));
}

void check_network_only(const RunOptions& o) {
  if (!o.network_only) return;
  const auto refuse = [](bool given, const char* option) {
    if (given)
      throw UsageError(option, "does not apply to --network-only (nothing is computed or written)");
  };
  refuse(!o.output.empty(), "OUTPUT");
  refuse(o.synthetic_vis, "--synthetic-vis");
  refuse(o.direction != swiftly::Direction::predict, "--direction");
  refuse(o.duration.has_value(), "--duration");
  refuse(o.target_err.has_value(), "--target-err");
  if (o.facet_workers && *o.facet_workers < 1)
    throw UsageError("--facet-workers",
                     "expected at least 1 with --network-only: producers send the contributions");
}

// --device=cuda: the GPU streamers degrid or grid; a run that does neither
// has nothing for them.
void check_device(const RunOptions& o) {
  if (o.device != device::Kind::cuda) return;
  const auto refuse = [](bool given, const std::string& why) {
    if (given) throw UsageError("--device", "cuda: " + why);
  };
  refuse(!o.observation && o.inputs.empty(),
         "expected a --vis-set: the GPU streamers degrid or grid visibilities");
  refuse(o.synthetic_vis, "does not apply to --synthetic-vis (nothing is degridded)");
  refuse(o.network_only, "does not apply to --network-only (nothing is computed)");
}

void check_direction(const RunOptions& o) {
  if (o.direction == swiftly::Direction::predict) {
    if (!o.inputs.empty())
      throw UsageError("FILE",
                       "input files are read by --direction=image; predict writes one OUTPUT");
    return;
  }
  const std::string d = "--direction=" + swiftly::to_string(o.direction);
  if (!o.observation && o.inputs.empty())
    throw UsageError("--vis-set",
                     "expected a visibility set, or a predict run's files to read, with " + d);
  // Storage only: the streamers read their parts' chunks in walk order
  // and check the pattern; nothing is gridded (the read side's twin of
  // --synthetic-vis in predict).
  if (o.synthetic_sequential)
    throw UsageError("--synthetic-vis", "=sequential writes: expected --direction=predict");
  if (o.synthetic_vis && (o.inputs.empty() || o.direction == swiftly::Direction::both))
    throw UsageError("--synthetic-vis",
                     "expected --direction=image and a synthetic run's files to read");
  if (o.duration) throw UsageError("--duration", "is not supported with " + d + " yet");
  if (o.target_err) throw UsageError("--target-err", "is not supported with " + d + " yet");
  if (o.facet_workers && *o.facet_workers < 1 && !o.synthetic_vis)
    throw UsageError("--facet-workers",
                     "expected at least 1 with " + d + ": producers hold the dirty image");
}

// --image: the imaging direction's dirty image, into a file of its own
// (never one of the files read).
void check_image(const RunOptions& o) {
  if (o.image.empty()) return;
  if (o.direction == swiftly::Direction::predict)
    throw UsageError("--image", "expected --direction=image or both: predict makes no image");
  if (o.synthetic_vis)
    throw UsageError("--image", "does not apply to --synthetic-vis (nothing is gridded)");
  std::error_code ignored;
  const auto image = std::filesystem::weakly_canonical(o.image, ignored);
  for (const auto& input : o.inputs)
    if (std::filesystem::weakly_canonical(input, ignored) == image)
      throw UsageError("--image", fmt::format("'{}' is one of the files to read", input));
}

// The roles against the ranks there are.
void check_rank_counts(const RunOptions& o, int size) {
  const int others = size - (o.assigner ? 1 : 0) - o.writer_ranks;
  if (o.writer_ranks > 0 && others < 1)
    throw UsageError(
        "--writer-ranks",
        fmt::format("expected fewer than the {} rank(s){}: the streamers need some",
                    size - (o.assigner ? 1 : 0), o.assigner ? " besides the assigner" : ""));
  if (o.facet_workers && (*o.facet_workers < 0 || *o.facet_workers > others))
    throw UsageError(
        "--facet-workers",
        fmt::format("expected 0 to {} producers for {} rank(s){}{}", others, size,
                    o.assigner ? " and an assigner" : "",
                    o.writer_ranks > 0 ? fmt::format(" and {} writer rank(s)", o.writer_ranks)
                                       : std::string()));
}

}  // namespace

// A run's options, all checked here, once, before any work (every rank
// alike, agreed; `plan --slurm` too, for the run it writes): the shape as
// `plan` checks it (job::), the back-end's options by the back-end registry
// (against the input files' when reading), then how the run's own options
// combine. Returns the output's back-end, resolved here once (the imaging
// direction writes none: its back-end options are the input files').
storage::StorageChoice check_run_combination(const RunOptions& o) {
  job::check_shape_options(o);
  storage::StorageChoice storage;
  if (o.inputs.empty()) {
    storage = storage::resolve_storage(o.storage, o.output);
  } else {
    storage::check_storage(o.storage, o.inputs.front());
    storage = storage::resolve_storage({}, "");
  }
  check_shared_output(o, storage);
  check_writer_ranks(o);
  check_network_only(o);
  check_direction(o);
  check_image(o);
  check_device(o);
  if (o.check_subgrids < 0) throw UsageError("--check", "expected a count >= 0");
  if (o.pixel_samples < 0) throw UsageError("--pixel-samples", "expected a count >= 0");
  if (o.vis_samples < 0) throw UsageError("--vis-samples", "expected a count >= 0");
  if (o.duration && !(*o.duration > 0))
    throw UsageError("--duration", fmt::format("expected seconds > 0, got {}", *o.duration));
  // Stonewalled files list the walk's parts they hold; file order has none.
  if (o.duration && o.synthetic_sequential)
    throw UsageError("--duration", "does not apply to --synthetic-vis=sequential (no walk)");
  if (o.assigner && o.synthetic_sequential)
    throw UsageError("--assigner", "does not apply to --synthetic-vis=sequential (no walk)");
  return storage;
}

namespace {

// ... and against the job's ranks.
storage::StorageChoice check_run_options(const RunOptions& o, int size) {
  auto storage = check_run_combination(o);
  check_rank_counts(o, size);
  return storage;
}

Roles make_roles(const RunOptions& o, const config::RecombinationParams& p, int rank, int size) {
  Roles r;
  r.rank = rank;
  r.size = size;
  const int others = size - (o.assigner ? 1 : 0) - o.writer_ranks;
  r.writers = o.writer_ranks;
  if (o.facet_workers) {
    r.producers = *o.facet_workers;
  } else if (o.synthetic_vis) {
    r.producers = 0;  // nothing to produce: every rank streams
  } else if (size == 1) {
    r.producers = 1;  // a producer-only dry run
  } else {
    // Degridding costs far more than producing (small + vlaa: streamer busy
    // 94 s, producers 12 s each): with visibilities a third of the ranks
    // produce, else half.
    const int share = o.observation || !o.inputs.empty() ? others / 3 : (others + 1) / 2;
    r.producers = static_cast<int>(std::min<index_t>(p.facet_count(), std::max(1, share)));
  }
  r.streamers = others - r.producers;
  if (o.assigner) {
    if (r.streamers < 1)
      throw UsageError("--assigner", "expected ranks left for streamers besides the assigner");
    r.assigner_rank = size - 1;
  }
  if ((o.observation || !o.inputs.empty()) && r.streamers < 1)
    throw UsageError("--facet-workers",
                     fmt::format("{} rank(s) leave no streamer to degrid; run under mpirun with "
                                 "more ranks, or use `iotest degrid` for one process",
                                 size));
  return r;
}

}  // namespace

namespace {

// Visibilities per visit over the whole observation: each rank bins its
// share of the baselines on its threads, then the shares are summed.
binning::VisitCounts count_visits(const binning::Binner& binner, MPI_Comm comm, int threads) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const index_t nb = binner.observation().baseline_count();
  auto counts = binner.count_visits(nb * rank / size, nb * (rank + 1) / size, threads);
  const int n = static_cast<int>(counts.visibilities.size());
  MPI_Request requests[4];
  MPI_Iallreduce(MPI_IN_PLACE, counts.visibilities.data(), n, MPI_INT64_T, MPI_SUM, comm,
                 &requests[0]);
  MPI_Iallreduce(MPI_IN_PLACE, counts.pieces.data(), n, MPI_INT64_T, MPI_SUM, comm, &requests[1]);
  MPI_Iallreduce(MPI_IN_PLACE, counts.w_lo.data(), n, MPI_DOUBLE, MPI_MIN, comm, &requests[2]);
  MPI_Iallreduce(MPI_IN_PLACE, counts.w_hi.data(), n, MPI_DOUBLE, MPI_MAX, comm, &requests[3]);
  for (auto& r : requests) wait_for(r);
  return counts;
}

// The estimate of this host's ranks against its available memory
// (collective): a job that cannot fit stops every rank with a usage error
// naming the role, before the large allocations.
void require_node_memory(const report::Memory& m, const Roles& roles, MPI_Comm comm) {
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  const index_t mine = roles.is_producer()   ? m.producer_bytes
                       : roles.is_assigner() ? m.assigner_bytes
                       : roles.is_writer()   ? m.writer_bytes
                                             : m.streamer_bytes;
  const char* role = roles.is_producer()   ? "producer"
                     : roles.is_assigner() ? "assigner"
                     : roles.is_writer()   ? "writer rank"
                                           : "streamer";
  index_t total = 0;
  MPI_Request request;
  MPI_Iallreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, local, &request);
  wait_for(request);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  const index_t available = available_memory_bytes();
  const auto gib = [](index_t b) { return static_cast<double>(b) / (1024.0 * 1024 * 1024); };
  agree_on_usage(comm, [&] {
    if (available <= 0 || total <= available) return;
    char host[64] = {};
    ::gethostname(host, sizeof(host) - 1);
    throw UsageError(
        "--rec-set",
        fmt::format(
            "the memory model gives this {} {:.2f} GiB and the {} rank(s) on {} {:.2f} GiB in "
            "all, but {:.2f} GiB are available; use more nodes, fewer ranks per node or shorter "
            "queues (iotest plan --nodes=N sizes a job)",
            role, gib(mine), local_size, host, gib(total), gib(available)));
  });
}

}  // namespace

namespace {
report::Report run_placed(const RunOptions& o, MPI_Comm comm);
}  // namespace

report::Report run(const RunOptions& o, MPI_Comm launched) {
  // Ranks in node-cyclic order, so the roles spread over the nodes (the
  // per-rank figures name these ranks). A failure ends the process, so
  // only a run that returns frees it.
  MPI_Comm comm = place_by_node(launched);
  auto report = run_placed(o, comm);
  MPI_Comm_free(&comm);
  return report;
}

namespace {

// What the setup leaves for the report besides the Context.
struct Setup {
  double t_wall = 0, planning_s = 0;
  job::RunShape shape;
  binning::VisitCounts counts;
  report::Memory memory;
  std::optional<degrid::TowerCalibration> calibration;
  // The imaging direction over files: what the streamers found.
  double inputs_open_s = 0;
  std::string input_backend;
  bool input_direct = false;
  index_t chunks_stored = 0;
};

// The options and the job: the recombination, and with visibilities the
// degridding that shapes it. The same on every rank, except what a node
// sees alone (a layout file it cannot read): agreed, so all end alike.
void resolve_job(Context& ctx, Setup& st, MPI_Comm comm) {
  const auto& o = ctx.options;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  agree_on_usage(comm, [&] {
    ctx.storage = check_run_options(o, size);
    auto jo = job::job_options(o);
    if (!o.inputs.empty()) {
      // The imaging direction over a predict run's files: their observation
      // and sky. Every rank reads the first file's provenance; the
      // streamers open them all, checked whole, before any work.
      const auto first = storage::open_reader(o.inputs[0], o.storage);
      job::use_files_observation(jo, storage::provenance_of(*first, o.inputs[0]), o.inputs[0]);
      st.input_backend = first->backend();
      st.input_direct = first->direct();
      ctx.input_nonce = first->provenance()->nonce;
      if (o.synthetic_vis && !first->provenance()->synthetic)
        throw UsageError("--synthetic-vis", fmt::format("expected a synthetic run's files: {} "
                                                        "holds a sky's visibilities",
                                                        o.inputs[0]));
    }
    ctx.job = job::resolve(jo);
    ctx.roles = make_roles(o, ctx.job.p, rank, size);
    // The streamers' nodes need the GPUs, the other roles' none.
    if (ctx.roles.is_streamer()) ctx.gpus = job::require_device(o.device);
    if (!o.inputs.empty() && ctx.roles.is_streamer()) {
      const auto t0 = Clock::now();
      ctx.inputs = storage::open_output_set(o.inputs, o.storage);
      st.chunks_stored = storage::require_whole_observation(ctx.inputs, o.inputs, *ctx.job.obs);
      st.inputs_open_s = seconds_since(t0);
    }
  });
  if (!o.inputs.empty()) {
    // One run's files throughout: every rank's first look and every
    // streamer's set (open_output_set: one run within it) agree, or
    // another run's output replaced them while the ranks opened them.
    const std::uint32_t set =
        ctx.inputs.empty() ? ctx.input_nonce : ctx.inputs[0]->provenance()->nonce;
    std::uint32_t highest[2] = {std::max(set, ctx.input_nonce),
                                ~std::min(set, ctx.input_nonce)};  // the highest and ~lowest
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, highest, 2, MPI_UINT32_T, MPI_MAX, comm, &request);
    wait_for(request);
    if (highest[0] != ~highest[1])
      throw UsageError("FILES", fmt::format("'{}' changed while the ranks opened it (another "
                                            "run's output replaced it?)",
                                            o.inputs[0]));
    // Rank 0, a producer, reports what the streamers found.
    MPI_Iallreduce(MPI_IN_PLACE, &st.chunks_stored, 1, MPI_INT64_T, MPI_MAX, comm, &request);
    wait_for(request);
    MPI_Iallreduce(MPI_IN_PLACE, &st.inputs_open_s, 1, MPI_DOUBLE, MPI_MAX, comm, &request);
    wait_for(request);
  }
}

// Threads, the run's communicators and its nonce.
void make_communicators(Context& ctx, Setup& st, MPI_Comm comm) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  const index_t chunk_bytes = ctx.job.obs ? storage::layout_of(*ctx.job.obs).chunk_bytes() : 0;
  st.shape = job::run_shape(o, roles.producers, roles.streamers, roles.assigner_rank >= 0,
                            default_threads(comm), chunk_bytes);
  st.shape.writer_held_chunks = st.shape.writes ? ctx.storage.held_chunks : 0;
  ctx.options.visibility_queue = st.shape.visibility_queue;  // resolved: every role reads it
  ctx.threads = st.shape.threads;
  ctx.producer_threads = st.shape.producer_threads;
  MPI_Comm_dup(comm, &ctx.data);
  MPI_Comm_dup(comm, &ctx.control);
  // One nonce and start for the run, rank 0's, in every file it writes.
  if (roles.rank == 0) {
    ctx.nonce = storage::draw_nonce();
    ctx.started = utc_now();
  }
  MPI_Bcast(&ctx.nonce, 1, MPI_UINT32_T, 0, comm);
  broadcast(comm, 0, ctx.started);
  MPI_Comm_split(comm, roles.is_producer() ? 0 : MPI_UNDEFINED, roles.rank, &ctx.producers);
  // A back-end with one output for the run: its writers' communicator.
  const bool shared = roles.writes_outputs() && ctx.storage.shared;
  MPI_Comm_split(comm, shared ? 0 : MPI_UNDEFINED, roles.rank, &ctx.shared_output);
  if (roles.writers > 0) MPI_Comm_dup(comm, &ctx.transit);
}

void free_communicators(Context& ctx) {
  MPI_Comm_free(&ctx.data);
  MPI_Comm_free(&ctx.control);
  for (MPI_Comm* c : {&ctx.producers, &ctx.shared_output, &ctx.transit})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

// This rank's share of the observation's bytes against the free space of
// each folder its outputs go to (a rank on a shared file system sees its
// own share only; node-local folders, %h, are each their host's). A
// warning on stderr, or with --require-space a usage error.
void check_free_space(const Context& ctx) {
  const auto& o = ctx.options;
  const auto outputs = ctx.outputs();
  if (!ctx.job.obs || o.network_only || ctx.imaging() || outputs.empty() || outputs[0].empty())
    return;
  const auto& roles = ctx.roles;
  const index_t writing_ranks = roles.writers > 0 ? roles.writers : roles.streamers;
  const bool shared = ctx.storage.shared;
  const double files_in_all = shared ? static_cast<double>(writing_ranks)
                                     : static_cast<double>(writing_ranks * o.writer_count);
  const double share = static_cast<double>(ctx.job.obs->visibility_bytes()) / files_in_all;
  std::map<std::string, double> per_folder;
  for (const auto& path : outputs) per_folder[storage::folder_of(path)] += share;
  for (const auto& [folder, bytes] : per_folder) {
    struct statvfs fs {};
    if (::statvfs(folder.c_str(), &fs) != 0) continue;  // claim_outputs has looked at it
    const double free_bytes = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
    if (free_bytes >= bytes) continue;
    const auto size = [](double b) {
      return b >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
    };
    const std::string what =
        fmt::format("{} has {} free, and this rank ({}) will write about {} there", folder,
                    size(free_bytes), host_name(), size(bytes));
    if (o.require_space) throw UsageError("--require-space", what);
    std::fprintf(stderr, "iotest: warning: OUTPUT: %s (--require-space makes it an error)\n",
                 what.c_str());
  }
}

// --device=cuda: the streamers of each node dealt round-robin over its
// GPUs by their index among the node's streamers (collective), each GPU's
// share of the memory model against its memory; agreed, so a GPU too
// small stops every rank with a usage error naming it. A streamer keeps
// its GPU's ordinal (ctx.gpu_ordinal).
void require_gpu_memory(const report::Memory& m, Context& ctx, MPI_Comm comm) {
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  const index_t mine = ctx.roles.is_streamer() ? 1 : 0;
  index_t streamers = 0, before = 0;
  MPI_Request requests[2];  // both read `mine`, which neither changes
  MPI_Iallreduce(&mine, &streamers, 1, MPI_INT64_T, MPI_SUM, local, &requests[0]);
  MPI_Iexscan(&mine, &before, 1, MPI_INT64_T, MPI_SUM, local, &requests[1]);
  for (auto& r : requests) wait_for(r);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  if (local_rank == 0) before = 0;  // MPI_Exscan leaves the first rank's undefined
  MPI_Comm_free(&local);
  if (ctx.roles.is_streamer() && !ctx.gpus.empty())
    ctx.gpu_ordinal = ctx.gpus[static_cast<size_t>(device::gpu_for_local_rank(
                                   static_cast<int>(before), static_cast<int>(ctx.gpus.size())))]
                          .index;
  agree_on_usage(comm, [&] {
    if (ctx.roles.is_streamer()) job::require_gpu_memory(m.streamer_gpu_bytes, streamers, ctx.gpus);
  });
}

// --device=cuda: the first streamer's GPUs, for the report on rank 0 (a
// producer, which probes none). Collective.
void share_gpus(Context& ctx, MPI_Comm comm) {
  if (ctx.options.device != device::Kind::cuda || ctx.roles.streamers == 0) return;
  const int first = ctx.roles.streamer_rank(0);
  std::string text;
  if (ctx.roles.rank == first) {
    auto list = nlohmann::json::array();
    for (const auto& g : ctx.gpus)
      list.push_back({g.index, g.name, g.driver, g.memory_bytes, g.multiprocessors,
                      g.compute_capability, g.memory_bytes_per_s, g.fp64_flops_per_s});
    text = list.dump();
  }
  broadcast(comm, first, text);
  if (ctx.roles.is_streamer()) return;  // a streamer keeps its own node's
  ctx.gpus.clear();
  for (const auto& f : nlohmann::json::parse(text))
    ctx.gpus.push_back({f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]});
}

// This rank's outputs checked, and those it publishes claimed: each of
// its own, a shared one by its first writing rank (the others check it).
// Claimed only where a back-end writes files with visibilities: a dry run
// or the network alone publishes nothing.
void claim_outputs(Context& ctx) {
  const auto& o = ctx.options;
  const bool writes = ctx.job.obs && !o.network_only && !ctx.imaging() && ctx.storage.writes_files;
  int first = 0;
  if (ctx.shared_output != MPI_COMM_NULL) MPI_Comm_rank(ctx.shared_output, &first);
  for (const auto& path : ctx.outputs()) {
    if (path.empty()) continue;
    if (writes && first == 0)
      ctx.claims.emplace_back(path, ctx.nonce, "OUTPUT", ctx.storage.folder);
    else
      storage::check_creatable(path, "OUTPUT", ctx.storage.folder);
  }
}

// --image: rank 0, its writer, claims it for the run (its partial file
// named by the run's nonce), before any work.
void claim_image(Context& ctx) {
  if (!ctx.options.image.empty() && ctx.roles.rank == 0)
    ctx.image_claim.emplace(storage::claim_image_path(ctx.options.image, ctx.nonce));
}

// The visits and their figures: counted in parallel over the ranks, the
// memory model checked against every node before the large allocations.
void count_and_check(Context& ctx, Setup& st, MPI_Comm comm) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  if (ctx.job.obs) {
    ctx.binner = std::make_unique<binning::Binner>(ctx.job.p, *ctx.job.obs, *ctx.job.geometry,
                                                   ctx.job.split());
    st.counts =
        count_visits(*ctx.binner, comm, roles.is_producer() ? ctx.producer_threads : ctx.threads);
  }
  st.memory = job::estimate_memory(ctx.job, st.shape, ctx.job.obs ? &st.counts : nullptr);
  if (ctx.job.obs) {
    const bool degrids = !o.synthetic_vis && !o.network_only;
    ctx.tower_planes = degrids ? job::max_tower_planes(ctx.job, st.counts) : 0;
    ctx.task_visibilities =
        o.network_only ? 0 : job::task_visibilities(ctx.job, st.counts, o.bls_per_task);
  }
  require_node_memory(st.memory, roles, comm);
  if (o.device == device::Kind::cuda) {
    require_gpu_memory(st.memory, ctx, comm);
    share_gpus(ctx, comm);
  }
  // Outputs: each writing rank checks and claims its own (its node may
  // lack a folder the others have; another run may be writing them),
  // agreed, so a bad path stops every rank before any work. Then its
  // writers open them (UVH5 headers: seconds at SKA sizes) while the FFTs
  // are planned and the facets touched.
  agree_on_usage(comm, [&] {
    claim_outputs(ctx);
    claim_image(ctx);
    check_free_space(ctx);
  });
  if ((roles.is_streamer() || roles.is_writer()) && !ctx.imaging()) open_writers(ctx);
}

// FFTW_MEASURE planning takes seconds on large sets, and ranks sharing
// cores slow each other down: one rank measures, the others plan from its
// wisdom (as FFTW's own MPI interface does; on a node unlike the root's
// the plans are still correct, only perhaps not the fastest). The root is
// a streamer, idle until contributions come anyway, while producers first
// touch their prepared facets, the run's one large allocation (seconds
// of page faults on a VM), on the host's idle cores. Returns the root.
int plan_transforms(Context& ctx, MPI_Comm comm) {
  const auto& o = ctx.options;
  const auto& p = ctx.job.p;
  const auto& roles = ctx.roles;
  const int wisdom_root = roles.streamers > 0 ? roles.streamer_rank(0) : 0;
  ctx.setup_threads = first_touch_threads(comm, roles.is_producer());  // collective
  // Storage only needs no transform, only the buffers' shapes: no measuring.
  const unsigned fft_flags = o.synthetic_vis ? FFTW_ESTIMATE : FFTW_MEASURE;
  if (roles.rank == wisdom_root) ctx.rec = std::make_unique<swiftly::Recombination>(p, fft_flags);
  const index_t my_facets = static_cast<index_t>(ctx.facets_of_producer().size());
  // Allocated here and first touched on the setup threads, row by row.
  const auto touch = [&](std::vector<Array2D>& buffers, index_t cols) {
    buffers = touched_buffers(my_facets, p.yB, cols, ctx.setup_threads);
  };
  if (o.direction != swiftly::Direction::image && !o.network_only) touch(ctx.prepared_facets, p.yN);
  if (ctx.imaging()) {
    touch(ctx.facet_sums, p.yN);
    touch(ctx.image_facets, p.yB);
    if (o.pixel_samples > 0 && !o.synthetic_vis)
      ctx.pixels = sky::random_sources(o.pixel_samples, p.used_size, o.seed ^ 0x1ace);
  }
  std::string wisdom = roles.rank == wisdom_root ? swiftly::export_fft_wisdom() : std::string();
  broadcast(comm, wisdom_root, wisdom);
  if (roles.rank != wisdom_root) {
    swiftly::import_fft_wisdom(wisdom);
    ctx.rec = std::make_unique<swiftly::Recombination>(p, fft_flags);
  }
  return wisdom_root;
}

// Everything before the start: the job, the communicators, the counts and
// memory check, the transforms, the tower height (--target-err), the
// degridder and the work plan.
Setup set_up(Context& ctx, MPI_Comm comm) {
  const auto& o = ctx.options;
  Setup st;
  st.t_wall = MPI_Wtime();
  resolve_job(ctx, st, comm);
  make_communicators(ctx, st, comm);
  const double t_plan = MPI_Wtime();
  if (!o.target_err) count_and_check(ctx, st, comm);  // else once the tower height is measured
  const int wisdom_root = plan_transforms(ctx, comm);
  if (ctx.job.obs && o.target_err) {
    // Measured once and shared: ranks measuring alone might choose
    // different heights (FFTs planned differently on unlike nodes), hence
    // different work plans.
    degrid::TowerCalibration c;
    if (ctx.roles.rank == wisdom_root) c = job::calibrate_w_layout(ctx.job, *ctx.rec);
    static_assert(std::is_trivially_copyable_v<degrid::TowerCalibration>);
    MPI_Request request;
    MPI_Ibcast(&c, sizeof(c), MPI_BYTE, wisdom_root, comm, &request);
    wait_for(request);
    if (ctx.roles.rank != wisdom_root) job::use_tower_height(ctx.job, c.height);
    st.calibration = c;
    count_and_check(ctx, st, comm);
  }
  // The w layout above still shapes the walk (margin, w-stacks) in the
  // storage-only mode; only the degridder itself is not needed there.
  if (ctx.job.obs && !o.synthetic_vis)
    ctx.degridder = std::make_unique<degrid::Degridder>(*ctx.rec, *ctx.job.geometry, *ctx.job.obs,
                                                        ctx.job.kernel, ctx.job.w);
  // Its tables uploaded before the start: setting up, not streaming.
  if (ctx.degridder && ctx.roles.is_streamer() && o.device == device::Kind::cuda)
    ctx.gpu = std::make_unique<GpuLane>(*ctx.degridder, ctx.gpu_ordinal);
  ctx.facet_tiles = swiftly::facet_tiles(ctx.job.p);
  ctx.subgrid_tiles = swiftly::subgrid_tiles(ctx.job.p);
  // The work plan needs only the visibilities per visit.
  std::map<std::pair<index_t, index_t>, index_t> per_visit;
  const auto& counts = st.counts;
  if (ctx.job.obs)
    for (index_t s = 0; s < counts.stacks; ++s)
      for (index_t g = 0; g < counts.subgrids; ++g)
        if (const index_t n = counts.visibilities[static_cast<size_t>(s * counts.subgrids + g)])
          per_visit[{counts.first_stack + s, g}] = n;
  ctx.plan = plan_work(ctx.job.p, per_visit, ctx.roles.streamers, ctx.roles.assigner_rank < 0);
  st.planning_s = MPI_Wtime() - t_plan;
  return st;
}

report::Pipeline pipeline_section(const Context& ctx) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  report::Pipeline pl;
  pl.ranks = roles.size;
  pl.producers = roles.producers;
  pl.streamers = roles.streamers;
  pl.assigner = roles.assigner_rank >= 0;
  pl.threads = ctx.threads;
  pl.producer_threads = ctx.producer_threads;
  pl.writers_per_streamer = ctx.job.obs && !ctx.imaging() ? o.writer_count : 0;
  pl.writer_ranks = roles.writers;
  pl.fork_writer = o.fork_writer;
  pl.synthetic_vis = o.synthetic_vis;
  pl.synthetic_order = !o.synthetic_vis ? "" : o.synthetic_sequential ? "sequential" : "walk";
  pl.network_only = o.network_only;
  pl.send_queue = o.send_queue;
  pl.subgrid_queue = o.subgrid_queue;
  pl.task_queue = o.task_queue;
  pl.bls_per_task = o.bls_per_task;
  pl.visibility_queue = *o.visibility_queue;
  pl.subgrid_visits = static_cast<index_t>(ctx.plan.visits.size());
  pl.subgrid_parts = static_cast<index_t>(ctx.plan.parts.size());
  return pl;
}

// The report as planned: rank 0 prints the plan from it before starting,
// and fills in what the run measured.
report::Report planned_report(const Context& ctx, const Setup& st) {
  const auto& o = ctx.options;
  report::Report r;
  r.mode = "run";
  r.rec = ctx.job.p;
  r.pipeline = pipeline_section(ctx);
  r.memory = st.memory;
  // Rank 0 may be a producer without GPUs: the first streamer's are
  // reported (share_gpus).
  r.device = job::device_section(o.device, ctx.gpus);
  r.settings = report::RunSettings{};
  auto& s = *r.settings;
  // Synthetic visibilities have no sky and nothing to check.
  s.source_count = o.synthetic_vis ? 0 : o.source_count;
  s.seed = o.seed;
  s.direction = swiftly::to_string(o.direction);
  s.subgrids = r.pipeline->subgrid_visits;
  s.check = o.synthetic_vis ? 0 : o.check_subgrids;
  s.threads = ctx.threads;
  if (ctx.job.obs) {
    std::set<index_t> stacks;
    for (const auto& v : ctx.plan.visits) stacks.insert(v.stack);
    if (ctx.degridder)
      job::describe_degridding(s, ctx.job, *ctx.degridder, static_cast<index_t>(stacks.size()),
                               st.calibration);
    if (!ctx.imaging()) {
      s.vis_samples = o.synthetic_vis ? 0 : o.vis_samples;
      s.backend = ctx.storage.backend;
      s.durability = ctx.storage.durability;
      s.value_bytes = ctx.storage.value_bytes;
      s.nonce = ctx.nonce;
      s.output = o.output;
    }
    job::add_observation(r, *ctx.job.obs, *ctx.job.geometry, binning::summarise(st.counts));
  }
  r.counts.facets = ctx.job.p.facet_count();
  r.counts.subgrids = ctx.job.p.subgrid_count();
  r.counts.subgrids_processed = r.pipeline->subgrid_visits;
  if (!o.inputs.empty()) {  // the rest once read
    r.reading = report::Reading{};
    r.reading->files = o.inputs;
  }
  if (!o.image.empty()) {  // the rest once written
    r.image = report::ImageFile{};
    r.image->path = o.image;
    r.image->format = storage::is_fits_path(o.image) ? "fits" : "hdf5";
    r.image->used_size = ctx.job.p.used_size;
  }
  if (ctx.job.obs && !o.synthetic_vis)
    r.sky = job::sky_of(ctx.job.sources, ctx.job.geometry->pixel_lm);
  return r;
}

// What the roles' work leaves: every rank's figures (on rank 0) and the
// imaging direction's pixel sums.
struct Outcome {
  double stream_s = 0;
  std::vector<Wire> all;                         // rank 0: every rank's
  std::vector<std::vector<TimeSample>> samples;  // rank 0: every rank's time line
  std::vector<cplx> pixel_sums;  // the sampled pixels' direct sums, then image values
  index_t outputs_replaced = 0;  // rank 0: files there before the run, replaced
  report::ImageFile image;       // rank 0, with --image: the dirty image's file
  std::vector<report::PeerTraffic> peers;  // rank 0: per rank and peer host
};

// What each rank sent to and received from each host, with the seconds in
// flight (report::PeerTraffic), on rank 0. The producers know their sends
// per destination rank; one all-to-all tells each rank what it received
// from each, then each rank adds them up by host and rank 0 gathers a
// fixed row per host from every rank (6 figures x hosts x ranks).
std::vector<report::PeerTraffic> gather_peers(const RankResult& mine, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr int kName = 64;
  std::vector<char> names(static_cast<size_t>(size * kName));
  char host[kName] = {};
  ::gethostname(host, kName - 1);
  MPI_Request request;
  MPI_Iallgather(host, kName, MPI_CHAR, names.data(), kName, MPI_CHAR, comm, &request);
  wait_for(request);
  std::vector<std::string> host_of(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i)
    host_of[static_cast<size_t>(i)] = std::string(&names[static_cast<size_t>(i * kName)]);
  std::vector<std::string> hosts = host_of;
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  const auto index_of = [&](int r) {
    return static_cast<size_t>(std::lower_bound(hosts.begin(), hosts.end(),
                                                host_of[static_cast<size_t>(r)]) -
                               hosts.begin());
  };
  // Per destination rank: messages, bytes, seconds in flight.
  std::vector<double> sent(static_cast<size_t>(3 * size)), received(sent.size());
  for (size_t d = 0; d < mine.sent_to.size() && d < static_cast<size_t>(size); ++d) {
    sent[3 * d] = mine.sent_to[d].messages;
    sent[3 * d + 1] = mine.sent_to[d].bytes;
    sent[3 * d + 2] = mine.sent_to[d].in_flight_s;
  }
  MPI_Ialltoall(sent.data(), 3, MPI_DOUBLE, received.data(), 3, MPI_DOUBLE, comm, &request);
  wait_for(request);
  // Per host: messages sent, received; bytes sent, received; seconds sent, received.
  constexpr size_t kFigures = 6;
  const size_t h = hosts.size();
  std::vector<double> row(kFigures * h);
  for (int r = 0; r < size; ++r) {
    const size_t at = kFigures * index_of(r), k = 3 * static_cast<size_t>(r);
    for (size_t f = 0; f < 3; ++f) {
      row[at + 2 * f] += sent[k + f];
      row[at + 2 * f + 1] += received[k + f];
    }
  }
  std::vector<double> all(rank == 0 ? row.size() * static_cast<size_t>(size) : 0);
  MPI_Igather(row.data(), static_cast<int>(row.size()), MPI_DOUBLE, all.data(),
              static_cast<int>(row.size()), MPI_DOUBLE, 0, comm, &request);
  wait_for(request);
  std::vector<report::PeerTraffic> peers;
  for (int r = 0; rank == 0 && r < size; ++r)
    for (size_t j = 0; j < h; ++j) {
      const double* f = &all[(static_cast<size_t>(r) * h + j) * kFigures];
      if (f[0] == 0 && f[1] == 0) continue;  // nothing either way
      peers.push_back({r, hosts[j], static_cast<index_t>(f[0]), static_cast<index_t>(f[1]),
                       static_cast<index_t>(f[2]), static_cast<index_t>(f[3]), f[4], f[5]});
    }
  return peers;
}

// The imaging direction's check: the sampled pixels' direct sums (from
// the streamers) and image values (from the producers holding them),
// summed on rank 0.
std::vector<cplx> pixel_sums(const Context& ctx, const RankResult& mine, MPI_Comm comm) {
  const auto& roles = ctx.roles;
  const index_t n = static_cast<index_t>(ctx.pixels.size());
  std::vector<cplx> sums(static_cast<size_t>(2 * n));
  if (n == 0) return sums;
  for (index_t i = 0; i < n && !mine.dirty_sums.empty(); ++i)
    sums[static_cast<size_t>(i)] = mine.dirty_sums[static_cast<size_t>(i)];
  for (index_t i = 0; i < n && roles.is_producer(); ++i) {
    const auto& px = ctx.pixels[static_cast<size_t>(i)];
    const auto at = swiftly::locate_pixel(ctx.facet_tiles, ctx.job.p.yB, px.y0, px.y1);
    if (at.facet < 0) throw std::logic_error("a sampled pixel outside every facet");
    if (roles.facet_owner(at.facet) == roles.rank)
      sums[static_cast<size_t>(n + i)] =
          ctx.image_facets[static_cast<size_t>(at.facet / roles.producers)](at.a, at.b);
  }
  MPI_Request request;
  MPI_Ireduce(roles.rank == 0 ? MPI_IN_PLACE : sums.data(), sums.data(),
              static_cast<int>(sums.size()), MPI_C_DOUBLE_COMPLEX, MPI_SUM, 0, comm, &request);
  wait_for(request);
  return sums;
}

// Past the barrier every rank has ended its role without failing (one
// that failed aborts the job): only now do the outputs take their names,
// all of them or none. Another run's output under one of the names ends
// the run, every output kept under its run's name (output_claim.hpp).
// Returns, on rank 0, how many replaced a file there before the run.
index_t publish_outputs(Context& ctx, MPI_Comm comm) {
  std::vector<storage::OutputClaim*> claims;  // the outputs', and the image's
  for (auto& claim : ctx.claims) claims.push_back(&claim);
  if (ctx.image_claim) claims.push_back(&*ctx.image_claim);
  std::string clash;
  for (auto* claim : claims) {
    try {
      clash = claim->take();
    } catch (const std::exception& e) {  // agreed too: no rank keeps a name alone
      clash = e.what();
    }
    if (!clash.empty()) {
      clash += fmt::format("; this run's outputs are kept, '.run-{}' before their extension ('{}')",
                           ctx.nonce, storage::kept_path(claim->path(), ctx.nonce));
      break;
    }
  }
  const std::string agreed = agree_on_error(comm, clash);
  if (!agreed.empty()) {
    for (auto* claim : claims) claim->keep();
    throw AgreedFailure("OUTPUT: " + agreed);
  }
  index_t replaced = 0, in_all = 0;
  for (auto* claim : claims) {
    replaced += claim->replaces() ? 1 : 0;
    claim->commit();
  }
  MPI_Reduce(&replaced, &in_all, 1, MPI_INT64_T, MPI_SUM, 0, comm);
  return in_all;
}

// The roles' work between two barriers, then the outputs published and
// every rank's figures gathered on rank 0.
Outcome run_roles(Context& ctx, MPI_Comm comm) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  if (ctx.writers) ctx.writers->wait_opened();  // a failure aborts the job
  MPI_Barrier(comm);
  ctx.start_s = MPI_Wtime();
  ctx.timeline.start(o.timeline_s, Clock::now());
  if (o.duration)
    ctx.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(*o.duration));
  RankResult mine;
  int role = 0;
  const double cpu0 = process_cpu_seconds();
  if (roles.is_producer()) {
    mine = o.direction == swiftly::Direction::image ? run_image_producer(ctx) : run_producer(ctx);
  } else if (roles.is_assigner()) {
    role = 2;
    mine = run_assigner(ctx);
  } else if (roles.is_writer()) {
    role = 3;
    mine = run_writer_rank(ctx);
  } else {
    role = 1;
    mine = ctx.imaging()            ? run_image_streamer(ctx)
           : o.synthetic_sequential ? run_file_order_streamer(ctx)
                                    : run_streamer(ctx);
  }
  mine.stats.cpu_s = process_cpu_seconds() - cpu0;
  MPI_Barrier(comm);
  Outcome out;
  out.stream_s = MPI_Wtime() - ctx.start_s;
  // The dirty image into its file, after the walk and apart from it, as
  // opening the outputs is apart from it; published with the outputs.
  if (!o.image.empty() && roles.is_producer()) out.image = write_image(ctx);
  out.outputs_replaced = publish_outputs(ctx, comm);
  out.pixel_sums = pixel_sums(ctx, mine, comm);
  const Wire wire = to_wire(mine, roles.rank, role);
  out.all.resize(roles.rank == 0 ? static_cast<size_t>(roles.size) : 1);
  MPI_Gather(&wire, sizeof(Wire), MPI_BYTE, out.all.data(), sizeof(Wire), MPI_BYTE, 0, comm);
  out.samples = gather_samples(ctx.timeline.samples(), comm);
  out.peers = gather_peers(mine, comm);
  return out;
}

// Every rank's figures added up (rank 0), for the report.
struct Totals {
  RelativeError subgrid_error, vis_error;
  double subgrid_worst = -1;
  index_t written = 0, checked = 0, vis_checked = 0, sent = 0, received = 0;
  index_t bytes_written = 0, chunks_written = 0, chunks_rewritten = 0, subgrids = 0,
          visibilities = 0, planes = 0;
  double write_s = 0, sync_s = 0, open_s = 0, producer_wait = 0, streamer_wait = 0;
  index_t parts_done = 0, tasks_skipped = 0, walk_end = -1;
  storage::ReadTally read;
  double read_s_max = 0, input_s = 0, check_s = 0, degrid_s = 0, grid_s = 0, observed2 = 0,
         residual2 = 0;
  device::GpuTiming gpu;  // summed over the streamers' GPUs
};

// Adds up the ranks' figures, and fills the per-rank table, the slowest
// rank and (imaging over files) what each streamer read.
Totals add_up(const std::vector<Wire>& all, const RunOptions& o, report::Report& r,
              report::Reading& reading) {
  Totals t;
  double busiest = -1;
  for (const auto& w : all) {
    const auto& f = w.figures;
    r.pipeline->per_rank.push_back(from_wire(w));
    t.subgrid_error.add(w.subgrid_error);
    t.vis_error.add(w.vis_error);
    t.subgrid_worst = std::max(t.subgrid_worst, w.subgrid_worst);
    t.checked += w.subgrids_checked;
    t.vis_checked += w.vis_checked;
    t.written += w.visibilities_written;
    t.parts_done += w.parts_done;
    t.tasks_skipped += w.tasks_skipped;
    t.walk_end = std::max(t.walk_end, w.walk_end);
    // Contributions, both ways (not the assigner's grants).
    t.sent += w.role < 2 ? f.bytes_sent : 0;
    t.received += w.role < 2 ? f.bytes_received : 0;
    t.bytes_written += f.bytes_written;
    t.chunks_written += f.chunks_written;
    t.chunks_rewritten += f.chunks_rewritten;
    t.subgrids += w.role == 1 ? f.subgrids : 0;
    t.visibilities += f.visibilities;
    t.planes += f.w_planes;
    t.write_s = std::max(t.write_s, f.write_s);
    t.sync_s = std::max(t.sync_s, f.sync_s);
    t.open_s = std::max(t.open_s, f.open_s);
    t.read.add(w.read);
    t.read_s_max = std::max(t.read_s_max, w.read.seconds);
    t.input_s = std::max(t.input_s, w.input_s);
    t.check_s = std::max(t.check_s, w.check_s);
    t.degrid_s = std::max(t.degrid_s, w.degrid_s);
    t.grid_s = std::max(t.grid_s, w.grid_s);
    t.observed2 += w.observed2;
    t.residual2 += w.residual2;
    t.gpu.kernel_s += w.gpu.kernel_s;
    t.gpu.transfer_s += w.gpu.transfer_s;
    t.gpu.host_wait_s += w.gpu.host_wait_s;
    reading.values_checked += w.values_checked;
    reading.values_wrong += w.values_wrong;
    if (w.role == 1 && !o.inputs.empty())
      reading.per_rank.push_back({w.rank, w.host, static_cast<index_t>(o.inputs.size()),
                                  w.read.chunks, w.read.bytes, 0.0, w.read.seconds});
    if (w.role == 0) t.producer_wait = std::max(t.producer_wait, f.wait_s);
    if (w.role == 1) t.streamer_wait = std::max(t.streamer_wait, f.wait_s);
    if (f.busy_s > busiest) {
      busiest = f.busy_s;
      r.pipeline->slowest_rank = w.rank;
    }
  }
  return t;
}

// What bound the run: whoever waited least while the others waited on it.
// Storage first: streamers held by full writer queues wait too, and with
// the producers waiting on them that would read as the network.
std::string bound_of(const Context& ctx, const Totals& t, double stream_s) {
  const auto& o = ctx.options;
  const double share = 0.25 * stream_s;
  if (o.network_only) return "network";
  if (t.write_s + t.sync_s > 0.5 * stream_s || t.read_s_max > 0.5 * stream_s) return "storage";
  if (t.producer_wait > share && t.streamer_wait > share) return "network";
  // Nothing computed: the streamers' walk and chunk assembly.
  if (o.synthetic_vis) return "chunk assembly";
  if (t.producer_wait >= t.streamer_wait && ctx.roles.streamers > 0)
    return ctx.imaging() ? "gridding" : ctx.job.obs ? "degridding" : "subgrid assembly";
  return "producers";
}

// The imaging direction: the sampled pixels against their direct sums, and
// over files what was read.
void imaging_results(const Context& ctx, const Setup& st, const Totals& t, const Outcome& out,
                     report::Reading& reading, report::Report& r, report::Accuracy& accuracy) {
  const auto& o = ctx.options;
  const index_t n = static_cast<index_t>(ctx.pixels.size());
  RelativeError pixel_error;
  for (index_t i = 0; i < n; ++i)
    pixel_error.add(CView2D(&out.pixel_sums[static_cast<size_t>(n + i)], 1, 1),
                    CView2D(&out.pixel_sums[static_cast<size_t>(i)], 1, 1));
  accuracy = {};
  accuracy.facet_rmse = pixel_error.value();
  accuracy.pixel_samples = n;
  if (ctx.both()) accuracy.residual_rms = std::sqrt(t.residual2 / t.observed2);
  if (t.visibilities != ctx.job.obs->visibility_count())
    throw std::logic_error(fmt::format("gridded {} visibilities of {}", t.visibilities,
                                       ctx.job.obs->visibility_count()));
  if (o.inputs.empty()) return;
  reading.backend = st.input_backend;
  reading.ranks = ctx.roles.streamers;
  reading.direct = st.input_direct;
  reading.chunks = t.read.chunks;
  reading.bytes = t.read.bytes;
  reading.open_s = st.inputs_open_s;
  reading.read_s = t.read.seconds;
  reading.wall_s = out.stream_s;
  reading.bytes_per_s = static_cast<double>(t.read.bytes) / out.stream_s;
  reading.chunks_reread = t.read.chunks - st.chunks_stored;
  reading.chunks_stored = st.chunks_stored;
  // Storage only: every value read against the synthetic pattern.
  reading.checked = o.synthetic_vis;
  reading.values_right = reading.values_checked - reading.values_wrong;
  reading.passed = reading.values_wrong == 0;
  if (!reading.passed)
    reading.first_wrong = fmt::format("{} values unlike the pattern", reading.values_wrong);
  r.reading = reading;
}

// The predict direction: what was written, and with --duration how much
// of the observation in how long.
void predict_results(const Context& ctx, const Totals& t, double stream_s, report::Report& r,
                     report::Accuracy& accuracy) {
  const auto& o = ctx.options;
  accuracy.vis_rmse = t.vis_error.value();
  accuracy.vis_rmse_max = accuracy.vis_rmse;
  accuracy.vis_samples = t.vis_checked;
  if (!o.network_only) r.counts.visibilities_written = t.written;  // nothing written there
  r.counts.bytes_written = t.bytes_written;
  r.counts.chunks_written = t.chunks_written;
  r.counts.chunks_rewritten = t.chunks_rewritten;
  if (o.duration) {
    report::Stonewall sw;
    sw.duration_s = *o.duration;
    sw.ended_early = t.walk_end >= 0 || t.tasks_skipped > 0;
    sw.visits_total = static_cast<index_t>(ctx.plan.visits.size());
    sw.visits_walked = t.walk_end >= 0 ? t.walk_end : sw.visits_total;
    sw.parts_total = static_cast<index_t>(ctx.plan.parts.size());
    sw.parts_done = t.parts_done;
    sw.visibilities_total = ctx.job.obs->visibility_count();
    sw.visibilities_done = t.visibilities;
    sw.fraction = static_cast<double>(t.visibilities) / static_cast<double>(sw.visibilities_total);
    sw.projected_s = sw.fraction > 0 ? stream_s / sw.fraction : 0;
    r.stonewall = sw;
  }
  if (!o.duration && !o.network_only && t.written != ctx.job.obs->visibility_count())
    throw std::logic_error(
        fmt::format("wrote {} visibilities of {}", t.written, ctx.job.obs->visibility_count()));
}

void timing_and_rates(const Context& ctx, const Setup& st, const Totals& t, const Outcome& out,
                      report::Report& r) {
  const double stream_s = out.stream_s;
  report::Timing timing;
  timing.planning_s = st.planning_s;
  timing.stream_s = stream_s;
  timing.input_s = t.input_s;
  timing.check_s = t.check_s;
  timing.degrid_s = t.degrid_s;  // --direction=both: the model's (the busiest streamer thread's)
  timing.image_s = t.grid_s;
  timing.write_s = t.write_s;
  timing.sync_s = t.sync_s;
  timing.open_s = t.open_s;
  timing.wall_s = MPI_Wtime() - st.t_wall;
  if (!ctx.imaging()) {
    timing.stages.emplace();
    for (const auto& w : out.all) *timing.stages += w.figures.stages;
  }
  r.timing = timing;
  report::Rates rates;
  rates.subgrids_per_s = t.subgrids / stream_s;
  rates.net_bytes_per_s = t.sent / stream_s;
  rates.vis_per_s = t.visibilities / stream_s;
  rates.vis_per_s_per_thread = rates.vis_per_s / std::max(1, ctx.roles.streamers * ctx.threads);
  rates.w_planes_per_s = t.planes / stream_s;
  rates.write_bytes_per_s = t.write_s + t.sync_s > 0 ? t.bytes_written / (t.write_s + t.sync_s) : 0;
  rates.raw_write_bytes_per_s = t.write_s > 0 ? t.bytes_written / t.write_s : 0;
  r.rates = rates;
  r.memory.peak_rss_bytes = 0;
  for (const auto& k : r.pipeline->per_rank)
    r.memory.peak_rss_bytes = std::max(*r.memory.peak_rss_bytes, k.peak_rss_bytes);
}

// Rank 0: what the run measured, into the planned report.
void fill_report(const Context& ctx, const Setup& st, const Outcome& out, report::Report& r) {
  const auto& o = ctx.options;
  const auto& p = ctx.job.p;
  report::Reading reading = r.reading.value_or(report::Reading{});
  const Totals t = add_up(out.all, o, r, reading);
  if (r.settings) r.settings->outputs_replaced = out.outputs_replaced;
  if (r.image) r.image = out.image;
  r.pipeline->bound = bound_of(ctx, t, out.stream_s);
  r.pipeline->peers = out.peers;
  report::judge_links(*r.pipeline);
  if (r.device && r.device->cuda()) {
    r.device->kernel_s = t.gpu.kernel_s;
    r.device->transfer_s = t.gpu.transfer_s;
    r.device->host_wait_s = t.gpu.host_wait_s;
  }
  r.counts.subgrids_checked = t.checked;
  std::set<std::pair<index_t, index_t>> columns;
  for (const auto& v : ctx.plan.visits) columns.insert({v.stack, v.subgrid / p.subgrids_per_axis});
  r.counts.subgrid_columns = static_cast<index_t>(columns.size());
  r.counts.bytes_sent = t.sent;
  r.counts.bytes_received = t.received;
  if (o.timeline_s > 0) r.timeline = timeline_of(out.all, out.samples, o.timeline_s);
  if (ctx.job.obs && !ctx.imaging() && !o.network_only &&
      (!o.output.empty() || ctx.roles.writers > 0))
    r.transit = transit_figures(out.all, o, ctx.roles, ctx.threads, out.stream_s);
  report::Accuracy accuracy;
  accuracy.subgrid_rmse = t.subgrid_error.value();
  accuracy.subgrid_rmse_max = t.subgrid_worst >= 0 ? t.subgrid_worst : std::nan("");
  if (ctx.imaging())
    imaging_results(ctx, st, t, out, reading, r, accuracy);
  else if (ctx.job.obs)
    predict_results(ctx, t, out.stream_s, r, accuracy);
  // Synthetic or network only: no sky, nothing to check.
  if (!o.synthetic_vis && !o.network_only) r.accuracy = accuracy;
  timing_and_rates(ctx, st, t, out, r);
}

// A run on ranks placed by node: set up, the roles' work, the report.
report::Report run_placed(const RunOptions& o, MPI_Comm comm) {
  Context ctx;
  ctx.options = o;
  const Setup st = set_up(ctx, comm);
  report::Report r = planned_report(ctx, st);
  if (ctx.roles.rank == 0 && o.print_plan) {
    std::fputs(report::render_run_plan(r).c_str(), stdout);
    std::fflush(stdout);
  }
  const Outcome out = run_roles(ctx, comm);
  free_communicators(ctx);
  if (ctx.roles.rank == 0) fill_report(ctx, st, out, r);
  return r;
}

}  // namespace

}  // namespace iotest::pipeline
