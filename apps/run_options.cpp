#include "run_options.hpp"

#include <fmt/format.h>

#include "cli_options.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/file_layout.hpp"
#include "iotest/job/job.hpp"
#include "iotest/swiftly/direction.hpp"

namespace iotest::cli {

namespace {

// What the run checks against the direct transforms.
void add_check_options(CLI::App* app, pipeline::RunOptions& o) {
  app->add_option("--check", o.check_subgrids, "subgrids checked against the direct transform")
      ->capture_default_str()
      ->group(kChecks);
  app->add_option("--vis-samples", o.vis_samples,
                  "visibilities checked against the direct transform")
      ->capture_default_str()
      ->group(kChecks);
  app->add_option("--pixel-samples", o.pixel_samples,
                  "--direction=image: dirty image pixels checked against the direct adjoint "
                  "transform")
      ->capture_default_str()
      ->group(kChecks);
}

// --file-layout's value, checked where it is given (plan --slurm too).
const CLI::Validator kFileLayout(
    [](std::string& value) {
      try {
        parse_layout_request(value);
        return std::string();
      } catch (const UsageError& e) {
        return std::string(e.what());
      }
    },
    "LAYOUT");

// The prediction's inputs (docs/sizing.md, "Predicting the run").
void add_prediction_options(CLI::App* app, RunCommand& run) {
  constexpr const char* kPrediction = "Prediction";
  app->add_option("--calibration", run.options.prediction.calibration,
                  "a one-node run's JSON report on the node type in question: predict this "
                  "run's stream time and what bounds it from its per-thread rates (the report "
                  "gives it beside what was measured)")
      ->group(kPrediction);
  app->add_option("--link-rate", run.link_rate,
                  "--calibration: what a node's link carries each way, bytes a second or with "
                  "a unit: 100Gbit, 12.5GB (needed on more than one node)")
      ->group(kPrediction);
  app->add_option("--storage-rate", run.storage_rate,
                  "--calibration: what the storage takes in all from every writer, as "
                  "--link-rate (default: no bound but each writer's calibrated rate)")
      ->group(kPrediction);
}

}  // namespace

void add_run_options(CLI::App* app, RunCommand& run, const std::string& paths_help) {
  auto& o = run.options;
  add_rec_set_option(app, o.rec_set);
  run.vis_set = add_observation_options(
      app, run.observation,
      std::string(kVisSets) + " (omit: recombination only, subgrids checked, nothing degridded)",
      true);
  add_sky_options(app, o.source_count, o.seed);
  add_kernel_options(app, o.kernel, o.margin, &o.target_err);
  add_check_options(app, o);
  app->add_option("--direction", run.direction,
                  "predict (write visibilities), image (read and grid them into the dirty "
                  "image) or both (the self-calibration major cycle)")
      ->capture_default_str()
      ->group(kMode);
  add_shape_options(app, o,
                    "a third of the ranks with --vis-set, else half, at most one per facet");
  add_device_option(app, run.device);
  app->add_flag("--network-only", o.network_only,
                "the network alone: the walk's contributions sent and received with the same "
                "slots, nothing computed (no facets, transforms, assembly or degridding)")
      ->group(kMode);
  app->add_option("--duration", o.duration,
                  "stonewall: start no new work after this many seconds, drain, report the "
                  "fraction done and the projected time of the whole observation")
      ->group(kMode);
  app->add_option("--repetitions", run.repetitions,
                  "run the job this many times in the same processes and report the min, median "
                  "and max of every rate (IOR's and fio's repetitions)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(kMode);
  app->add_option("--timeline", o.timeline_s,
                  "the report's time line: each rank's busy and wait time and rates per "
                  "interval of this many seconds (0: none; tools/timeline_plot.py draws it)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(kOutput);
  app->add_flag("--no-progress", run.no_progress, "no progress line on stderr")->group(kOutput);
  app->add_flag("--require-space", o.require_space,
                "exit 2 before any work when an output's file system has less free space than "
                "the writing rank will write there (default: a warning)")
      ->group("Storage");
  add_storage_stall_option(app, o.storage_stall_timeout_s);
  app->add_option("--file-layout", run.file_layout,
                  "CephFS: make each output with this layout (object_size=4M,stripe_unit=1M,"
                  "stripe_count=4,pool=NAME, any of them), as IOR sets Lustre stripes; "
                  "elsewhere a warning (Lustre: lfs setstripe on the output folder)")
      ->check(kFileLayout)
      ->group("Storage");
  add_image_autocorrelations_option(app, o.image_autocorrelations, "--direction=image or both: ");
  app->add_option("--image", o.image,
                  std::string("--direction=image or both: ") + kImageHelp +
                      "; rank 0 writes it after the walk, taking the facets a block at a time")
      ->group(kOutput);
  app->add_option("paths", run.paths,
                  !paths_help.empty()
                      ? paths_help
                      : "predict: OUT%d.h5, one file per writer, %d its number, %h the host's "
                        "name (omit: a dry run); image: a predict run's files to read (omit: the "
                        "streamers predict the visibilities of --vis-set themselves)");
  add_storage_options(app, o.storage);
  add_prediction_options(app, run);
}

void check_run_command(RunCommand& run) {
  auto& o = run.options;
  if (*run.vis_set) o.observation = run.observation;
  o.progress = !run.no_progress;
  o.direction = swiftly::parse_direction(run.direction);
  o.device = job::parse_device(run.device);
  if (!run.file_layout.empty()) o.file_layout = parse_layout_request(run.file_layout);
  auto& predicted = o.prediction;
  predicted.link_bytes_per_s =
      run.link_rate.empty() ? 0 : prediction::parse_rate(run.link_rate, "--link-rate");
  predicted.storage_bytes_per_s =
      run.storage_rate.empty() ? 0 : prediction::parse_rate(run.storage_rate, "--storage-rate");
  if (predicted.calibration.empty() &&
      (predicted.link_bytes_per_s > 0 || predicted.storage_bytes_per_s > 0))
    throw UsageError(run.link_rate.empty() ? "--storage-rate" : "--link-rate",
                     "applies to a prediction: expected a --calibration report too");
  o.output.clear();
  o.inputs.clear();
  if (o.direction == swiftly::Direction::predict) {
    if (run.paths.size() > 1)
      throw UsageError("OUTPUT", fmt::format("expected one output pattern (OUT%d.h5) for "
                                             "--direction=predict, got {} paths",
                                             run.paths.size()));
    if (!run.paths.empty()) o.output = run.paths.front();
  } else {
    o.inputs = run.paths;
  }
}

}  // namespace iotest::cli
