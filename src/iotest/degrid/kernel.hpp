// The separable gridding kernel of the degridder: a PSWF `support` cells
// wide, for grids whose image uses |nu| <= x0 of the period (nu in cycles
// per cell). Its Fourier transform over the used image is the grid
// correction, applied on the facet side so the pipeline stays exact.
#pragma once

#include <array>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/swiftly/window.hpp"

namespace iotest::degrid {

inline constexpr int kMaxSupport = 16;
using Taps = std::array<double, kMaxSupport>;

class GridKernel {
 public:
  // The PSWF parameter is c = pi * support * (1 - x0): the kernel's
  // transform is concentrated on |nu| <= 1 - x0, so the aliases of the used
  // part |nu| <= x0 fall where it has decayed.
  GridKernel(int support, double x0);

  int support() const { return support_; }
  double x0() const { return x0_; }
  // Degree of the tap polynomials (chosen in the constructor).
  int degree() const { return degree_; }

  // The kernel at t cells from the visibility (direct evaluation, slow).
  double value(double t) const;
  // Weights of the `support` taps around position `pos` (in cells); tap j
  // applies to cell first + j, where first is returned.
  index_t weights(double pos, Taps& w) const;
  // The same at n positions at once (the hot path): the positions' Horner
  // chains interleave, which hides the multiply-add latency that bounds a
  // single position.
  void weights(const double* pos, int n, Taps* w, index_t* first) const;
  // The kernel's Fourier transform at nu cycles per cell, |nu| <= x0.
  double correction(double nu) const;
  // The tap polynomials' monomial coefficients in x = 2 d - 1, per power
  // (degree() + 1 of them) then tap: what weights() evaluates, for the GPU
  // path's copy (src/iotest/device/tap_math.hpp).
  const std::vector<Taps>& coefficients() const { return coeffs_; }

  // The hot loop of weights(), compiled for each support.
  using HornerTaps = void (*)(const std::vector<Taps>& coeffs, int degree, int support,
                              const double* pos, int n, Taps* w, index_t* first);

 private:
  int support_;
  double x0_, alpha_;
  swiftly::Pswf pswf_;
  double transform_at_zero_ = 0;
  int degree_ = 0;
  // Polynomial coefficients in x = 2 d - 1 (d the fractional offset), per
  // power then tap (fitted at Chebyshev nodes).
  std::vector<Taps> coeffs_;
  HornerTaps horner_ = nullptr;
};

}  // namespace iotest::degrid
