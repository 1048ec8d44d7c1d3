// The commands that run in one process: recombine, layout, degrid, grid,
// scale and verify. Each reports through run_in_process: a usage error is
// one line and kExitUsage, any other failure one line and kExitFailure.
#include <charconv>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "iotest/commands/degrid.hpp"
#include "iotest/commands/grid.hpp"
#include "iotest/commands/layout.hpp"
#include "iotest/commands/recombine.hpp"
#include "iotest/commands/scale.hpp"
#include "iotest/commands/verify.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/job/job.hpp"
#include "iotest/swiftly/direction.hpp"

namespace iotest::cli {

namespace {

// "all" or a positive count.
std::optional<index_t> parse_count_or_all(const std::string& option, const std::string& text) {
  if (text == "all") return std::nullopt;
  index_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw iotest::UsageError(option, "expected a count or 'all', got '" + text + "'");
  return value;
}

}  // namespace

Command add_recombine_command(CLI::App& app, ReportOptions& out) {
  struct State {
    iotest::commands::Options options;
    std::string direction = "both", subgrids = "all", check;
  };
  const auto state = std::make_shared<State>();
  State& s = *state;
  auto* recombine =
      app.add_subcommand("recombine",
                         "SwiFTly recombination of a whole set in one process, checked against the "
                         "direct Fourier transform");
  add_rec_set_option(recombine, s.options.rec_set);
  add_window_width_option(recombine, s.options.window_width);
  add_sky_options(recombine, s.options.source_count, s.options.seed);
  recombine->add_option("--direction", s.direction, "predict, image or both")
      ->capture_default_str()
      ->group(kMode);
  recombine
      ->add_option("--subgrids", s.subgrids,
                   "subgrids to process (nearest the grid centre first) or 'all'")
      ->capture_default_str()
      ->group(kMode);
  recombine
      ->add_option("--check", s.check,
                   "subgrids to check against the direct transform, or 'all' (default: up "
                   "to 64, spread over the walk)")
      ->group(kChecks);
  add_process_threads_option(recombine, s.options.threads);
  add_report_options(recombine, out);
  set_example(recombine, "  iotest recombine --rec-set=small --check=16 --report=small.json");
  const auto execute = [state, &out] {
    return run_in_process(out, [&] {
      auto& rec_opts = state->options;
      rec_opts.direction = iotest::swiftly::parse_direction(state->direction);
      rec_opts.subgrids = parse_count_or_all("--subgrids", state->subgrids);
      if (rec_opts.subgrids && *rec_opts.subgrids == 0)
        throw iotest::UsageError("--subgrids", "expected at least 1 subgrid or 'all'");
      if (!state->check.empty()) {
        rec_opts.check = parse_count_or_all("--check", state->check);
        rec_opts.check_all = !rec_opts.check;
      }
      emit(iotest::commands::run(rec_opts), out);
      return iotest::kExitOk;
    });
  };
  return {recombine, execute, {}};
}

Command add_layout_command(CLI::App& app, ReportOptions& out) {
  const auto layout_opts = std::make_shared<iotest::commands::LayoutOptions>();
  auto* layout = app.add_subcommand(
      "layout", "a visibility set's antennas and the (u, v, w) of a few baselines");
  add_observation_options(layout, layout_opts->observation, kVisSets, false)->required();
  layout->add_option("--baselines", layout_opts->baselines, "baselines whose (u, v, w) to show")
      ->capture_default_str();
  add_report_options(layout, out);
  set_example(layout, "  iotest layout --vis-set=lowbd2 --dec=-45 --baselines=5");
  const auto execute = [layout_opts, &out] {
    return run_in_process(out, [&] {
      emit(iotest::commands::layout(*layout_opts), out);
      return iotest::kExitOk;
    });
  };
  return {layout, execute, {}};
}

Command add_degrid_command(CLI::App& app, ReportOptions& out) {
  struct State {
    iotest::commands::DegridRunOptions options;
    std::string device = "cpu";
  };
  const auto state = std::make_shared<State>();
  State& s = *state;
  auto* degrid = app.add_subcommand(
      "degrid",
      "the whole predict chain in one process (facets, subgrids, w-towers, "
      "degridding) without writing, checked against the direct Fourier transform");
  add_rec_set_option(degrid, s.options.rec_set);
  add_observation_options(degrid, s.options.observation, kVisSets, false)->required();
  add_sky_options(degrid, s.options.source_count, s.options.seed);
  add_kernel_options(degrid, s.options.kernel, s.options.margin, &s.options.target_err);
  degrid
      ->add_option("--vis-samples", s.options.vis_samples,
                   "visibilities checked against the direct transform")
      ->capture_default_str()
      ->group(kChecks);
  add_bls_per_task_option(degrid, s.options.bls_per_task);
  add_process_threads_option(degrid, s.options.threads);
  add_device_option(degrid, s.device);
  add_report_options(degrid, out);
  degrid->add_option("output", s.options.output,
                     "file to write the visibilities to (omit: a dry run)");
  add_storage_options(degrid, s.options.storage);
  set_example(degrid,
              "  iotest degrid --rec-set=T05_ --vis-set=vlaa --time=-230:230/64/16 "
              "--vis-samples=1000");
  const auto execute = [state, &out] {
    return run_in_process(out, [&] {
      auto& degrid_opts = state->options;
      degrid_opts.device = iotest::job::parse_device(state->device);
      emit(iotest::commands::degrid(degrid_opts), out, degrid_opts.output);
      return iotest::kExitOk;
    });
  };
  return {degrid, execute, {}};
}

Command add_grid_command(CLI::App& app, ReportOptions& out) {
  struct State {
    iotest::commands::GridRunOptions options;
    std::string device = "cpu";
    double storage_stall_timeout_s = 120;  // as run's and read's
  };
  const auto state = std::make_shared<State>();
  State& s = *state;
  auto* grid = app.add_subcommand(
      "grid",
      "the imaging direction in one process (gridding onto w-towers, subgrids, facets): "
      "a predict run's files, or the sky predicted in memory, into the dirty image, checked "
      "against the direct adjoint transform");
  grid->add_option("files", s.options.inputs,
                   "a predict run's visibility files (omit: the sky's visibilities, predicted "
                   "in memory; the files give the rec-set, observation and sky)");
  add_rec_set_option(grid, s.options.rec_set, "without files: T05_");
  add_observation_options(grid, s.options.observation,
                          std::string(kVisSets) + " (default without files: vlaa)", false);
  add_sky_options(grid, s.options.source_count, s.options.seed);
  add_kernel_options(grid, s.options.kernel, s.options.margin, nullptr);
  grid->add_option("--pixel-samples", s.options.pixel_samples,
                   "dirty image pixels checked against the direct adjoint transform")
      ->capture_default_str()
      ->group(kChecks);
  add_bls_per_task_option(grid, s.options.bls_per_task);
  add_process_threads_option(grid, s.options.threads);
  add_device_option(grid, s.device);
  add_image_autocorrelations_option(grid, s.options.image_autocorrelations);
  grid->add_option("--image", s.options.image, kImageHelp)->group(kOutput);
  add_report_options(grid, out);
  add_storage_options(grid, s.options.storage, false);
  add_storage_stall_option(grid, s.storage_stall_timeout_s);
  set_example(grid,
              "  iotest grid --rec-set=T05_ --vis-set=vlaa --pixel-samples=64\n"
              "  iotest grid out/vis*.h5 --image=dirty.h5");
  const auto execute = [state, &out] {
    return run_in_process(
        out,
        [&] {
          auto& grid_opts = state->options;
          grid_opts.device = iotest::job::parse_device(state->device);
          emit(iotest::commands::grid(grid_opts), out);
          return iotest::kExitOk;
        },
        state->storage_stall_timeout_s);
  };
  return {grid, execute, {}};
}

Command add_scale_command(CLI::App& app, ReportOptions& out) {
  const auto scale_opts = std::make_shared<iotest::commands::ScaleOptions>();
  auto* scale = app.add_subcommand(
      "scale",
      "the scaling study: the same job at several rank counts (or run reports already made), "
      "the Universal Scalability Law fitted to every stage, and its plots");
  scale->add_option("reports", scale_opts->reports, "`iotest run` reports to fit (no runs)");
  scale->add_option("--ranks", scale_opts->ranks, "rank counts to run the job at, e.g. 2,3,4")
      ->delimiter(',');
  scale->add_option("--job", scale_opts->job,
                    "the job's `iotest run` options in one string, e.g. \"--rec-set=small "
                    "--vis-set=vlaa\"");
  scale->add_option("--launcher", scale_opts->launcher, "what starts a run (srun under Slurm)")
      ->capture_default_str();
  scale->add_option("--np-flag", scale_opts->np_flag, "the launcher's rank count flag (srun: -n)")
      ->capture_default_str();
  scale->add_option("--out", scale_opts->out, "folder for the runs, the fit and the plots")
      ->capture_default_str()
      ->group(kOutput);
  scale->add_option("--n", scale_opts->n_by, "what N counts: streamers, ranks or nodes")
      ->capture_default_str();
  scale->add_option("--python", scale_opts->python,
                    "the Python for tools/usl.py (default: the project's .venv, else python3)");
  add_report_options(scale, out);
  set_example(scale,
              "  iotest scale --ranks=2,3,4,5 --job=\"--rec-set=small --vis-set=vlaa\" "
              "--out=scale\n"
              "  iotest scale --launcher=srun --np-flag=-n --n=nodes --ranks=4,8,16,32 "
              "--job=\"...\"");
  const auto execute = [scale_opts, &out] {
    return run_in_process(out, [&] {
      emit(iotest::commands::scale(*scale_opts), out);
      return iotest::kExitOk;
    });
  };
  return {scale, execute, {}};
}

Command add_verify_command(CLI::App& app, ReportOptions& out) {
  struct State {
    iotest::commands::VerifyOptions options;
    double storage_stall_timeout_s = 120;  // as run's and read's
  };
  const auto state = std::make_shared<State>();
  auto* verify_opts = &state->options;
  auto* verify = app.add_subcommand(
      "verify", "re-read visibility files and check every chunk against the direct transform");
  verify->add_option("files", verify_opts->files, "files written by iotest (any back-end)")
      ->required();
  verify
      ->add_flag("--all", verify_opts->all,
                 "check every value, not samples (--synthetic-vis sets: exactly)")
      ->group(kChecks);
  verify
      ->add_option("--nonce", verify_opts->nonce,
                   "the run the files must come from (its report's config.nonce)")
      ->group(kChecks);
  verify
      ->add_option("--source-count", verify_opts->source_count,
                   "sources of the sky (default: the file's)")
      ->group(kSky);
  verify->add_option("--seed", verify_opts->seed, "seed of the sky (default: the file's)")
      ->check(kNonNegative)
      ->group(kSky);
  verify->add_option("--samples", verify_opts->samples, "visibilities checked over the files")
      ->capture_default_str()
      ->group(kChecks);
  verify->add_option("--tolerance", verify_opts->tolerance, "relative RMSE allowed")
      ->capture_default_str()
      ->group(kChecks);
  add_storage_stall_option(verify, state->storage_stall_timeout_s);
  add_report_options(verify, out);
  set_example(verify, "  iotest verify out/vis*.h5 --all --nonce=123456789");
  const auto execute = [state, &out] {
    return run_in_process(
        out,
        [&] {
          const auto report = iotest::commands::verify(state->options);
          emit(report, out, state->options.files.front());
          if (!report.verification->passed) return iotest::kExitFailure;
          return iotest::kExitOk;
        },
        state->storage_stall_timeout_s);
  };
  return {verify, execute, {}};
}

}  // namespace iotest::cli
