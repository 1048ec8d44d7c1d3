// --device=cuda in `iotest run`: a streamer's GPU, shared by its threads.
// The streamers keep their CPU structure (tasks of --bls-per-task baseline
// tracks, chunks cut and checked on the CPU threads); only each task's
// tower and tap sums move to the GPU, one task at a time: a thread hands
// its task to the GPU and waits, while the other threads cut the previous
// tasks' visibilities into chunks, check them and feed the writers. A
// task's buffer stays the CPU path's (degrid::kTaskVisibilities), so the
// memory model and the writer queues are the same on both devices.
#pragma once

#include <mutex>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/common/array.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/device/gpu_degridder.hpp"

namespace iotest::pipeline {

class GpuLane {
 public:
  // Uploads the degridder's tables to GPU `gpu` (its ordinal on the node).
  GpuLane(const degrid::Degridder& d, int gpu) : dw_(d.planes().dw), gpu_(d, gpu) {}

  // Predict: one task's runs [begin, end) of a subgrid at (off0, off1)
  // whose visit spans w in [w_lo, w_hi] (wavelengths), from its
  // image-space sum, into `vis` (resized to the task), in
  // Degridder::degrid's order.
  void degrid(const binning::VisRun* begin, const binning::VisRun* end, index_t off0, index_t off1,
              double w_lo, double w_hi, const cplx* sum, std::vector<cplx>& vis) {
    const device::GpuVisit task{w_lo / dw_, w_hi / dw_, begin, end, off0, off1};
    vis.resize(static_cast<size_t>(task.visibilities()));  // outside the lock: others use the GPU
    const std::lock_guard<std::mutex> hold(lock_);
    gpu_.degrid({&task, 1}, {&sum, 1}, vis.data());
  }

  // Imaging, degrid's adjoint: adds to `sum` (xM x xM) what the task's
  // visibilities make through grid and collapse_tower.
  void grid(const binning::VisRun* begin, const binning::VisRun* end, index_t off0, index_t off1,
            double w_lo, double w_hi, const cplx* vis, cplx* sum) {
    const device::GpuVisit task{w_lo / dw_, w_hi / dw_, begin, end, off0, off1};
    const std::lock_guard<std::mutex> hold(lock_);
    gpu_.grid({&task, 1}, vis, {&sum, 1});
  }

  // Where the GPU's time went (after the streamer's threads are done).
  device::GpuTiming timing() const {
    const std::lock_guard<std::mutex> hold(lock_);
    return gpu_.timing();
  }
  int gpu() const { return gpu_.gpu(); }

 private:
  double dw_;
  mutable std::mutex lock_;  // GpuDegridder takes one call at a time
  device::GpuDegridder gpu_;
};

}  // namespace iotest::pipeline
