// `iotest degrid`: the whole predict chain in one process, without writing:
// facets (grid-corrected), recombination of the subgrids that hold
// visibilities, w-towers and degridding; visibilities are checked against
// the direct Fourier transform on random samples.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "iotest/degrid/degridder.hpp"
#include "iotest/report/report.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::commands {

struct DegridRunOptions {
  std::string rec_set = "T05_";
  telescope::ObservationOptions observation{"vlaa", {}, {}, {}};
  index_t source_count = 10;
  std::uint64_t seed = 1;
  index_t vis_samples = 1000;
  int threads = 0;
  index_t bls_per_task = 256;  // baselines' time chunks (row chunks) per degrid task
  degrid::DegridOptions kernel;
  std::optional<index_t> margin;  // default: from degrid::w_layout
  // Tower height from a target error (<= 0: twice the error at w = 0)
  // instead of the margin's conservative bound.
  std::optional<double> target_err;
  std::string output;  // UVH5 file to write; empty: a dry run (null back-end)
};

report::Report degrid(const DegridRunOptions& options);

// Shared with the distributed run: checks the kernel and w options against
// the set and returns the w layout (UsageError naming the option).
degrid::WLayout check_degrid_options(const config::RecombinationParams& p0,
                                     const telescope::Observation& obs,
                                     const binning::GridGeometry& g,
                                     const degrid::DegridOptions& kernel,
                                     std::optional<index_t> margin,
                                     std::optional<double> target_err);
// --target-err: measures the tower height and sets it (and the stacking
// step) in `w`.
// The degridding settings of a report: kernels, w layout, calibration.
void describe_degridding(report::RunSettings& s, const degrid::DegridOptions& kernel,
                         const degrid::Degridder& d, const degrid::WLayout& w, index_t w_stacks,
                         const std::optional<degrid::TowerCalibration>& calibration);
// The sky, so other tools can predict the same visibilities (nothing above
// 10,000 sources).
std::optional<report::Sky> sky_of(const std::vector<sky::PointSource>& sources, double pixel_lm);

degrid::TowerCalibration calibrate_w_layout(const swiftly::Recombination& rec,
                                            const binning::GridGeometry& g,
                                            const telescope::Observation& obs,
                                            const degrid::DegridOptions& kernel, double target,
                                            degrid::WLayout& w);

}  // namespace iotest::commands
