// What the commands share (commands.hpp): the report's environment and
// output, and the way a command fails, in one process or over MPI.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/file_layout.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/common/system.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/output/file_store.hpp"
#include "iotest/storage/output/unpublished.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/storage_progress.hpp"
#include "iotest/swiftly/fft.hpp"
#include "revision.hpp"  // generated: IOTEST_GIT_REVISION

namespace iotest::cli {

std::string command_line, configuration;

namespace {

// The first output of a pattern, for its layout: the path itself where
// it is there (a single output, the files read), else writer 0's, named as
// the writers name theirs (OUT0.h5, or out.0.h5 for several writers of
// out.h5): every run has a writer 0.
std::optional<std::string> first_output(const std::string& path) {
  for (const auto& candidate : {path, iotest::pipeline::output_path(path, 0, 2)})
    if (std::error_code error; std::filesystem::exists(candidate, error)) return candidate;
  return std::nullopt;
}

// The file system of the output (or the files read) on this host: its
// mount, and on CephFS the first output's layout and its pool's
// replication (asked of the ceph CLI: once, here, on the rank that writes
// the report).
std::optional<iotest::report::Environment::FileSystem> file_system_of(
    const std::string& data_path) {
  // Another store's output (a URL) has no mount: the report's config.store
  // names that store.
  if (!iotest::storage::file_store().holds(data_path)) return std::nullopt;
  const std::string path = iotest::pipeline::with_host(data_path, iotest::host_name());
  // An output pattern (OUT%d.h5) is looked up by its folder.
  const auto folder = std::filesystem::path(path).parent_path();
  const auto m = iotest::mount_of(folder.empty() ? "." : folder.string());
  if (!m) return std::nullopt;
  iotest::report::Environment::FileSystem fs;
  fs.path = data_path;
  fs.mount_point = m->mount_point;
  fs.type = m->type;
  fs.options = m->options;
  fs.name = iotest::file_system_name(m->type);
  fs.client = iotest::file_system_client(m->type);
  if (fs.name != "ceph") return fs;
  try {  // a listing that fails midway leaves the layout unknown, not the report unwritten
    if (const auto output = first_output(path)) fs.layout = iotest::read_file_layout(*output);
  } catch (const std::exception&) {
  }
  if (!fs.layout) {
    fs.replication_unknown_why = "the output's layout, and so its pool, could not be read";
    return fs;
  }
  const auto replication = iotest::pool_replication(fs.layout->pool);
  fs.replication = replication.copies;
  fs.replication_unknown_why = replication.unknown_why;
  return fs;
}

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
  if (!data_path.empty()) e.output = file_system_of(data_path);
  return e;
}

std::string what_failed(const std::exception& e) {
  return dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what();
}

}  // namespace

void emit(iotest::report::Report report, const ReportOptions& out, const std::string& data_path) {
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
  // Watched as the outputs are (a report on the shared file system).
  if (!out.report.empty()) {
    const iotest::storage::WatchedCall call(iotest::storage::StorageStep::writing, out.report);
    iotest::report::write_json(report, out.report);
  }
  if (!out.csv.empty()) {
    const iotest::storage::WatchedCall call(iotest::storage::StorageStep::writing, out.csv);
    iotest::report::write_csv(report, out.csv);
  }
}

// Before any work: the report's and the tables' paths can be written.
void check_outputs(const ReportOptions& out) {
  using iotest::storage::StorageStep, iotest::storage::WatchedCall;
  if (!out.report.empty()) {
    const WatchedCall call(StorageStep::creating, out.report);
    iotest::report::check_writable(out.report);
  }
  if (!out.csv.empty()) {
    const WatchedCall call(StorageStep::creating, out.csv + ".summary.csv");
    iotest::report::check_writable(out.csv + ".summary.csv", "--csv");
  }
}

// The one line a failure gets on stderr.
void print_error(const std::string& line) {
  std::fprintf(stderr, "iotest: error: %s\n", line.c_str());
  std::fflush(stderr);
}

// Seconds a failed rank gives MPI_Abort before it leaves by itself.
constexpr int kAbortGraceS = 10;

// Ends the whole job from this rank, whose failure is said: only
// MPI_Abort reaches peers blocked on it.
void abort_job() {
  // Its peers may be killed before their own clean-up: the run's outputs
  // that hold space unpublished (an object store's uploads) are taken back
  // from here, within a bound (storage/output/unpublished.hpp).
  iotest::storage::drop_unpublished_outputs(std::chrono::seconds(5));
  // A launcher forwards a rank's output through its own processes
  // (MPICH's Hydra: a proxy per host), and an abort tears them down: a
  // moment first, so that the one line reaches the user.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // A resource manager may be slow to carry the abort out (Slurm's PMIx
  // plugin once left such a job for minutes): this rank then leaves by
  // itself, its failed exit ending the step (srun --kill-on-bad-exit, as
  // plan's scripts launch) and its closed links its peers' waits. _Exit:
  // no destructors or exit handlers, which could wait on a thread or
  // flush into a file system that stopped answering.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceS));
    std::_Exit(iotest::kExitFailure);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, iotest::kExitFailure);
}

// A storage call blocked in the kernel (a shared file system's link cut)
// cannot be cancelled, nor its thread joined: the watchdog says so once
// and ends the job (`leave`, if any, then _Exit), the blocked process left
// to the kernel
// (docs/pipeline.md, "A stalled file system").
std::optional<iotest::storage::StallWatch> watch_storage(double bound_s, void (*leave)()) {
  return std::optional<iotest::storage::StallWatch>(
      std::in_place, iotest::storage::rank_progress(), bound_s,
      [leave](const iotest::storage::Stall& stall) {
        print_error(iotest::storage::describe(stall, iotest::host_name()));
        if (leave) leave();
        std::_Exit(iotest::kExitFailure);  // `leave` came back (MPI_Abort): leave anyway
      });
}

// An exception thrown where nothing can catch it ends the process through
// std::terminate: a library's destructor that writes (casacore's tables
// write table.dat again as they close, and throw from the destructor when
// a quota or the disk is full). The default handler says only "terminate
// called" and aborts with a backtrace, which a job's log buries or loses:
// this one says the exception's text in the one line (rank `rank`; -1:
// not over MPI) and ends the job as any failure does.
void end_on_terminate(int rank) {
  static int terminating_rank = -1;
  terminating_rank = rank;
  std::set_terminate([] {
    std::string what = "an internal error (std::terminate, no exception)";
    if (const auto thrown = std::current_exception()) {
      try {
        std::rethrow_exception(thrown);
      } catch (const std::exception& e) {
        what = what_failed(e);
      } catch (...) {
        what = "an exception of unknown type";
      }
    }
    print_error(terminating_rank < 0 ? what : fmt::format("(rank {}) {}", terminating_rank, what));
    if (terminating_rank >= 0) abort_job();
    std::_Exit(iotest::kExitFailure);
  });
}

int run_in_process(const ReportOptions& out, const std::function<int()>& body,
                   double stall_timeout_s) {
  end_on_terminate(-1);
  // No MPI to abort: the watchdog's _Exit ends the process, and no
  // destructor waits on the thread blocked in the kernel.
  const auto watch = watch_storage(stall_timeout_s, nullptr);
  try {
    check_outputs(out);
    return body();
  } catch (const iotest::UsageError& e) {
    print_error(e.one_line());
    return iotest::kExitUsage;
  } catch (const std::exception& e) {
    print_error(what_failed(e));
    return iotest::kExitFailure;
  }
}

// A command over MPI (run, read): MPI only lives here (docs/pipeline.md,
// "When a rank fails"). Usage errors are agreed by every rank: rank 0 says
// it once and all leave with the usage status. Any other failure is this
// rank's alone, with peers perhaps blocked on it: only MPI_Abort reaches
// them. `body` runs the command; `data_path` is its output or input.
// `threads`: the MPI thread support the command needs (MPI_THREAD_MULTIPLE
// when writer threads call MPI: the phdf5 back-end).
int run_mpi(const std::function<iotest::report::Report(MPI_Comm)>& body, const ReportOptions& out,
            const std::string& parse_error, const std::string& data_path, int threads,
            double stall_timeout_s) {
  // iotest never moves MPI-IO's shared file pointer, but Open MPI's OMPIO
  // opens a component for it with every file: across nodes its lockedfile
  // component makes FILE-JOBID-PID.lock beside a shared output (phdf5),
  // which a job that aborts leaves there (issue 56), and its individual
  // component makes FILE.data.N and FILE.metadata.N. sm alone makes none
  // beside the file (its segment is in the session directory) and is not
  // used across nodes, which OMPIO allows while no shared-pointer call is
  // made. A user's own choice stays; MPICH ignores the variable.
  setenv("OMPI_MCA_sharedfp", "sm", 0);
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, threads, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  end_on_terminate(rank);
  auto watch = watch_storage(stall_timeout_s, abort_job);  // MPI_Abort needs MPI up
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
    abort_job();
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
  watch.reset();
  MPI_Finalize();
  return status;
}

int run_pipeline(const iotest::pipeline::RunOptions& options, int repetitions,
                 const ReportOptions& out, const std::string& parse_error) {
  // Threads other than the first call MPI: a shared output's writers, in
  // transit each streamer's forwarding thread, and with outputs split by
  // frequency the streamers' exchange (its forwarding and receiving threads).
  const bool multiple = iotest::storage::shares_output(options.storage, options.output) ||
                        options.writer_ranks > 0 ||
                        iotest::storage::splits_by_frequency(options.storage, options.output);
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
  return run_mpi(
      repeated, out, parse_error, options.inputs.empty() ? options.output : options.inputs.front(),
      multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, options.storage_stall_timeout_s);
}

}  // namespace iotest::cli
