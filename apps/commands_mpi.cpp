// The commands that run over MPI under mpirun: read, h5, net and run. Each
// goes through run_mpi, its parse errors too, so that a usage error is said
// once, by rank 0, and every rank leaves with kExitUsage.
#include <mpi.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "commands.hpp"
#include "iotest/checkpoint/h5_checkpoint.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/net/net.hpp"
#include "iotest/pipeline/read.hpp"
#include "run_options.hpp"

namespace iotest::cli {

namespace {

// A parse error under mpirun: said by rank 0 alone, through MPI.
int parse_failed_under_mpi(const std::string& line) {
  return run_mpi([](MPI_Comm) { return iotest::report::Report{}; }, {}, line, "");
}

// h5's options as parsed, and the words turned into H5Options by run_h5.
struct H5Command {
  iotest::checkpoint::H5Options options;
  std::vector<long long> grid, domain, chunk;
  std::string transfer = "collective";
  bool fill = false;
};

int run_h5(H5Command& s, const ReportOptions& out) {
  auto& h5_opts = s.options;
  const auto triple = [](const std::vector<long long>& v, auto& to) {
    for (size_t a = 0; a < 3 && a < v.size(); ++a)
      to[a] = static_cast<std::remove_reference_t<decltype(to[a])>>(v[a]);
  };
  triple(s.grid, h5_opts.grid);
  triple(s.domain, h5_opts.domain);
  triple(s.chunk, h5_opts.chunk);
  h5_opts.never_fill = !s.fill;
  std::string bad;
  if (s.transfer == "independent")
    h5_opts.collective = false;
  else if (s.transfer != "collective")
    bad = "--transfer: expected collective or independent, got '" + s.transfer + "'";
  return run_mpi([&](MPI_Comm comm) { return iotest::checkpoint::h5(h5_opts, comm); }, out, bad,
                 h5_opts.path);
}

}  // namespace

Command add_read_command(CLI::App& app, ReportOptions& out) {
  const auto read_opts = std::make_shared<iotest::pipeline::ReadOptions>();
  auto* read = app.add_subcommand(
      "read",
      "read a run's output back as the imaging direction will (under mpirun: each rank "
      "its share of the files), and measure it");
  read->add_option("files", read_opts->files, "files written by iotest (any back-end)")->required();
  read->add_flag("--drop-caches", read_opts->drop_caches,
                 "empty the page cache before reading (root: /proc/sys/vm/drop_caches)")
      ->group(kMode);
  read->add_flag("--check", read_opts->check,
                 "check every value read against the synthetic pattern (--synthetic-vis sets)")
      ->group(kChecks);
  add_report_options(read, out, true);
  add_storage_options(read, read_opts->storage, false);
  add_storage_stall_option(read, read_opts->storage_stall_timeout_s);
  set_example(read, "  mpirun -np 2 iotest read out/vis*.h5 --check --report=read.json");
  const auto execute = [read_opts, &out] {
    return run_mpi([&](MPI_Comm comm) { return iotest::pipeline::read(*read_opts, comm); }, out, "",
                   read_opts->files.front(), MPI_THREAD_FUNNELED,
                   read_opts->storage_stall_timeout_s);
  };
  return {read, execute, parse_failed_under_mpi};
}

Command add_h5_command(CLI::App& app, ReportOptions& out) {
  const auto state = std::make_shared<H5Command>();
  H5Command& s = *state;
  auto* h5 = app.add_subcommand(
      "h5",
      "the checkpoint kernel of seism-core under mpirun: a 3-D process grid writes a 4-D "
      "dataset, one 3-D slice per step, through parallel HDF5");
  h5->add_option("file", s.options.path, "the shared HDF5 file (a new one)")->required();
  h5->add_option("--grid", s.grid, "process grid PX,PY,PZ (default: from the rank count)")
      ->delimiter(',')
      ->expected(3)
      ->group("Dataset");
  h5->add_option("--domain", s.domain, "values per rank NX,NY,NZ (doubles; default 64,64,64)")
      ->delimiter(',')
      ->expected(3)
      ->group("Dataset");
  h5->add_option("--chunk", s.chunk, "HDF5 chunk CX,CY,CZ of a step (default: the domain)")
      ->delimiter(',')
      ->expected(3)
      ->group("Dataset");
  h5->add_option("--steps", s.options.steps, "time steps (3-D slices)")
      ->capture_default_str()
      ->group("Dataset");
  h5->add_option("--transfer", s.transfer, "collective or independent")
      ->capture_default_str()
      ->group("Parallel HDF5");
  h5->add_flag("--collective-metadata", s.options.collective_metadata,
               "collective metadata reads and writes")
      ->group("Parallel HDF5");
  h5->add_flag("--fill", s.fill, "fill the dataset at allocation (default: never fill)")
      ->group("Parallel HDF5");
  h5->add_option("--alloc", s.options.alloc, "allocation time: early, late or incremental")
      ->capture_default_str()
      ->group("Parallel HDF5");
  h5->add_flag("--precreate", s.options.precreate,
               "rank 0 creates and allocates the file alone, then all ranks open it")
      ->group("Parallel HDF5");
  h5->add_option("--alignment", s.options.alignment, "align objects to this many bytes")
      ->group("Parallel HDF5");
  h5->add_option("--chunk-cache", s.options.chunk_cache, "chunk cache bytes per dataset")
      ->group("Parallel HDF5");
  h5->add_option("--hint", s.options.hints,
                 "MPI-IO hint KEY=VALUE, repeatable (striping_factor, striping_unit, cb_nodes, "
                 "romio_cb_write)")
      ->group("Parallel HDF5");
  h5->add_flag("--check", s.options.check, "read every value back and check it")->group(kChecks);
  h5->add_flag("--keep", s.options.keep, "keep the file (default: removed at the end)")
      ->group(kOutput);
  add_report_options(h5, out, true);
  set_example(h5,
              "  mpirun -np 8 iotest h5 /scratch/ckpt.h5 --grid=2,2,2 --transfer=collective "
              "--collective-metadata --check");
  return {h5, [state, &out] { return run_h5(*state, out); }, parse_failed_under_mpi};
}

Command add_net_command(CLI::App& app, ReportOptions& out) {
  const auto net_opts = std::make_shared<iotest::net::NetOptions>();
  auto* net = app.add_subcommand(
      "net",
      "the interconnect under mpirun: latency and bandwidth between pairs of ranks over message "
      "size, for MPI and for TCP sockets (as OSU's latency and bw tests)");
  net->add_option("--pairs", net_opts->pairs,
                  "rank pairs A:B,C:D measured at once, A sending (default: the first rank of "
                  "each node with the first of the next; one node: 0:1,2:3,...)");
  net->add_option("--min-size", net_opts->min_size, "smallest message (bytes)")
      ->capture_default_str();
  net->add_option("--max-size", net_opts->max_size, "largest message (bytes; powers of 2 between)")
      ->capture_default_str();
  net->add_option("--iterations", net_opts->iterations,
                  "timed iterations below 8 KiB, a tenth of them up to 1 MiB, a hundredth above "
                  "(default: 1000)");
  net->add_option("--warmup", net_opts->warmup,
                  "untimed iterations first, scaled as --iterations (default: a tenth of "
                  "--iterations)");
  net->add_option("--window", net_opts->window, "messages in flight per bandwidth iteration")
      ->capture_default_str();
  net->add_option("--time-per-size", net_opts->time_per_size,
                  "seconds a size's timed iterations may take, all its tests together (IMB's "
                  "-time): each test times as many of its iterations as fit its share (at least "
                  "one) and a window holds as many messages as fit it")
      ->capture_default_str();
  net->add_option("--transport", net_opts->transports, "mpi, tcp or mpi,tcp")
      ->delimiter(',')
      ->capture_default_str();
  net->add_flag("--check", net_opts->check,
                "check the bytes of every message of extra, untimed iterations (OSU's -c)")
      ->group(kChecks);
  add_report_options(net, out, true);
  set_example(net, "  mpirun -np 2 --map-by node iotest net --max-size=4194304 --report=net.json");
  const auto execute = [net_opts, &out] {
    // MPI_THREAD_SINGLE: net calls MPI from one thread, and on Open MPI a
    // higher level costs ~0.07 us a message (half the 8 B message rate).
    return run_mpi([&](MPI_Comm comm) { return iotest::net::net(*net_opts, comm); }, out, "", "",
                   MPI_THREAD_SINGLE);
  };
  return {net, execute, parse_failed_under_mpi};
}

Command add_run_command(CLI::App& app, ReportOptions& out) {
  const auto run_cmd = std::make_shared<RunCommand>();
  auto* run = app.add_subcommand(
      "run",
      "the predict pipeline over MPI ranks (the default command): producers, streamers, "
      "writers; run under mpirun");
  add_run_options(run, *run_cmd);
  add_report_options(run, out, true);
  set_example(run,
              "  mpirun -np 3 iotest --rec-set=T05_ --vis-set=vlaa out/vis%d.h5 "
              "--report=run.json\n"
              "  mpirun -np 3 iotest run --direction=image --rec-set=T05_ out/vis*.h5\n"
              "  mpirun -np 3 iotest --rec-set=small --vis-set=vlaa --synthetic-vis "
              "--storage=posix --posix.direct out/vis%d");
  const auto execute = [run_cmd, &out] {
    std::string bad;
    try {
      check_run_command(*run_cmd);
    } catch (const iotest::UsageError& e) {
      bad = e.one_line();
    }
    run_cmd->options.command_line = command_line;
    return run_pipeline(run_cmd->options, run_cmd->repetitions, out, bad);
  };
  // A parse error: the run as parsed so far, once.
  const auto parse_failed = [run_cmd](const std::string& line) {
    return run_pipeline(run_cmd->options, 1, {}, line);
  };
  return {run, execute, parse_failed};
}

}  // namespace iotest::cli
