#include "iotest/job/job_script.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/job/mpi_library.hpp"

namespace iotest::job {

void check_job_script_options(const JobScriptOptions& o) {
  if (o.launcher != "srun" && o.launcher != "mpirun")
    throw UsageError("--launcher", "expected srun or mpirun, got '" + o.launcher + "'");
  if (!o.time_limit.empty()) time_limit_seconds(o.time_limit);  // empty: from the prediction
}

double time_limit_seconds(const std::string& limit) {
  const auto refuse = [&] {
    return UsageError("--time-limit",
                      "expected Slurm's time format (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                      "D-HH:MM:SS) of at least a minute, got '" +
                          limit + "'");
  };
  if (limit.empty() || limit.find_first_not_of("0123456789:-") != std::string::npos ||
      limit.size() > 16)
    throw refuse();
  double days = 0;
  std::string rest = limit;
  const auto dash = limit.find('-');
  if (dash != std::string::npos) {
    if (dash == 0 || limit.find('-', dash + 1) != std::string::npos) throw refuse();
    days = std::stod(limit.substr(0, dash));
    rest = limit.substr(dash + 1);
  }
  std::vector<double> fields;
  for (size_t from = 0;;) {
    const auto colon = rest.find(':', from);
    const auto field = rest.substr(from, colon == std::string::npos ? colon : colon - from);
    if (field.empty()) throw refuse();
    fields.push_back(std::stod(field));
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  double seconds = 0;
  if (dash != std::string::npos) {  // D-HH[:MM[:SS]]
    if (fields.size() > 3) throw refuse();
    const double unit[] = {3600, 60, 1};
    for (size_t i = 0; i < fields.size(); ++i) seconds += fields[i] * unit[i];
    seconds += days * 86400;
  } else if (fields.size() == 1) {  // minutes
    seconds = fields[0] * 60;
  } else if (fields.size() == 2) {  // MM:SS
    seconds = fields[0] * 60 + fields[1];
  } else if (fields.size() == 3) {  // HH:MM:SS
    seconds = fields[0] * 3600 + fields[1] * 60 + fields[2];
  } else {
    throw refuse();
  }
  if (seconds < 60) throw refuse();
  return seconds;
}

namespace {

StreamBudget budget_of(double limit_s) {
  StreamBudget b;
  b.limit_s = limit_s;
  b.setup_s = std::clamp(0.10 * b.limit_s, 10.0, 600.0);
  b.drain_s = std::clamp(0.10 * b.limit_s, 10.0, 600.0);
  b.margin_s = std::clamp(0.05 * b.limit_s, 5.0, 300.0);
  b.duration_s = std::floor(b.limit_s - b.setup_s - b.drain_s - b.margin_s);
  return b;
}

}  // namespace

StreamBudget stream_budget(const std::string& time_limit) {
  const auto b = budget_of(time_limit_seconds(time_limit));
  if (b.duration_s < 10)
    throw UsageError("--time-limit", fmt::format("{} leaves {:.0f} s to stream after setup, "
                                                 "drain and margin; expected at least 10 s",
                                                 time_limit, b.duration_s));
  return b;
}

StreamBudget stream_budget(const std::string& time_limit, int repetitions) {
  if (repetitions <= 1) return stream_budget(time_limit);
  const auto b = budget_of(time_limit_seconds(time_limit) / repetitions);
  if (b.duration_s < 10)
    throw UsageError("--repetitions",
                     fmt::format("{} runs in --time-limit={} leave each {:.0f} s to stream after "
                                 "setup, drain and margin; expected at least 10 s",
                                 repetitions, time_limit, b.duration_s));
  return b;
}

std::string time_limit_for(double stream_s, int repetitions, double margin) {
  const double wanted = std::max(10.0, margin * stream_s);
  const int runs = std::max(1, repetitions);
  // The budget grows with the limit: the smallest whole minute that holds
  // it, found by doubling, then halving the step.
  index_t high = 1;
  while (budget_of(60.0 * static_cast<double>(high) / runs).duration_s < wanted) high *= 2;
  index_t low = high / 2;  // too short, or 0
  while (high - low > 1) {
    const index_t mid = (low + high) / 2;
    (budget_of(60.0 * static_cast<double>(mid) / runs).duration_s < wanted ? low : high) = mid;
  }
  const index_t days = high / 1440, hours = high / 60 % 24, minutes = high % 60;
  return days > 0 ? fmt::format("{}-{:02}:{:02}:00", days, hours, minutes)
                  : fmt::format("{:02}:{:02}:00", hours, minutes);
}

std::string shell_quote(const std::string& word) {
  const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_=./:,+%@").find(c) != std::string_view::npos;
  });
  if (safe) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string mpiexec_path() {
  return IOTEST_MPIEXEC;
}

std::string local_launcher() {
  if (built_with_mpi() == MpiLibrary::open_mpi) return "mpirun --allow-run-as-root --oversubscribe";
  return mpiexec_path();
}

std::string slurm_script(const report::Advice& a, const JobScriptOptions& o) {
  const index_t tasks = a.nodes * a.ranks_per_node;
  const int cpus = std::max<int>(1, o.cores_per_node / static_cast<int>(a.ranks_per_node));
  // Threads beyond the task's cores are what --overcommit is for; ranks
  // beyond a node's cores too.
  const int threads = std::max(a.threads, a.producer_threads);
  const bool overcommitted = a.ranks_per_node > o.cores_per_node;
  std::string s = "#!/bin/bash\n";
  s += fmt::format(
      "# iotest: {} node(s) x {} rank(s): {} producer(s), {} streamer(s){}{}; {} thread(s) per "
      "streamer, {} per producer.\n",
      a.nodes, a.ranks_per_node, a.producers, a.streamers,
      a.writer_ranks > 0 ? fmt::format(", {} writer rank(s)", a.writer_ranks) : "",
      a.assigner ? ", the assigner" : "", a.threads, a.producer_threads);
  s += "# Made by `iotest plan --slurm` (its report holds the memory per node).\n";
  s += fmt::format("#SBATCH --job-name={}\n", o.job_name);
  s += fmt::format("#SBATCH --nodes={}\n", a.nodes);
  if (overcommitted) {
    s += fmt::format(
        "# {0} ranks per node on {1} cores: Slurm refuses --ntasks-per-node={0} with\n"
        "# --exclusive (\"Requested node configuration is not available\"), but takes\n"
        "# --ntasks with --overcommit; the launch below places {0} ranks on each node.\n",
        a.ranks_per_node, o.cores_per_node);
    s += fmt::format("#SBATCH --ntasks={}\n", tasks);
  } else {
    s += fmt::format("#SBATCH --ntasks-per-node={}\n", a.ranks_per_node);
  }
  s += fmt::format("#SBATCH --cpus-per-task={}\n", cpus);
  // --device=cuda: the node's GPUs, which its streamers share round-robin.
  if (a.gpus_per_node > 0) s += fmt::format("#SBATCH --gpus-per-node={}\n", a.gpus_per_node);
  s += "#SBATCH --overcommit\n";
  s += "#SBATCH --exclusive\n";
  s += fmt::format("#SBATCH --time={}\n", o.time_limit);
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", o.partition);
  if (!o.account.empty()) s += fmt::format("#SBATCH --account={}\n", o.account);
  s += "#SBATCH --output=iotest-%j.out\n\n";
  s += "set -euo pipefail\n\n";
  s += "# Threads stay on their task's cores and sleep while they wait: on shared\n"
       "# cores a spinning wait takes the time of the rank it waits for.\n";
  s += fmt::format("export OMP_NUM_THREADS={}\n", threads);
  s += "export OMP_PLACES=cores OMP_PROC_BIND=close OMP_WAIT_POLICY=PASSIVE\n";
  const bool open_mpi = built_with_mpi() == MpiLibrary::open_mpi;
  if (open_mpi) {
    s += "# Open MPI: waiting ranks yield their core. In a container without ptrace\n"
         "# rights also: export OMPI_MCA_btl_vader_single_copy_mechanism=none\n";
    s += "export OMPI_MCA_mpi_yield_when_idle=1\n\n";
  } else {
    s += "# MPICH (or an MPI of its ABI): srun starts the ranks through Slurm's PMI-2.\n\n";
  }
  // The plan's producers and threads unless the run's options say: run's
  // own defaults differ (a third of the ranks are producers), and the job
  // is the plan's layout.
  std::string arguments = o.run_arguments;
  const auto has = [&](const char* option) {
    return (" " + arguments).find(std::string(" ") + option + "=") != std::string::npos;
  };
  if (a.producers > 0 && !has("--facet-workers"))
    arguments += fmt::format(" --facet-workers={}", a.producers);
  if (!has("--threads")) arguments += fmt::format(" --threads={}", a.threads);
  if (a.producers > 0 && !has("--producer-threads"))
    arguments += fmt::format(" --producer-threads={}", a.producer_threads);
  if (o.stonewall && !has("--duration")) {
    const auto b = stream_budget(o.time_limit, o.repetitions);
    if (o.repetitions > 1)
      s += fmt::format(
          "# --repetitions={0}: the {1:.0f} s time limit is shared by {0} runs, {2:.0f} s each.\n",
          o.repetitions, time_limit_seconds(o.time_limit), b.limit_s);
    s += fmt::format(
        "# The run stops taking new work after --duration={:.0f} s (stonewalling) and ends\n"
        "# by itself, its files whole, before Slurm's SIGTERM at the time limit: {:.0f} s\n"
        "# less {:.0f} s of setup, {:.0f} s of drain and a margin of {:.0f} s. Its report\n"
        "# projects the whole observation's time. Without it, a run the limit ends\n"
        "# leaves only .partial files.\n\n",
        b.duration_s, b.limit_s, b.setup_s, b.drain_s, b.margin_s);
    arguments += fmt::format(" --duration={:.0f}", b.duration_s);
  } else if (!o.stonewall) {
    s += "# No --duration: the run takes none with its options (no walk to stonewall);\n"
         "# it must end within the time limit, or leave only .partial files.\n\n";
  }
  std::string words = " ";  // the arguments as whole words
  words += arguments;
  words += " ";
  if (words.find(" --no-progress ") == std::string::npos) arguments += " --no-progress";
  std::string paths;
  for (const auto& path : o.paths) paths.append(" ").append(shell_quote(path));
  const std::string run = fmt::format("{} run {} --report=iotest-${{SLURM_JOB_ID}}.json{}",
                                      o.iotest, arguments, paths);
  if (o.launcher == "srun") {
    s += "# A rank that dies ends the step (--kill-on-bad-exit): its peers would wait\n"
         "# for it in MPI until the time limit.\n";
    s += fmt::format(
        "srun{} --ntasks={} --ntasks-per-node={} --cpus-per-task={}{} --kill-on-bad-exit=1 "
        "--cpu-bind=verbose,cores \\\n"
        "     --distribution=block:block \\\n     {}\n",
        open_mpi ? "" : " --mpi=pmi2", tasks, a.ranks_per_node, cpus,
        overcommitted ? " --overcommit" : "", run);
  } else if (!open_mpi) {  // Hydra's mpiexec: it starts its proxies through Slurm
    s += fmt::format("{} -n {} -ppn {} -bind-to {} \\\n     {}\n", mpiexec_path(), tasks,
                     a.ranks_per_node,
                     a.ranks_per_node * cpus <= o.cores_per_node ? fmt::format("core:{}", cpus)
                                                                 : std::string("none"),
                     run);
  } else {
    const bool fits = a.ranks_per_node * cpus <= o.cores_per_node;
    s += fmt::format(
        "mpirun -np {} --map-by ppr:{}:node{} --bind-to {} --report-bindings \\\n"
        "     {}\n",
        tasks, a.ranks_per_node, fits ? fmt::format(":PE={}", cpus) : "", fits ? "core" : "none",
        run);
  }
  return s;
}

}  // namespace iotest::job
