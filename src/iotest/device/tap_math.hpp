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
// (slot) and the index of its first visibility in the batch's output.
struct Run {
  int baseline, time, chan_begin, chan_end, w_stack, slot;
  long long out;
};

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

// Channel `chan` of run `r` in a subgrid at (off0, off1) whose tower holds
// planes [first_plane, first_plane + plane_count): walk_runs' positions
// and weights for it.
IOTEST_HOST_DEVICE inline void visibility_taps(const Tables& t, const Run& r, int chan, double off0,
                                               double off1, long long first_plane,
                                               long long plane_count, VisTaps& v) {
  const int a1 = t.baselines[2 * r.baseline], a2 = t.baselines[2 * r.baseline + 1];
  const double* p1 = t.antenna_uvw + 3 * (static_cast<long long>(r.time) * t.antennas + a1);
  const double* p2 = t.antenna_uvw + 3 * (static_cast<long long>(r.time) * t.antennas + a2);
  const double bu = p2[0] - p1[0], bv = p2[1] - p1[1], bw = p2[2] - p1[2];
  const double scale = t.chan_scale[chan];
  const double w_stack = r.w_stack * t.stack_step;
  v.uc = wrap_centred(bu * scale / t.cell_uv - off0, t.N);
  v.vc = wrap_centred(bv * scale / t.cell_uv - off1, t.N);
  v.w = bw * scale;
  const int half = t.xA / 2;
  v.fu = weights(t.coeff_uv, t.degree_uv, t.support, v.uc, v.wu) + half;
  v.fv = weights(t.coeff_uv, t.degree_uv, t.support, v.vc, v.wv) + half;
  long long fw = 0;
  if (t.w_free) {
    v.ww[0] = 1;
  } else {
    fw = weights(t.coeff_w, t.degree_w, t.w_taps, (v.w - w_stack) / t.dw, v.ww);
  }
  fw -= first_plane;
  v.fw = static_cast<int>(fw);
  v.inside = v.fu >= 0 && v.fv >= 0 && v.fu + t.support <= t.xA && v.fv + t.support <= t.xA &&
             fw >= 0 && fw + t.w_taps <= plane_count;
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

// The run holding visibility i of a batch: the last of runs[0, n) whose
// `out` is at most i (runs in output order).
IOTEST_HOST_DEVICE inline int run_of(const Run* runs, int n, long long i) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (runs[mid].out <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace iotest::device::tap
