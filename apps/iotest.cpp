// The iotest executable: parses the command line and hands over to the
// library. Everything it prints comes from a report::Report.
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "cli_options.hpp"
#include "run_options.hpp"
#include "iotest/checkpoint/h5_checkpoint.hpp"
#include "iotest/commands/degrid.hpp"
#include "iotest/commands/grid.hpp"
#include "iotest/commands/layout.hpp"
#include "iotest/commands/plan.hpp"
#include "iotest/commands/recombine.hpp"
#include "iotest/commands/scale.hpp"
#include "iotest/commands/verify.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/common/system.hpp"
#include "iotest/job/job.hpp"
#include "iotest/net/net.hpp"
#include "iotest/pipeline/read.hpp"
#include "iotest/pipeline/run.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/swiftly/fft.hpp"
#include "revision.hpp"  // generated: IOTEST_GIT_REVISION

namespace {

namespace cli = iotest::cli;
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

// The command line as typed, and the command's options resolved (as a
// --config file), for every report (set once in main).
std::string command_line, configuration;

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
  // MPICH says "MPICH Version:\t4.0.2": "MPICH 4.0.2", as Open MPI's "Open MPI v4.1.4".
  if (const auto tab = e.mpi_version.find(" Version:\t"); tab != std::string::npos)
    e.mpi_version.replace(tab, std::string(" Version:\t").size(), " ");
  e.fftw_version = iotest::swiftly::fftw_library_version();
  e.date = iotest::utc_now();
  e.command_line = command_line;
  e.configuration = configuration;
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

void emit(iotest::report::Report report, const cli::ReportOptions& out,
          const std::string& data_path = "") {
  report.environment = environment(report, data_path);
  // With the JSON going to stdout the human summary moves to stderr, so
  // `--report=-` gives clean JSON.
  // `plan --slurm` prints the job script alone on stdout (`> job.sh`).
  const bool job_script = report.advice && !report.advice->job_script.empty();
  const bool json_on_stdout = out.report == "/dev/stdout";
  const std::string text = iotest::report::render_text(report);
  std::FILE* human = json_on_stdout || job_script ? stderr : stdout;
  std::fputs(text.c_str(), human);
  std::fflush(human);
  if (job_script && !json_on_stdout) {
    std::fputs(report.advice->job_script.c_str(), stdout);
    std::fflush(stdout);
  }
  if (!out.report.empty()) iotest::report::write_json(report, out.report);
  if (!out.csv.empty()) iotest::report::write_csv(report, out.csv);
}

// Before any work: the report's and the tables' paths can be written.
void check_outputs(const cli::ReportOptions& out) {
  if (!out.report.empty()) iotest::report::check_writable(out.report);
  if (!out.csv.empty()) iotest::report::check_writable(out.csv + ".summary.csv", "--csv");
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
            const cli::ReportOptions& out, const std::string& parse_error,
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
    iotest::agree_on_usage(MPI_COMM_WORLD, [&] {
      if (rank == 0) check_outputs(out);
    });
    report = body(MPI_COMM_WORLD);
  } catch (const iotest::UsageError& e) {
    if (rank == 0) print_error(e.one_line());
    status = iotest::kExitUsage;
  } catch (const iotest::AgreedFailure& e) {
    if (rank == 0) print_error(e.what());
    status = iotest::kExitFailure;
  } catch (const std::exception& e) {
    print_error(fmt::format("(rank {}) {}", rank, what_failed(e)));
    // A launcher forwards a rank's output through its own processes
    // (MPICH's Hydra: a proxy per host), and an abort tears them down: a
    // moment first, so that the one line reaches the user.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    MPI_Abort(MPI_COMM_WORLD, iotest::kExitFailure);
  }
  // After run() no rank waits on another: rank 0 failing to write the
  // report ends with the failure status, the others as they are.
  if (rank == 0 && report) {
    try {
      emit(*report, out, data_path);
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
                 const cli::ReportOptions& out, const std::string& parse_error) {
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
  return run_mpi(repeated, out, parse_error,
                 options.inputs.empty() ? options.output : options.inputs.front(),
                 multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED);
}

// What the plan lays out: the run's rec-set, observation, shape, output
// and device, as `iotest run` would take them.
void plan_the_run(const iotest::pipeline::RunOptions& r, iotest::commands::PlanOptions& p) {
  p.rec_set = r.rec_set;
  p.observation = r.observation;
  p.facet_workers = r.facet_workers;
  p.assigner = r.assigner;
  p.threads = r.threads;
  p.producer_threads = r.producer_threads;
  p.send_queue = r.send_queue;
  p.subgrid_queue = r.subgrid_queue;
  p.task_queue = r.task_queue;
  p.bls_per_task = r.bls_per_task;
  p.visibility_queue = r.visibility_queue;
  p.writer_count = r.writer_count;
  p.writer_ranks = r.writer_ranks;
  p.transit_queue = r.transit_queue;
  p.fork_writer = r.fork_writer;
  p.synthetic_vis = r.synthetic_vis;
  p.synthetic_sequential = r.synthetic_sequential;
  p.synthetic_order = r.synthetic_order;
  p.output = r.output;
  p.device = r.device;
}

// SIGTERM (a batch system's time limit, scancel) or SIGINT: one line naming
// the signal and this host, then the default action, so the process ends
// at once. Files still under their temporary names stay so (.partial): a
// run ended early publishes nothing (docs/cluster.md). The lines are made
// before any signal, since a handler may only write().
char termination_lines[2][160];

extern "C" void on_termination(int signal) {
  const char* line = termination_lines[signal == SIGTERM ? 0 : 1];
  (void)!::write(STDERR_FILENO, line, std::strlen(line));
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void report_termination_signals() {
  const std::string host = iotest::host_name();
  for (int i = 0; i < 2; ++i)
    std::snprintf(termination_lines[i], sizeof(termination_lines[i]),
                  "iotest: ended by %s on %s; unfinished outputs stay .partial\n",
                  i == 0 ? "SIGTERM" : "SIGINT", host.c_str());
  std::signal(SIGTERM, on_termination);
  std::signal(SIGINT, on_termination);
}

}  // namespace

int main(int argc, char** argv) {
  report_termination_signals();
  // A file-size limit (ulimit -f, some quotas) then fails a write with EFBIG,
  // reported like a full disk, instead of killing the process silently.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"iotest: SKA-scale radio-astronomy imaging I/O benchmark"};
  app.require_subcommand(1);
  // The version and the commit it was built from (a container's too:
  // containers/build.sh passes it as IOTEST_REVISION).
  app.set_version_flag("--version", IOTEST_VERSION " (" IOTEST_GIT_REVISION ")");
  // --config files: a key the command does not have is an error (the
  // commands inherit this).
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(
      "Which command answers which question: docs/guide.md. Every command's options: "
      "iotest COMMAND --help (docs/cli.md).");
  cli::ReportOptions out;

  iotest::commands::Options rec_opts;
  std::string direction = "both", subgrids = "all", check;
  auto* recombine =
      app.add_subcommand("recombine",
                         "SwiFTly recombination of a whole set in one process, checked against the "
                         "direct Fourier transform");
  cli::add_rec_set_option(recombine, rec_opts.rec_set);
  cli::add_window_width_option(recombine, rec_opts.window_width);
  cli::add_sky_options(recombine, rec_opts.source_count, rec_opts.seed);
  recombine->add_option("--direction", direction, "predict, image or both")
      ->capture_default_str()
      ->group(cli::kMode);
  recombine
      ->add_option("--subgrids", subgrids,
                   "subgrids to process (nearest the grid centre first) or 'all'")
      ->capture_default_str()
      ->group(cli::kMode);
  recombine
      ->add_option("--check", check,
                   "subgrids to check against the direct transform, or 'all' (default: up "
                   "to 64, spread over the walk)")
      ->group(cli::kChecks);
  cli::add_process_threads_option(recombine, rec_opts.threads);
  cli::add_report_options(recombine, out);
  cli::set_example(recombine, "  iotest recombine --rec-set=small --check=16 --report=small.json");

  iotest::commands::PlanOptions plan_opts;
  auto* plan = app.add_subcommand(
      "plan",
      "resolved parameters, counts and memory per role of a set, and its ranks laid out on "
      "--nodes against the memory of a node; --slurm: the job script");
  // The plan's own options first: the allocation and the job script.
  plan->add_option("--nodes", plan_opts.nodes, "nodes the job will use")
      ->capture_default_str()
      ->group("Allocation");
  plan->add_option("--ranks-per-node", plan_opts.ranks_per_node,
                   "MPI ranks on each node; the run deals its roles over the nodes, rank r on node "
                   "r mod nodes "
                   "(default: enough for one streamer per node; --device=cuda: one per GPU)")
      ->group("Allocation");
  plan->add_option("--node-memory", plan_opts.node_memory,
                   "memory of one node: bytes, or with a binary suffix K M G T (24G = 24 GiB; "
                   "default: what this machine has available, as run checks)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Allocation");
  plan->add_option("--cores-per-node", plan_opts.cores_per_node,
                   "cores of a node, which its ranks' threads share (default: this machine's)")
      ->group("Allocation");
  plan->add_option("--gpus-per-node", plan_opts.gpus_per_node,
                   "--device=cuda: GPUs of a node, which its streamers share round-robin "
                   "(default: this machine's, else 1; and one streamer per GPU)")
      ->group("Allocation");
  plan->add_option("--gpu-memory", plan_opts.gpu_memory,
                   "--device=cuda: memory of one GPU: bytes, or with a binary suffix K M G T "
                   "(80G = 80 GiB; default: this machine's first GPU's)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Allocation");
  bool plan_slurm = false;
  iotest::job::JobScriptOptions slurm_opts;
  plan->add_flag("--slurm", plan_slurm,
                 "print the Slurm job script for this layout on stdout (the plan's summary goes "
                 "to stderr): #SBATCH lines, threads, binding, the srun or mpirun line running "
                 "`iotest run` with every run option given here")
      ->group("Slurm");
  plan->add_option(
          "--launcher", slurm_opts.launcher,
          "srun, or mpirun (this build's MPI's own launcher: Open MPI's mpirun, MPICH's mpiexec)")
      ->capture_default_str()
      ->group("Slurm");
  plan->add_option("--time-limit", slurm_opts.time_limit, "the job's time limit")
      ->capture_default_str()
      ->group("Slurm");
  plan->add_option("--partition", slurm_opts.partition, "the Slurm partition")->group("Slurm");
  plan->add_option("--account", slurm_opts.account, "the account charged")->group("Slurm");
  plan->add_option("--binary", slurm_opts.iotest, "iotest as the compute nodes find it")
      ->capture_default_str()
      ->group("Slurm");
  // Then every option of `iotest run`, registered and checked as run's
  // (run_options.hpp): the plan lays out the run they describe, and --slurm
  // carries each one given into the job script's run line.
  cli::RunCommand plan_run;
  cli::add_run_options(plan, plan_run,
                       "the run's paths, as `iotest run` takes them: predict: OUT%d.h5 it would "
                       "write (counts the writers' HDF5 caches); image: the files it would read. "
                       "plan writes and reads nothing");
  plan->get_option("--facet-workers")
      ->description(
          "producer ranks, each holding facets (default: one per facet; 0: streamers degrid "
          "zeros; always 0 with --synthetic-vis)");
  cli::add_window_width_option(plan, plan_opts.window_width);
  plan->add_option("--rates-from", plan_opts.rates_from,
                   "a run's JSON report: suggest --writer-ranks from its measured compute and "
                   "write rates")
      ->group(cli::kWriters);
  cli::add_report_options(plan, out);
  cli::set_example(plan,
                   "  iotest plan --rec-set=small --vis-set=vlaa --nodes=4 --node-memory=256G\n"
                   "  iotest plan --rec-set=small --vis-set=vlaa --nodes=16 --slurm "
                   "'/local/%h/vis%d.h5' > job.sh");

  iotest::commands::LayoutOptions layout_opts;
  auto* layout = app.add_subcommand(
      "layout", "a visibility set's antennas and the (u, v, w) of a few baselines");
  cli::add_observation_options(layout, layout_opts.observation, cli::kVisSets, false)->required();
  layout->add_option("--baselines", layout_opts.baselines, "baselines whose (u, v, w) to show")
      ->capture_default_str();
  cli::add_report_options(layout, out);
  cli::set_example(layout, "  iotest layout --vis-set=lowbd2 --dec=-45 --baselines=5");

  iotest::commands::DegridRunOptions degrid_opts;
  auto* degrid = app.add_subcommand(
      "degrid",
      "the whole predict chain in one process (facets, subgrids, w-towers, "
      "degridding) without writing, checked against the direct Fourier transform");
  cli::add_rec_set_option(degrid, degrid_opts.rec_set);
  cli::add_observation_options(degrid, degrid_opts.observation, cli::kVisSets, false)->required();
  cli::add_sky_options(degrid, degrid_opts.source_count, degrid_opts.seed);
  cli::add_kernel_options(degrid, degrid_opts.kernel, degrid_opts.margin, &degrid_opts.target_err);
  degrid
      ->add_option("--vis-samples", degrid_opts.vis_samples,
                   "visibilities checked against the direct transform")
      ->capture_default_str()
      ->group(cli::kChecks);
  cli::add_bls_per_task_option(degrid, degrid_opts.bls_per_task);
  cli::add_process_threads_option(degrid, degrid_opts.threads);
  std::string degrid_device = "cpu";
  cli::add_device_option(degrid, degrid_device);
  cli::add_report_options(degrid, out);
  degrid->add_option("output", degrid_opts.output,
                     "file to write the visibilities to (omit: a dry run)");
  cli::add_storage_options(degrid, degrid_opts.storage);
  cli::set_example(degrid,
                   "  iotest degrid --rec-set=T05_ --vis-set=vlaa --time=-230:230/64/16 "
                   "--vis-samples=1000");

  iotest::commands::GridRunOptions grid_opts;
  auto* grid = app.add_subcommand(
      "grid",
      "the imaging direction in one process (gridding onto w-towers, subgrids, facets): "
      "a predict run's files, or the sky predicted in memory, into the dirty image, checked "
      "against the direct adjoint transform");
  grid->add_option("files", grid_opts.inputs,
                   "a predict run's visibility files (omit: the sky's visibilities, predicted "
                   "in memory; the files give the rec-set, observation and sky)");
  cli::add_rec_set_option(grid, grid_opts.rec_set, "without files: T05_");
  cli::add_observation_options(grid, grid_opts.observation,
                               std::string(cli::kVisSets) + " (default without files: vlaa)", false);
  cli::add_sky_options(grid, grid_opts.source_count, grid_opts.seed);
  cli::add_kernel_options(grid, grid_opts.kernel, grid_opts.margin, nullptr);
  grid->add_option("--pixel-samples", grid_opts.pixel_samples,
                   "dirty image pixels checked against the direct adjoint transform")
      ->capture_default_str()
      ->group(cli::kChecks);
  cli::add_bls_per_task_option(grid, grid_opts.bls_per_task);
  cli::add_process_threads_option(grid, grid_opts.threads);
  std::string grid_device = "cpu";
  cli::add_device_option(grid, grid_device);
  grid->add_option("--image", grid_opts.image, cli::kImageHelp)->group(cli::kOutput);
  cli::add_report_options(grid, out);
  cli::add_storage_options(grid, grid_opts.storage, false);
  cli::set_example(grid,
                   "  iotest grid --rec-set=T05_ --vis-set=vlaa --pixel-samples=64\n"
                   "  iotest grid out/vis*.h5 --image=dirty.h5");

  iotest::pipeline::ReadOptions read_opts;
  auto* read = app.add_subcommand(
      "read",
      "read a run's output back as the imaging direction will (under mpirun: each rank "
      "its share of the files), and measure it");
  read->add_option("files", read_opts.files, "files written by iotest (any back-end)")->required();
  read->add_flag("--drop-caches", read_opts.drop_caches,
                 "empty the page cache before reading (root: /proc/sys/vm/drop_caches)")
      ->group(cli::kMode);
  read->add_flag("--check", read_opts.check,
                 "check every value read against the synthetic pattern (--synthetic-vis sets)")
      ->group(cli::kChecks);
  cli::add_report_options(read, out, true);
  cli::add_storage_options(read, read_opts.storage, false);
  cli::set_example(read, "  mpirun -np 2 iotest read out/vis*.h5 --check --report=read.json");

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
      ->expected(3)
      ->group("Dataset");
  h5->add_option("--domain", h5_domain, "values per rank NX,NY,NZ (doubles; default 64,64,64)")
      ->delimiter(',')
      ->expected(3)
      ->group("Dataset");
  h5->add_option("--chunk", h5_chunk, "HDF5 chunk CX,CY,CZ of a step (default: the domain)")
      ->delimiter(',')
      ->expected(3)
      ->group("Dataset");
  h5->add_option("--steps", h5_opts.steps, "time steps (3-D slices)")
      ->capture_default_str()
      ->group("Dataset");
  h5->add_option("--transfer", h5_transfer, "collective or independent")
      ->capture_default_str()
      ->group("Parallel HDF5");
  h5->add_flag("--collective-metadata", h5_opts.collective_metadata,
               "collective metadata reads and writes")
      ->group("Parallel HDF5");
  h5->add_flag("--fill", h5_fill, "fill the dataset at allocation (default: never fill)")
      ->group("Parallel HDF5");
  h5->add_option("--alloc", h5_opts.alloc, "allocation time: early, late or incremental")
      ->capture_default_str()
      ->group("Parallel HDF5");
  h5->add_flag("--precreate", h5_opts.precreate,
               "rank 0 creates and allocates the file alone, then all ranks open it")
      ->group("Parallel HDF5");
  h5->add_option("--alignment", h5_opts.alignment, "align objects to this many bytes")
      ->group("Parallel HDF5");
  h5->add_option("--chunk-cache", h5_opts.chunk_cache, "chunk cache bytes per dataset")
      ->group("Parallel HDF5");
  h5->add_option("--hint", h5_opts.hints,
                 "MPI-IO hint KEY=VALUE, repeatable (striping_factor, striping_unit, cb_nodes, "
                 "romio_cb_write)")
      ->group("Parallel HDF5");
  h5->add_flag("--check", h5_opts.check, "read every value back and check it")->group(cli::kChecks);
  h5->add_flag("--keep", h5_opts.keep, "keep the file (default: removed at the end)")
      ->group(cli::kOutput);
  cli::add_report_options(h5, out, true);
  cli::set_example(h5,
                   "  mpirun -np 8 iotest h5 /scratch/ckpt.h5 --grid=2,2,2 --transfer=collective "
                   "--collective-metadata --check");

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
  net->add_option("--time-per-size", net_opts.time_per_size,
                  "seconds a size's timed iterations may take, all its tests together (IMB's "
                  "-time): each test times as many of its iterations as fit its share (at least "
                  "one) and a window holds as many messages as fit it")
      ->capture_default_str();
  net->add_option("--transport", net_opts.transports, "mpi, tcp or mpi,tcp")
      ->delimiter(',')
      ->capture_default_str();
  net->add_flag("--check", net_opts.check,
                "check the bytes of every message of extra, untimed iterations (OSU's -c)")
      ->group(cli::kChecks);
  cli::add_report_options(net, out, true);
  cli::set_example(net,
                   "  mpirun -np 2 --map-by node iotest net --max-size=4194304 --report=net.json");

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
      ->capture_default_str()
      ->group(cli::kOutput);
  scale->add_option("--n", scale_opts.n_by, "what N counts: streamers, ranks or nodes")
      ->capture_default_str();
  scale->add_option("--python", scale_opts.python,
                    "the Python for tools/usl.py (default: the project's .venv, else python3)");
  cli::add_report_options(scale, out);
  cli::set_example(scale,
                   "  iotest scale --ranks=2,3,4,5 --job=\"--rec-set=small --vis-set=vlaa\" "
                   "--out=scale\n"
                   "  iotest scale --launcher=srun --np-flag=-n --n=nodes --ranks=4,8,16,32 "
                   "--job=\"...\"");

  iotest::commands::VerifyOptions verify_opts;
  auto* verify = app.add_subcommand(
      "verify", "re-read visibility files and check every chunk against the direct transform");
  verify->add_option("files", verify_opts.files, "files written by iotest (any back-end)")
      ->required();
  verify
      ->add_flag("--all", verify_opts.all,
                 "check every value, not samples (--synthetic-vis sets: exactly)")
      ->group(cli::kChecks);
  verify
      ->add_option("--nonce", verify_opts.nonce,
                   "the run the files must come from (its report's config.nonce)")
      ->group(cli::kChecks);
  verify
      ->add_option("--source-count", verify_opts.source_count,
                   "sources of the sky (default: the file's)")
      ->group(cli::kSky);
  verify->add_option("--seed", verify_opts.seed, "seed of the sky (default: the file's)")
      ->check(cli::kNonNegative)
      ->group(cli::kSky);
  verify->add_option("--samples", verify_opts.samples, "visibilities checked over the files")
      ->capture_default_str()
      ->group(cli::kChecks);
  verify->add_option("--tolerance", verify_opts.tolerance, "relative RMSE allowed")
      ->capture_default_str()
      ->group(cli::kChecks);
  cli::add_report_options(verify, out);
  cli::set_example(verify, "  iotest verify out/vis*.h5 --all --nonce=123456789");

  cli::RunCommand run_cmd;
  auto* run = app.add_subcommand(
      "run",
      "the predict pipeline over MPI ranks (the default command): producers, streamers, "
      "writers; run under mpirun");
  cli::add_run_options(run, run_cmd);
  cli::add_report_options(run, out, true);
  cli::set_example(run,
                   "  mpirun -np 3 iotest --rec-set=T05_ --vis-set=vlaa out/vis%d.h5 "
                   "--report=run.json\n"
                   "  mpirun -np 3 iotest run --direction=image --rec-set=T05_ out/vis*.h5\n"
                   "  mpirun -np 3 iotest --rec-set=small --vis-set=vlaa --synthetic-vis "
                   "--storage=posix --posix.direct out/vis%d");

  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    const bool quote = word.empty() || word.find_first_of(" \t'\"") != std::string::npos;
    command_line += (i ? " " : "") + (quote ? "'" + word + "'" : word);
  }
  // `iotest [run] ...`: without a command name, the pipeline runs.
  std::vector<std::string> args(argv, argv + argc);
  bool is_run = true;
  if (argc > 1) {
    const std::string first = argv[1];
    const auto commands = app.get_subcommands({});
    const bool named = first == "-h" || first == "--help" || first == "--version" ||
                       std::any_of(commands.begin(), commands.end(),
                                   [&](const CLI::App* c) { return c->get_name() == first; });
    if (!named) args.insert(args.begin() + 1, "run");
    is_run = !named || first == "run";
  }
  const std::string command_name = args.size() > 1 ? args[1] : "";
  cli::enable_config(app, command_name);
  cli::hoist_config(args);
  std::vector<char*> arg_pointers;
  for (auto& a : args) arg_pointers.push_back(a.data());
  argc = static_cast<int>(arg_pointers.size());
  argv = arg_pointers.data();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A config file's faults name --config.
    const bool config =
        dynamic_cast<const CLI::ConfigError*>(&e) || dynamic_cast<const CLI::FileError*>(&e);
    const std::string line =
        (config ? "--config: " : "") + std::string(e.what()) + " (see iotest --help)";
    // Under mpirun every rank gets the same error: said once, by rank 0
    // (run and the other commands that start MPI).
    if (is_run) return run_pipeline(run_cmd.options, 1, {}, line);
    if (command_name == "read" || command_name == "h5" || command_name == "net")
      return run_mpi([](MPI_Comm) { return iotest::report::Report{}; }, {}, line, "");
    print_error(line);
    return iotest::kExitUsage;
  }
  for (const auto* command : app.get_subcommands())
    configuration = cli::resolved_configuration(*command);

  if (out.report == "-") out.report = "/dev/stdout";
  if (*h5) {
    const auto triple = [](const std::vector<long long>& v, auto& to) {
      for (size_t a = 0; a < 3 && a < v.size(); ++a)
        to[a] = static_cast<std::remove_reference_t<decltype(to[a])>>(v[a]);
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
    return run_mpi([&](MPI_Comm comm) { return iotest::checkpoint::h5(h5_opts, comm); }, out, bad,
                   h5_opts.path);
  }
  if (*net)
    // MPI_THREAD_SINGLE: net calls MPI from one thread, and on Open MPI a
    // higher level costs ~0.07 us a message (half the 8 B message rate).
    return run_mpi([&](MPI_Comm comm) { return iotest::net::net(net_opts, comm); }, out, "", "",
                   MPI_THREAD_SINGLE);
  if (*read)
    return run_mpi([&](MPI_Comm comm) { return iotest::pipeline::read(read_opts, comm); }, out, "",
                   read_opts.files.front());
  if (*run) {
    std::string bad;
    try {
      cli::check_run_command(run_cmd);
    } catch (const iotest::UsageError& e) {
      bad = e.one_line();
    }
    run_cmd.options.command_line = command_line;
    return run_pipeline(run_cmd.options, run_cmd.repetitions, out, bad);
  }
  try {
    check_outputs(out);
    if (*recombine) {
      rec_opts.direction = iotest::swiftly::parse_direction(direction);
      rec_opts.subgrids = parse_count_or_all("--subgrids", subgrids);
      if (rec_opts.subgrids && *rec_opts.subgrids == 0)
        throw iotest::UsageError("--subgrids", "expected at least 1 subgrid or 'all'");
      if (!check.empty()) {
        rec_opts.check = parse_count_or_all("--check", check);
        rec_opts.check_all = !rec_opts.check;
      }
      emit(iotest::commands::run(rec_opts), out);
    } else if (*verify) {
      const auto report = iotest::commands::verify(verify_opts);
      emit(report, out, verify_opts.files.front());
      if (!report.verification->passed) return iotest::kExitFailure;
    } else if (*degrid) {
      degrid_opts.device = iotest::job::parse_device(degrid_device);
      emit(iotest::commands::degrid(degrid_opts), out, degrid_opts.output);
    } else if (*grid) {
      grid_opts.device = iotest::job::parse_device(grid_device);
      emit(iotest::commands::grid(grid_opts), out);
    } else if (*scale) {
      emit(iotest::commands::scale(scale_opts), out);
    } else if (*layout) {
      emit(iotest::commands::layout(layout_opts), out);
    } else if (*plan) {
      cli::check_run_command(plan_run);
      plan_the_run(plan_run.options, plan_opts);
      // The run's own checks (but for its ranks, which the plan lays out):
      // a script is never written for a run that would refuse its options.
      iotest::pipeline::check_run_combination(plan_run.options);
      if (plan_slurm) {
        const auto& r = plan_run.options;
        slurm_opts.run_arguments = cli::shared_arguments(*plan, *run);
        slurm_opts.paths = plan_run.paths;
        slurm_opts.repetitions = plan_run.repetitions;
        // The run refuses --duration where it has no walk to stonewall.
        slurm_opts.stonewall = r.direction == iotest::swiftly::Direction::predict &&
                               !r.network_only && !r.synthetic_sequential;
        plan_opts.slurm = slurm_opts;
      }
      emit(iotest::commands::plan(plan_opts), out);
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
