// Which device a streamer degrids and grids on, and what this process can
// find. The CPU path is always built; the CUDA path where the build found a
// CUDA toolkit (-DIOTEST_CUDA, the `cuda` preset). Everything here compiles
// without CUDA, so options, the memory model and the report name GPUs on
// any build, and a CPU-only binary refuses --device=cuda with one line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "iotest/common/array.hpp"

namespace iotest::device {

enum class Kind { cpu, cuda };
std::string_view name(Kind k);

// One GPU as the CUDA runtime describes it.
struct GpuInfo {
  int index = -1;            // CUDA device ordinal on this node
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string driver;        // "CUDA driver 12.4, runtime 12.6"
  index_t memory_bytes = 0;  // total device memory
  int multiprocessors = 0;
  int compute_capability = 0;     // 90 for sm_90
  double memory_bytes_per_s = 0;  // peak, from memory clock and bus width
  double fp64_flops_per_s = 0;    // peak FP64 (FMA = 2), 0 where unknown
};

// True where this binary has the CUDA path.
bool built_with_cuda();

// The GPUs this process sees, or why it can use none: `missing` is one line
// ("this iotest was built without CUDA (configure with -DIOTEST_CUDA=ON or
// the cuda preset)", "no CUDA device: <the runtime's reason>"), empty when
// `gpus` is not.
struct Probe {
  std::vector<GpuInfo> gpus;
  std::string missing;
};
Probe probe();

// A streamer's GPU: ranks on a node share its GPUs round-robin by their
// rank on the node.
inline int gpu_for_local_rank(int local_rank, int gpus) {
  return gpus > 0 ? local_rank % gpus : -1;
}

// What one streamer holds on its GPU (the memory model, `plan`, and the
// refusal of a run that cannot fit all use this one count). The GPU path
// works on batches of subgrids, two in flight (one computing while the
// next is copied in): per subgrid its image-space sum (xM x xM) and its
// w-tower (planes x xA x xA), complex doubles; per batch its visibilities
// and the runs that place them (double buffered, in and out); and the
// observation's tables (antenna positions per time step, frequencies, the
// kernels' coefficients).
struct GpuShape {
  index_t xM = 0, xA = 0;      // subgrid image and grid sizes
  index_t tower_planes = 0;    // the largest tower any visit needs
  index_t batch_subgrids = 0;  // subgrids per batch
  index_t batch_visibilities = 0;
  index_t batch_runs = 0;
  index_t table_bytes = 0;  // antenna positions, frequencies, kernel coefficients
};
inline constexpr index_t kBatchesInFlight = 2;
inline constexpr index_t kDefaultBatchSubgrids = 16;
// A batch's visibilities at most (a single larger task makes a batch of
// its own): 256 MiB of buffer each side, whatever the observation.
inline constexpr index_t kMaxBatchVisibilities = index_t{1} << 24;
struct GpuItem {
  std::string name;
  index_t bytes = 0;
};
std::vector<GpuItem> gpu_memory_items(const GpuShape& s);
index_t gpu_memory_bytes(const GpuShape& s);
// The host's pinned staging for the same batches (sums, visibilities and
// runs of each batch in flight).
index_t gpu_staging_bytes(const GpuShape& s);

}  // namespace iotest::device
