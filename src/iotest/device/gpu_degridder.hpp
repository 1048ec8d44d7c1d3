// Degridding and gridding on a CUDA GPU: the CPU Degridder's towers, tap
// sums and their adjoints, batch after batch of subgrids (docs/gpu.md).
// Plain C++: compiles in every build; where the build has no CUDA path the
// constructor throws with device::probe()'s reason.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/common/array.hpp"
#include "iotest/device/device.hpp"
#include "iotest/device/tap_math.hpp"

namespace iotest::degrid {
class Degridder;
}

namespace iotest::device {

// Where a GpuDegridder's time went, summed over its batches (CUDA events
// on its streams): kernels (tower screens, FFTs, gathers, the (de)gridding
// itself), copies between host and device, and the host's waits for them.
// The two streams overlap, so kernel_s + transfer_s may exceed the wall
// time.
struct GpuTiming {
  double kernel_s = 0, transfer_s = 0, host_wait_s = 0;
};

// One visit (a subgrid of one w-stacking plane) of a batch, as the CPU path
// gives it to Degridder::build_tower and degrid / grid: its tower's w
// range (w / dw relative to its stack: binning::VisitRuns::w_range over
// dw), its runs [begin, end) and the subgrid's offsets.
struct GpuVisit {
  double wc_min = 0, wc_max = 0;
  const binning::VisRun* begin = nullptr;
  const binning::VisRun* end = nullptr;
  index_t off0 = 0, off1 = 0;
  index_t visibilities() const;  // the runs' channels
};

// A degridder's tables as tap_math.hpp takes them, in host memory: what
// GpuDegridder uploads, and what the host tests walk.
struct TapTables {
  std::vector<double> coeff_uv, coeff_w, antenna_uvw, chan_scale;
  std::vector<int> baselines;
  std::vector<cplx> screen_step;  // xM x xM, FFT order
  index_t xM = 0;
  tap::Tables tables;  // pointing into the vectors above (not copyable for that reason)
  explicit TapTables(const degrid::Degridder& d);
  TapTables(const TapTables&) = delete;
  TapTables& operator=(const TapTables&) = delete;
};

class GpuDegridder {
 public:
  // Uploads the degridder's tables (kernels, screen step, antennas' uvw
  // per time step, baselines, frequencies) to GPU `gpu` once. `d` must
  // outlive this object. batch_subgrids: subgrids per batch (two batches
  // in flight); max_batch_visibilities bounds a batch's visibility buffers
  // (a single busier visit still makes a batch of its own).
  GpuDegridder(const degrid::Degridder& d, int gpu, index_t batch_subgrids = kDefaultBatchSubgrids,
               index_t max_batch_visibilities = kMaxBatchVisibilities);
  ~GpuDegridder();
  GpuDegridder(const GpuDegridder&) = delete;
  GpuDegridder& operator=(const GpuDegridder&) = delete;

  // Predict: appends to `out` the visibilities of every visit, visit after
  // visit, each in Degridder::degrid's order (run after run, channel after
  // channel). sums[i] is visit i's image-space subgrid sum (xM x xM, FFT
  // order, as build_tower takes it). Throws std::logic_error where a
  // visibility's taps reach outside its tower (as Degridder does).
  void degrid(std::span<const GpuVisit> visits, std::span<const cplx* const> sums,
              std::vector<cplx>& out);
  // The same into out[0, n), n the visits' visibilities: a buffer the
  // caller keeps, not zeroed first (256 MiB a batch, 16 B a visibility:
  // zeroing it costs as much as copying the batch back).
  void degrid(std::span<const GpuVisit> visits, std::span<const cplx* const> sums, cplx* out);

  // Imaging, degrid's adjoint: adds to sums[i] (xM x xM) what visit i's
  // visibilities (`vis`, in degrid's order over all visits) make through
  // grid() and collapse_tower().
  void grid(std::span<const GpuVisit> visits, const cplx* vis, std::span<cplx* const> sums);

  const GpuTiming& timing() const;
  int gpu() const;
  // Device memory held now (buffers grow to the largest batch seen).
  index_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace iotest::device
