// `iotest plan --slurm`: the Slurm batch script for a planned layout. The
// defaults carry the lessons of the 2019 code's runs on JUWELS: an explicit
// CPU binding (sites' defaults differ), --overcommit (producers and
// streamers share a node's cores: a producer's threads mostly wait on its
// send queue), sleeping waits, and srun given --cpus-per-task itself (since
// Slurm 22.05 it no longer inherits sbatch's).
#pragma once

#include <string>

#include "iotest/report/report.hpp"

namespace iotest::job {

struct JobScriptOptions {
  std::string launcher = "srun";  // srun, or mpirun inside the allocation
  std::string time_limit = "01:00:00";
  std::string partition, account;  // empty: the site's defaults
  std::string job_name = "iotest";
  int cores_per_node = 0;         // what a node's ranks share (--cpus-per-task)
  std::string run_arguments;      // `iotest run`'s options, shell-quoted
  std::string output;             // its output pattern (empty: a dry run)
  std::string iotest = "iotest";  // the binary, as the nodes find it
};

// Throws UsageError for a launcher other than srun or mpirun.
void check_job_script_options(const JobScriptOptions& o);

// The script: #SBATCH lines for a.nodes x a.ranks_per_node tasks, the
// environment, and the launch of `iotest run` with a's threads.
std::string slurm_script(const report::Advice& a, const JobScriptOptions& o);

// A word for the shell: quoted when it holds anything but safe characters.
std::string shell_quote(const std::string& word);

}  // namespace iotest::job
