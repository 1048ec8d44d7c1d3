// The CUDA build's probe: what the CUDA runtime reports, in plain C++ (the
// runtime API needs no nvcc). With the static runtime the driver (libcuda)
// is loaded on the first call, so a machine without one gets the runtime's
// reason in `missing`, never a crash.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "iotest/device/device.hpp"

namespace iotest::device {
namespace {
// FP64 fused multiply-adds per clock per multiprocessor, for the data
// centre parts (V100, A100, H100); consumer parts run FP64 at 1/32 or 1/64
// of FP32 and are reported as unknown (0).
int fp64_fma_per_sm(int major, int minor) {
  if (minor != 0) return 0;
  switch (major) {
    case 7:
    case 8:
      return 32;
    case 9:
      return 64;
    default:
      return 0;
  }
}

int attribute(cudaDeviceAttr a, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, a, device) != cudaSuccess) {
    cudaGetLastError();  // clear it: an unknown attribute is not an error here
    return 0;
  }
  return value;
}

std::string version_text(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}
}  // namespace

bool built_with_cuda() {
  return true;
}

Probe probe() {
  Probe p;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    // The static runtime reports a missing driver as too old a driver.
    int driver = 0;
    if (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
        driver == 0)
      p.missing = "no CUDA device: no CUDA driver on this machine (libcuda.so.1 not found)";
    else
      p.missing = fmt::format("no CUDA device: {}", cudaGetErrorString(err));
    return p;
  }
  if (count == 0) {
    p.missing = "no CUDA device: the runtime sees none (CUDA_VISIBLE_DEVICES?)";
    return p;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::string versions =
      fmt::format("CUDA driver {}, runtime {}", version_text(driver), version_text(runtime));
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuInfo g;
    g.index = d;
    g.name = prop.name;
    g.driver = versions;
    g.memory_bytes = static_cast<index_t>(prop.totalGlobalMem);
    g.multiprocessors = prop.multiProcessorCount;
    g.compute_capability = prop.major * 10 + prop.minor;
    // Clocks in kHz; CUDA 13 dropped them from cudaDeviceProp, and a
    // runtime that no longer reports them gives 0 (unknown).
    const double clock_hz = 1e3 * attribute(cudaDevAttrClockRate, d);
    const double memory_clock_hz = 1e3 * attribute(cudaDevAttrMemoryClockRate, d);
    const int bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, d);
    g.memory_bytes_per_s = 2 * memory_clock_hz * bus_bits / 8;  // double data rate
    g.fp64_flops_per_s =
        2.0 * fp64_fma_per_sm(prop.major, prop.minor) * prop.multiProcessorCount * clock_hz;
    p.gpus.push_back(std::move(g));
  }
  if (p.gpus.empty()) p.missing = "no CUDA device: none could be queried";
  return p;
}

}  // namespace iotest::device
