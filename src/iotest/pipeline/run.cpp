// `iotest run`: sets up what every rank needs (the same on all of them),
// runs this rank's role and gathers the measurements into one report on
// rank 0.
#include "iotest/pipeline/run.hpp"

#include <fmt/format.h>
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
#include "iotest/pipeline/run_report.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/output_set.hpp"
#include "iotest/swiftly/fft.hpp"

namespace iotest::pipeline {

// The outputs are numbered across the streamers, or in transit across the
// writer ranks: --writer-count each.
namespace {
index_t outputs_in_all(const Context& ctx) {
  return (ctx.roles.writers > 0 ? ctx.roles.writers : ctx.roles.streamers) *
         ctx.options.writer_count;
}
}  // namespace

index_t Context::first_output() const {
  return (roles.writers > 0 ? roles.writer_index() : roles.streamer_index()) * options.writer_count;
}

std::vector<std::string> Context::outputs() const {
  std::vector<std::string> paths;
  const auto& o = options;
  // A shared output: every writer's (phdf5's one a rank; msv4's an MSv4 each).
  if (shared_output != MPI_COMM_NULL) return std::vector<std::string>(o.writer_count, o.output);
  for (int w = 0; roles.writes_outputs() && w < o.writer_count; ++w)
    paths.push_back(o.output.empty()
                        ? std::string()
                        : output_path(o.output, first_output() + w, outputs_in_all(*this)));
  return paths;
}

std::vector<std::string> Context::partial_outputs() const {
  std::vector<std::string> partials;
  const storage::OutputStore* store = storage.store();
  for (const auto& path : outputs()) {
    const auto claim = std::find_if(claims.begin(), claims.end(),
                                    [&](const auto& c) { return c->path() == path; });
    partials.push_back(claim != claims.end()    ? (*claim)->partial()
                       : store && !path.empty() ? store->partial_of(path, nonce)
                                                : std::string());
  }
  return partials;
}

storage::FileSplit Context::split() const {
  storage::FileSplit s;
  if (!storage.files_by_frequency || !job.obs) return s;
  s.by = storage::FileSplit::By::frequency;
  s.files = outputs_in_all(*this);
  s.freq_chunks = storage::layout_of(*job.obs).freq_chunks();
  return s;
}

bool Context::exchanges_chunks() const {
  return storage.files_by_frequency && storage.store() && roles.writers == 0 &&
         roles.streamers > 1 && job.obs && !options.network_only && !imaging();
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

// One output shared by every streamer (phdf5, msv4): one name; where its
// writers meet in MPI calls (phdf5), one writer each, a thread.
void check_shared_output(const RunOptions& o, const storage::StorageChoice& storage) {
  if (!storage.shared) return;
  const std::string& name = storage.backend;
  if (o.output.find("%d") != std::string::npos || o.output.find("%h") != std::string::npos)
    throw UsageError("OUTPUT", fmt::format("expected one name without %d or %h: --storage={} "
                                           "writes one output shared by every streamer",
                                           name));
  if (!storage.collective) return;
  if (o.writer_count != 1)
    throw UsageError("--writer-count",
                     fmt::format("expected 1 with --storage={}: each streamer has one writer "
                                 "of the one shared file, got {}",
                                 name, o.writer_count));
  if (o.fork_writer)
    throw UsageError("--fork-writer", fmt::format("does not apply to --storage={}: its writers "
                                                  "call MPI, so they are threads",
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

// --image-autocorrelations: a rule of the image, so only where one is made.
void check_image_autocorrelations(const RunOptions& o) {
  if (!o.image_autocorrelations) return;
  if (o.direction == swiftly::Direction::predict)
    throw UsageError("--image-autocorrelations",
                     "expected --direction=image or both: predict writes every row and makes "
                     "no image");
  if (o.synthetic_vis)
    throw UsageError("--image-autocorrelations",
                     "does not apply to --synthetic-vis (nothing is gridded)");
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
  const storage::WatchedCall lookups(storage::StorageStep::opening, o.image);
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
  check_image_autocorrelations(o);
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
  if (!o.prediction.calibration.empty()) {  // read again by rank 0 for the report
    prediction::require_predictable(prediction::job_kind_of(o));
    prediction::read_calibration(o.prediction.calibration);
  }
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
    jo.bin_autocorrelations = job::bins_autocorrelations(o);
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
  job::hold_for_storage(st.shape, ctx.storage);
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
  // In transit, and in situ when the streamers exchange chunks (outputs
  // split by frequency): the chunks' own communicator.
  if (roles.writers > 0 || ctx.exchanges_chunks()) MPI_Comm_dup(comm, &ctx.transit);
}

void free_communicators(Context& ctx) {
  MPI_Comm_free(&ctx.data);
  MPI_Comm_free(&ctx.control);
  for (MPI_Comm* c : {&ctx.producers, &ctx.shared_output, &ctx.transit})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

// This rank's share of the observation's bytes against the free space of
// each place its outputs go to (a folder, a bucket; a rank on a shared file
// system sees its own share only; node-local folders, %h, are each their
// host's), as its store finds it. A warning on stderr, or with
// --require-space a usage error.
void check_free_space(const Context& ctx) {
  const auto& o = ctx.options;
  const auto outputs = ctx.outputs();
  const storage::OutputStore* store = ctx.storage.store();
  if (!ctx.job.obs || o.network_only || ctx.imaging() || outputs.empty() || outputs[0].empty() ||
      !store)
    return;
  const auto& roles = ctx.roles;
  const index_t writing_ranks = roles.writers > 0 ? roles.writers : roles.streamers;
  // A writer's share (a shared output's writers each write one).
  const double files_in_all = static_cast<double>(writing_ranks * o.writer_count);
  const double share = static_cast<double>(ctx.job.obs->visibility_bytes()) / files_in_all;
  std::map<std::string, double> per_place;
  for (const auto& path : outputs) per_place[store->place_of(path)] += share;
  for (const auto& [place, bytes] : per_place) {
    const auto free_bytes = store->free_bytes(place);
    if (!free_bytes || *free_bytes >= bytes) continue;
    const auto size = [](double b) {
      return b >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
    };
    const std::string what =
        fmt::format("{} has {} free, and this rank ({}) will write about {} there", place,
                    size(*free_bytes), host_name(), size(bytes));
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

// --file-layout on a claimed output, while it is empty: this rank's first
// reason where it cannot be set.
void set_layout(Context& ctx, const storage::OutputClaim& claim) {
  if (!ctx.options.file_layout || !ctx.file_layout_not_set.empty()) return;
  const std::string why = claim.set_layout(*ctx.options.file_layout);
  if (!why.empty()) ctx.file_layout_not_set = "not set on " + claim.path() + " (" + why + ")";
}

// Should this rank end the job early (its failure, SIGTERM), it takes back
// every output of the run that is unpublished, its peers' too: they may be
// killed before their own clean-up (storage/output/unpublished.hpp). A %h
// output is known on this rank's host only.
void take_back_on_failure(Context& ctx) {
  const auto& o = ctx.options;
  const storage::OutputStore* store = ctx.storage.store();
  if (!store || !store->keeps_unpublished() || o.output.empty() || !ctx.job.obs || o.network_only ||
      ctx.imaging())
    return;
  const index_t outputs = outputs_in_all(ctx);
  std::vector<std::string> paths;
  for (index_t i = 0; i < outputs; ++i)
    paths.push_back(with_host(output_path(ctx.options.output, i, outputs), host_name()));
  ctx.unpublished_outputs.emplace([store, paths] { store->drop_unpublished(paths); });
}

// This rank's outputs checked, and those it publishes claimed: each of
// its own, a shared one by its first writing rank (the others check it).
// Claimed only where a back-end keeps visibilities: a dry run or the
// network alone publishes nothing.
void claim_outputs(Context& ctx) {
  const auto& o = ctx.options;
  const storage::OutputStore* store = ctx.storage.store();
  if (!store) return;
  const bool writes = ctx.job.obs && !o.network_only && !ctx.imaging();
  int first = 0;
  if (ctx.shared_output != MPI_COMM_NULL) MPI_Comm_rank(ctx.shared_output, &first);
  std::set<std::string> seen;  // a shared output is its every writer's
  for (const auto& path : ctx.outputs()) {
    if (path.empty() || !seen.insert(path).second) continue;
    const storage::WatchedCall call(storage::StorageStep::creating, path);
    if (writes && first == 0) {
      ctx.claims.push_back(store->claim(path, ctx.nonce, "OUTPUT"));
      set_layout(ctx, *ctx.claims.back());
    } else {
      store->check_creatable(path, "OUTPUT");
    }
  }
}

// --image: rank 0, its writer, claims it for the run (its partial file
// named by the run's nonce), before any work.
void claim_image(Context& ctx) {
  if (!ctx.options.image.empty() && ctx.roles.rank == 0) {
    ctx.image_claim.emplace(image::claim_image_path(ctx.options.image, ctx.nonce));
    set_layout(ctx, *ctx.image_claim);
  }
}

// Every rank's claims made and agreed: another run that finds one of them
// from now on gives way at once (storage/output_claim.hpp).
void go_ahead(const Context& ctx) {
  for (const auto& claim : ctx.claims) claim->go_ahead();
  if (ctx.image_claim) ctx.image_claim->go_ahead();
}

// Outputs split by frequency: each holds at least one frequency chunk.
void check_file_split(const Context& ctx) {
  if (!ctx.options.output.empty() && ctx.job.obs)
    job::require_storable_time_chunk(ctx.storage, *ctx.job.obs);
  const auto split = ctx.split();
  if (ctx.options.output.empty() || !split.by_frequency()) return;
  job::require_frequency_chunk_per_output(split.files, split.freq_chunks, ctx.storage.backend,
                                          ctx.roles.writers > 0);
}

// --file-layout: whether every output has it, agreed (collective); rank 0
// says once, for the whole run and all its repetitions, where it has not,
// and the run goes on with the file system's own layout.
void agree_layout(Context& ctx, MPI_Comm comm) {
  if (!ctx.options.file_layout) return;
  ctx.file_layout_not_set = agree_on_error(comm, ctx.file_layout_not_set);
  static bool warned = false;
  if (ctx.file_layout_not_set.empty() || ctx.roles.rank != 0 || warned) return;
  warned = true;
  std::fprintf(stderr,
               "iotest: warning: --file-layout: %s; the run goes on with the file system's own "
               "layout\n",
               ctx.file_layout_not_set.c_str());
  std::fflush(stderr);
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
    check_file_split(ctx);
    claim_outputs(ctx);
    claim_image(ctx);
    check_free_space(ctx);
  });
  take_back_on_failure(ctx);
  go_ahead(ctx);
  agree_layout(ctx, comm);
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
  const auto plan = [&] {
    ctx.rec = std::make_unique<swiftly::Recombination>(p, fft_flags, o.direction);
  };
  if (roles.rank == wisdom_root) plan();
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
    plan();
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

// Past the barrier every rank has ended its role without failing (one
// that failed aborts the job): only now do the outputs take their names,
// all of them or none. Another run's output under one of the names ends
// the run, every output kept under its run's name (output_claim.hpp).
// Returns, on rank 0, how many replaced a file there before the run.
index_t publish_outputs(Context& ctx, MPI_Comm comm) {
  std::vector<storage::OutputClaim*> claims;  // the outputs', and the image's
  for (auto& claim : ctx.claims) claims.push_back(claim.get());
  if (ctx.image_claim) claims.push_back(&*ctx.image_claim);
  std::string clash;
  for (auto* claim : claims) {
    try {
      const storage::WatchedCall call(storage::StorageStep::publishing, claim->partial());
      clash = claim->take();
    } catch (const std::exception& e) {  // agreed too: no rank keeps a name alone
      clash = e.what();
    }
    if (!clash.empty()) {
      const std::string kept = claim->kept_name();
      clash += kept.empty() ? "; this run's outputs are dropped"
                            : fmt::format(
                                  "; this run's outputs are kept, '.run-{}' before their "
                                  "extension ('{}')",
                                  ctx.nonce, kept);
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
    const storage::WatchedCall call(storage::StorageStep::publishing, claim->partial());
    claim->commit();
  }
  if (ctx.unpublished_outputs) ctx.unpublished_outputs->release();  // published
  MPI_Reduce(&replaced, &in_all, 1, MPI_INT64_T, MPI_SUM, 0, comm);
  return in_all;
}

// The roles' work between two barriers, then the outputs published and
// every rank's figures gathered on rank 0.
Outcome run_roles(Context& ctx, MPI_Comm comm) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  wait_writers_opened(ctx);  // a failure aborts the job
  // Sleeping, not Open MPI's spinning MPI_Barrier: the first ranks here
  // would take the cores of those still planning FFTs or opening files.
  barrier(comm);
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
  barrier(comm);  // sleeping: the last writers' syncs keep their cores
  Outcome out;
  out.stream_s = MPI_Wtime() - ctx.start_s;
  // The dirty image into its file, after the walk and apart from it, as
  // opening the outputs is apart from it; published with the outputs.
  if (!o.image.empty() && roles.is_producer()) out.image = write_image(ctx);
  out.outputs_replaced = publish_outputs(ctx, comm);
  gather_outcome(ctx, mine, role, out, comm);
  return out;
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
