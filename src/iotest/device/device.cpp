#include "iotest/device/device.hpp"

#include <numeric>

namespace iotest::device {

std::string_view name(Kind k) {
  return k == Kind::cuda ? "cuda" : "cpu";
}

std::vector<GpuItem> gpu_memory_items(const GpuShape& s) {
  constexpr index_t kComplex = 16;
  // A run: baseline, time, channel range, w-stack and its output offset.
  constexpr index_t kRunBytes = 48;
  const index_t in_flight = kBatchesInFlight * s.batch_subgrids;
  return {
      {"subgrid sums", in_flight * s.xM * s.xM * kComplex},
      {"w-towers", in_flight * s.tower_planes * s.xA * s.xA * kComplex},
      {"visibility buffers", kBatchesInFlight * s.batch_visibilities * kComplex},
      {"runs", kBatchesInFlight * s.batch_runs * kRunBytes},
      {"tables", s.table_bytes},
  };
}

index_t gpu_staging_bytes(const GpuShape& s) {
  const auto items = gpu_memory_items(s);
  return items[0].bytes + items[2].bytes + items[3].bytes;  // sums, visibilities, runs
}

index_t gpu_memory_bytes(const GpuShape& s) {
  const auto items = gpu_memory_items(s);
  return std::accumulate(items.begin(), items.end(), index_t{0},
                         [](index_t a, const GpuItem& i) { return a + i.bytes; });
}

#ifndef IOTEST_HAVE_CUDA
bool built_with_cuda() {
  return false;
}

Probe probe() {
  return {{},
          "this iotest was built without CUDA (configure with -DIOTEST_CUDA=ON or --preset cuda)"};
}
#endif

}  // namespace iotest::device
