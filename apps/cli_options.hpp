// The command line's shared parts: every option that more than one command
// takes is defined here once (its name, help, check and --help group), and
// the --config file support. apps/commands_*.cpp wire them into the commands.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::cli {

// The --help groups, in the order a reader looks for them.
inline constexpr const char* kJob = "Job";
inline constexpr const char* kObservation = "Observation";
inline constexpr const char* kSky = "Sky";
inline constexpr const char* kKernel = "Kernel";
inline constexpr const char* kChecks = "Checks";
inline constexpr const char* kMode = "Mode";
inline constexpr const char* kRoles = "Roles and threads";
inline constexpr const char* kQueues = "Queues";
inline constexpr const char* kWriters = "Writers";
inline constexpr const char* kOutput = "Report and configuration";

// The --vis-set help of the commands that take a visibility set.
inline constexpr const char* kVisSets =
    "visibility set: lowbd2 lowbd2-core lowr3 lowr4 low-aa0.5 midr5 mkatplus askap lofar vlaa "
    "(NAME@pole: at declination 90, every w 0)";

// --image's help (run and grid): the dirty image's file.
inline constexpr const char* kImageHelp =
    "write the dirty image to this file: FILE.fits as WSClean writes images (RA, Dec SIN "
    "projection at the phase centre, east left, north up), any other name HDF5 (dataset "
    "dirty_image: float64 [y][x][2], real and imaginary, the FITS image's rows and columns)";

// --image-autocorrelations (run and grid): the dirty image takes the rows
// whose two antennas are the same, which imagers leave out by default.
// `when`: where it applies, as the help begins (run: its directions).
void add_image_autocorrelations_option(CLI::App* app, bool& flag, const std::string& when = "");

// CLI11's own non-negative check prints its range up to DBL_MAX.
extern const CLI::Validator kNonNegative;

// --rec-set (required unless `default_text` says what stands in) and --window-width.
void add_rec_set_option(CLI::App* app, std::string& rec_set, const std::string& default_text = "");
void add_window_width_option(CLI::App* app, std::optional<double>& window_width);

// --vis-set, --time, --freq, --dec. The observation options need --vis-set
// where it is optional (`needs_vis_set`). Returns --vis-set's option.
CLI::Option* add_observation_options(CLI::App* app, telescope::ObservationOptions& o,
                                     const std::string& vis_set_help, bool needs_vis_set);

// --source-count, --seed: the random sky.
template <class Count, class Seed>
void add_sky_options(CLI::App* app, Count& source_count, Seed& seed) {
  app->add_option("--source-count", source_count, "point sources of 1 Jy in the random sky")
      ->capture_default_str()
      ->group(kSky);
  app->add_option("--seed", seed, "seed of the sky and the samples")
      ->check(kNonNegative)
      ->capture_default_str()
      ->group(kSky);
}

// --support, --w-support, --margin, --wstep, and --target-err where the
// command measures the tower height (`target_err` not null).
void add_kernel_options(CLI::App* app, degrid::DegridOptions& kernel,
                        std::optional<index_t>& margin, std::optional<double>* target_err);

// --bls-per-task: baselines' time chunks per degrid (or gridding) task.
void add_bls_per_task_option(CLI::App* app, index_t& bls_per_task);

// The run's shape (job::run_shape), for `run` and `plan` alike: roles,
// threads, queues, writers.
template <class Options>
void add_shape_options(CLI::App* app, Options& o, const std::string& facet_workers_default) {
  app->add_option("--facet-workers", o.facet_workers,
                  "producer ranks, each holding facets (default: " + facet_workers_default +
                      "; 0: streamers degrid zeros; always 0 with --synthetic-vis)")
      ->group(kRoles);
  app->add_flag("--assigner", o.assigner, "dedicate the last rank to handing out work dynamically")
      ->group(kRoles);
  app->add_option("--threads", o.threads,
                  "threads per streamer (default: the node's cores over its ranks)")
      ->check(CLI::Range(1, 4096))
      ->group(kRoles);
  app->add_option("--producer-threads", o.producer_threads,
                  "threads per producer (default: as --threads)")
      ->check(CLI::Range(1, 4096))
      ->group(kRoles);
  app->add_flag("--synthetic-vis{walk}", o.synthetic_order,
                "storage only: no producers or degridding; streamers write a pattern in the "
                "real run's chunks (needs --vis-set): in the order the walk completes them "
                "(=walk, the default), or in file order (=sequential: the storage ceiling, as "
                "IOR writes)")
      // A configuration file says true (or false) as of a plain flag.
      ->check(CLI::IsMember({"walk", "sequential", "true", "false"}))
      ->each([&o](const std::string& order) {
        o.synthetic_vis = order != "false";
        o.synthetic_sequential = order == "sequential";
      })
      ->group(kMode);
  app->add_option("--send-queue", o.send_queue, "contributions in flight per producer thread")
      ->capture_default_str()
      ->group(kQueues);
  app->add_option("--subgrid-queue", o.subgrid_queue, "subgrids a streamer receives at once")
      ->capture_default_str()
      ->group(kQueues);
  app->add_option("--task-queue", o.task_queue, "degrid tasks outstanding per streamer")
      ->capture_default_str()
      ->group(kQueues);
  add_bls_per_task_option(app, o.bls_per_task);
  app->add_option("--visibility-queue", o.visibility_queue,
                  "chunks waiting for a streamer's writers (and as many parts of chunks held "
                  "until whole); default: 64 MiB of chunks, 16 to 1024 (1024 at 64 KiB)")
      ->group(kQueues);
  app->add_option("--transit-queue", o.transit_queue,
                  "with --writer-ranks: chunks in flight from each streamer and receives posted "
                  "on each writer rank")
      ->capture_default_str()
      ->group(kQueues);
  app->add_option("--writer-count", o.writer_count,
                  "writers per streamer (with --writer-ranks: per writer rank)")
      ->capture_default_str()
      ->group(kWriters);
  app->add_option("--writer-ranks", o.writer_ranks,
                  "in transit: this many ranks (after the streamers) write what the streamers "
                  "send them over MPI (0: in situ, the writers inside each streamer)")
      ->capture_default_str()
      ->group(kWriters);
  app->add_flag("--fork-writer", o.fork_writer,
                "writers are forked processes, not threads (HDF5 serialises threads)")
      ->group(kWriters);
}

// --device (cpu or cuda) of the commands that degrid or grid (run, degrid,
// grid) and of plan; the text is parsed by job::parse_device, where the
// command's other options are checked.
void add_device_option(CLI::App* app, std::string& device);

// --threads of the one-process commands (recombine, degrid, grid).
void add_process_threads_option(CLI::App* app, int& threads);

// --storage (where the command writes: `choose`) and every back-end's
// options, each under its back-end's name (--posix.direct) in its own
// --help group, as IOR does. Readers find the back-end from the files.
void add_storage_options(CLI::App* app, storage::StorageOptions& o, bool choose = true);

// --storage-stall-timeout (run, read): the bound on a storage call
// (docs/pipeline.md, "A stalled file system").
void add_storage_stall_option(CLI::App* app, double& seconds);

// --report, --csv and --config. `rank0`: the command runs under mpirun.
struct ReportOptions {
  std::string report;  // JSON report path ("-": stdout)
  std::string csv;     // CSV tables' prefix
};
void add_report_options(CLI::App* app, ReportOptions& o, bool rank0 = false);

// The example that ends a command's --help.
void set_example(CLI::App* app, const std::string& example);

// --config=FILE (TOML): any option of the command, `key = value` at the
// top level or under the command's [section]; the command line wins. Call
// on the main app after the commands are added, with the one being run.
// Unknown keys are errors: main sets allow_config_extras(error) before
// adding the commands, so they inherit it.
void enable_config(CLI::App& app, const std::string& command);
// --config given after the command's name moves in front of it, where the
// main app reads the file (CLI11 reads config files for the main app only).
void hoist_config(std::vector<std::string>& args);
// The options given to `from` that `to` takes too (the same names, one
// meaning), as shell words for `to`'s command line: the run a plan was
// made for. Report options and positional arguments are left out.
std::string shared_arguments(const CLI::App& from, const CLI::App& to);

// The command's every option as a --config file (TOML), defaults included,
// less where the report and tables go: the report's record of how to
// repeat the run.
std::string resolved_configuration(const CLI::App& command);

}  // namespace iotest::cli
