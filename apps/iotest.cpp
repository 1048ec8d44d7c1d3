// The iotest executable: parses the command line and hands over to the
// library. Everything it prints comes from a report::Report.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <vector>

#include "iotest/checkpoint/h5_checkpoint.hpp"
#include "iotest/commands/degrid.hpp"
#include "iotest/commands/grid.hpp"
#include "iotest/commands/layout.hpp"
#include "iotest/commands/plan.hpp"
#include "iotest/commands/recombine.hpp"
#include "iotest/commands/scale.hpp"
#include "iotest/commands/verify.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/net/net.hpp"
#include "iotest/pipeline/read.hpp"
#include "iotest/pipeline/run.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/swiftly/fft.hpp"
#include "revision.hpp"  // generated: IOTEST_GIT_REVISION

namespace {

using iotest::index_t;

// "all" or a positive count.
std::optional<index_t> parse_count_or_all(const std::string& option, const std::string& text) {
  if (text == "all") return std::nullopt;
  index_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw iotest::UsageError(option, "expected a count or 'all', got '" + text + "'");
  return value;
}

// CLI11's own non-negative check prints its range up to DBL_MAX.
const CLI::Validator kNonNegative(
    [](std::string& value) {
      return !value.empty() && value[0] == '-' ? "expected a non-negative integer, got " + value
                                               : std::string();
    },
    "NONNEGATIVE");

// The options a run's shape comes from (job::run_shape), for `run` and
// `plan` alike: the same names and meanings.
template <class Options>
void add_shape_options(CLI::App* app, Options& o, const std::string& facet_workers_default) {
  app->add_option("--facet-workers", o.facet_workers,
                  "producer ranks, each holding facets (default: " + facet_workers_default +
                      "; 0: streamers degrid zeros; always 0 with --synthetic-vis)");
  app->add_flag("--assigner", o.assigner, "dedicate the last rank to handing out work dynamically");
  app->add_option("--threads", o.threads,
                  "threads per streamer (default: this host's cores over its ranks)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--producer-threads", o.producer_threads,
                  "threads per producer (default: as --threads)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--send-queue", o.send_queue, "contributions in flight per producer thread")
      ->capture_default_str();
  app->add_option("--subgrid-queue", o.subgrid_queue, "subgrids a streamer receives at once")
      ->capture_default_str();
  app->add_option("--task-queue", o.task_queue, "degrid tasks outstanding per streamer")
      ->capture_default_str();
  app->add_option("--bls-per-task", o.bls_per_task, "baselines' time chunks per degrid task")
      ->capture_default_str();
  app->add_option("--visibility-queue", o.visibility_queue,
                  "chunks waiting for a streamer's writers (and as many parts of chunks held "
                  "until whole)")
      ->capture_default_str();
  app->add_option("--writer-count", o.writer_count,
                  "writers per streamer (with --writer-ranks: per writer rank)")
      ->capture_default_str();
  app->add_option("--writer-ranks", o.writer_ranks,
                  "in transit: this many ranks (after the streamers) write what the streamers "
                  "send them over MPI (0: in situ, the writers inside each streamer)")
      ->capture_default_str();
  app->add_option("--transit-queue", o.transit_queue,
                  "with --writer-ranks: chunks in flight from each streamer and receives posted "
                  "on each writer rank")
      ->capture_default_str();
  app->add_flag("--synthetic-vis", o.synthetic_vis,
                "storage only: no producers or degridding; streamers write a pattern in the "
                "real run's chunks (needs --vis-set)");
  app->add_flag("--fork-writer", o.fork_writer,
                "writers are forked processes, not threads (HDF5 serialises threads)");
}

// --storage and every back-end's options, each under its back-end's name
// (--posix.direct) and listed in its own group of --help, as IOR does.
// `choose`: the command writes, so the back-end is chosen (readers find
// it from the files).
// The job's options, as `degrid` and `grid` take them. Without `required`
// (grid's input files give the job) an option left out stays empty.
template <class Options>
void add_job_options(CLI::App* app, Options& o, std::optional<iotest::index_t>& margin,
                     bool required) {
  auto* rec_set = app->add_option("--rec-set", o.rec_set, "recombination set");
  auto* vis_set = app->add_option("--vis-set", o.observation.vis_set, "visibility set");
  if (required) {
    rec_set->required();
    vis_set->required();
  } else {
    rec_set->description("recombination set (default without files: T05_)");
    vis_set->description("visibility set (default without files: vlaa)");
  }
  app->add_option("--time", o.observation.time, "hour angles START:END/STEPS[/CHUNK] (s)");
  app->add_option("--freq", o.observation.freq, "frequencies START:END/STEPS[/CHUNK] (Hz)");
  app->add_option("--dec", o.observation.dec_deg, "phase centre declination (degrees)");
  app->add_option("--source-count", o.source_count, "unit point sources in the sky")
      ->capture_default_str();
  app->add_option("--seed", o.seed, "seed of the sky and the samples")
      ->check(kNonNegative)
      ->capture_default_str();
  app->add_option("--support", o.kernel.support, "u, v kernel width (cells, even)")
      ->capture_default_str();
  app->add_option("--w-support", o.kernel.w_support, "w kernel width (planes, even)")
      ->capture_default_str();
  app->add_option("--margin", margin,
                  "subgrid cells kept outside the tiles (default: from kernel and w-tower)");
  app->add_option("--wstep", o.kernel.w_step,
                  "w-tower planes between w-stacking planes (default: from the margin)");
  app->add_option("--bls-per-task", o.bls_per_task, "baselines' time chunks per task")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app->add_option("--threads", o.threads, "OpenMP threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
}

void add_storage_options(CLI::App* app, iotest::storage::StorageOptions& o, bool choose = true) {
  if (choose)
    app->add_option("--storage", o.storage,
                    "storage back-end: " + iotest::storage::backend_names() +
                        " (default: from the output: none null, .h5 hdf5, other posix)")
        ->group("Storage");
  for (const auto& b : iotest::storage::backends())
    for (const auto& opt : b.options) {
      const std::string group = "Storage: --storage=" + b.name + " (" + b.summary + ")";
      if (opt.flag) {
        app->add_flag_callback(
               "--" + opt.key, [&o, key = opt.key] { o.values[key] = "true"; }, opt.help)
            ->group(group);
      } else {
        const std::string help =
            opt.help + (opt.default_value.empty() ? "" : " (default: " + opt.default_value + ")");
        app->add_option_function<std::string>(
               "--" + opt.key, [&o, key = opt.key](const std::string& v) { o.values[key] = v; },
               help)
            ->group(group);
      }
    }
}

// The command line as typed, for every report (set once in main).
std::string command_line;

// Where the report was made: versions, hosts, date, the command line, and
// the file system of `data_path` (the output, or the files read).
iotest::report::Environment environment(const iotest::report::Report& report,
                                        const std::string& data_path) {
  iotest::report::Environment e;
  e.iotest_version = IOTEST_VERSION;
  e.git_revision = IOTEST_GIT_REVISION;
  e.build_arch = IOTEST_ARCH;
  e.hdf5_version = iotest::storage::hdf5_version();
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi, &length);  // allowed before MPI_Init
  e.mpi_version = std::string(mpi, static_cast<size_t>(length));
  e.mpi_version = e.mpi_version.substr(0, e.mpi_version.find_first_of(",\n"));
  e.fftw_version = iotest::swiftly::fftw_library_version();
  e.date = iotest::utc_now();
  e.command_line = command_line;
  if (report.pipeline) {
    for (const auto& k : report.pipeline->per_rank)
      if (std::find(e.hosts.begin(), e.hosts.end(), k.host) == e.hosts.end())
        e.hosts.push_back(k.host);
  }
  if (report.interconnect) {
    for (const auto& p : report.interconnect->pairs)
      for (const auto& h : {p.sender_host, p.receiver_host})
        if (std::find(e.hosts.begin(), e.hosts.end(), h) == e.hosts.end()) e.hosts.push_back(h);
  }
  if (e.hosts.empty()) e.hosts.push_back(iotest::host_name());
  if (!data_path.empty()) {
    // An output pattern (OUT%d.h5) is looked up by its folder.
    const auto folder =
        std::filesystem::path(iotest::pipeline::with_host(data_path, iotest::host_name()))
            .parent_path();
    if (const auto m = iotest::mount_of(folder.empty() ? "." : folder.string()))
      e.output =
          iotest::report::Environment::FileSystem{data_path, m->mount_point, m->type, m->options};
  }
  return e;
}

void emit(iotest::report::Report report, const std::string& report_path,
          const std::string& data_path = "") {
  report.environment = environment(report, data_path);
  // With the JSON going to stdout the human summary moves to stderr, so
  // `--report=/dev/stdout` gives clean JSON.
  const bool json_on_stdout = report_path == "/dev/stdout";
  const std::string text = iotest::report::render_text(report);
  std::fputs(text.c_str(), json_on_stdout ? stderr : stdout);
  std::fflush(json_on_stdout ? stderr : stdout);
  if (!report_path.empty()) iotest::report::write_json(report, report_path);
}

// The one line a failure gets on stderr.
void print_error(const std::string& line) {
  std::fprintf(stderr, "iotest: error: %s\n", line.c_str());
  std::fflush(stderr);
}
std::string what_failed(const std::exception& e) {
  return dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what();
}

// A command over MPI (run, read): MPI only lives here (docs/pipeline.md,
// "When a rank fails"). Usage errors are agreed by every rank: rank 0 says
// it once and all leave with the usage status. Any other failure is this
// rank's alone, with peers perhaps blocked on it: only MPI_Abort reaches
// them. `body` runs the command; `data_path` is its output or input.
// `threads`: the MPI thread support the command needs (MPI_THREAD_MULTIPLE
// when writer threads call MPI: the phdf5 back-end).
int run_mpi(const std::function<iotest::report::Report(MPI_Comm)>& body,
            const std::string& report_path, const std::string& parse_error,
            const std::string& data_path, int threads = MPI_THREAD_FUNNELED) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, threads, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = iotest::kExitOk;
  std::optional<iotest::report::Report> report;
  try {
    // Every rank parsed the same command line: no need to agree.
    if (!parse_error.empty()) throw iotest::UsageError("", parse_error);
    if (provided < threads)
      throw iotest::UsageError("--storage",
                               "this MPI library lacks MPI_THREAD_MULTIPLE, which a shared "
                               "output's writer threads need (use --storage=hdf5 or posix)");
    // Rank 0 alone writes the report, so its check is agreed.
    iotest::pipeline::agree_on_usage(MPI_COMM_WORLD, [&] {
      if (rank == 0 && !report_path.empty()) iotest::report::check_writable(report_path);
    });
    report = body(MPI_COMM_WORLD);
  } catch (const iotest::UsageError& e) {
    if (rank == 0) print_error(e.one_line());
    status = iotest::kExitUsage;
  } catch (const std::exception& e) {
    print_error(fmt::format("(rank {}) {}", rank, what_failed(e)));
    MPI_Abort(MPI_COMM_WORLD, iotest::kExitFailure);
  }
  // After run() no rank waits on another: rank 0 failing to write the
  // report ends with the failure status, the others as they are.
  if (rank == 0 && report) {
    try {
      emit(*report, report_path, data_path);
    } catch (const std::exception& e) {
      print_error(what_failed(e));
      status = iotest::kExitFailure;
    }
    // A read-back that found wrong values fails, as verify does.
    if (report->reading && !report->reading->passed) status = iotest::kExitFailure;
    if (report->checkpoint && report->checkpoint->values_wrong > 0) status = iotest::kExitFailure;
    if (report->interconnect && report->interconnect->messages_wrong > 0)
      status = iotest::kExitFailure;
  }
  MPI_Finalize();
  return status;
}

int run_pipeline(const iotest::pipeline::RunOptions& options, int repetitions,
                 const std::string& report_path, const std::string& parse_error) {
  // Threads other than the first call MPI: a shared output's writers, and
  // in transit each streamer's forwarding thread.
  const bool multiple =
      iotest::storage::shares_output(options.storage, options.output) || options.writer_ranks > 0;
  const auto repeated = [&](MPI_Comm comm) {
    // --repetitions: the whole job again in the same processes (setup
    // included, outside the measured part); the outputs are written anew
    // each time, the last ones stay.
    std::vector<iotest::report::Report> runs;
    for (int i = 0; i < repetitions; ++i) {
      auto o = options;
      o.print_plan = i == 0;
      runs.push_back(iotest::pipeline::run(o, comm));
    }
    return repetitions > 1 ? iotest::report::with_repetitions(std::move(runs))
                           : std::move(runs.front());
  };
  return run_mpi(repeated, report_path, parse_error,
                 options.inputs.empty() ? options.output : options.inputs.front(),
                 multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED);
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f, some quotas) then fails a write with EFBIG,
  // reported like a full disk, instead of killing the process silently.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"iotest: SKA-scale radio-astronomy imaging I/O benchmark"};
  app.require_subcommand(1);
  app.set_version_flag("--version", IOTEST_VERSION);

  iotest::commands::Options rec_opts;
  std::string direction = "both", subgrids = "all", check, report_path;
  auto* recombine =
      app.add_subcommand("recombine",
                         "SwiFTly recombination of a whole set in one process, checked against the "
                         "direct Fourier transform");
  recombine
      ->add_option("--rec-set", rec_opts.rec_set,
                   "recombination set: image-facet-subgrid (k = 1024, e.g. 16k-8k-512) or "
                   "T05_ tiny small smallish medium large tremendous huge")
      ->required();
  recombine
      ->add_option("--source-count", rec_opts.source_count, "unit point sources in the random sky")
      ->capture_default_str();
  recombine->add_option("--seed", rec_opts.seed, "seed of the random sky")
      ->check(kNonNegative)
      ->capture_default_str();
  recombine->add_option("--direction", direction, "predict, image or both")->capture_default_str();
  recombine
      ->add_option("--subgrids", subgrids,
                   "subgrids to process (nearest the grid centre first) or 'all'")
      ->capture_default_str();
  recombine->add_option("--check", check,
                        "subgrids to check against the direct transform, or 'all' (default: up "
                        "to 64, spread over the walk)");
  recombine->add_option("--threads", rec_opts.threads, "OpenMP threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  recombine->add_option("--window-width", rec_opts.window_width,
                        "override the set's PSWF width W (accuracy against usable subgrid size)");
  recombine->add_option("--report", report_path, "write the JSON report to this file");

  iotest::commands::PlanOptions plan_opts;
  iotest::telescope::ObservationOptions obs_opts;
  auto* plan = app.add_subcommand(
      "plan",
      "resolved parameters, counts and memory per role of a set, and its ranks laid out on "
      "--nodes against the memory of a node");
  plan->add_option("--rec-set", plan_opts.rec_set, "recombination set (as for recombine)")
      ->required();
  plan->add_option("--nodes", plan_opts.nodes, "nodes the job will use")->capture_default_str();
  plan->add_option("--ranks-per-node", plan_opts.ranks_per_node,
                   "MPI ranks on each node, filled in rank order as mpirun maps by slot "
                   "(default: enough for one streamer per node)");
  plan->add_option("--node-memory", plan_opts.node_memory,
                   "memory of one node: bytes, or with a binary suffix K M G T (24G = 24 GiB; "
                   "default: what this machine has available, as run checks)")
      ->transform(CLI::AsSizeValue(false));
  add_shape_options(plan, plan_opts, "one per facet");
  plan->add_option("--rates-from", plan_opts.rates_from,
                   "a run's JSON report: suggest --writer-ranks from its measured compute and "
                   "write rates");
  plan->add_option("--window-width", plan_opts.window_width, "override the set's PSWF width W");
  auto* plan_vis_set = plan->add_option(
      "--vis-set", obs_opts.vis_set,
      "visibility set: lowbd2 lowbd2-core lowr3 lowr4 low-aa0.5 midr5 mkatplus askap lofar vlaa");
  plan->add_option("--time", obs_opts.time,
                   "hour angles START:END/STEPS[/CHUNK] in seconds (default: the vis-set's)")
      ->needs(plan_vis_set);
  plan->add_option("--freq", obs_opts.freq,
                   "frequencies START:END/STEPS[/CHUNK] in Hz (default: the vis-set's)")
      ->needs(plan_vis_set);
  plan->add_option("--dec", obs_opts.dec_deg,
                   "phase centre declination in degrees (default: the vis-set's)")
      ->needs(plan_vis_set);
  plan->add_option("--report", report_path, "write the JSON report to this file");
  plan->add_option("output", plan_opts.output,
                   "OUT%d.h5 the run would write (counts the writers' HDF5 caches; plan writes "
                   "nothing)");

  iotest::commands::LayoutOptions layout_opts;
  auto* layout = app.add_subcommand(
      "layout", "a visibility set's antennas and the (u, v, w) of a few baselines");
  layout->add_option("--vis-set", layout_opts.observation.vis_set, "visibility set")->required();
  layout->add_option("--time", layout_opts.observation.time,
                     "hour angles START:END/STEPS[/CHUNK] (s)");
  layout->add_option("--freq", layout_opts.observation.freq,
                     "frequencies START:END/STEPS[/CHUNK] (Hz)");
  layout->add_option("--dec", layout_opts.observation.dec_deg,
                     "phase centre declination (degrees)");
  layout->add_option("--baselines", layout_opts.baselines, "baselines whose (u, v, w) to show")
      ->capture_default_str();
  layout->add_option("--report", report_path, "write the JSON report to this file");

  iotest::commands::DegridRunOptions degrid_opts;
  std::optional<iotest::index_t> degrid_margin;
  auto* degrid = app.add_subcommand(
      "degrid",
      "the whole predict chain in one process (facets, subgrids, w-towers, "
      "degridding) without writing, checked against the direct Fourier transform");
  add_job_options(degrid, degrid_opts, degrid_margin, true);
  degrid
      ->add_option("--vis-samples", degrid_opts.vis_samples,
                   "visibilities checked against the direct transform")
      ->capture_default_str();
  degrid->add_option("--target-err", degrid_opts.target_err,
                     "measure the w-tower height at which the error reaches this "
                     "(0: twice the error at w = 0) instead of bounding it");
  degrid->add_option("--report", report_path, "write the JSON report to this file");
  degrid->add_option("output", degrid_opts.output,
                     "file to write the visibilities to (omit: a dry run)");
  add_storage_options(degrid, degrid_opts.storage);

  iotest::commands::GridRunOptions grid_opts;
  std::optional<iotest::index_t> grid_margin;
  auto* grid = app.add_subcommand(
      "grid",
      "the imaging direction in one process (gridding onto w-towers, subgrids, facets): "
      "a predict run's files, or the sky predicted in memory, into the dirty image, checked "
      "against the direct adjoint transform");
  grid->add_option("files", grid_opts.inputs,
                   "a predict run's visibility files (omit: the sky's visibilities, predicted "
                   "in memory; the files give the rec-set, observation and sky)");
  add_job_options(grid, grid_opts, grid_margin, false);
  grid->add_option("--pixel-samples", grid_opts.pixel_samples,
                   "dirty image pixels checked against the direct adjoint transform")
      ->capture_default_str();
  grid->add_option("--image", grid_opts.image,
                   "write the dirty image to this HDF5 file (dataset dirty_image: float64 "
                   "[used, used, 2], real and imaginary)");
  grid->add_option("--report", report_path, "write the JSON report to this file");
  add_storage_options(grid, grid_opts.storage, false);

  iotest::pipeline::ReadOptions read_opts;
  auto* read = app.add_subcommand(
      "read",
      "read a run's output back as the imaging direction will (under mpirun: each rank "
      "its share of the files), and measure it");
  read->add_option("files", read_opts.files, "files written by iotest (any back-end)")->required();
  read->add_flag("--drop-caches", read_opts.drop_caches,
                 "empty the page cache before reading (root: /proc/sys/vm/drop_caches)");
  read->add_flag("--check", read_opts.check,
                 "check every value read against the synthetic pattern (--synthetic-vis sets)");
  read->add_option("--report", report_path, "write the JSON report to this file (rank 0)");
  add_storage_options(read, read_opts.storage, false);

  iotest::checkpoint::H5Options h5_opts;
  std::vector<long long> h5_grid, h5_domain, h5_chunk;
  std::string h5_transfer = "collective";
  bool h5_fill = false;
  auto* h5 = app.add_subcommand(
      "h5",
      "the checkpoint kernel of seism-core under mpirun: a 3-D process grid writes a 4-D "
      "dataset, one 3-D slice per step, through parallel HDF5");
  h5->add_option("file", h5_opts.path, "the shared HDF5 file (a new one)")->required();
  h5->add_option("--grid", h5_grid, "process grid PX,PY,PZ (default: from the rank count)")
      ->delimiter(',')
      ->expected(3);
  h5->add_option("--domain", h5_domain, "values per rank NX,NY,NZ (doubles; default 64,64,64)")
      ->delimiter(',')
      ->expected(3);
  h5->add_option("--chunk", h5_chunk, "HDF5 chunk CX,CY,CZ of a step (default: the domain)")
      ->delimiter(',')
      ->expected(3);
  h5->add_option("--steps", h5_opts.steps, "time steps (3-D slices)")->capture_default_str();
  h5->add_option("--transfer", h5_transfer, "collective or independent")->capture_default_str();
  h5->add_flag("--collective-metadata", h5_opts.collective_metadata,
               "collective metadata reads and writes");
  h5->add_flag("--fill", h5_fill, "fill the dataset at allocation (default: never fill)");
  h5->add_option("--alloc", h5_opts.alloc, "allocation time: early, late or incremental")
      ->capture_default_str();
  h5->add_flag("--precreate", h5_opts.precreate,
               "rank 0 creates and allocates the file alone, then all ranks open it");
  h5->add_option("--alignment", h5_opts.alignment, "align objects to this many bytes");
  h5->add_option("--chunk-cache", h5_opts.chunk_cache, "chunk cache bytes per dataset");
  h5->add_option("--hint", h5_opts.hints,
                 "MPI-IO hint KEY=VALUE, repeatable (striping_factor, striping_unit, cb_nodes, "
                 "romio_cb_write)");
  h5->add_flag("--check", h5_opts.check, "read every value back and check it");
  h5->add_flag("--keep", h5_opts.keep, "keep the file (default: removed at the end)");
  h5->add_option("--report", report_path, "write the JSON report to this file (rank 0)");

  iotest::net::NetOptions net_opts;
  auto* net = app.add_subcommand(
      "net",
      "the interconnect under mpirun: latency and bandwidth between pairs of ranks over message "
      "size, for MPI and for TCP sockets (as OSU's latency and bw tests)");
  net->add_option("--pairs", net_opts.pairs,
                  "rank pairs A:B,C:D measured at once, A sending (default: the first rank of "
                  "each node with the first of the next; one node: 0:1,2:3,...)");
  net->add_option("--min-size", net_opts.min_size, "smallest message (bytes)")
      ->capture_default_str();
  net->add_option("--max-size", net_opts.max_size, "largest message (bytes; powers of 2 between)")
      ->capture_default_str();
  net->add_option("--iterations", net_opts.iterations,
                  "timed iterations below 8 KiB, a tenth of them up to 1 MiB, a hundredth above "
                  "(default: 1000)");
  net->add_option("--warmup", net_opts.warmup,
                  "untimed iterations first, scaled as --iterations (default: a tenth of "
                  "--iterations)");
  net->add_option("--window", net_opts.window, "messages in flight per bandwidth iteration")
      ->capture_default_str();
  net->add_option("--transport", net_opts.transports, "mpi, tcp or mpi,tcp")
      ->delimiter(',')
      ->capture_default_str();
  net->add_flag("--check", net_opts.check,
                "check the bytes of every message of extra, untimed iterations (OSU's -c)");
  net->add_option("--report", report_path, "write the JSON report to this file (rank 0)");

  iotest::commands::ScaleOptions scale_opts;
  auto* scale = app.add_subcommand(
      "scale",
      "the scaling study: the same job at several rank counts (or run reports already made), "
      "the Universal Scalability Law fitted to every stage, and its plots");
  scale->add_option("reports", scale_opts.reports, "`iotest run` reports to fit (no runs)");
  scale->add_option("--ranks", scale_opts.ranks, "rank counts to run the job at, e.g. 2,3,4")
      ->delimiter(',');
  scale->add_option("--job", scale_opts.job,
                    "the job's `iotest run` options in one string, e.g. \"--rec-set=small "
                    "--vis-set=vlaa\"");
  scale->add_option("--launcher", scale_opts.launcher, "what starts a run (srun under Slurm)")
      ->capture_default_str();
  scale->add_option("--np-flag", scale_opts.np_flag, "the launcher's rank count flag (srun: -n)")
      ->capture_default_str();
  scale->add_option("--out", scale_opts.out, "folder for the runs, the fit and the plots")
      ->capture_default_str();
  scale->add_option("--n", scale_opts.n_by, "what N counts: streamers, ranks or nodes")
      ->capture_default_str();
  scale->add_option("--python", scale_opts.python,
                    "the Python for tools/usl.py (default: the project's .venv, else python3)");
  scale->add_option("--report", report_path, "write the JSON report to this file");

  iotest::commands::VerifyOptions verify_opts;
  auto* verify = app.add_subcommand(
      "verify", "re-read visibility files and check every chunk against the direct transform");
  verify->add_option("files", verify_opts.files, "files written by iotest (any back-end)")
      ->required();
  verify->add_flag("--all", verify_opts.all,
                   "check every value, not samples (--synthetic-vis sets: exactly)");
  verify->add_option("--nonce", verify_opts.nonce,
                     "the run the files must come from (its report's config.nonce)");
  verify->add_option("--source-count", verify_opts.source_count,
                     "sources of the sky (default: the file's)");
  verify->add_option("--seed", verify_opts.seed, "seed of the sky (default: the file's)")
      ->check(kNonNegative);
  verify->add_option("--samples", verify_opts.samples, "visibilities checked over the files")
      ->capture_default_str();
  verify->add_option("--tolerance", verify_opts.tolerance, "relative RMSE allowed")
      ->capture_default_str();
  verify->add_option("--report", report_path, "write the JSON report to this file");

  iotest::pipeline::RunOptions run_opts;
  iotest::telescope::ObservationOptions run_obs;
  std::optional<iotest::index_t> run_margin;
  bool no_progress = false;
  auto* run = app.add_subcommand(
      "run",
      "the predict pipeline over MPI ranks (the default command): producers, streamers, "
      "writers; run under mpirun");
  run->add_option("--rec-set", run_opts.rec_set, "recombination set")->required();
  auto* run_vis_set = run->add_option(
      "--vis-set", run_obs.vis_set,
      "visibility set (omit: recombination only, subgrids checked, nothing degridded)");
  run->add_option("--time", run_obs.time, "hour angles START:END/STEPS[/CHUNK] (s)")
      ->needs(run_vis_set);
  run->add_option("--freq", run_obs.freq, "frequencies START:END/STEPS[/CHUNK] (Hz)")
      ->needs(run_vis_set);
  run->add_option("--dec", run_obs.dec_deg, "phase centre declination (degrees)")
      ->needs(run_vis_set);
  run->add_option("--source-count", run_opts.source_count, "unit point sources in the sky")
      ->capture_default_str();
  run->add_option("--seed", run_opts.seed, "seed of the sky and the samples")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--check", run_opts.check_subgrids,
                  "subgrids checked against the direct transform")
      ->capture_default_str();
  run->add_option("--vis-samples", run_opts.vis_samples,
                  "visibilities checked against the direct transform")
      ->capture_default_str();
  add_shape_options(run, run_opts,
                    "a third of the ranks with --vis-set, else half, at most one per facet");
  run->add_option("--support", run_opts.kernel.support, "u, v kernel width (cells, even)")
      ->capture_default_str();
  run->add_option("--w-support", run_opts.kernel.w_support, "w kernel width (planes, even)")
      ->capture_default_str();
  run->add_option("--margin", run_margin,
                  "subgrid cells kept outside the tiles (default: from kernel and w-tower)");
  run->add_option("--target-err", run_opts.target_err,
                  "measure the w-tower height at which the error reaches this");
  run->add_option("--wstep", run_opts.kernel.w_step, "w-tower planes between w-stacking planes");
  run->add_flag("--no-progress", no_progress, "no progress line on stderr");
  run->add_flag("--network-only", run_opts.network_only,
                "the network alone: the walk's contributions sent and received with the same "
                "slots, nothing computed (no facets, transforms, assembly or degridding)");
  run->add_option("--duration", run_opts.duration,
                  "stonewall: start no new work after this many seconds, drain, report the "
                  "fraction done and the projected time of the whole observation");
  int run_repetitions = 1;
  run->add_option("--repetitions", run_repetitions,
                  "run the job this many times in the same processes and report the min, median "
                  "and max of every rate (IOR's and fio's repetitions)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--timeline", run_opts.timeline_s,
                  "the report's time line: each rank's busy and wait time and rates per "
                  "interval of this many seconds (0: none; tools/timeline_plot.py draws it)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->add_option("--report", report_path, "write the JSON report to this file (rank 0)");
  std::string run_direction = "predict";
  std::vector<std::string> run_paths;
  run->add_option("--direction", run_direction,
                  "predict (write visibilities) or image (read and grid them into the dirty "
                  "image)")
      ->capture_default_str();
  run->add_option("--pixel-samples", run_opts.pixel_samples,
                  "--direction=image: dirty image pixels checked against the direct adjoint "
                  "transform")
      ->capture_default_str();
  run->add_option("paths", run_paths,
                  "predict: OUT%d.h5, one file per writer, %d its number (omit: a dry run); "
                  "image: a predict run's files to read (omit: the streamers predict the "
                  "visibilities of --vis-set themselves)");
  add_storage_options(run, run_opts.storage);

  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    const bool quote = word.empty() || word.find_first_of(" \t'\"") != std::string::npos;
    command_line += (i ? " " : "") + (quote ? "'" + word + "'" : word);
  }
  // `iotest [run] ...`: without a command name, the pipeline runs.
  std::vector<char*> args(argv, argv + argc);
  std::string run_name = "run";
  bool is_run = true;
  if (argc > 1) {
    const std::string first = argv[1];
    const auto commands = app.get_subcommands({});
    const bool named = first == "-h" || first == "--help" || first == "--version" ||
                       std::any_of(commands.begin(), commands.end(),
                                   [&](const CLI::App* c) { return c->get_name() == first; });
    if (!named) args.insert(args.begin() + 1, run_name.data());
    is_run = !named || first == run_name;
  }
  argc = static_cast<int>(args.size());
  argv = args.data();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string line = std::string(e.what()) + " (see iotest --help)";
    // Under mpirun every rank gets the same error: said once, by rank 0
    // (run and the other commands that start MPI).
    if (is_run) return run_pipeline(run_opts, 1, "", line);
    const std::string named = argc > 1 ? argv[1] : "";
    if (named == "read" || named == "h5" || named == "net")
      return run_mpi([](MPI_Comm) { return iotest::report::Report{}; }, "", line, "");
    print_error(line);
    return iotest::kExitUsage;
  }

  if (report_path == "-") report_path = "/dev/stdout";
  if (*h5) {
    const auto triple = [](const std::vector<long long>& v, auto& out) {
      for (size_t a = 0; a < 3 && a < v.size(); ++a)
        out[a] = static_cast<std::remove_reference_t<decltype(out[a])>>(v[a]);
    };
    triple(h5_grid, h5_opts.grid);
    triple(h5_domain, h5_opts.domain);
    triple(h5_chunk, h5_opts.chunk);
    h5_opts.never_fill = !h5_fill;
    std::string bad;
    if (h5_transfer == "independent")
      h5_opts.collective = false;
    else if (h5_transfer != "collective")
      bad = "--transfer: expected collective or independent, got '" + h5_transfer + "'";
    return run_mpi([&](MPI_Comm comm) { return iotest::checkpoint::h5(h5_opts, comm); },
                   report_path, bad, h5_opts.path);
  }
  if (*net)
    // MPI_THREAD_SINGLE: net calls MPI from one thread, and on Open MPI a
    // higher level costs ~0.07 us a message (half the 8 B message rate).
    return run_mpi([&](MPI_Comm comm) { return iotest::net::net(net_opts, comm); }, report_path, "",
                   "", MPI_THREAD_SINGLE);
  if (*read)
    return run_mpi([&](MPI_Comm comm) { return iotest::pipeline::read(read_opts, comm); },
                   report_path, "", read_opts.files.front());
  if (*run) {
    if (*run_vis_set) run_opts.observation = run_obs;
    run_opts.margin = run_margin;
    run_opts.progress = !no_progress;
    std::string bad;
    try {
      run_opts.direction = iotest::swiftly::parse_direction(run_direction);
      if (run_opts.direction == iotest::swiftly::Direction::predict) {
        if (run_paths.size() > 1)
          throw iotest::UsageError("OUTPUT", fmt::format("expected one output pattern (OUT%d.h5) "
                                                         "for --direction=predict, got {} paths",
                                                         run_paths.size()));
        if (!run_paths.empty()) run_opts.output = run_paths.front();
      } else {
        run_opts.inputs = run_paths;
      }
    } catch (const iotest::UsageError& e) {
      bad = e.one_line();
    }
    return run_pipeline(run_opts, run_repetitions, report_path, bad);
  }
  try {
    if (!report_path.empty()) iotest::report::check_writable(report_path);
    if (*recombine) {
      rec_opts.direction = iotest::swiftly::parse_direction(direction);
      rec_opts.subgrids = parse_count_or_all("--subgrids", subgrids);
      if (rec_opts.subgrids && *rec_opts.subgrids == 0)
        throw iotest::UsageError("--subgrids", "expected at least 1 subgrid or 'all'");
      if (!check.empty()) {
        rec_opts.check = parse_count_or_all("--check", check);
        rec_opts.check_all = !rec_opts.check;
      }
      emit(iotest::commands::run(rec_opts), report_path);
    } else if (*verify) {
      const auto report = iotest::commands::verify(verify_opts);
      emit(report, report_path, verify_opts.files.front());
      if (!report.verification->passed) return iotest::kExitFailure;
    } else if (*degrid) {
      degrid_opts.margin = degrid_margin;
      emit(iotest::commands::degrid(degrid_opts), report_path, degrid_opts.output);
    } else if (*grid) {
      grid_opts.margin = grid_margin;
      emit(iotest::commands::grid(grid_opts), report_path);
    } else if (*scale) {
      emit(iotest::commands::scale(scale_opts), report_path);
    } else if (*layout) {
      emit(iotest::commands::layout(layout_opts), report_path);
    } else if (*plan) {
      if (*plan_vis_set) plan_opts.observation = obs_opts;
      emit(iotest::commands::plan(plan_opts), report_path);
    }
  } catch (const iotest::UsageError& e) {
    print_error(e.one_line());
    return iotest::kExitUsage;
  } catch (const std::exception& e) {
    print_error(what_failed(e));
    return iotest::kExitFailure;
  }
  return iotest::kExitOk;
}
