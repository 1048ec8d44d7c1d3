// `iotest grid`: the imaging direction in one process, the mirror of
// `iotest degrid`: visibilities (from a predict run's files, or the sky's
// predicted in memory) gridded onto w-towers, collapsed into subgrids and
// recombined into the dirty image facets, checked on sampled pixels
// against the direct adjoint transform of the same visibilities, and
// optionally written (HDF5: storage/image_file.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iotest/degrid/degridder.hpp"
#include "iotest/device/device.hpp"
#include "iotest/report/report.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::commands {

struct GridRunOptions {
  // Without input files: the job, as `iotest degrid` takes it (empty: T05_
  // and vlaa). With files it comes from their provenance, and neither may
  // be given.
  std::string rec_set;
  telescope::ObservationOptions observation;
  index_t source_count = 10;
  std::uint64_t seed = 1;
  index_t pixel_samples = 64;  // dirty image pixels checked against the direct transform
  int threads = 0;
  index_t bls_per_task = 256;  // baselines' time chunks (row chunks) per gridding task
  degrid::DegridOptions kernel;
  std::optional<index_t> margin;
  std::vector<std::string> inputs;  // a predict run's visibility files
  storage::StorageOptions storage;  // the back-ends' read options (--posix.direct)
  std::string image;                // --image=FILE.h5: the dirty image (empty: not written)
  // --image-autocorrelations: grid the rows whose two antennas are the
  // same too; by default the image leaves them out, as WSClean and CASA do.
  bool image_autocorrelations = false;
  // --device: where it degrids or grids (cuda: job::require_device).
  device::Kind device = device::Kind::cpu;
};

report::Report grid(const GridRunOptions& options);

}  // namespace iotest::commands
