// GpuDegridder's host side: the tables, the batches, the two streams and
// their pinned staging, cuFFT's plans and the timing. The kernels are in
// gpu_degridder.cu. Without the CUDA path only TapTables is built, and the
// constructor refuses with device::probe()'s reason.
#include "iotest/device/gpu_degridder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "iotest/degrid/degridder.hpp"

#ifdef IOTEST_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "iotest/device/cufft_library.hpp"
#include "iotest/device/gpu_kernels.hpp"
#endif

namespace iotest::device {

static_assert(tap::kMaxSupport == degrid::kMaxSupport);
static_assert(sizeof(tap::Cplx) == sizeof(cplx));

index_t GpuVisit::visibilities() const {
  index_t n = 0;
  for (const auto* r = begin; r != end; ++r) n += r->count();
  return n;
}

TapTables::TapTables(const degrid::Degridder& d) {
  const auto dt = d.device_tables();
  const auto& p = d.recombination().params();
  const auto& obs = d.observation();
  const auto flatten = [](const degrid::GridKernel& k) {
    std::vector<double> c;
    for (const auto& row : k.coefficients()) c.insert(c.end(), row.begin(), row.end());
    return c;
  };
  coeff_uv = flatten(*dt.uv_kernel);
  if (!dt.layout->w_free()) coeff_w = flatten(*dt.w_kernel);
  for (const auto& step : *dt.antenna_uvw)
    for (const auto& a : step) antenna_uvw.insert(antenna_uvw.end(), {a.u, a.v, a.w});
  for (const auto& [a1, a2] : *dt.baselines) baselines.insert(baselines.end(), {a1, a2});
  // As walk_runs: frequency times 1 / c.
  const double inv_c = 1.0 / telescope::kSpeedOfLight;
  for (index_t k = 0; k < obs.freq.steps; ++k) chan_scale.push_back(obs.freq.at(k) * inv_c);
  screen_step = *dt.screen_step;
  xM = p.xM;

  tap::Tables& t = tables;
  t.coeff_uv = coeff_uv.data();
  t.coeff_w = coeff_w.empty() ? nullptr : coeff_w.data();
  t.antenna_uvw = antenna_uvw.data();
  t.baselines = baselines.data();
  t.chan_scale = chan_scale.data();
  t.antennas = static_cast<int>(obs.antenna_count());
  t.support = dt.uv_kernel->support();
  t.w_taps = dt.w_taps;
  t.degree_uv = dt.uv_kernel->degree();
  t.degree_w = dt.layout->w_free() ? 0 : dt.w_kernel->degree();
  t.w_free = dt.layout->w_free() ? 1 : 0;
  t.xA = static_cast<int>(p.xA);
  t.N = static_cast<double>(p.N);
  t.cell_uv = d.geometry().cell_uv;
  t.dw = d.planes().dw;
  t.centre = d.planes().centre;
  t.stack_step = dt.layout->stack_step;
}

// Both builds: the output grown, then the pointer overload fills it.
void GpuDegridder::degrid(std::span<const GpuVisit> visits, std::span<const cplx* const> sums,
                          std::vector<cplx>& out) {
  index_t total = 0;
  for (const auto& v : visits) total += v.visibilities();
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(total));
  degrid(visits, sums, out.data() + at);
}

#ifndef IOTEST_HAVE_CUDA

struct GpuDegridder::Impl {
  GpuTiming timing;
};

GpuDegridder::GpuDegridder(const degrid::Degridder&, int, index_t, index_t) {
  throw std::runtime_error(probe().missing);
}
GpuDegridder::~GpuDegridder() = default;
void GpuDegridder::degrid(std::span<const GpuVisit>, std::span<const cplx* const>, cplx*) {
  throw std::runtime_error(probe().missing);
}
void GpuDegridder::grid(std::span<const GpuVisit>, const cplx*, std::span<cplx* const>) {
  throw std::runtime_error(probe().missing);
}
const GpuTiming& GpuDegridder::timing() const {
  return impl_->timing;
}
int GpuDegridder::gpu() const {
  return -1;
}
index_t GpuDegridder::device_bytes() const {
  return 0;
}

#else

namespace {
using gpu::Cplx;
using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(e)));
  }
}
void check(cufftResult e, const char* what) {
  if (e != CUFFT_SUCCESS)
    throw std::runtime_error(fmt::format("cuFFT: {}: error {}", what, int(e)));
}

// Memory that grows to the largest request: on the device, or pinned on
// the host for copies that overlap the kernels (a resize waits for the
// device: cudaFree synchronises).
enum class Memory { device, pinned };
template <class T, Memory M = Memory::device>
struct Buffer {
  T* p = nullptr;
  size_t n = 0;
  void reserve(size_t count) {
    if (count <= n) return;
    release();
    void** at = reinterpret_cast<void**>(&p);
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    if constexpr (M == Memory::device)
      check(cudaMalloc(at, bytes), "cudaMalloc");
    else
      check(cudaMallocHost(at, bytes), "cudaMallocHost");
    n = count;
  }
  void upload(const T* host, size_t count) {
    reserve(count);
    check(cudaMemcpy(p, host, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  size_t bytes() const { return n * sizeof(T); }
  void release() {
    if (p && M == Memory::device) cudaFree(p);
    if (p && M == Memory::pinned) cudaFreeHost(p);
    p = nullptr;
    n = 0;
  }
  ~Buffer() { release(); }
};
template <class T>
using DeviceBuffer = Buffer<T, Memory::device>;
template <class T>
using PinnedBuffer = Buffer<T, Memory::pinned>;

// Planes per cuFFT execution: a batched plan of this many xM x xM
// transforms runs over a batch's planes (the plane buffer is rounded up
// to a multiple; the extra planes are transformed and never read).
constexpr int kFftPlanes = 16;

double elapsed_s(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return 1e-3 * ms;
}
}  // namespace

// One of the two batches in flight: its stream, plan, events and buffers.
struct Lane {
  cudaStream_t stream = nullptr;
  cufftHandle plan = 0;
  bool has_plan = false;
  cudaEvent_t start = nullptr, copied_in = nullptr, computed = nullptr, done = nullptr;
  DeviceBuffer<Cplx> sums, fft, tower, vis;
  DeviceBuffer<tap::Run> runs;
  DeviceBuffer<gpu::Slot> slots;
  DeviceBuffer<int> plane_slot, error;
  DeviceBuffer<long long> plane_power;
  PinnedBuffer<Cplx> h_sums, h_vis;
  PinnedBuffer<tap::Run> h_runs;
  PinnedBuffer<gpu::Slot> h_slots;
  PinnedBuffer<int> h_plane_slot, h_error;
  PinnedBuffer<long long> h_plane_power;
  // The batch in flight: where its results go.
  bool busy = false, imaging = false;
  cplx* out = nullptr;         // predict: its visibilities' place in the output
  index_t visibilities = 0;    // predict: how many
  std::vector<cplx*> targets;  // imaging: the sums its slots add to
  index_t xM2 = 0;

  index_t device_bytes() const {
    return static_cast<index_t>(sums.bytes() + fft.bytes() + tower.bytes() + vis.bytes() +
                                runs.bytes() + slots.bytes() + plane_slot.bytes() + error.bytes() +
                                plane_power.bytes());
  }
};

struct GpuDegridder::Impl {
  const degrid::Degridder& d;
  int gpu;
  index_t batch_subgrids, max_batch_visibilities;
  index_t xM, xA;
  int w_support;
  TapTables host;
  tap::Tables tables;  // device pointers
  DeviceBuffer<double> coeff_uv, coeff_w, antenna_uvw, chan_scale;
  DeviceBuffer<int> baselines;
  DeviceBuffer<Cplx> step;
  Lane lanes[kBatchesInFlight];
  GpuTiming timing;

  Impl(const degrid::Degridder& dg, int g, index_t bs, index_t mv)
      : d(dg),
        gpu(g),
        batch_subgrids(std::max<index_t>(bs, 1)),
        max_batch_visibilities(mv),
        host(dg) {
    const auto& p = d.recombination().params();
    xM = p.xM;
    xA = p.xA;
    const auto dt = d.device_tables();
    w_support = dt.w_kernel->support();
    const Probe found = probe();
    if (found.gpus.empty()) throw std::runtime_error(found.missing);
    if (gpu < 0 || gpu >= static_cast<int>(found.gpus.size()))
      throw std::runtime_error(
          fmt::format("no CUDA device {} (this node has {})", gpu, found.gpus.size()));
    check(cudaSetDevice(gpu), "cudaSetDevice");
    coeff_uv.upload(host.coeff_uv.data(), host.coeff_uv.size());
    if (!host.coeff_w.empty()) coeff_w.upload(host.coeff_w.data(), host.coeff_w.size());
    antenna_uvw.upload(host.antenna_uvw.data(), host.antenna_uvw.size());
    chan_scale.upload(host.chan_scale.data(), host.chan_scale.size());
    baselines.upload(host.baselines.data(), host.baselines.size());
    step.upload(reinterpret_cast<const Cplx*>(host.screen_step.data()), host.screen_step.size());
    tables = host.tables;
    tables.coeff_uv = coeff_uv.p;
    tables.coeff_w = host.coeff_w.empty() ? nullptr : coeff_w.p;
    tables.antenna_uvw = antenna_uvw.p;
    tables.chan_scale = chan_scale.p;
    tables.baselines = baselines.p;
    for (auto& l : lanes) {
      l.xM2 = xM * xM;
      check(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      for (auto* e : {&l.start, &l.copied_in, &l.computed, &l.done})
        check(cudaEventCreate(e), "cudaEventCreate");
      int n[2] = {static_cast<int>(xM), static_cast<int>(xM)};
      const int dist = static_cast<int>(xM * xM);
      check(cufft().plan_many(&l.plan, 2, n, nullptr, 1, dist, nullptr, 1, dist, CUFFT_Z2Z,
                              kFftPlanes),
            "cufftPlanMany");
      l.has_plan = true;
      check(cufft().set_stream(l.plan, l.stream), "cufftSetStream");
    }
  }

  ~Impl() {
    cudaSetDevice(gpu);
    for (auto& l : lanes) {
      if (l.stream) cudaStreamSynchronize(l.stream);
      if (l.has_plan) cufft().destroy(l.plan);
      for (auto* e : {l.start, l.copied_in, l.computed, l.done})
        if (e) cudaEventDestroy(e);
      if (l.stream) cudaStreamDestroy(l.stream);
    }
  }

  // The transforms of `planes` planes in l.fft (rounded up to kFftPlanes).
  void transform(Lane& l, long long planes, int direction) {
    for (long long at = 0; at < planes; at += kFftPlanes) {
      auto* data = reinterpret_cast<cufftDoubleComplex*>(l.fft.p + at * l.xM2);
      check(cufft().exec_z2z(l.plan, data, data, direction), "cufftExecZ2Z");
    }
  }

  // Waits for the lane's batch, takes its timing and hands its results
  // over.
  void finish(Lane& l) {
    if (!l.busy) return;
    const auto t0 = Clock::now();
    check(cudaEventSynchronize(l.done), "cudaEventSynchronize");
    timing.host_wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
    timing.transfer_s += elapsed_s(l.start, l.copied_in) + elapsed_s(l.computed, l.done);
    timing.kernel_s += elapsed_s(l.copied_in, l.computed);
    l.busy = false;
    if (l.h_error.p[0] != 0)
      throw std::logic_error(
          "a visibility reaches outside its subgrid's tower (GPU): the binning and the margin "
          "should prevent this");
    if (!l.imaging) {
      // From the pinned staging to the caller, in slices over the threads
      // where a single copy would leave the host behind the GPU (one
      // thread copies 5-10 GB/s; a batch is up to 256 MiB). Inside a
      // parallel region (a streamer's task) it is one thread's copy.
      const index_t n = l.visibilities, slice = index_t{1} << 18;
#pragma omp parallel for schedule(static) if (n > 4 * slice)
      for (index_t at = 0; at < n; at += slice)
        std::memcpy(static_cast<void*>(l.out + at), l.h_vis.p + at,
                    static_cast<size_t>(std::min(slice, n - at)) * sizeof(cplx));
    } else {
      for (size_t s = 0; s < l.targets.size(); ++s) {
        const auto* src = reinterpret_cast<const cplx*>(l.h_sums.p) + s * l.xM2;
        cplx* dst = l.targets[s];
        for (index_t i = 0; i < l.xM2; ++i) dst[i] += src[i];
      }
    }
  }

  // Stages a batch's runs, slots and planes in the lane's pinned buffers;
  // returns the batch's planes and visibilities.
  std::pair<long long, long long> stage(Lane& l, std::span<const GpuVisit> visits) {
    const auto dt = d.device_tables();
    long long planes = 0, vis = 0;
    size_t runs = 0;
    for (const auto& v : visits) {
      planes += degrid::tower_planes(*dt.layout, w_support, v.wc_min, v.wc_max).count;
      runs += static_cast<size_t>(v.end - v.begin);
    }
    l.h_slots.reserve(visits.size());
    l.h_runs.reserve(runs);
    l.h_plane_slot.reserve(static_cast<size_t>(planes));
    l.h_plane_power.reserve(static_cast<size_t>(planes));
    l.h_error.reserve(1);
    long long plane = 0, group = 0;
    size_t r = 0;
    for (size_t s = 0; s < visits.size(); ++s) {
      const auto& v = visits[s];
      const auto range = degrid::tower_planes(*dt.layout, w_support, v.wc_min, v.wc_max);
      l.h_slots.p[s] = {static_cast<double>(v.off0), static_cast<double>(v.off1), range.first,
                        range.count, plane};
      for (index_t k = 0; k < range.count; ++k, ++plane) {
        l.h_plane_slot.p[plane] = static_cast<int>(s);
        l.h_plane_power.p[plane] = range.first + k;
      }
      for (const auto* run = v.begin; run != v.end; ++run, ++r) {
        l.h_runs.p[r] = {run->baseline, run->time,    run->chan_begin,
                         run->chan_end, run->w_stack, static_cast<int>(s),
                         vis,           group};
        vis += run->count();
        group += tap::groups_of(l.h_runs.p[r]);
      }
    }
    const size_t fft_planes =
        static_cast<size_t>((planes + kFftPlanes - 1) / kFftPlanes) * kFftPlanes;
    l.slots.reserve(visits.size());
    l.runs.reserve(runs);
    l.plane_slot.reserve(static_cast<size_t>(planes));
    l.plane_power.reserve(static_cast<size_t>(planes));
    l.error.reserve(1);
    l.sums.reserve(visits.size() * static_cast<size_t>(l.xM2));
    l.fft.reserve(fft_planes * static_cast<size_t>(l.xM2));
    l.tower.reserve(static_cast<size_t>(planes * xA * xA));
    l.vis.reserve(static_cast<size_t>(vis));
    l.h_vis.reserve(static_cast<size_t>(vis));
    l.h_sums.reserve(visits.size() * static_cast<size_t>(l.xM2));
    return {planes, vis};
  }

  template <class T>
  void copy_in(Lane& l, T* dst, const T* src, size_t count) {
    if (count == 0) return;  // (the buffers may not exist yet)
    check(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyHostToDevice, l.stream),
          "cudaMemcpyAsync");
  }

  gpu::Batch batch_of(Lane& l, size_t slots, size_t runs, long long vis) {
    gpu::Batch b;
    b.runs = l.runs.p;
    b.run_count = static_cast<int>(runs);
    b.slots = l.slots.p;
    b.slot_count = static_cast<int>(slots);
    b.visibilities = vis;
    // The staged runs' channel groups: the last one's first and its own.
    if (runs > 0) {
      const tap::Run& last = l.h_runs.p[runs - 1];
      b.groups = last.group + tap::groups_of(last);
    }
    b.tower = l.tower.p;
    b.error = l.error.p;
    return b;
  }

  size_t run_count(std::span<const GpuVisit> visits) {
    size_t n = 0;
    for (const auto& v : visits) n += static_cast<size_t>(v.end - v.begin);
    return n;
  }

  // Copies in the staged batch's tables (events: start, then copied_in).
  void copy_tables(Lane& l, size_t slots, size_t runs, long long planes) {
    copy_in(l, l.slots.p, l.h_slots.p, slots);
    copy_in(l, l.runs.p, l.h_runs.p, runs);
    copy_in(l, l.plane_slot.p, l.h_plane_slot.p, static_cast<size_t>(planes));
    copy_in(l, l.plane_power.p, l.h_plane_power.p, static_cast<size_t>(planes));
    check(cudaMemsetAsync(l.error.p, 0, sizeof(int), l.stream), "cudaMemsetAsync");
  }

  void predict(Lane& l, std::span<const GpuVisit> visits, std::span<const cplx* const> sums,
               cplx* out) {
    finish(l);
    const auto [planes, vis] = stage(l, visits);
    const size_t runs = run_count(visits);
    for (size_t s = 0; s < visits.size(); ++s)
      std::memcpy(static_cast<void*>(l.h_sums.p + s * static_cast<size_t>(l.xM2)), sums[s],
                  static_cast<size_t>(l.xM2) * sizeof(cplx));
    check(cudaEventRecord(l.start, l.stream), "cudaEventRecord");
    copy_tables(l, visits.size(), runs, planes);
    copy_in(l, l.sums.p, l.h_sums.p, visits.size() * static_cast<size_t>(l.xM2));
    check(cudaEventRecord(l.copied_in, l.stream), "cudaEventRecord");
    // build_tower: screens, finish_subgrid_in's FFT (FFTW_BACKWARD's sign,
    // unnormalised) and its gather.
    gpu::launch_screens(l.sums.p, step.p, l.plane_slot.p, l.plane_power.p, planes,
                        static_cast<int>(xM), l.fft.p, l.stream);
    transform(l, planes, CUFFT_INVERSE);
    gpu::launch_gather(l.fft.p, planes, static_cast<int>(xM), static_cast<int>(xA), l.tower.p,
                       l.stream);
    gpu::launch_degrid(tables, batch_of(l, visits.size(), runs, vis), l.vis.p, l.stream);
    check(cudaGetLastError(), "kernel launch");
    check(cudaEventRecord(l.computed, l.stream), "cudaEventRecord");
    if (vis > 0)
      check(cudaMemcpyAsync(l.h_vis.p, l.vis.p, static_cast<size_t>(vis) * sizeof(Cplx),
                            cudaMemcpyDeviceToHost, l.stream),
            "cudaMemcpyAsync");
    check(cudaMemcpyAsync(l.h_error.p, l.error.p, sizeof(int), cudaMemcpyDeviceToHost, l.stream),
          "cudaMemcpyAsync");
    check(cudaEventRecord(l.done, l.stream), "cudaEventRecord");
    l.busy = true;
    l.imaging = false;
    l.out = out;
    l.visibilities = vis;
  }

  void image(Lane& l, std::span<const GpuVisit> visits, const cplx* vis_in,
             std::span<cplx* const> sums) {
    finish(l);
    const auto [planes, vis] = stage(l, visits);
    const size_t runs = run_count(visits);
    if (vis > 0)
      std::memcpy(static_cast<void*>(l.h_vis.p), vis_in, static_cast<size_t>(vis) * sizeof(cplx));
    check(cudaEventRecord(l.start, l.stream), "cudaEventRecord");
    copy_tables(l, visits.size(), runs, planes);
    copy_in(l, l.vis.p, l.h_vis.p, static_cast<size_t>(vis));
    check(cudaEventRecord(l.copied_in, l.stream), "cudaEventRecord");
    // begin_tower, grid, then collapse_tower: prepare_subgrid's scatter
    // and FFT (FFTW_FORWARD's sign), the conjugate screens by Horner.
    check(cudaMemsetAsync(l.tower.p, 0, static_cast<size_t>(planes * xA * xA) * sizeof(Cplx),
                          l.stream),
          "cudaMemsetAsync");
    gpu::launch_grid(tables, batch_of(l, visits.size(), runs, vis), l.vis.p, l.stream);
    check(cudaMemsetAsync(l.fft.p, 0, static_cast<size_t>(planes) * l.xM2 * sizeof(Cplx), l.stream),
          "cudaMemsetAsync");
    gpu::launch_place(l.tower.p, planes, static_cast<int>(xM), static_cast<int>(xA), l.fft.p,
                      l.stream);
    transform(l, planes, CUFFT_FORWARD);
    gpu::launch_collapse(l.fft.p, l.slots.p, static_cast<int>(visits.size()), step.p,
                         static_cast<int>(xM), l.sums.p, l.stream);
    check(cudaGetLastError(), "kernel launch");
    check(cudaEventRecord(l.computed, l.stream), "cudaEventRecord");
    check(cudaMemcpyAsync(l.h_sums.p, l.sums.p,
                          visits.size() * static_cast<size_t>(l.xM2) * sizeof(Cplx),
                          cudaMemcpyDeviceToHost, l.stream),
          "cudaMemcpyAsync");
    check(cudaMemcpyAsync(l.h_error.p, l.error.p, sizeof(int), cudaMemcpyDeviceToHost, l.stream),
          "cudaMemcpyAsync");
    check(cudaEventRecord(l.done, l.stream), "cudaEventRecord");
    l.busy = true;
    l.imaging = true;
    l.targets.assign(sums.begin(), sums.end());
  }

  // Batches: up to batch_subgrids visits and max_batch_visibilities
  // visibilities (one busier visit alone), in order; calls f(first, count,
  // first visibility) for each.
  template <class F>
  void batches(std::span<const GpuVisit> visits, F&& f) {
    size_t first = 0;
    index_t vis = 0, first_vis = 0;
    for (size_t i = 0; i < visits.size(); ++i) {
      const index_t n = visits[i].visibilities();
      const size_t count = i - first;
      if (count > 0 &&
          (static_cast<index_t>(count) >= batch_subgrids || vis + n > max_batch_visibilities)) {
        f(first, count, first_vis);
        first = i;
        first_vis += vis;
        vis = 0;
      }
      vis += n;
    }
    if (first < visits.size()) f(first, visits.size() - first, first_vis);
  }

  // Runs every batch, alternating lanes, and waits for both at the end.
  template <class Launch>
  void run(std::span<const GpuVisit> visits, Launch&& launch) {
    check(cudaSetDevice(gpu), "cudaSetDevice");
    size_t k = 0;
    try {
      batches(visits, [&](size_t first, size_t count, index_t first_vis) {
        launch(lanes[k++ % kBatchesInFlight], first, count, first_vis);
      });
      for (auto& l : lanes) finish(l);
    } catch (...) {
      for (auto& l : lanes) {
        cudaStreamSynchronize(l.stream);
        l.busy = false;
      }
      throw;
    }
  }
};

GpuDegridder::GpuDegridder(const degrid::Degridder& d, int gpu, index_t batch_subgrids,
                           index_t max_batch_visibilities)
    : impl_(std::make_unique<Impl>(d, gpu, batch_subgrids, max_batch_visibilities)) {}

GpuDegridder::~GpuDegridder() = default;

void GpuDegridder::degrid(std::span<const GpuVisit> visits, std::span<const cplx* const> sums,
                          cplx* out) {
  if (sums.size() != visits.size())
    throw std::invalid_argument("GpuDegridder::degrid: one subgrid sum per visit");
  impl_->run(visits, [&](Lane& l, size_t first, size_t count, index_t first_vis) {
    impl_->predict(l, visits.subspan(first, count), sums.subspan(first, count), out + first_vis);
  });
}

void GpuDegridder::grid(std::span<const GpuVisit> visits, const cplx* vis,
                        std::span<cplx* const> sums) {
  if (sums.size() != visits.size())
    throw std::invalid_argument("GpuDegridder::grid: one subgrid sum per visit");
  impl_->run(visits, [&](Lane& l, size_t first, size_t count, index_t first_vis) {
    impl_->image(l, visits.subspan(first, count), vis + first_vis, sums.subspan(first, count));
  });
}

const GpuTiming& GpuDegridder::timing() const {
  return impl_->timing;
}
int GpuDegridder::gpu() const {
  return impl_->gpu;
}
index_t GpuDegridder::device_bytes() const {
  index_t n = static_cast<index_t>(impl_->coeff_uv.bytes() + impl_->coeff_w.bytes() +
                                   impl_->antenna_uvw.bytes() + impl_->chan_scale.bytes() +
                                   impl_->baselines.bytes() + impl_->step.bytes());
  for (const auto& l : impl_->lanes) n += l.device_bytes();
  return n;
}

#endif

}  // namespace iotest::device
