// `iotest degrid`: the whole predict chain in one process, without writing:
// facets (grid-corrected), recombination of the subgrids that hold
// visibilities, w-towers and degridding; visibilities are checked against
// the direct Fourier transform on random samples.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "iotest/degrid/degridder.hpp"
#include "iotest/device/device.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"
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
  std::string output;               // the file to write; empty: a dry run (null back-end)
  storage::StorageOptions storage;  // --storage and its options
  // --device: where it degrids or grids (cuda: job::require_device).
  device::Kind device = device::Kind::cpu;
};

report::Report degrid(const DegridRunOptions& options);

}  // namespace iotest::commands
