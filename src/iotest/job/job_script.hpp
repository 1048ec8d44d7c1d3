// `iotest plan --slurm`: the Slurm batch script for a planned layout. The
// defaults carry the lessons of the 2019 code's runs on JUWELS: an explicit
// CPU binding (sites' defaults differ), --overcommit (producers and
// streamers share a node's cores: a producer's threads mostly wait on its
// send queue), sleeping waits, and srun given --cpus-per-task itself (since
// Slurm 22.05 it no longer inherits sbatch's).
#pragma once

#include <string>
#include <vector>

#include "iotest/report/report.hpp"

namespace iotest::job {

struct JobScriptOptions {
  std::string launcher = "srun";  // srun, or mpirun: the MPI's own launcher inside the allocation
                                  // (Open MPI's mpirun, MPICH's mpiexec)
  std::string time_limit = "01:00:00";  // empty: plan's, from its prediction (--calibration)
  std::string partition, account;  // empty: the site's defaults
  std::string job_name = "iotest";
  int cores_per_node = 0;         // what a node's ranks share (--cpus-per-task)
  std::string run_arguments;      // `iotest run`'s options, shell-quoted
  // Its positional paths: the output pattern (none: a dry run), or with
  // --direction=image the files it reads.
  std::vector<std::string> paths;
  std::string iotest = "iotest";  // the binary, as the nodes find it
  // Whether the run takes a --duration (stonewalling): not with
  // --direction=image or both, --network-only or --synthetic-vis=sequential,
  // which it refuses.
  bool stonewall = true;
  int repetitions = 1;  // --repetitions: the time limit is shared by them all
};

// Throws UsageError for a launcher other than srun or mpirun, or a time
// limit Slurm would not take.
void check_job_script_options(const JobScriptOptions& o);

// Slurm's time formats (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
// D-HH:MM:SS) in seconds; throws UsageError naming --time-limit.
double time_limit_seconds(const std::string& limit);

// The stream time a job of this limit is given (`iotest run --duration`),
// so that it ends by itself, its files whole, before Slurm's SIGTERM: the
// limit less the setup, the drain (writers emptied, files closed, synced
// and published, the report) and a margin, each a share of the limit
// within bounds (setup and drain 10 %, 10 s to 10 min; margin 5 %, 5 s to
// 5 min). Throws UsageError when nothing is left to stream.
struct StreamBudget {
  double limit_s = 0, setup_s = 0, drain_s = 0, margin_s = 0, duration_s = 0;
};
StreamBudget stream_budget(const std::string& time_limit);
// As above for each of `repetitions` runs in one limit: each is given an
// equal share of the limit (its own setup, drain and margin); UsageError
// names --repetitions when a share leaves nothing to stream.
StreamBudget stream_budget(const std::string& time_limit, int repetitions);

// The script: #SBATCH lines for a.nodes x a.ranks_per_node tasks (with
// more ranks than cores on a node, --ntasks and --overcommit: Slurm refuses
// --ntasks-per-node beyond a node's CPUs in an exclusive allocation), the
// environment, and the launch of `iotest run` with a's producers
// (--facet-workers) and threads and, unless the run's options give one or
// the run takes none, the --duration of stream_budget.
std::string slurm_script(const report::Advice& a, const JobScriptOptions& o);

// The time limit (Slurm's D-HH:MM:SS, whole minutes) whose stream budget
// gives each of `repetitions` runs at least `margin` x `stream_s`: a
// predicted stream time (plan --calibration) made a job's limit.
std::string time_limit_for(double stream_s, int repetitions, double margin);

// A word for the shell: quoted when it holds anything but safe characters.
std::string shell_quote(const std::string& word);

}  // namespace iotest::job
