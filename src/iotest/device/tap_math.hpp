// The per-visibility arithmetic of degridding and gridding, shared by the
// host and the CUDA kernels (gpu_degridder.cu) so that both compute the
// same thing: where a visibility lies in its subgrid's tower (cells,
// planes), its PSWF tap weights from the kernels' Horner polynomials, the
// S x S x Sw tap sum and its adjoint spread, and the phase exp(2 pi i w c0)
// the tower's planes lack. It restates Degridder::walk_runs, sum_taps and
// spread_taps (degridder.cpp) and GridKernel::weights (kernel.cpp) over
// plain arrays: no std::vector or std::complex, which device code lacks.
// tests/unit/test_gpu.cpp holds these to Degridder::degrid on the host.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define IOTEST_HOST_DEVICE __host__ __device__
#else
#define IOTEST_HOST_DEVICE
#endif

// Loops the device unrolls (every array they index then lives in
// registers); the host compiler unrolls as it sees fit.
#if defined(__CUDA_ARCH__)
#define IOTEST_UNROLL _Pragma("unroll")
#define IOTEST_ROLLED _Pragma("unroll 1")
#else
#define IOTEST_UNROLL
#define IOTEST_ROLLED
#endif

namespace iotest::device::tap {

// The widest kernel (degrid::kMaxSupport): coefficient rows are this wide.
inline constexpr int kMaxSupport = 16;

struct Cplx {
  double re, im;
};
IOTEST_HOST_DEVICE inline Cplx mul(Cplx a, Cplx b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
IOTEST_HOST_DEVICE inline Cplx conj(Cplx a) {
  return {a.re, -a.im};
}
// z^n for |z| = 1 by repeated squaring (z^-1 = conj z), as build_tower.
IOTEST_HOST_DEVICE inline Cplx integer_power(Cplx z, long long n) {
  if (n < 0) {
    z = conj(z);
    n = -n;
  }
  Cplx r{1, 0};
  for (; n > 0; n >>= 1, z = mul(z, z))
    if (n & 1) r = mul(r, z);
  return r;
}

// a x + c, fused where GridKernel's Horner loop fuses it (the device
// always; the host where the target has FMA), so weights agree to rounding.
IOTEST_HOST_DEVICE inline double madd(double a, double x, double c) {
#if defined(__CUDA_ARCH__) || defined(__FMA__)
  return fma(a, x, c);
#else
  return a * x + c;
#endif
}

// The layout and kernels of one Degridder, as plain values and pointers
// (host or device memory, whichever side calls).
struct Tables {
  const double* coeff_uv = nullptr;     // (degree_uv + 1) x kMaxSupport, per power then tap
  const double* coeff_w = nullptr;      // (degree_w + 1) x kMaxSupport; unused when w_free
  const double* antenna_uvw = nullptr;  // [time][antenna][u, v, w], metres
  const int* baselines = nullptr;       // [baseline][a1, a2]
  const double* chan_scale = nullptr;   // per channel: frequency / c
  int antennas = 0;
  int support = 0, w_taps = 1;  // u, v taps; planes a visibility spans (1 when w_free)
  int degree_uv = 0, degree_w = 0;
  int w_free = 0;
  int xA = 0;
  double N = 0;  // grid cells per axis
  double cell_uv = 0, dw = 0, centre = 0, stack_step = 0;
};

// One visibility run (a binning::VisRun) placed in a batch: its subgrid
// (slot), the index of its first visibility in the batch's output and of
// its first channel group (below) among the batch's groups.
struct Run {
  int baseline, time, chan_begin, chan_end, w_stack, slot;
  long long out;
  long long group = 0;
};

// Channels degridded together by one thread (a group): consecutive
// channels of one run, whose taps most often cover the same cells (a
// run's uv and w scale with frequency, and a channel moves a visibility by
// a small fraction of a cell), so that each tower cell loaded serves every
// channel of the group. A run of c channels has ceil(c / kGroupChannels)
// groups, the last one short where c is not a multiple.
inline constexpr int kGroupChannels = 2;
IOTEST_HOST_DEVICE inline long long groups_of(const Run& r) {
  return (r.chan_end - r.chan_begin + kGroupChannels - 1) / kGroupChannels;
}

// A visibility's taps in its tower: weights, the first cell in u, v (from
// the tower's corner) and plane (from the tower's first), the phase
// exp(2 pi i w c0), and whether every tap lies inside the tower (the
// binning and the margin guarantee it; Degridder::check_taps throws where
// they do not).
struct VisTaps {
  double wu[kMaxSupport], wv[kMaxSupport], ww[kMaxSupport];
  int fu, fv, fw;
  Cplx phase;
  bool inside;
  // Where it is (for messages): cells from the subgrid's centre, w in
  // wavelengths.
  double uc, vc, w;
};

// GridKernel::weights at one position: the `support` weights around `pos`
// (cells), tap j at cell first + j; returns first.
IOTEST_HOST_DEVICE inline int weights(const double* coeffs, int degree, int support, double pos,
                                      double* w) {
  const double left = pos - support / 2.0;
  const double f = ceil(left);
  const double x = 2 * (f - left) - 1;
  for (int j = 0; j < support; ++j) {
    double a = coeffs[degree * kMaxSupport + j];
    for (int k = degree - 1; k >= 0; --k) a = madd(a, x, coeffs[k * kMaxSupport + j]);
    w[j] = a;
  }
  return static_cast<int>(f);
}

// Into [-N/2, N/2), as walk_runs wraps grid positions.
IOTEST_HOST_DEVICE inline double wrap_centred(double c, double N) {
  return c - N * floor(c / N + 0.5);
}

// Where channel `chan` of run `r` lies in a subgrid at (off0, off1), as
// walk_runs has it: u, v in cells from the subgrid's centre, w in
// wavelengths, and w in planes from the run's w-stack (`pw`, unused when
// w_free).
struct Place {
  double uc, vc, w, pw;
};
IOTEST_HOST_DEVICE inline Place place_of(const Tables& t, const Run& r, int chan, double off0,
                                         double off1) {
  const int a1 = t.baselines[2 * r.baseline], a2 = t.baselines[2 * r.baseline + 1];
  const double* p1 = t.antenna_uvw + 3 * (static_cast<long long>(r.time) * t.antennas + a1);
  const double* p2 = t.antenna_uvw + 3 * (static_cast<long long>(r.time) * t.antennas + a2);
  const double bu = p2[0] - p1[0], bv = p2[1] - p1[1], bw = p2[2] - p1[2];
  const double scale = t.chan_scale[chan];
  const double w_stack = r.w_stack * t.stack_step;
  Place p;
  p.uc = wrap_centred(bu * scale / t.cell_uv - off0, t.N);
  p.vc = wrap_centred(bv * scale / t.cell_uv - off1, t.N);
  p.w = bw * scale;
  p.pw = t.w_free ? 0 : (p.w - w_stack) / t.dw;
  return p;
}

// Whether taps from (fu, fv, fw) lie inside a tower of plane_count planes.
IOTEST_HOST_DEVICE inline bool taps_inside(const Tables& t, int fu, int fv, long long fw,
                                           long long plane_count) {
  return fu >= 0 && fv >= 0 && fu + t.support <= t.xA && fv + t.support <= t.xA && fw >= 0 &&
         fw + t.w_taps <= plane_count;
}

// Channel `chan` of run `r` in a subgrid at (off0, off1) whose tower holds
// planes [first_plane, first_plane + plane_count): walk_runs' positions
// and weights for it.
IOTEST_HOST_DEVICE inline void visibility_taps(const Tables& t, const Run& r, int chan, double off0,
                                               double off1, long long first_plane,
                                               long long plane_count, VisTaps& v) {
  const Place p = place_of(t, r, chan, off0, off1);
  v.uc = p.uc;
  v.vc = p.vc;
  v.w = p.w;
  const int half = t.xA / 2;
  v.fu = weights(t.coeff_uv, t.degree_uv, t.support, v.uc, v.wu) + half;
  v.fv = weights(t.coeff_uv, t.degree_uv, t.support, v.vc, v.wv) + half;
  long long fw = 0;
  if (t.w_free) {
    v.ww[0] = 1;
  } else {
    fw = weights(t.coeff_w, t.degree_w, t.w_taps, p.pw, v.ww);
  }
  fw -= first_plane;
  v.fw = static_cast<int>(fw);
  v.inside = taps_inside(t, v.fu, v.fv, fw, plane_count);
  const double angle = 2 * M_PI * v.w * t.centre;
  v.phase = {cos(angle), sin(angle)};
}

// sum_taps: the S x S x Sw taps of `v` on the tower (plane after plane of
// xA x xA, row-major), without the phase. The order of the CPU's sum: per
// v tap, the u, w taps accumulated, then weighted by the v weights.
IOTEST_HOST_DEVICE inline Cplx sum_taps(const Tables& t, const VisTaps& v, const Cplx* tower) {
  const long long plane_size = static_cast<long long>(t.xA) * t.xA;
  double acc_re[kMaxSupport], acc_im[kMaxSupport];
  for (int jv = 0; jv < kMaxSupport; ++jv) acc_re[jv] = acc_im[jv] = 0;
  for (int jw = 0; jw < t.w_taps; ++jw) {
    const Cplx* plane = tower + (v.fw + jw) * plane_size;
    for (int ju = 0; ju < t.support; ++ju) {
      const double c = v.ww[jw] * v.wu[ju];
      const Cplx* row = plane + static_cast<long long>(v.fu + ju) * t.xA + v.fv;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int jv = 0; jv < kMaxSupport; ++jv)
        if (jv < t.support) {
          acc_re[jv] += c * row[jv].re;
          acc_im[jv] += c * row[jv].im;
        }
    }
  }
  double re = 0, im = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int jv = 0; jv < kMaxSupport; ++jv)
    if (jv < t.support) {
      re += v.wv[jv] * acc_re[jv];
      im += v.wv[jv] * acc_im[jv];
    }
  return {re, im};
}

// The visibility: the tap sum times the phase.
IOTEST_HOST_DEVICE inline Cplx degrid_value(const Tables& t, const VisTaps& v, const Cplx* tower) {
  return mul(sum_taps(t, v, tower), v.phase);
}

// spread_taps, sum_taps' adjoint: `add(p, x)` adds x to the double at p
// (a plain += on the host, atomicAdd on the device) for every tap.
template <class Add>
IOTEST_HOST_DEVICE inline void spread_taps(const Tables& t, const VisTaps& v, Cplx value,
                                           Cplx* tower, Add add) {
  const long long plane_size = static_cast<long long>(t.xA) * t.xA;
  double s_re[kMaxSupport], s_im[kMaxSupport];
  for (int jv = 0; jv < t.support; ++jv) {
    s_re[jv] = v.wv[jv] * value.re;
    s_im[jv] = v.wv[jv] * value.im;
  }
  for (int jw = 0; jw < t.w_taps; ++jw) {
    Cplx* plane = tower + (v.fw + jw) * plane_size;
    for (int ju = 0; ju < t.support; ++ju) {
      const double c = v.ww[jw] * v.wu[ju];
      Cplx* row = plane + static_cast<long long>(v.fu + ju) * t.xA + v.fv;
      for (int jv = 0; jv < t.support; ++jv) {
        add(&row[jv].re, c * s_re[jv]);
        add(&row[jv].im, c * s_im[jv]);
      }
    }
  }
}

// grid()'s per visibility: the value times the conjugate phase, spread.
template <class Add>
IOTEST_HOST_DEVICE inline void grid_value(const Tables& t, const VisTaps& v, Cplx vis, Cplx* tower,
                                          Add add) {
  spread_taps(t, v, mul(vis, conj(v.phase)), tower, add);
}

// The last of runs[0, n) whose `field` (`out` or `group`, rising in
// output order) is at most x: the run holding visibility or group x of a
// batch (a run of no channels has neither, and is passed over).
IOTEST_HOST_DEVICE inline int last_run_at_most(const Run* runs, int n, long long Run::*field,
                                               long long x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (runs[mid].*field <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
IOTEST_HOST_DEVICE inline int run_of(const Run* runs, int n, long long i) {
  return last_run_at_most(runs, n, &Run::out, i);
}
IOTEST_HOST_DEVICE inline int run_of_group(const Run* runs, int n, long long g) {
  return last_run_at_most(runs, n, &Run::group, g);
}

// A group's degridding, for a support S known at compile time (the
// kernels are compiled for each even support; GpuDegridder dispatches per
// launch). The tap sum reads each tower cell once for the whole group; its
// loops over u and v taps are unrolled, so the v weights and the sums stay
// in registers (the u and w weights, read once a row or plane, wait in a
// scratch: shared memory on the device). The reason is the number of load
// instructions: S x S x Sw = 1152 taps of 16 bytes per
// visibility at S = 12, Sw = 8 is 18 kB, which at 2e9 visibilities a
// second exceeds what the L1 caches deliver. So the cells are 16-byte
// loads (one instruction a cell, not one per double), on the read-only
// path, and K = kGroupChannels channels share each.

// A cell of the tower, or two doubles of a kernel table (16-byte aligned:
// device buffers are, and cells and coefficient pairs are 16 bytes apart).
IOTEST_HOST_DEVICE inline Cplx load_cell(const Cplx* p) {
#if defined(__CUDA_ARCH__)
  const double2 c = __ldg(reinterpret_cast<const double2*>(p));
  return {c.x, c.y};
#else
  return *p;
#endif
}
IOTEST_HOST_DEVICE inline void load_pair(const double* p, double& a, double& b) {
#if defined(__CUDA_ARCH__)
  const double2 c = __ldg(reinterpret_cast<const double2*>(p));
  a = c.x;
  b = c.y;
#else
  a = p[0];
  b = p[1];
#endif
}
IOTEST_HOST_DEVICE inline double load_coeff(const double* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// weights() at N positions for a support S known at compile time: the
// same Horner chains (so the same weights, to the bit), side by side, so
// that each coefficient pair loaded serves all N.
template <int S, int N>
IOTEST_HOST_DEVICE inline void weights_at(const double* coeffs, int degree, const double (&pos)[N],
                                          double (&w)[N][S], int (&first)[N]) {
  static_assert(S % 2 == 0, "supports are even");
  double x[N];
  IOTEST_UNROLL
  for (int i = 0; i < N; ++i) {
    const double left = pos[i] - S / 2.0;
    const double f = ceil(left);
    x[i] = 2 * (f - left) - 1;
    first[i] = static_cast<int>(f);
  }
  IOTEST_UNROLL
  for (int j = 0; j < S; j += 2) {
    double c0, c1;
    load_pair(coeffs + degree * kMaxSupport + j, c0, c1);
    IOTEST_UNROLL
    for (int i = 0; i < N; ++i) {
      w[i][j] = c0;
      w[i][j + 1] = c1;
    }
  }
  IOTEST_ROLLED
  for (int k = degree - 1; k >= 0; --k) {
    IOTEST_UNROLL
    for (int j = 0; j < S; j += 2) {
      double c0, c1;
      load_pair(coeffs + k * kMaxSupport + j, c0, c1);
      IOTEST_UNROLL
      for (int i = 0; i < N; ++i) {
        w[i][j] = madd(w[i][j], x[i], c0);
        w[i][j + 1] = madd(w[i][j + 1], x[i], c1);
      }
    }
  }
}

// weights() at N positions for a support known at run time (the w
// kernel's), each coefficient loaded once for all N; tap j of position i
// goes to store(i, j).
template <int N, class Store>
IOTEST_HOST_DEVICE inline void weights_at(const double* coeffs, int degree, int support,
                                          const double (&pos)[N], long long (&first)[N],
                                          Store store) {
  double x[N];
  IOTEST_UNROLL
  for (int i = 0; i < N; ++i) {
    const double left = pos[i] - support / 2.0;
    const double f = ceil(left);
    x[i] = 2 * (f - left) - 1;
    first[i] = static_cast<int>(f);
  }
  IOTEST_ROLLED
  for (int j = 0; j < support; ++j) {
    double a[N];
    const double top = load_coeff(coeffs + degree * kMaxSupport + j);
    IOTEST_UNROLL
    for (int i = 0; i < N; ++i) a[i] = top;
    IOTEST_ROLLED
    for (int k = degree - 1; k >= 0; --k) {
      const double c = load_coeff(coeffs + k * kMaxSupport + j);
      IOTEST_UNROLL
      for (int i = 0; i < N; ++i) a[i] = madd(a[i], x[i], c);
    }
    IOTEST_UNROLL
    for (int i = 0; i < N; ++i) store(i, j, a[i]);
  }
}

// Where a group's u and w weights wait while its tap sums run (they are
// read once a row and once a plane, the v weights once a cell, which stay
// in registers): wu(k, j), ww(k, j) for channel k of the group, and
// wu_pair(k, j, a, b) reading taps j, j + 1 (j even) at once. The device
// keeps them in shared memory (gpu_degridder.cu); this one, in plain
// arrays, serves the host's tests.
template <int S, int K>
struct ArrayScratch {
  double u[K][S], w[K][kMaxSupport];
  IOTEST_HOST_DEVICE double& wu(int k, int j) { return u[k][j]; }
  IOTEST_HOST_DEVICE double& ww(int k, int j) { return w[k][j]; }
  IOTEST_HOST_DEVICE double ww(int k, int j) const { return w[k][j]; }
  IOTEST_HOST_DEVICE void wu_pair(int k, int j, double& a, double& b) const {
    a = u[k][j];
    b = u[k][j + 1];
  }
};

// weights_at's store into a scratch's w weights.
template <class Scratch>
struct StoreWw {
  Scratch& sc;
  IOTEST_HOST_DEVICE void operator()(int k, int j, double x) const { sc.ww(k, j) = x; }
};

// The S x S x Sw taps from the tower cell (fu, fv) of plane fw for each of
// K channels (their v weights wv, their u and w weights in `sc`), without
// the phase. Each cell is loaded once and weighted for every channel:
// per row the v-weighted sum, then that times the row's u and plane's w
// weight. (Not the CPU's order, which keeps S partial sums per channel
// and weights them by v last: twice the registers. The sums differ by
// rounding only, far inside the 1e-12 the tests hold them to.)
template <int S, int K, class Scratch>
IOTEST_HOST_DEVICE inline void sum_group(const Tables& t, const double (&wv)[K][S],
                                         const Scratch& sc, int fu, int fv, int fw,
                                         const Cplx* tower, Cplx (&sum)[K]) {
  const long long plane_size = static_cast<long long>(t.xA) * t.xA;
  double acc_re[K], acc_im[K];
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k) acc_re[k] = acc_im[k] = 0;
  IOTEST_ROLLED
  for (int jw = 0; jw < t.w_taps; ++jw) {
    const Cplx* plane = tower + (fw + jw) * plane_size;
    double cw[K];
    IOTEST_UNROLL
    for (int k = 0; k < K; ++k) cw[k] = sc.ww(k, jw);
    IOTEST_UNROLL
    for (int ju = 0; ju < S; ju += 2) {
      double cu[K][2];
      IOTEST_UNROLL
      for (int k = 0; k < K; ++k) sc.wu_pair(k, ju, cu[k][0], cu[k][1]);
      IOTEST_UNROLL
      for (int h = 0; h < 2; ++h) {
        const Cplx* row = plane + static_cast<long long>(fu + ju + h) * t.xA + fv;
        double row_re[K], row_im[K];
        IOTEST_UNROLL
        for (int jv = 0; jv < S; ++jv) {
          const Cplx c = load_cell(row + jv);
          IOTEST_UNROLL
          for (int k = 0; k < K; ++k) {
            row_re[k] = jv == 0 ? wv[k][jv] * c.re : madd(wv[k][jv], c.re, row_re[k]);
            row_im[k] = jv == 0 ? wv[k][jv] * c.im : madd(wv[k][jv], c.im, row_im[k]);
          }
        }
        IOTEST_UNROLL
        for (int k = 0; k < K; ++k) {
          const double c = cw[k] * cu[k][h];
          acc_re[k] = madd(c, row_re[k], acc_re[k]);
          acc_im[k] = madd(c, row_im[k], acc_im[k]);
        }
      }
    }
  }
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k) sum[k] = {acc_re[k], acc_im[k]};
}

// The adjoint of sum_group: value[k] times channel k's S x S x Sw
// weights (its v weights wv, its u and w weights in `sc`), added onto the
// tower from the cell (fu, fv) of plane fw for each of K channels (a
// channel whose value is 0 adds nothing). The channels are summed per
// cell before the add: one add a cell for the whole group, not one per
// channel. The reason is the adds themselves: on the device each is an
// atomic pair to global memory, and they, not the arithmetic, bound
// gridding. (Per row the u and w weights times each value, then per cell
// the v-weighted sum over channels: the CPU's spread_taps weights the
// value by v first, so the two differ by rounding only.)
template <int S, int K, class Scratch, class Add>
IOTEST_HOST_DEVICE inline void spread_group(const Tables& t, const double (&wv)[K][S],
                                            const Scratch& sc, int fu, int fv, int fw,
                                            const Cplx (&value)[K], Cplx* tower, Add add) {
  const long long plane_size = static_cast<long long>(t.xA) * t.xA;
  IOTEST_ROLLED
  for (int jw = 0; jw < t.w_taps; ++jw) {
    Cplx* plane = tower + (fw + jw) * plane_size;
    double cw[K];
    IOTEST_UNROLL
    for (int k = 0; k < K; ++k) cw[k] = sc.ww(k, jw);
    IOTEST_UNROLL
    for (int ju = 0; ju < S; ju += 2) {
      double cu[K][2];
      IOTEST_UNROLL
      for (int k = 0; k < K; ++k) sc.wu_pair(k, ju, cu[k][0], cu[k][1]);
      IOTEST_UNROLL
      for (int h = 0; h < 2; ++h) {
        Cplx* row = plane + static_cast<long long>(fu + ju + h) * t.xA + fv;
        double a_re[K], a_im[K];
        IOTEST_UNROLL
        for (int k = 0; k < K; ++k) {
          const double c = cw[k] * cu[k][h];
          a_re[k] = c * value[k].re;
          a_im[k] = c * value[k].im;
        }
        IOTEST_UNROLL
        for (int jv = 0; jv < S; ++jv) {
          double re = wv[0][jv] * a_re[0], im = wv[0][jv] * a_im[0];
          IOTEST_UNROLL
          for (int k = 1; k < K; ++k) {
            re = madd(wv[k][jv], a_re[k], re);
            im = madd(wv[k][jv], a_im[k], im);
          }
          add(&row[jv].re, re);
          add(&row[jv].im, im);
        }
      }
    }
  }
}

// Channels k0, k0 + 1, ... (up to K, fewer at the run's end) of run `r`,
// from offset k0 in the run, in a subgrid at (off0, off1) whose tower
// holds planes [first_plane, first_plane + plane_count), as
// visibility_taps places them: their count n, v weights (the u and w
// weights go to the scratch), first cells, phases, and `todo`, bit k set
// where channel k < n has every tap inside the tower (`outside` where one
// does not). degrid_group and grid_group share it, so that gridding is
// degridding's adjoint to rounding.
template <int S, int K>
struct GroupTaps {
  double wv[K][S];
  int fu[K], fv[K], fw[K];
  Cplx phase[K];
  unsigned todo;
  int n;
  bool outside;
};

template <int S, int K, class Scratch>
IOTEST_HOST_DEVICE inline void group_taps(const Tables& t, const Run& r, int k0, double off0,
                                          double off1, long long first_plane, long long plane_count,
                                          Scratch& sc, GroupTaps<S, K>& g) {
  const int left = r.chan_end - r.chan_begin - k0;
  const int n = left < K ? left : K;
  g.n = n;
  // Positions (the channels past the run's end repeat its last one: they
  // are computed, never used).
  double uv_pos[2 * K], w_pos[K], w[K];
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k) {
    const int chan = r.chan_begin + k0 + (k < n ? k : n - 1);
    const Place p = place_of(t, r, chan, off0, off1);
    uv_pos[k] = p.uc;
    uv_pos[K + k] = p.vc;
    w_pos[k] = p.pw;
    w[k] = p.w;
  }
  // Weights: u into the scratch, v kept here.
  {
    double uv[2 * K][S];
    int first[2 * K];
    weights_at<S, 2 * K>(t.coeff_uv, t.degree_uv, uv_pos, uv, first);
    const int half = t.xA / 2;
    IOTEST_UNROLL
    for (int k = 0; k < K; ++k) {
      IOTEST_UNROLL
      for (int j = 0; j < S; ++j) {
        sc.wu(k, j) = uv[k][j];
        g.wv[k][j] = uv[K + k][j];
      }
      g.fu[k] = first[k] + half;
      g.fv[k] = first[K + k] + half;
    }
  }
  long long first_w[K];
  if (t.w_free) {
    IOTEST_UNROLL
    for (int k = 0; k < K; ++k) {
      sc.ww(k, 0) = 1;
      first_w[k] = 0;
    }
  } else {
    weights_at<K>(t.coeff_w, t.degree_w, t.w_taps, w_pos, first_w, StoreWw<Scratch>{sc});
  }
  g.todo = 0;
  g.outside = false;
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k) {
    const long long f = first_w[k] - first_plane;
    g.fw[k] = static_cast<int>(f);
    const double angle = 2 * M_PI * w[k] * t.centre;
    g.phase[k] = {cos(angle), sin(angle)};
    if (k < n) {
      if (taps_inside(t, g.fu[k], g.fv[k], f, plane_count))
        g.todo |= 1u << k;
      else
        g.outside = true;
    }
  }
}

// The first channel of `todo` (non-zero) and every other of `todo` with
// its footprint: their bits, and the footprint's first cell (gu, gv) and
// plane gw.
template <int S, int K>
IOTEST_HOST_DEVICE inline unsigned next_footprint(const GroupTaps<S, K>& g, unsigned todo, int& gu,
                                                  int& gv, int& gw) {
  bool found = false;
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k)
    if (!found && (todo >> k & 1u)) {
      gu = g.fu[k];
      gv = g.fv[k];
      gw = g.fw[k];
      found = true;
    }
  unsigned same = 0;
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k)
    if ((todo >> k & 1u) && g.fu[k] == gu && g.fv[k] == gv && g.fw[k] == gw) same |= 1u << k;
  return same;
}

// A group's degridding (group_taps' channels): their visibilities into
// vis[0, n), n returned, as visibility_taps and degrid_value compute them.
// The tap sums run once per distinct footprint (fu, fv, fw) among the
// channels, each for the channels that share it: once where they all do,
// the common case. `outside` says whether a channel's taps reach outside
// the tower; its visibility is then 0 (and vis[n, K) are 0 too).
template <int S, int K, class Scratch>
IOTEST_HOST_DEVICE inline int degrid_group(const Tables& t, const Run& r, int k0, double off0,
                                           double off1, long long first_plane,
                                           long long plane_count, const Cplx* tower, Scratch& sc,
                                           Cplx (&vis)[K], bool& outside) {
  GroupTaps<S, K> g;
  group_taps<S, K>(t, r, k0, off0, off1, first_plane, plane_count, sc, g);
  outside = g.outside;
  IOTEST_UNROLL
  for (int k = 0; k < K; ++k) vis[k] = {0, 0};
  unsigned todo = g.todo;
  while (todo != 0) {
    int gu = 0, gv = 0, gw = 0;
    const unsigned same = next_footprint(g, todo, gu, gv, gw);
    Cplx sum[K];
    sum_group<S, K>(t, g.wv, sc, gu, gv, gw, tower, sum);
    IOTEST_UNROLL
    for (int k = 0; k < K; ++k)
      if (same >> k & 1u) vis[k] = mul(sum[k], g.phase[k]);
    todo &= ~same;
  }
  return g.n;
}

// A group's gridding, degrid_group's adjoint (grid_value per channel):
// vis[k] times the conjugate phase, spread with channel k's weights for
// k < n (n returned; vis[n, K) are not read). `add(p, x)` adds x to the
// double at p, as in spread_taps. The spread runs once per distinct
// footprint, each for the channels that share it, summed per cell: where
// they all share one, the common case, each cell gets one add for the
// group. A channel whose taps reach outside the tower sets `outside` and
// adds nothing.
template <int S, int K, class Scratch, class Add>
IOTEST_HOST_DEVICE inline int grid_group(const Tables& t, const Run& r, int k0, double off0,
                                         double off1, long long first_plane, long long plane_count,
                                         const Cplx (&vis)[K], Cplx* tower, Scratch& sc, Add add,
                                         bool& outside) {
  GroupTaps<S, K> g;
  group_taps<S, K>(t, r, k0, off0, off1, first_plane, plane_count, sc, g);
  outside = g.outside;
  unsigned todo = g.todo;
  while (todo != 0) {
    int gu = 0, gv = 0, gw = 0;
    const unsigned same = next_footprint(g, todo, gu, gv, gw);
    // The channels of this footprint with their values, the rest 0.
    Cplx value[K];
    IOTEST_UNROLL
    for (int k = 0; k < K; ++k)
      value[k] = (same >> k & 1u) ? mul(vis[k], conj(g.phase[k])) : Cplx{0, 0};
    spread_group<S, K>(t, g.wv, sc, gu, gv, gw, value, tower, add);
    todo &= ~same;
  }
  return g.n;
}

}  // namespace iotest::device::tap
