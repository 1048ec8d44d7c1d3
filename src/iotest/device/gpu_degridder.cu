// GpuDegridder's kernels (gpu_kernels.hpp): the towers' screens and the
// gather / scatter around cuFFT's transforms, and the (de)gridding of a
// whole batch in one launch. The per-visibility arithmetic is
// tap_math.hpp's, the host's own.
//
// Balance: a batch's visibilities are one flat index space, thread i
// degridding visibility i wherever it lies (its run found by binary search
// over the runs' output offsets). A launch's work is its visibility count,
// however unequally the batch's subgrids share it: one subgrid with
// millions of visibilities and fifteen with a handful keep every SM as busy
// as sixteen equal ones (the lesson of arXiv 2102.12739: per-subgrid
// blocks leave the device waiting on the busiest).
//
// Degridding proper runs one thread per group of kGroupChannels
// consecutive channels of a run (tap_math.hpp's degrid_group): adjacent
// channels mostly share their taps' cells, so a group loads each cell
// once. It is compiled for each even support (every array then in
// registers, the row loops unrolled); degrid_kernel, one thread per
// visibility at any support, is the fallback. Gridding, its adjoint, runs
// the same way (grid_group): a group's channels that share their taps'
// cells are summed per cell before the atomic add, so a group costs one
// atomic pair a cell where one thread per visibility (grid_kernel, the
// fallback) cost one per channel; the atomics, not the arithmetic, bound
// it.
#include <type_traits>
#include <utility>

#include "iotest/device/gpu_kernels.hpp"

namespace iotest::device::gpu {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(long long n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

__device__ inline long long wrap(long long i, long long n) {
  i %= n;
  return i < 0 ? i + n : i;
}

__global__ void screens_kernel(const Cplx* sums, const Cplx* step, const int* plane_slot,
                               const long long* plane_power, long long planes, int xM, Cplx* fft) {
  const long long pixels = static_cast<long long>(xM) * xM;
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const long long p = blockIdx.y;
  if (i >= pixels || p >= planes) return;
  const Cplx s = sums[plane_slot[p] * pixels + i];
  fft[p * pixels + i] = tap::mul(s, tap::integer_power(step[i], plane_power[p]));
}

// Tower cell i (xA x xA, centred) in its plane's xM x xM FFT order.
__device__ inline long long fft_cell(long long i, int xM, int xA) {
  const long long a = i / xA, b = i % xA;
  return wrap(a - xA / 2, xM) * xM + wrap(b - xA / 2, xM);
}

__global__ void gather_kernel(const Cplx* fft, int xM, int xA, Cplx* tower) {
  const long long cells = static_cast<long long>(xA) * xA;
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const long long p = blockIdx.y;
  if (i >= cells) return;
  tower[p * cells + i] = fft[p * xM * static_cast<long long>(xM) + fft_cell(i, xM, xA)];
}

__global__ void place_kernel(const Cplx* tower, int xM, int xA, Cplx* fft) {
  const long long cells = static_cast<long long>(xA) * xA;
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const long long p = blockIdx.y;
  if (i >= cells) return;
  // xA <= xM: no two cells meet, so a store is prepare_subgrid's add.
  fft[p * xM * static_cast<long long>(xM) + fft_cell(i, xM, xA)] = tower[p * cells + i];
}

__global__ void collapse_kernel(const Cplx* fft, const Slot* slots, const Cplx* step, int xM,
                                Cplx* sums) {
  const long long pixels = static_cast<long long>(xM) * xM;
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= pixels) return;
  const Slot s = slots[blockIdx.y];
  // Horner from the top plane, as collapse_tower.
  const Cplx back = tap::conj(step[i]);
  Cplx acc{0, 0};
  for (long long p = s.plane_count - 1; p >= 0; --p) {
    const Cplx x = fft[(s.tower + p) * pixels + i];
    acc = p == s.plane_count - 1 ? x : tap::mul(acc, back);
    if (p != s.plane_count - 1) {
      acc.re += x.re;
      acc.im += x.im;
    }
  }
  sums[blockIdx.y * pixels + i] = tap::mul(acc, tap::integer_power(step[i], -s.first_plane));
}

__device__ inline void taps_of(const tap::Tables& t, const Batch& b, long long i, tap::VisTaps& v) {
  const int r = tap::run_of(b.runs, b.run_count, i);
  const tap::Run run = b.runs[r];
  const Slot s = b.slots[run.slot];
  const int chan = run.chan_begin + static_cast<int>(i - run.out);
  tap::visibility_taps(t, run, chan, s.off0, s.off1, s.first_plane, s.plane_count, v);
  v.fw += static_cast<int>(s.tower);  // from the batch's first plane
}

__global__ void degrid_kernel(tap::Tables t, Batch b, Cplx* vis) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= b.visibilities) return;
  tap::VisTaps v;
  taps_of(t, b, i, v);
  if (!v.inside) {
    atomicExch(b.error, 1);
    vis[i] = {0, 0};
    return;
  }
  vis[i] = tap::degrid_value(t, v, b.tower);
}

// The threads of a degrid_groups_kernel block.
constexpr int kGroupThreads = 128;
constexpr int K = tap::kGroupChannels;

// degrid_group's scratch in shared memory, per thread: the u weights as
// pairs of taps (one 16-byte load for two rows), then the w weights, the
// block's threads side by side (consecutive threads, consecutive words:
// no bank conflicts).
template <int S>
struct SharedScratch {
  double2* u;  // this thread's first u pair: block + threadIdx.x
  double* w;   // its first w weight: after the block's K S / 2 x stride u pairs, + threadIdx.x
  int stride;  // threads in the block
  int w_taps;  // planes a visibility spans
  __device__ SharedScratch(double2* block, int threads, int taps)
      : u(block + threadIdx.x),
        w(reinterpret_cast<double*>(block + K * (S / 2) * threads) + threadIdx.x),
        stride(threads),
        w_taps(taps) {}
  __device__ double& wu(int k, int j) const {
    return (&u[(k * (S / 2) + j / 2) * stride].x)[j & 1];
  }
  __device__ void wu_pair(int k, int j, double& a, double& b) const {
    const double2 p = u[(k * (S / 2) + j / 2) * stride];
    a = p.x;
    b = p.y;
  }
  __device__ double& ww(int k, int j) const { return w[(k * w_taps + j) * stride]; }
  // Shared memory for a block of `threads`: K S u weights and K w_taps w
  // weights a thread.
  static size_t bytes(int threads, int w_taps) {
    return sizeof(double) * static_cast<size_t>(threads) * K * (S + w_taps);
  }
};

// Blocks per SM the register allocation must allow (ptxas -v, sm_90): 3
// (at most 170 registers a thread) from S = 8 to 12, 2 at S = 14 and 16
// (and 6), which spill at 170 (128), 4 at S = 2, 4, which fit in 128.
// Gridding uses the same: its registers are degridding's but at S = 12,
// which spills 38 bytes at 170 (none at 2 blocks, 254 registers); 3
// blocks keep more warps issuing the spread's atomics, but which of the
// two is faster has not been timed.
constexpr int group_blocks(int S) {
  return S <= 4 ? 4 : S == 6 || S >= 14 ? 2 : 3;
}

// One thread per group of a batch: group g of the run whose groups hold
// it, from channel (g - run.group) K of the run.
template <int S>
__global__ void __launch_bounds__(kGroupThreads, group_blocks(S))
    degrid_groups_kernel(tap::Tables t, Batch b, Cplx* vis) {
  extern __shared__ double2 scratch[];
  const long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (g >= b.groups) return;
  const tap::Run run = b.runs[tap::run_of_group(b.runs, b.run_count, g)];
  const Slot s = b.slots[run.slot];
  const int k0 = static_cast<int>(g - run.group) * K;
  SharedScratch<S> sc(scratch, static_cast<int>(blockDim.x), t.w_taps);
  const long long plane_size = static_cast<long long>(t.xA) * t.xA;
  Cplx out[K];
  bool outside = false;
  const int n = tap::degrid_group<S, K>(t, run, k0, s.off0, s.off1, s.first_plane, s.plane_count,
                                        b.tower + s.tower * plane_size, sc, out, outside);
  if (outside) atomicExch(b.error, 1);
  double2* to = reinterpret_cast<double2*>(vis + run.out + k0);
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (k < n) to[k] = make_double2(out[k].re, out[k].im);
}

// One thread per group of the batch, for either group kernel; beyond
// 48 kB of shared memory (S + w_taps > 24) a kernel must ask for it.
template <int S, class Kernel, class Vis>
void launch_per_group(Kernel kernel, const tap::Tables& t, const Batch& b, Vis vis,
                      cudaStream_t s) {
  const size_t bytes = SharedScratch<S>::bytes(kGroupThreads, t.w_taps);
  if (bytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(bytes));
  const auto blocks = static_cast<unsigned>((b.groups + kGroupThreads - 1) / kGroupThreads);
  kernel<<<blocks, kGroupThreads, bytes, s>>>(t, b, vis);
}

// The supports the group kernels are compiled for: even, 2 to 16.
using GroupSupports = std::integer_sequence<int, 2, 4, 6, 8, 10, 12, 14, 16>;

// Calls f(std::integral_constant<int, S>) for the batch's support S where
// the group kernels are compiled for it; false where not, and the
// per-visibility kernels serve.
template <class F, int... S>
bool with_one_of(int support, std::integer_sequence<int, S...>, F&& f) {
  return ((support == S && (f(std::integral_constant<int, S>{}), true)) || ...);
}
template <class F>
bool with_group_support(const tap::Tables& t, const Batch& b, F&& f) {
  if (b.groups == 0 || t.w_taps < 1 || t.w_taps > tap::kMaxSupport) return false;
  return with_one_of(t.support, GroupSupports{}, f);
}

struct AtomicAdd {
  __device__ void operator()(double* p, double x) const { atomicAdd(p, x); }
};

// Gridding, degrid_groups_kernel's adjoint: one thread per group, its
// visibilities spread by grid_group with one atomic pair a cell for the
// group where its channels share their footprint.
template <int S>
__global__ void __launch_bounds__(kGroupThreads, group_blocks(S))
    grid_groups_kernel(tap::Tables t, Batch b, const Cplx* vis) {
  extern __shared__ double2 scratch[];
  const long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (g >= b.groups) return;
  const tap::Run run = b.runs[tap::run_of_group(b.runs, b.run_count, g)];
  const Slot s = b.slots[run.slot];
  const int k0 = static_cast<int>(g - run.group) * K;
  const int n = run.chan_end - run.chan_begin - k0;
  SharedScratch<S> sc(scratch, static_cast<int>(blockDim.x), t.w_taps);
  const long long plane_size = static_cast<long long>(t.xA) * t.xA;
  const double2* from = reinterpret_cast<const double2*>(vis + run.out + k0);
  Cplx in[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    // Past the run's end: not read by grid_group, but defined.
    const double2 x = k < n ? __ldg(from + k) : make_double2(0, 0);
    in[k] = {x.x, x.y};
  }
  bool outside = false;
  tap::grid_group<S, K>(t, run, k0, s.off0, s.off1, s.first_plane, s.plane_count, in,
                        b.tower + s.tower * plane_size, sc, AtomicAdd{}, outside);
  if (outside) atomicExch(b.error, 1);
}

__global__ void grid_kernel(tap::Tables t, Batch b, const Cplx* vis) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= b.visibilities) return;
  tap::VisTaps v;
  taps_of(t, b, i, v);
  if (!v.inside) {
    atomicExch(b.error, 1);
    return;
  }
  tap::grid_value(t, v, vis[i], b.tower, AtomicAdd{});
}

}  // namespace

void launch_screens(const Cplx* sums, const Cplx* step, const int* plane_slot,
                    const long long* plane_power, long long planes, int xM, Cplx* fft,
                    cudaStream_t s) {
  if (planes == 0) return;
  const dim3 grid(blocks_for(static_cast<long long>(xM) * xM), static_cast<unsigned>(planes));
  screens_kernel<<<grid, kThreads, 0, s>>>(sums, step, plane_slot, plane_power, planes, xM, fft);
}

void launch_gather(const Cplx* fft, long long planes, int xM, int xA, Cplx* tower, cudaStream_t s) {
  if (planes == 0) return;
  const dim3 grid(blocks_for(static_cast<long long>(xA) * xA), static_cast<unsigned>(planes));
  gather_kernel<<<grid, kThreads, 0, s>>>(fft, xM, xA, tower);
}

void launch_place(const Cplx* tower, long long planes, int xM, int xA, Cplx* fft, cudaStream_t s) {
  if (planes == 0) return;
  const dim3 grid(blocks_for(static_cast<long long>(xA) * xA), static_cast<unsigned>(planes));
  place_kernel<<<grid, kThreads, 0, s>>>(tower, xM, xA, fft);
}

void launch_collapse(const Cplx* fft, const Slot* slots, int slot_count, const Cplx* step, int xM,
                     Cplx* sums, cudaStream_t s) {
  if (slot_count == 0) return;
  const dim3 grid(blocks_for(static_cast<long long>(xM) * xM), static_cast<unsigned>(slot_count));
  collapse_kernel<<<grid, kThreads, 0, s>>>(fft, slots, step, xM, sums);
}

void launch_degrid(const tap::Tables& t, const Batch& b, Cplx* vis, cudaStream_t s) {
  if (b.visibilities == 0) return;
  const bool grouped = with_group_support(t, b, [&](auto S) {
    launch_per_group<decltype(S)::value>(degrid_groups_kernel<decltype(S)::value>, t, b, vis, s);
  });
  if (!grouped) degrid_kernel<<<blocks_for(b.visibilities), kThreads, 0, s>>>(t, b, vis);
}

void launch_grid(const tap::Tables& t, const Batch& b, const Cplx* vis, cudaStream_t s) {
  if (b.visibilities == 0) return;
  const bool grouped = with_group_support(t, b, [&](auto S) {
    launch_per_group<decltype(S)::value>(grid_groups_kernel<decltype(S)::value>, t, b, vis, s);
  });
  if (!grouped) grid_kernel<<<blocks_for(b.visibilities), kThreads, 0, s>>>(t, b, vis);
}

}  // namespace iotest::device::gpu
