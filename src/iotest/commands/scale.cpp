#include "iotest/commands/scale.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "iotest/common/errors.hpp"

extern char** environ;

namespace iotest::commands {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Runs argv with stdout and stderr into `log`; returns the exit status
// (128 + signal when killed). `option`: what gave argv[0], for the error.
int run_to(const std::vector<std::string>& argv, const std::string& log, const char* option) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0)
    throw UsageError(option, fmt::format("cannot start '{}': {}", argv[0], std::strerror(err)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The first "error:" line of a log, for a one-line message.
std::string error_in(const std::string& log) {
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("error:") != std::string::npos) return line;
  return "see " + log;
}

double number(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

// tools/usl.py and the interpreter for it: the project's own (its venv)
// unless given.
std::string usl_tool() {
  if (const char* path = std::getenv("IOTEST_USL")) return path;
  const std::string sources = std::string(IOTEST_SOURCE_DIR) + "/tools/usl.py";
  return fs::exists(sources) ? sources : std::string(IOTEST_DATA_DIR) + "/tools/usl.py";
}
std::string default_python() {
  const std::string venv = std::string(IOTEST_SOURCE_DIR) + "/.venv/bin/python";
  return fs::exists(venv) ? venv : "python3";
}

// The options checked before any run: the runs to make or the reports to
// fit, the output folder made, the fit's tool found.
void check_scale_options(const ScaleOptions& o) {
  const bool running = !o.ranks.empty();
  if (running == !o.reports.empty())
    throw UsageError("--ranks", running ? "expected --ranks or run reports, not both"
                                        : "expected --ranks (with --job) to run, or run "
                                          "reports to fit");
  if (running && words(o.job).empty())
    throw UsageError("--job",
                     "expected the job's `iotest run` options, e.g. \"--rec-set=small "
                     "--vis-set=vlaa\"");
  if (o.n_by != "streamers" && o.n_by != "ranks" && o.n_by != "nodes")
    throw UsageError("--n", "expected streamers, ranks or nodes, got '" + o.n_by + "'");
  for (const int n : o.ranks)
    if (n < 1) throw UsageError("--ranks", fmt::format("expected rank counts >= 1, got {}", n));
  const auto count =
      running ? std::set<int>(o.ranks.begin(), o.ranks.end()).size() : o.reports.size();
  if (count < 3)
    throw UsageError(running ? "--ranks" : "REPORT",
                     "expected 3 or more runs: the law has three parameters");
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out))
    throw UsageError("--out", fmt::format("cannot create the folder '{}': {}", o.out,
                                          ec ? ec.message() : "not a folder"));
  if (!fs::exists(usl_tool()))
    throw UsageError("--python", fmt::format("the fit's tool {} is not there (set IOTEST_USL "
                                             "to tools/usl.py of the iotest sources)",
                                             usl_tool()));
}

// The job at each rank count, one run after the other, each with its
// report and its output in the folder; the reports' paths.
std::vector<std::string> run_at_ranks(const ScaleOptions& o) {
  std::vector<std::string> reports;
  const std::string self = o.self.empty() ? fs::read_symlink("/proc/self/exe").string() : o.self;
  for (const int n : o.ranks) {
    auto argv = words(o.launcher);
    if (argv.empty()) throw UsageError("--launcher", "expected a launcher, e.g. mpirun");
    const std::string report = fmt::format("{}/report-{}.json", o.out, n);
    const std::string log = fmt::format("{}/run-{}.txt", o.out, n);
    for (const auto& w : std::vector<std::string>{o.np_flag, std::to_string(n), self, "run"})
      argv.push_back(w);
    for (const auto& w : words(o.job)) argv.push_back(w);
    argv.push_back("--no-progress");
    argv.push_back("--report=" + report);
    const int status = run_to(argv, log, "--launcher");
    if (status == kExitUsage)
      throw UsageError("--job", fmt::format("refused at {} ranks: {}", n, error_in(log)));
    if (status != 0)
      throw std::runtime_error(
          fmt::format("the run at {} ranks failed (exit {}): {}", n, status, error_in(log)));
    reports.push_back(report);
  }
  return reports;
}

// A run's report as a point of the study: its N (what --n counts) and
// its stages' rates.
report::Scaling::Point scaling_point(const std::string& path, const std::string& n_by) {
  const json j = report::read_json(path, "REPORT");
  if (j.value("mode", "") != "run" || !j.contains("pipeline"))
    throw UsageError(path, "is not an `iotest run` report");
  const auto& pl = j["pipeline"];
  report::Scaling::Point pt;
  pt.report = path;
  pt.ranks = pl.value("ranks", 0);
  pt.streamers = pl.value("streamers", 0);
  std::set<std::string> hosts;
  for (const auto& k : pl["per_rank"]) hosts.insert(k.value("host", ""));
  pt.n = n_by == "ranks"   ? pt.ranks
         : n_by == "nodes" ? static_cast<int>(hosts.size())
                           : pt.streamers;
  pt.stream_s = number(j["timing"], "stream_s");
  pt.vis_per_s = number(j["rates"], "vis_per_s");
  pt.net_bytes_per_s = number(j["rates"], "net_bytes_per_s");
  // A dry run's null back-end only counts: no write rate.
  const bool writes = !j["config"].value("output", std::string()).empty();
  pt.write_bytes_per_s = writes ? number(j["rates"], "write_bytes_per_s") : 0;
  return pt;
}

report::Scaling::Fit usl_fit_of(const json& f) {
  report::Scaling::Fit fit;
  fit.stage = f.value("stage", "");
  fit.unit = f.value("unit", "");
  fit.gamma = number(f, "gamma");
  fit.alpha = number(f, "alpha");
  fit.beta = number(f, "beta");
  fit.gamma_ci = number(f, "gamma_ci");
  fit.alpha_ci = number(f, "alpha_ci");
  fit.beta_ci = number(f, "beta_ci");
  fit.peak_n =
      f.contains("peak_n") && f["peak_n"].is_number() ? f["peak_n"].get<double>() : INFINITY;
  fit.efficiency = f["efficiency"].empty() ? std::nan("") : f["efficiency"].back().get<double>();
  fit.sublinear = f.value("sublinear", false);
  fit.negative = f.value("negative", false);
  return fit;
}

// The fit and the plots: the Python tool, as its own process. The fits,
// and the plots it drew, in name order.
void fit_usl(const ScaleOptions& o, const std::vector<std::string>& reports, report::Scaling& sc) {
  const std::string python = o.python.empty() ? default_python() : o.python;
  std::vector<std::string> argv{python, usl_tool()};
  for (const auto& path : reports) argv.push_back(path);
  const std::string fits = o.out + "/fits.json", plots = o.out + "/plots";
  for (const auto& w : {"--n=" + o.n_by, "--plots=" + plots, "--json=" + fits}) argv.push_back(w);
  const std::string log = o.out + "/fit.txt";
  const int status = run_to(argv, log, "--python");
  if (status == kExitUsage) throw UsageError("REPORT", error_in(log));
  if (status != 0)
    throw std::runtime_error(fmt::format("the fit failed (exit {}): {}", status, error_in(log)));
  for (const auto& f : report::read_json(fits, "--python")) sc.fits.push_back(usl_fit_of(f));
  for (const auto& entry : fs::directory_iterator(plots))
    if (entry.path().extension() == ".png") sc.plots.push_back(entry.path().string());
  std::sort(sc.plots.begin(), sc.plots.end());
}

}  // namespace

report::Report scale(const ScaleOptions& o) {
  check_scale_options(o);
  const auto reports = o.ranks.empty() ? o.reports : run_at_ranks(o);
  report::Report r;
  r.mode = "scale";
  report::Scaling sc;
  sc.n_by = o.n_by;
  for (const auto& path : reports) sc.points.push_back(scaling_point(path, o.n_by));
  std::sort(sc.points.begin(), sc.points.end(),
            [](const auto& a, const auto& b) { return a.n < b.n; });
  fit_usl(o, reports, sc);
  r.scaling = sc;
  return r;
}

}  // namespace iotest::commands
