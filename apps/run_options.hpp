// `iotest run`'s options, registered and checked in one place: `run` takes
// them, and so does `plan --slurm`, which carries every one given into its
// job script's run line. A new run option added here reaches both (and
// tests/cli/test_plan.py checks that each of run's options does).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "iotest/pipeline/run.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::cli {

// The run's options as parsed: RunOptions' fields, and the words turned
// into them by check_run_command.
struct RunCommand {
  pipeline::RunOptions options;
  telescope::ObservationOptions observation;  // into options with --vis-set
  CLI::Option* vis_set = nullptr;             // --vis-set's option
  std::string direction = "predict";
  std::string device = "cpu";
  int repetitions = 1;
  bool no_progress = false;
  std::string file_layout;         // --file-layout as given (checked by its validator)
  std::string link_rate, storage_rate;  // as given: parsed into options.prediction
  std::vector<std::string> paths;  // predict: the output pattern; image: the files read
};

// Every option of `iotest run` but --report, --csv and --config (each
// command has its own), on `app`; `paths_help` describes the positional
// paths (run's own help when empty).
void add_run_options(CLI::App* app, RunCommand& run, const std::string& paths_help = "");

// Checks what the parser cannot (the direction, the device, the paths
// against the direction) and fills run.options: UsageError naming the
// option. The rest is checked by pipeline::run on every rank, before any
// work.
void check_run_command(RunCommand& run);

}  // namespace iotest::cli
