// The iotest commands, one function each: add_<name>_command registers the
// command's options on the main app and returns what it does when chosen.
// apps/iotest.cpp adds them in --help's order, parses, and runs the chosen
// one; the rest of this header is what the commands share: how a command
// reports, and how it fails (one line, an exit status).
#pragma once

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli_options.hpp"
#include "iotest/pipeline/run.hpp"
#include "iotest/report/report.hpp"

namespace iotest::cli {

// A command as added to the app. Its option variables live in the
// `execute` closure, so they outlive the function that added it.
struct Command {
  CLI::App* app = nullptr;
  // The chosen command's work: the process's exit status.
  std::function<int()> execute;
  // A command that starts MPI (run, read, h5, net) says its parse errors
  // through MPI too, so that under mpirun rank 0 alone prints the line:
  // this gets the line and returns the exit status. Empty: main prints it.
  std::function<int(const std::string& line)> parse_failed;
};

// In --help's order.
Command add_recombine_command(CLI::App& app, ReportOptions& out);
Command add_plan_command(CLI::App& app, ReportOptions& out);  // needs "run" added too
Command add_layout_command(CLI::App& app, ReportOptions& out);
Command add_degrid_command(CLI::App& app, ReportOptions& out);
Command add_grid_command(CLI::App& app, ReportOptions& out);
Command add_read_command(CLI::App& app, ReportOptions& out);
Command add_h5_command(CLI::App& app, ReportOptions& out);
Command add_net_command(CLI::App& app, ReportOptions& out);
Command add_scale_command(CLI::App& app, ReportOptions& out);
Command add_verify_command(CLI::App& app, ReportOptions& out);
Command add_run_command(CLI::App& app, ReportOptions& out);

// The command line as typed, and the command's options resolved (as a
// --config file), for every report (set once in main).
extern std::string command_line, configuration;

// The report: its summary on stdout (stderr when the JSON or a job script
// goes there), then --report's JSON and --csv's tables. `data_path`: the
// output, or the files read, whose file system the report names.
void emit(report::Report report, const ReportOptions& out, const std::string& data_path = "");

// Before any work: the report's and the tables' paths can be written.
void check_outputs(const ReportOptions& out);

// The one line a failure gets on stderr.
void print_error(const std::string& line);

// A one-process command (all but run, read, h5 and net): the report's
// paths checked, then `body`, whose status is returned; a usage error
// exits with kExitUsage, any other failure kExitFailure, each in one line.
// `stall_timeout_s`: its storage calls' bound (--storage-stall-timeout of
// verify and grid, which read a run's files; 0: none): past it, one line
// naming the host and the file, and the process leaves with kExitFailure.
int run_in_process(const ReportOptions& out, const std::function<int()>& body,
                   double stall_timeout_s = 0);

// A command over MPI (run, read, h5, net), every failure handled as
// docs/pipeline.md says ("When a rank fails"). `body` runs the command;
// `parse_error`, when not empty, is a usage error said by rank 0 instead;
// `data_path` is its output or input; `threads`: the MPI thread support the
// command needs (MPI_THREAD_MULTIPLE when writer threads call MPI);
// `stall_timeout_s`: its storage calls' bound (--storage-stall-timeout; 0:
// none), its report's included.
int run_mpi(const std::function<report::Report(MPI_Comm)>& body, const ReportOptions& out,
            const std::string& parse_error, const std::string& data_path,
            int threads = MPI_THREAD_FUNNELED, double stall_timeout_s = 0);

// `iotest run`: the pipeline, `repetitions` times, over run_mpi.
int run_pipeline(const pipeline::RunOptions& options, int repetitions, const ReportOptions& out,
                 const std::string& parse_error);

}  // namespace iotest::cli
