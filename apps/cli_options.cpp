#include "cli_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "iotest/job/job_script.hpp"

namespace iotest::cli {

const CLI::Validator kNonNegative(
    [](std::string& value) {
      return !value.empty() && value[0] == '-' ? "expected a non-negative integer, got " + value
                                               : std::string();
    },
    "NONNEGATIVE");

void add_rec_set_option(CLI::App* app, std::string& rec_set, const std::string& default_text) {
  auto* option = app->add_option(
      "--rec-set", rec_set,
      "recombination set: image-facet-subgrid (k = 1024, e.g. 16k-8k-512) or T05_ tiny small "
      "smallish medium large tremendous huge" +
          (default_text.empty() ? std::string() : " (default " + default_text + ")"));
  option->group(kJob);
  if (default_text.empty()) option->required();
}

void add_window_width_option(CLI::App* app, std::optional<double>& window_width) {
  app->add_option("--window-width", window_width,
                  "override the set's PSWF width W (accuracy against usable subgrid size)")
      ->group(kJob);
}

CLI::Option* add_observation_options(CLI::App* app, telescope::ObservationOptions& o,
                                     const std::string& vis_set_help, bool needs_vis_set) {
  auto* vis_set = app->add_option("--vis-set", o.vis_set, vis_set_help)->group(kObservation);
  const auto add = [&](const char* name, auto& value, const char* help) {
    auto* option = app->add_option(name, value, help)->group(kObservation);
    if (needs_vis_set) option->needs(vis_set);
  };
  add("--time", o.time, "hour angles START:END/STEPS[/CHUNK] in seconds (default: the vis-set's)");
  add("--freq", o.freq, "frequencies START:END/STEPS[/CHUNK] in Hz (default: the vis-set's)");
  add("--dec", o.dec_deg, "phase centre declination in degrees (default: the vis-set's)");
  return vis_set;
}

void add_kernel_options(CLI::App* app, degrid::DegridOptions& kernel,
                        std::optional<index_t>& margin, std::optional<double>* target_err) {
  app->add_option("--support", kernel.support, "u, v kernel width (cells, even)")
      ->capture_default_str()
      ->group(kKernel);
  app->add_option("--w-support", kernel.w_support, "w kernel width (planes, even)")
      ->capture_default_str()
      ->group(kKernel);
  app->add_option("--margin", margin,
                  "subgrid cells kept outside the tiles (default: from kernel and w-tower)")
      ->group(kKernel);
  app->add_option("--wstep", kernel.w_step,
                  "w-tower planes between w-stacking planes (default: from the margin)")
      ->group(kKernel);
  if (!target_err) return;
  app->add_option("--target-err", *target_err,
                  "measure the w-tower height at which the error reaches this (0: twice the "
                  "error at w = 0) instead of bounding it")
      ->group(kKernel);
}

void add_bls_per_task_option(CLI::App* app, index_t& bls_per_task) {
  app->add_option("--bls-per-task", bls_per_task, "baselines' time chunks per degrid task")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str()
      ->group(kQueues);
}

void add_device_option(CLI::App* app, std::string& device) {
  app->add_option("--device", device,
                  "where degridding and gridding run: cpu, or cuda (needs a build with the CUDA "
                  "path and a GPU; a node's streamers share its GPUs round-robin)")
      ->capture_default_str()
      ->group(kMode);
}

void add_process_threads_option(CLI::App* app, int& threads) {
  app->add_option("--threads", threads, "OpenMP threads (default: all cores)")
      ->check(CLI::Range(1, 4096))
      ->group(kRoles);
}

void add_storage_options(CLI::App* app, storage::StorageOptions& o, bool choose) {
  if (choose)
    app->add_option("--storage", o.storage,
                    "storage back-end: " + storage::backend_names() +
                        " (default: from the output: " + storage::default_backends_text() + ")")
        ->group("Storage");
  for (const auto& b : storage::backends())
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

// A bound in seconds: a number, 0 or more (CLI11's own range check prints
// its range up to DBL_MAX; its conversion error does not say what was
// expected).
const CLI::Validator kSeconds(
    [](std::string& value) {
      char* end = nullptr;
      const double s = std::strtod(value.c_str(), &end);
      return value.empty() || *end != '\0' || !std::isfinite(s) || s < 0
                 ? "expected a number of seconds, 0 or more, got '" + value + "'"
                 : std::string();
    },
    "SECONDS");

void add_storage_stall_option(CLI::App* app, double& seconds) {
  app->add_option("--storage-stall-timeout", seconds,
                  "end the job when a storage call (open, read, write, sync, close) makes no "
                  "progress for this many seconds: a shared file system that stopped answering "
                  "(0: wait for ever)")
      ->check(kSeconds)
      ->capture_default_str()
      ->group("Storage");
}

void add_image_autocorrelations_option(CLI::App* app, bool& flag, const std::string& when) {
  app->add_flag("--image-autocorrelations", flag,
                when +
                    "grid the autocorrelations (rows whose two antennas are the same) into the "
                    "dirty image too; by default they are left out, as WSClean and CASA leave "
                    "them")
      ->group(kMode);
}

void add_report_options(CLI::App* app, ReportOptions& o, bool rank0) {
  app->add_option("--report", o.report,
                  std::string("write the JSON report to this file ('-': stdout)") +
                      (rank0 ? " (rank 0)" : ""))
      ->group(kOutput);
  app->add_option("--csv", o.csv,
                  "write the report's tables as PREFIX.<table>.csv (ranks, timeline, summary, "
                  "...)")
      ->type_name("PREFIX")
      ->group(kOutput);
  // Shown here; read by the main app (hoist_config), so never set itself.
  app->add_option("--config",
                  "read options from this TOML file (`key = value`, the option "
                  "names without --; the command line wins; a report's "
                  "environment.configuration repeats its run)")
      ->type_name("FILE")
      ->configurable(false)
      ->group(kOutput);
}

void set_example(CLI::App* app, const std::string& example) {
  app->footer("Example:\n" + example);
}

namespace {

// CLI11's TOML reader, with the keys given to the command being run: the
// top-level ones and its own [section]'s; other commands' sections are left
// alone, so one file can hold several commands' settings. A back-end's
// option is a dotted key (posix.direct = true) or a [posix] table.
class CommandConfig : public CLI::ConfigTOML {
 public:
  CommandConfig(std::string command, std::vector<std::string> commands)
      : command_(std::move(command)), commands_(std::move(commands)) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> mine;
    for (auto& item : CLI::ConfigTOML::from_config(input)) {
      if (item.name == "++" || item.name == "--") continue;  // a section's start and end
      auto parents = item.parents;
      if (!parents.empty() && parents.front() == command_) {
        parents.erase(parents.begin());
      } else if (!parents.empty() && std::find(commands_.begin(), commands_.end(),
                                               parents.front()) != commands_.end()) {
        continue;  // another command's
      }
      for (auto p = parents.rbegin(); p != parents.rend(); ++p) item.name = *p + "." + item.name;
      item.parents = {command_};
      mine.push_back(std::move(item));
    }
    return mine;
  }

 private:
  std::string command_;
  std::vector<std::string> commands_;
};

// A value as TOML: numbers and booleans bare, anything else a string
// (JSON's escapes are TOML's).
std::string toml_value(const std::string& v) {
  static const std::regex number(R"(^[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)$)");
  if (v == "true" || v == "false" || std::regex_match(v, number)) return v;
  return nlohmann::json(v).dump();
}

// An option of the job itself: not help, nor where its report and
// tables go, nor the file its options came from.
bool is_job_option(const CLI::Option* opt) {
  const std::string key = opt->get_single_name();
  return !key.empty() && key != "help" && key != "report" && key != "csv" && key != "config";
}

}  // namespace

void enable_config(CLI::App& app, const std::string& command) {
  std::vector<std::string> commands;
  for (const auto* c : app.get_subcommands({})) commands.push_back(c->get_name());
  app.config_formatter(std::make_shared<CommandConfig>(command, commands));
  app.set_config("--config", "", "read options from this TOML file")->group("");
}

void hoist_config(std::vector<std::string>& args) {
  for (size_t i = 2; i < args.size(); ++i) {
    const bool joined = args[i].rfind("--config=", 0) == 0;
    if (!joined && args[i] != "--config") continue;
    const size_t n = joined || i + 1 == args.size() ? 1 : 2;
    std::vector<std::string> moved(args.begin() + static_cast<std::ptrdiff_t>(i),
                                   args.begin() + static_cast<std::ptrdiff_t>(i + n));
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
               args.begin() + static_cast<std::ptrdiff_t>(i + n));
    args.insert(args.begin() + 1, moved.begin(), moved.end());
    return;
  }
}

std::string shared_arguments(const CLI::App& from, const CLI::App& to) {
  std::string words;
  for (const CLI::Option* opt : from.get_options()) {
    if (opt->count() == 0 || !is_job_option(opt) || opt->get_positional()) continue;
    const std::string key = opt->get_single_name();
    if (to.get_option_no_throw("--" + key) == nullptr) continue;
    for (const auto& v : opt->results()) {
      // A flag as given: bare, or with its value (--synthetic-vis=sequential).
      const bool bare = opt->get_expected_min() == 0 && (v.empty() || v == "true" || v == "1");
      words += " " + job::shell_quote(bare ? "--" + key : "--" + key + "=" + v);
    }
  }
  return words.empty() ? words : words.substr(1);
}

std::string resolved_configuration(const CLI::App& command) {
  std::string out = fmt::format(
      "# iotest {0}: every option of this run; repeat it with\n"
      "#   iotest {0} --config=THIS_FILE\n",
      command.get_name());
  for (const CLI::Option* opt : command.get_options()) {
    if (!opt->get_configurable() || !is_job_option(opt)) continue;
    const std::string key = opt->get_single_name();
    const bool flag = opt->get_expected_min() == 0;
    std::vector<std::string> values;
    if (flag) {
      if (opt->count() == 0) continue;
      values = {"true"};
    } else if (opt->count() > 0) {
      values = opt->results();
    } else if (!opt->get_default_str().empty()) {
      values = {opt->get_default_str()};
    } else {
      continue;  // not given, no default: the command decides
    }
    std::string text;
    if (values.size() == 1 && opt->get_items_expected_max() <= 1) {
      text = toml_value(values.front());
    } else {
      for (const auto& v : values) text += (text.empty() ? "" : ", ") + toml_value(v);
      text = "[" + text + "]";
    }
    out += key + " = " + text + "\n";
  }
  return out;
}

}  // namespace iotest::cli
