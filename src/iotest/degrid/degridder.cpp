#include "iotest/degrid/degridder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/vec4.hpp"

namespace iotest::degrid {
namespace {
inline index_t centred(index_t i, index_t n) {
  return i < n / 2 ? i : i - n;
}
// A position in cells wrapped into [-N/2, N/2) (the grid is periodic).
inline double wrap_centred(double c, index_t N) {
  return c - static_cast<double>(N) * std::floor(c / static_cast<double>(N) + 0.5);
}
// z^n for |z| = 1 by repeated squaring (z^-1 = conj z).
inline cplx integer_power(cplx z, index_t n) {
  if (n < 0) {
    z = std::conj(z);
    n = -n;
  }
  cplx r = 1;
  for (; n > 0; n >>= 1, z *= z)
    if (n & 1) r *= z;
  return r;
}
}  // namespace

WPlanes w_planes(const binning::GridGeometry& g, double x0) {
  WPlanes w;
  const double h = g.field_lm / 2;
  w.n_min = std::sqrt(std::max(0.0, 1 - 2 * h * h));
  // n - 1 spans [n_min - 1, 0]; centred by c0 it spans +-(1 - n_min)/2, and
  // the w kernel needs dw (1 - n_min) / 2 <= x0.
  w.centre = (w.n_min - 1) / 2;
  w.dw = 2 * x0 / std::max(1 - w.n_min, 1e-300);
  return w;
}

WLayout w_layout(const binning::GridGeometry& g, const telescope::Observation& obs, index_t xA,
                 const DegridOptions& o, std::optional<index_t> margin) {
  WLayout w;
  w.planes = w_planes(g, kWKernelX0);
  // The observation's own w range, not the longest baseline's bound: a
  // short track near the zenith needs a fraction of it, and a smaller
  // margin leaves larger tiles, so fewer subgrids.
  w.w_max = obs.max_abs_w_m() * obs.freq.end / telescope::kSpeedOfLight;
  const double w_max = w.w_max;
  const double kernel_reach = o.w_support * w.planes.dw / 2;  // planes beyond a visibility's w
  const double cells_per_wavelength = (g.field_lm / 2) / w.planes.n_min / g.cell_uv;
  // Margin for a tower reaching `height` wavelengths from its stack: the
  // kernel, plus the spread either side with 25 % and a cell of slack.
  const auto margin_for = [&](double height) {
    return o.support + 2 +
           2 * static_cast<index_t>(std::ceil(1.25 * cells_per_wavelength * height));
  };
  if (w.w_free()) {  // one plane: the margin holds the u, v kernel alone
    w.margin = margin.value_or(margin_for(0));
    if (w.margin < margin_for(0))
      throw UsageError("--margin", fmt::format("expected at least {} cells for the kernel (got {})",
                                               margin_for(0), w.margin));
    return w;
  }
  const index_t single_stack = margin_for(w_max + kernel_reach);
  // By default a tower holds at most kMaxTowerPlanes planes (each xA^2
  // complex values, per streamer thread): a wide w range (long baselines
  // far from the zenith) is w-stacked instead of held in one tall tower.
  const auto w_step = o.w_step ? o.w_step
                      : !margin && 2 * w_max / w.planes.dw + o.w_support > kMaxTowerPlanes
                          ? std::optional<index_t>(kMaxTowerPlanes - o.w_support)
                          : std::nullopt;
  if (w_step) {  // the tower height is given: the margin follows
    if (*w_step < 1) throw UsageError("--wstep", "expected at least 1 plane between w-stacks");
    if (margin) throw UsageError("--wstep", "give either --wstep or --margin, not both");
    w.tower_half_height = static_cast<double>(*w_step) * w.planes.dw / 2;
    if (w.tower_half_height >= w_max) {
      w.margin = single_stack;
      w.tower_half_height = w_max;
      return w;
    }
    w.margin = margin_for(w.tower_half_height + kernel_reach);
    w.stack_step = 2 * w.tower_half_height;
    return w;
  }
  w.margin = margin.value_or(
      std::max(std::min(single_stack, xA / 4), margin_for(kernel_reach + w.planes.dw)));
  if (w.margin >= single_stack) {
    w.tower_half_height = w_max;
    return w;
  }
  // The tower height this margin allows.
  const double spread = (static_cast<double>(w.margin - o.support - 2) / 2 - 1) / 1.25;
  w.tower_half_height = spread / cells_per_wavelength - kernel_reach;
  if (w.tower_half_height < w.planes.dw / 2)
    throw UsageError("--margin", fmt::format("expected at least {} cells for the kernels (got {})",
                                             margin_for(kernel_reach + w.planes.dw), w.margin));
  w.stack_step = 2 * w.tower_half_height;
  return w;
}

PlaneRange tower_planes(const WLayout& w, int w_support, double wc_min, double wc_max) {
  if (w.w_free()) return {0, 1};
  const index_t first = static_cast<index_t>(std::ceil(wc_min - w_support / 2.0));
  const index_t last = static_cast<index_t>(std::ceil(wc_max - w_support / 2.0)) + w_support - 1;
  return {first, last - first + 1};
}

Degridder::Workspace::Workspace(const config::RecombinationParams& p)
    : screened(p.xM, p.xM), scratch(p.xM, p.xM) {}

Degridder::Degridder(const swiftly::Recombination& rec, const binning::GridGeometry& g,
                     const telescope::Observation& obs, const DegridOptions& o, const WLayout& w)
    : rec_(rec),
      p_(rec.params()),
      g_(g),
      obs_(obs),
      uv_kernel_(o.support, p_.f / 2),
      sum_taps_(pick_sum_taps(o.support)),
      pair_sums_(pick_pair_sums(o.support)),
      spread_taps_(pick_spread_taps(o.support)),
      w_kernel_(o.w_support, kWKernelX0),
      layout_(w),
      planes_(w.planes),
      baselines_(obs.baselines()) {
  for (index_t t = 0; t < obs.time.steps; ++t) antenna_uvw_.push_back(obs.antenna_uvw(t));
  // The tower's phase screen per plane step over the subgrid image (pixel z
  // of the xM image lies at z N / xM image pixels).
  const index_t xM = p_.xM;
  screen_step_.resize(static_cast<size_t>(xM * xM));
  const double scale = static_cast<double>(p_.N) / static_cast<double>(xM) * g.pixel_lm;
  for (index_t i0 = 0; i0 < xM; ++i0)
    for (index_t i1 = 0; i1 < xM; ++i1) {
      const double l = static_cast<double>(centred(i0, xM)) * scale,
                   m = static_cast<double>(centred(i1, xM)) * scale;
      const double n = std::sqrt(std::max(0.0, 1 - l * l - m * m));
      const double turns = planes_.dw * (n - 1 - planes_.centre);
      screen_step_[static_cast<size_t>(i0 * xM + i1)] = std::polar(1.0, kTwoPi * turns);
    }
  // Chebyshev coefficients of the w correction on [lo, hi] = dw (n - 1 - c0)
  // over n in [n_min, 1] (a little wider), from its values at the
  // Chebyshev nodes. The PSWF's transform is entire, so 40 terms reach
  // rounding (tests/unit/test_grid.cpp checks against the direct value).
  constexpr int kTerms = 40;
  const double reach = planes_.dw * (1 - planes_.n_min) / 2 * 1.01 + 1e-12;
  w_correction_lo_ = -reach;
  w_correction_hi_ = reach;
  std::array<double, kTerms> values;
  for (int k = 0; k < kTerms; ++k) {
    const double x = std::cos(std::numbers::pi * (k + 0.5) / kTerms);
    values[static_cast<size_t>(k)] = w_kernel_.correction(reach * x);
  }
  w_correction_cheb_.assign(kTerms, 0.0);
  for (int j = 0; j < kTerms; ++j) {
    double sum = 0;
    for (int k = 0; k < kTerms; ++k)
      sum += values[static_cast<size_t>(k)] * std::cos(std::numbers::pi * j * (k + 0.5) / kTerms);
    w_correction_cheb_[static_cast<size_t>(j)] = (j == 0 ? 1.0 : 2.0) * sum / kTerms;
  }
}

double Degridder::w_correction(double nu) const {
  if (layout_.w_free()) return 1;  // no w kernel to correct for
  if (nu < w_correction_lo_ || nu > w_correction_hi_) return w_kernel_.correction(nu);
  // Clenshaw's recurrence at x in [-1, 1].
  const double x =
      (2 * nu - w_correction_lo_ - w_correction_hi_) / (w_correction_hi_ - w_correction_lo_);
  double b1 = 0, b2 = 0;
  for (size_t j = w_correction_cheb_.size() - 1; j > 0; --j) {
    const double b0 = 2 * x * b1 - b2 + w_correction_cheb_[j];
    b2 = b1;
    b1 = b0;
  }
  return x * b1 - b2 + w_correction_cheb_[0];
}

cplx Degridder::facet_correction(double y0, double y1, index_t stack) const {
  const double N = static_cast<double>(p_.N);
  const double l = y0 * g_.pixel_lm, m = y1 * g_.pixel_lm;
  const double n = std::sqrt(1 - l * l - m * m);
  const double w_stack = static_cast<double>(stack) * layout_.stack_step;
  // N^2: the flux scale, undoing the recombination's 1/N^2 (degridder.hpp).
  return std::polar(N * N, kTwoPi * w_stack * (n - 1 - planes_.centre)) /
         (uv_kernel_.correction(y0 / N) * uv_kernel_.correction(y1 / N) *
          w_correction(planes_.dw * (n - 1 - planes_.centre)));
}

void Degridder::correct_facet_adjoint(const swiftly::Tile& t0, const swiftly::Tile& t1,
                                      index_t stack, MView2D facet) const {
  // facet_correction's conjugate over N^2 at every pixel (without the flux
  // scale: SwiFTly's image direction brings N^2 itself, degridder.hpp); the
  // u, v kernels' factors are separable, so evaluated once per row and column.
  const index_t half = facet.rows / 2;
  const double N = static_cast<double>(p_.N);
  std::vector<double> cu(static_cast<size_t>(facet.rows)), cv(static_cast<size_t>(facet.cols));
  for (index_t a = 0; a < facet.rows; ++a)
    cu[static_cast<size_t>(a)] =
        uv_kernel_.correction(static_cast<double>(t0.offset + a - half) / N);
  for (index_t b = 0; b < facet.cols; ++b)
    cv[static_cast<size_t>(b)] =
        uv_kernel_.correction(static_cast<double>(t1.offset + b - half) / N);
  const double w_stack = static_cast<double>(stack) * layout_.stack_step;
  for (index_t a = 0; a < facet.rows; ++a) {
    const double l = static_cast<double>(t0.offset + a - half) * g_.pixel_lm;
    for (index_t b = 0; b < facet.cols; ++b) {
      const double m = static_cast<double>(t1.offset + b - half) * g_.pixel_lm;
      const double n1 = std::sqrt(1 - l * l - m * m) - 1 - planes_.centre;
      const double amplitude = 1 / (cu[static_cast<size_t>(a)] * cv[static_cast<size_t>(b)] *
                                    w_correction(planes_.dw * n1));
      facet(a, b) *= w_stack == 0 ? cplx(amplitude) : std::polar(amplitude, -kTwoPi * w_stack * n1);
    }
  }
}

void Degridder::correct_facet(const swiftly::Tile& t0, const swiftly::Tile& t1, index_t stack,
                              MView2D facet) const {
  const index_t half = facet.rows / 2;
  for (index_t a = 0; a < facet.rows; ++a)
    for (index_t b = 0; b < facet.cols; ++b) {
      cplx& v = facet(a, b);
      if (v == cplx{}) continue;  // a sparse sky needs few corrections
      v *= facet_correction(static_cast<double>(t0.offset + a - half),
                            static_cast<double>(t1.offset + b - half), stack);
    }
}

telescope::Uvw Degridder::baseline_uvw(index_t baseline, index_t time) const {
  const auto [a1, a2] = baselines_[static_cast<size_t>(baseline)];
  const auto& uvw = antenna_uvw_[static_cast<size_t>(time)];
  const auto& p1 = uvw[static_cast<size_t>(a1)];
  const auto& p2 = uvw[static_cast<size_t>(a2)];
  return {p2.u - p1.u, p2.v - p1.v, p2.w - p1.w};
}

void Degridder::size_tower(double wc_min, double wc_max, Workspace& ws) const {
  const auto range = tower_planes(layout_, w_kernel_.support(), wc_min, wc_max);
  while (static_cast<index_t>(ws.planes.size()) < range.count)
    ws.planes.emplace_back(p_.xA, p_.xA, false);
  ws.first_plane = range.first;
  ws.plane_count = range.count;
}

double Degridder::cells_from(double metres, index_t chan, index_t off) const {
  const double scale = obs_.freq.at(chan) * (1.0 / telescope::kSpeedOfLight);
  return wrap_centred(metres * scale / g_.cell_uv - static_cast<double>(off), p_.N);
}

index_t Degridder::build_tower(CView2D subgrid_sum, double wc_min, double wc_max, Workspace& ws,
                               const binning::VisitRuns& visit, index_t off1) const {
  tap_columns(visit, off1, ws.tap_columns);
  return build_tower(subgrid_sum, wc_min, wc_max, ws, ws.tap_columns);
}

void Degridder::tap_columns(const binning::VisitRuns& visit, index_t off1,
                            std::vector<std::uint8_t>& columns) const {
  const index_t xA = p_.xA;
  const int S = uv_kernel_.support();
  columns.assign(static_cast<size_t>(xA), 0);
  visit.for_each_run([&](const binning::VisRun& run) {
    // v is linear in frequency along a run, so its ends bound its taps
    // (placed as walk_blocks places them: the same cells_from).
    const double v = baseline_uvw(run.baseline, run.time).v;
    const auto first_tap = [&](index_t chan) {
      return static_cast<index_t>(std::ceil(cells_from(v, chan, off1) - S / 2.0)) + xA / 2;
    };
    const index_t a = first_tap(run.chan_begin), b = first_tap(run.chan_end - 1);
    const index_t lo = std::max<index_t>(0, std::min(a, b));
    const index_t hi = std::min<index_t>(xA, std::max(a, b) + S);
    std::fill(columns.begin() + lo, columns.begin() + std::max(lo, hi), std::uint8_t{1});
  });
}

index_t Degridder::build_tower(CView2D subgrid_sum, double wc_min, double wc_max, Workspace& ws,
                               std::span<const std::uint8_t> columns) const {
  const index_t xM = p_.xM;
  size_tower(wc_min, wc_max, ws);
  const index_t p_lo = ws.first_plane, nplanes = ws.plane_count;

  // Plane p: the subgrid image times exp(2 pi i p dw (n - 1 - c0)), to the
  // grid. The screen of the first plane is the step screen to the power
  // p_lo (by squaring: no sine or cosine per pixel), the next ones follow
  // by one product each; each plane is transformed from a copy (scratch).
  cplx* screened = ws.screened.data();
  cplx* scratch = ws.scratch.data();
  const cplx* step = screen_step_.data();
  for (index_t i = 0; i < xM * xM; ++i)
    scratch[i] = screened[i] = subgrid_sum.data[i] * integer_power(step[i], p_lo);
  for (index_t p = 0; p < nplanes; ++p) {
    if (p > 0)
      for (index_t i = 0; i < xM * xM; ++i) scratch[i] = screened[i] *= step[i];
    rec_.finish_subgrid_in(ws.scratch.view(), ws.planes[static_cast<size_t>(p)].view(), columns);
  }
  return nplanes;
}

index_t Degridder::begin_tower(double wc_min, double wc_max, Workspace& ws) const {
  size_tower(wc_min, wc_max, ws);
  for (index_t p = 0; p < ws.plane_count; ++p) {
    auto& plane = ws.planes[static_cast<size_t>(p)];
    std::fill(plane.data(), plane.data() + plane.size(), cplx{});
  }
  return ws.plane_count;
}

void Degridder::collapse_tower(Workspace& ws, MView2D subgrid_sum) const {
  const index_t xM = p_.xM;
  // sum_p conj(screen)^(p_lo + p) X_p, X_p the plane back in image space
  // (prepare_subgrid, finish_subgrid_in's adjoint), by Horner's rule from
  // the top plane: one product per plane and pixel, then the power p_lo.
  cplx* screened = ws.screened.data();
  const cplx* scratch = ws.scratch.data();
  const cplx* step = screen_step_.data();
  for (index_t p = ws.plane_count - 1; p >= 0; --p) {
    rec_.prepare_subgrid(ws.planes[static_cast<size_t>(p)].view(), ws.scratch.view());
    if (p == ws.plane_count - 1)
      std::copy(scratch, scratch + xM * xM, screened);
    else
      for (index_t i = 0; i < xM * xM; ++i)
        screened[i] = screened[i] * std::conj(step[i]) + scratch[i];
  }
  for (index_t i = 0; i < xM * xM; ++i)
    subgrid_sum.data[i] += screened[i] * integer_power(step[i], -ws.first_plane);
}

namespace {
// The row of S complex values where tap (fu + ju, fv) starts.
inline const double* tap_row(const Array2D& plane, index_t fu, int ju, index_t fv) {
  return reinterpret_cast<const double*>(plane.data() + (fu + ju) * plane.cols() + fv);
}

// Loads a row of S complex values (S / 2 vectors; S is even) into `r`.
template <int S>
inline void load_row(const double* row, Vec4* r) {
  for (int k = 0; k < S / 2; ++k) {
    std::memcpy(&r[k], row + 4 * k, sizeof(Vec4));
#ifdef __AVX__
    // Held in a register: GCC would otherwise fold the load into every
    // multiply-add that reads it, and a pair would load each row twice. The
    // loads (a quarter of them split across cache lines) then bind the sum.
    asm("" : "+x"(r[k]));
#endif
  }
}

// The u, v taps' row of S complex sums (S / 2 vectors) weighted by the v
// taps: the last step of a tap sum.
template <int S>
cplx sum_over_v(const double* wv, const Vec4* acc) {
  std::array<double, 2 * S> sums;
  std::memcpy(sums.data(), acc, sizeof(sums));
  double re = 0, im = 0;
  for (int jv = 0; jv < S; ++jv) {
    re += wv[jv] * sums[2 * static_cast<size_t>(jv)];
    im += wv[jv] * sums[2 * static_cast<size_t>(jv) + 1];
  }
  return {re, im};
}

// The tap sum of one visibility: S x S taps in u, v on each of Sw planes.
// With S fixed at compile time the accumulators (rows of S complex values)
// stay in vector registers, and the sum is as many loads as taps. Rows of
// even and odd u go to two sets of accumulators: one set would wait on its
// own multiply-adds (4 cycles each) rather than on the loads.
template <int S>
cplx sum_taps(const double* wu, const double* wv, const double* ww, int Sw, const Array2D* planes,
              index_t fu, index_t fv) {
  Vec4 even[S / 2] = {}, odd[S / 2] = {};
  for (int jw = 0; jw < Sw; ++jw)
    for (int ju = 0; ju < S; ju += 2) {
      const double c0 = ww[jw] * wu[ju], c1 = ww[jw] * wu[ju + 1];
      Vec4 r0[S / 2], r1[S / 2];
      load_row<S>(tap_row(planes[jw], fu, ju, fv), r0);
      load_row<S>(tap_row(planes[jw], fu, ju + 1, fv), r1);
      for (int k = 0; k < S / 2; ++k) {
        even[k] += c0 * r0[k];
        odd[k] += c1 * r1[k];
      }
    }
  for (int k = 0; k < S / 2; ++k) even[k] += odd[k];
  return sum_over_v<S>(wv, even);
}

// Two visibilities whose taps start at the same cells and planes (two
// consecutive channels mostly are: a channel moves a visibility by a
// fraction of a cell, and by much less in w): each row is loaded once for
// both. With w, a visibility's 12 x 12 x 8 taps are the predict's main
// cost. Each sum agrees with sum_taps' to rounding (its products are
// summed in another order). R rows of C cells a plane: (S, S) for the
// same taps; (S + 1, S) or (S, S + 2) for a window that holds two
// visibilities' taps one row or one cell apart, each weighted zero where
// it has no tap (C is even: rows load as whole vectors).
template <int R, int C>
void sum_taps_pair(const Taps* wu, const Taps* wv, const Taps* ww, int Sw, const Array2D* planes,
                   index_t fu, index_t fv, cplx* out) {
  Vec4 acc0[C / 2] = {}, acc1[C / 2] = {};
  for (int jw = 0; jw < Sw; ++jw)
    for (int ju = 0; ju < R; ++ju) {
      const double c0 = ww[0][jw] * wu[0][ju], c1 = ww[1][jw] * wu[1][ju];
      Vec4 r[C / 2];
      load_row<C>(tap_row(planes[jw], fu, ju, fv), r);
      for (int k = 0; k < C / 2; ++k) {
        acc0[k] += c0 * r[k];
        acc1[k] += c1 * r[k];
      }
    }
  out[0] = sum_over_v<C>(wv[0].data(), acc0);
  out[1] = sum_over_v<C>(wv[1].data(), acc1);
}

// A support's pair sums: the same taps, a window a row taller, a window a
// cell wider (none where the wider window's weights outgrow Taps).
template <int S>
PairSums pair_sums() {
  if constexpr (S + 2 <= kMaxSupport)
    return {&sum_taps_pair<S, S>, &sum_taps_pair<S + 1, S>, &sum_taps_pair<S, S + 2>};
  else
    return {&sum_taps_pair<S, S>, nullptr, nullptr};
}

// sum_taps' adjoint: the same taps, each plane row taking c times the S
// values wv[jv] * value, kept as 2 S doubles in registers.
template <int S>
void spread_taps(const double* wu, const double* wv, const double* ww, int Sw, Array2D* planes,
                 index_t fu, index_t fv, cplx value) {
  std::array<double, 2 * S> spread;
  for (int jv = 0; jv < S; ++jv) {
    spread[2 * static_cast<size_t>(jv)] = wv[jv] * value.real();
    spread[2 * static_cast<size_t>(jv) + 1] = wv[jv] * value.imag();
  }
  for (int jw = 0; jw < Sw; ++jw) {
    Array2D& plane = planes[jw];
    for (int ju = 0; ju < S; ++ju) {
      const double c = ww[jw] * wu[ju];
      double* row = reinterpret_cast<double*>(plane.data() + (fu + ju) * plane.cols() + fv);
      for (int i = 0; i < 2 * S; ++i) row[i] += c * spread[static_cast<size_t>(i)];
    }
  }
}

// The compiled variant for a support: every even support the kernel
// allows, 2, 4, ..., kMaxSupport.
template <class Fn, int... S>
Fn taps_for(int support, std::integer_sequence<int, S...>) {
  Fn f = nullptr;
  if constexpr (std::is_same_v<Fn, SumTaps>)
    ((support == 2 * (S + 1) ? (f = &sum_taps<2 * (S + 1)>, 0) : 0), ...);
  else
    ((support == 2 * (S + 1) ? (f = &spread_taps<2 * (S + 1)>, 0) : 0), ...);
  return f;
}
}  // namespace

SumTaps Degridder::pick_sum_taps(int support) {
  return taps_for<SumTaps>(support, std::make_integer_sequence<int, kMaxSupport / 2>{});
}
PairSums Degridder::pick_pair_sums(int support) {
  PairSums f;
  [&]<int... H>(std::integer_sequence<int, H...>) {
    ((support == 2 * (H + 1) ? (f = pair_sums<2 * (H + 1)>(), 0) : 0), ...);
  }
  (std::make_integer_sequence<int, kMaxSupport / 2>{});
  return f;
}
SpreadTaps Degridder::pick_spread_taps(int support) {
  return taps_for<SpreadTaps>(support, std::make_integer_sequence<int, kMaxSupport / 2>{});
}

cplx Degridder::degrid_point(double uc, double vc, double w_rel, double w,
                             const Workspace& ws) const {
  const double pos[3] = {uc, vc, w_rel / planes_.dw};
  Taps taps[3];
  index_t first[3];
  uv_kernel_.weights(pos, 2, taps, first);
  w_weights(pos + 2, 1, taps + 2, first + 2);
  return sum_point(taps[0], taps[1], taps[2], first[0], first[1], first[2], uc, vc, w, ws) *
         std::polar(1.0, kTwoPi * w * planes_.centre);
}

void Degridder::check_taps(index_t fu, index_t fv, index_t fw, double uc, double vc, double w,
                           const Workspace& ws) const {
  const index_t xA = p_.xA;
  const int S = uv_kernel_.support(), Sw = w_taps();
  // The binning and the margin guarantee this; a breach would reach outside
  // the tower, so it is checked rather than assumed.
  if (fu < 0 || fv < 0 || fu + S > xA || fv + S > xA || fw < 0 || fw + Sw > ws.plane_count)
    throw std::logic_error(fmt::format(
        "visibility at ({:.2f}, {:.2f}) cells, w {:.1f} reaches outside its subgrid's tower", uc,
        vc, w));
}

cplx Degridder::sum_point(const Taps& wu, const Taps& wv, const Taps& ww, index_t first_u,
                          index_t first_v, index_t first_w, double uc, double vc, double w,
                          const Workspace& ws) const {
  const index_t xA = p_.xA;
  const index_t fu = first_u + xA / 2, fv = first_v + xA / 2, fw = first_w - ws.first_plane;
  check_taps(fu, fv, fw, uc, vc, w, ws);
  return sum_taps_(wu.data(), wv.data(), ww.data(), w_taps(), ws.planes.data() + fw, fu, fv);
}

void Degridder::w_weights(const double* pos, int n, Taps* w, index_t* first) const {
  if (!layout_.w_free()) {
    w_kernel_.weights(pos, n, w, first);
    return;
  }
  for (int i = 0; i < n; ++i) {  // the one plane, whole
    w[i][0] = 1;
    first[i] = 0;
  }
}

namespace {
constexpr int kBlock = 16;  // channels whose tap weights are evaluated together
// Up to kBlock channels of one run as the taps see them: positions in cells
// (u, v), planes (w) and wavelengths (w), each axis' weights and first
// tap, and exp(2 pi i w c0), the factor the planes lack.
struct TapBlock {
  int n = 0;
  std::array<double, kBlock> pu, pv, pw, wl;
  std::array<Taps, kBlock> tu, tv, tw;
  std::array<index_t, kBlock> fu, fv, fw;
  std::array<cplx, kBlock> phase;
  bool same_first_taps(int i, int j) const {
    return fu[static_cast<size_t>(i)] == fu[static_cast<size_t>(j)] &&
           fv[static_cast<size_t>(i)] == fv[static_cast<size_t>(j)] &&
           fw[static_cast<size_t>(i)] == fw[static_cast<size_t>(j)];
  }
};
}  // namespace

template <class VisitBlock>
void Degridder::walk_blocks(const binning::VisRun* begin, const binning::VisRun* end, index_t off0,
                            index_t off1, VisitBlock&& visit) const {
  const double inv_c = 1.0 / telescope::kSpeedOfLight;
  TapBlock b;
  index_t at = 0;
  for (const auto* run_it = begin; run_it != end; ++run_it) {
    const auto& run = *run_it;
    const auto uvw = baseline_uvw(run.baseline, run.time);
    const double w_stack = run.w_stack * layout_.stack_step;
    for (index_t k0 = run.chan_begin; k0 < run.chan_end; k0 += kBlock) {
      b.n = static_cast<int>(std::min<index_t>(kBlock, run.chan_end - k0));
      for (int i = 0; i < b.n; ++i) {
        b.pu[i] = cells_from(uvw.u, k0 + i, off0);
        b.pv[i] = cells_from(uvw.v, k0 + i, off1);
        b.wl[i] = uvw.w * (obs_.freq.at(k0 + i) * inv_c);
        b.pw[i] = (b.wl[i] - w_stack) / planes_.dw;
      }
      uv_kernel_.weights(b.pu.data(), b.n, b.tu.data(), b.fu.data());
      uv_kernel_.weights(b.pv.data(), b.n, b.tv.data(), b.fv.data());
      w_weights(b.pw.data(), b.n, b.tw.data(), b.fw.data());
      // exp(2 pi i w c0) is a phase linear in frequency, so stepped across
      // the block.
      cplx phase = std::polar(1.0, kTwoPi * b.wl[0] * planes_.centre);
      const cplx step = std::polar(1.0, kTwoPi * uvw.w * obs_.freq.step() * inv_c * planes_.centre);
      for (int i = 0; i < b.n; ++i, phase *= step) b.phase[static_cast<size_t>(i)] = phase;
      visit(at, std::as_const(b));
      at += b.n;
    }
  }
}

template <class Visit>
void Degridder::walk_runs(const binning::VisRun* begin, const binning::VisRun* end, index_t off0,
                          index_t off1, Visit&& visit) const {
  walk_blocks(begin, end, off0, off1, [&](index_t at, const TapBlock& b) {
    for (size_t i = 0; i < static_cast<size_t>(b.n); ++i)
      visit(at + static_cast<index_t>(i), b.tu[i], b.tv[i], b.tw[i], b.fu[i], b.fv[i], b.fw[i],
            b.pu[i], b.pv[i], b.wl[i], b.phase[i]);
  });
}

namespace {
// `t` (n taps) moved `shift` taps on, zeros before and after.
Taps shifted(const Taps& t, int n, index_t shift) {
  Taps out{};
  std::copy_n(t.begin(), n, out.begin() + shift);
  return out;
}
}  // namespace

template <class Block>
bool Degridder::sum_pair(const Block& b, size_t i, const Workspace& ws, cplx* out) const {
  const index_t half = p_.xA / 2;
  const int S = uv_kernel_.support(), Sw = w_taps();
  const size_t j = i + 1;
  const index_t du = b.fu[j] - b.fu[i], dv = b.fv[j] - b.fv[i], dw = b.fw[j] - b.fw[i];
  // The window holding both visibilities' taps starts at the lower start.
  const index_t fu = std::min(b.fu[i], b.fu[j]) + half, fv = std::min(b.fv[i], b.fv[j]) + half,
                fw = std::min(b.fw[i], b.fw[j]) - ws.first_plane;
  const Array2D* planes = ws.planes.data() + fw;
  if (du == 0 && dv == 0 && dw == 0) {  // the same taps: checked once
    check_taps(fu, fv, fw, b.pu[i], b.pv[i], b.wl[i], ws);
    pair_sums_.same(&b.tu[i], &b.tv[i], &b.tw[i], Sw, planes, fu, fv, out);
    return true;
  }
  // Otherwise only starts one row or column apart (a track crossing a cell
  // edge between two channels) are summed together. A plane's edge is
  // rarely crossed alone (planes are about ten cells deep in w), so those
  // are summed apart.
  if (dw != 0 || std::abs(du) + std::abs(dv) != 1 || !pair_sums_.taller) return false;
  if (dv != 0 && fv + S + 2 > p_.xA) return false;  // the wider rows would leave the plane
  check_taps(b.fu[i] + half, b.fv[i] + half, b.fw[i] - ws.first_plane, b.pu[i], b.pv[i], b.wl[i],
             ws);
  check_taps(b.fu[j] + half, b.fv[j] + half, b.fw[j] - ws.first_plane, b.pu[j], b.pv[j], b.wl[j],
             ws);
  // Visibility k's taps lie `shift` taps into the window along an axis
  // where the two starts differ by d.
  const auto shift = [](index_t d, size_t k) {
    return static_cast<index_t>(k == 0 ? d < 0 : d > 0);
  };
  Taps tu[2], tv[2];
  for (size_t k = 0; k < 2; ++k) {
    tu[k] = shifted(b.tu[i + k], S, shift(du, k));
    tv[k] = shifted(b.tv[i + k], S, shift(dv, k));
  }
  (du != 0 ? pair_sums_.taller : pair_sums_.wider)(tu, tv, &b.tw[i], Sw, planes, fu, fv, out);
  return true;
}

void Degridder::degrid(const binning::VisRun* begin, const binning::VisRun* end, index_t off0,
                       index_t off1, const Workspace& ws, std::vector<cplx>& out) const {
  walk_blocks(begin, end, off0, off1, [&](index_t, const TapBlock& b) {
    for (size_t i = 0; i < static_cast<size_t>(b.n);) {
      cplx pair[2];
      if (i + 1 < static_cast<size_t>(b.n) && sum_pair(b, i, ws, pair)) {
        out.push_back(pair[0] * b.phase[i]);
        out.push_back(pair[1] * b.phase[i + 1]);
        i += 2;
        continue;
      }
      out.push_back(sum_point(b.tu[i], b.tv[i], b.tw[i], b.fu[i], b.fv[i], b.fw[i], b.pu[i],
                              b.pv[i], b.wl[i], ws) *
                    b.phase[i]);
      ++i;
    }
  });
}

void Degridder::grid(const binning::VisRun* begin, const binning::VisRun* end, index_t off0,
                     index_t off1, const cplx* vis, Workspace& ws) const {
  const index_t xA = p_.xA;
  walk_runs(begin, end, off0, off1,
            [&](index_t i, const Taps& tu, const Taps& tv, const Taps& tw, index_t first_u,
                index_t first_v, index_t first_w, double uc, double vc, double w, cplx phase) {
              const index_t fu = first_u + xA / 2, fv = first_v + xA / 2,
                            fw = first_w - ws.first_plane;
              check_taps(fu, fv, fw, uc, vc, w, ws);
              spread_taps_(tu.data(), tv.data(), tw.data(), w_taps(), ws.planes.data() + fw, fu, fv,
                           vis[i] * std::conj(phase));
            });
}

cplx Degridder::direct(const std::vector<sky::PointSource>& sources, index_t baseline, index_t time,
                       index_t chan) const {
  const auto b = baseline_uvw(baseline, time);
  const double scale = obs_.freq.at(chan) / telescope::kSpeedOfLight;
  return direct_at(sources, b.u * scale, b.v * scale, b.w * scale);
}

cplx Degridder::direct_at(const std::vector<sky::PointSource>& sources, double u, double v,
                          double w) const {
  return sky::direct_visibility(sources, g_.pixel_lm, u, v, w);
}

}  // namespace iotest::degrid
