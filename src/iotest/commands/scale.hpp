// `iotest scale`: the scaling study (SDP Memo 56). It runs one job at a
// list of rank counts (a launcher such as mpirun, or srun under Slurm) or
// takes the reports of runs already made, then fits the Universal
// Scalability Law to every stage's throughput and draws the plots with the
// project's Python tool (tools/usl.py, run as a separate process: the
// program itself holds no Python).
#pragma once

#include <string>
#include <vector>

#include "iotest/job/mpi_library.hpp"
#include "iotest/report/report.hpp"

namespace iotest::commands {

struct ScaleOptions {
  std::vector<std::string> reports;  // `iotest run` reports to fit (instead of running)
  std::vector<int> ranks;            // rank counts to run the job at
  std::string job;                   // the job's `iotest run` options, one string
  // What starts a run, before the rank count flag and N (under Slurm:
  // --launcher=srun --np-flag=-n, inside an allocation). Default: this
  // build's MPI's own launcher on this machine.
  std::string launcher = job::local_launcher();
  std::string np_flag = "-np";
  std::string out = "scale";       // folder: the runs' reports and outputs, the fits, the plots
  std::string n_by = "streamers";  // what N counts: streamers, ranks or nodes
  std::string python;              // the interpreter for the fit (default: the project's venv)
  std::string self;                // this binary (argv[0] resolved)
};

report::Report scale(const ScaleOptions& options);

}  // namespace iotest::commands
