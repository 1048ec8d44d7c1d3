// The run's report, assembled on rank 0: planned before the start (rank
// 0 prints the plan from it), then filled with what every rank measured,
// gathered at the end. Inside the pipeline: run.cpp's only.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "iotest/job/memory.hpp"
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/time_series.hpp"
#include "iotest/report/report.hpp"

namespace iotest::pipeline {

// What the setup leaves for the report besides the Context.
struct Setup {
  double t_wall = 0, planning_s = 0;
  job::RunShape shape;
  binning::VisitCounts counts;
  report::Memory memory;
  std::optional<degrid::TowerCalibration> calibration;
  // The imaging direction over files: what the streamers found.
  double inputs_open_s = 0;
  std::string input_backend;
  bool input_direct = false;
  index_t chunks_stored = 0;
};

// What a rank sends to rank 0 at the end: plain numbers, one MPI_BYTE block.
struct Wire : RoleFigures {
  report::RankFigures figures;
  int rank = 0, role = 0;  // role: an index into kRoleNames
  char host[64] = {};
};
static_assert(std::is_trivially_copyable_v<Wire>);
inline constexpr const char* kRoleNames[] = {"producer", "streamer", "assigner", "writer"};

// What the roles' work leaves: every rank's figures (on rank 0) and the
// imaging direction's pixel sums.
struct Outcome {
  double stream_s = 0;
  std::vector<Wire> all;                         // rank 0: every rank's
  std::vector<std::vector<TimeSample>> samples;  // rank 0: every rank's time line
  std::vector<cplx> pixel_sums;  // the sampled pixels' direct sums, then image values
  index_t outputs_replaced = 0;  // rank 0: files there before the run, replaced
  report::ImageFile image;       // rank 0, with --image: the dirty image's file
  std::vector<report::PeerTraffic> peers;  // rank 0: per rank and peer host
};

// The report as planned, before the start.
report::Report planned_report(const Context& ctx, const Setup& st);

// Every rank (collective): its figures, time line and traffic per peer
// host to rank 0, and the imaging direction's sampled pixels summed there,
// into `out` (`role`: this rank's, as kRoleNames).
void gather_outcome(const Context& ctx, const RankResult& mine, int role, Outcome& out,
                    MPI_Comm comm);

// Rank 0: what the run measured, into the planned report.
void fill_report(const Context& ctx, const Setup& st, const Outcome& out, report::Report& r);

}  // namespace iotest::pipeline
