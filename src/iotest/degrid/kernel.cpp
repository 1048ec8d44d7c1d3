#include "iotest/degrid/kernel.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace iotest::degrid {

GridKernel::GridKernel(int support, double x0)
    : support_(support), x0_(x0), alpha_(1 - x0), pswf_(std::numbers::pi * support * (1 - x0)) {
  if (support < 2 || support > kMaxSupport || support % 2 != 0)
    throw std::invalid_argument("kernel support must be even, from 2 to 16");
  if (!(x0 > 0 && x0 < 0.5)) throw std::invalid_argument("kernel x0 must lie in (0, 1/2)");
  // Transform at 0: the kernel's integral, by Simpson's rule on a fine grid
  // (the kernel is smooth inside its support).
  const int n = 20000;
  const double h = support_ / static_cast<double>(n);
  double sum = 0;
  for (int k = 0; k <= n; ++k) {
    const double t = -support_ / 2.0 + k * h;
    sum += (k == 0 || k == n ? 1 : (k % 2 ? 4 : 2)) * pswf_.evaluate(2 * t / support_);
  }
  transform_at_zero_ = sum * h / 3;

  // Each tap is a smooth function of the fractional offset d in [0, 1):
  // a Chebyshev series in x = 2d - 1, evaluated for all taps at once.
  degree_ = support_ + 8;
  const int nodes = degree_ + 1;
  coeffs_.assign(static_cast<size_t>(nodes), {});
  for (int m = 0; m < nodes; ++m) {
    const double theta = std::numbers::pi * (m + 0.5) / nodes;
    const double x = std::cos(theta), d = (x + 1) / 2;
    for (int j = 0; j < support_; ++j) {
      const double g = value(support_ / 2.0 - j - d);
      for (int k = 0; k < nodes; ++k)
        coeffs_[static_cast<size_t>(k)][static_cast<size_t>(j)] +=
            (k == 0 ? 1.0 : 2.0) / nodes * g * std::cos(k * theta);
    }
  }
  // To monomials in x: T_k(x) expanded with the recurrence
  // T_{k+1} = 2x T_k - T_{k-1}. The series converges fast (|a_k| falls
  // far below the growth of T_k's monomial coefficients), so this stays
  // accurate to ~1e-14 at these degrees (tests/unit/test_kernel.cpp).
  std::vector<std::vector<double>> T{{1.0}, {0.0, 1.0}};
  for (int k = 2; k < nodes; ++k) {
    std::vector<double> next(static_cast<size_t>(k + 1), 0.0);
    for (int i = 0; i < k; ++i)
      next[static_cast<size_t>(i + 1)] += 2 * T[static_cast<size_t>(k - 1)][static_cast<size_t>(i)];
    for (int i = 0; i < k - 1; ++i)
      next[static_cast<size_t>(i)] -= T[static_cast<size_t>(k - 2)][static_cast<size_t>(i)];
    T.push_back(std::move(next));
  }
  std::vector<Taps> monomial(static_cast<size_t>(nodes));
  for (int k = 0; k < nodes; ++k)
    for (int i = 0; i <= k; ++i)
      for (int j = 0; j < support_; ++j)
        monomial[static_cast<size_t>(i)][static_cast<size_t>(j)] +=
            T[static_cast<size_t>(k)][static_cast<size_t>(i)] *
            coeffs_[static_cast<size_t>(k)][static_cast<size_t>(j)];
  coeffs_ = std::move(monomial);
}

double GridKernel::value(double t) const {
  const double s = 2 * t / support_;
  return std::abs(s) <= 1 ? pswf_.evaluate(s) : 0.0;
}

index_t GridKernel::weights(double pos, Taps& w) const {
  index_t first = 0;
  weights(&pos, 1, &w, &first);
  return first;
}

void GridKernel::weights(const double* pos, int n, Taps* w, index_t* first) const {
  constexpr int kLanes = 4;  // positions per interleaved group (a0..a3 below)
  for (int i0 = 0; i0 < n; i0 += kLanes) {
    const int lanes = std::min(kLanes, n - i0);
    std::array<double, kLanes> x{};
    for (int b = 0; b < lanes; ++b) {
      const double left = pos[i0 + b] - support_ / 2.0;
      const double f = std::ceil(left);
      x[static_cast<size_t>(b)] = 2 * (f - left) - 1;
      first[i0 + b] = static_cast<index_t>(f);
    }
    // Horner's rule on the monomial coefficients, all taps of the four
    // lanes side by side: 4 x kMaxSupport independent chains that vectorise
    // over the taps (written out per lane so the compiler keeps them in
    // registers instead of transposing).
    const Taps& top = coeffs_[static_cast<size_t>(degree_)];
    Taps a0 = top, a1 = top, a2 = top, a3 = top;
    for (int k = degree_ - 1; k >= 0; --k) {
      const Taps& c = coeffs_[static_cast<size_t>(k)];
      for (size_t j = 0; j < kMaxSupport; ++j) {
        a0[j] = a0[j] * x[0] + c[j];
        a1[j] = a1[j] * x[1] + c[j];
        a2[j] = a2[j] * x[2] + c[j];
        a3[j] = a3[j] * x[3] + c[j];
      }
    }
    const std::array<const Taps*, kLanes> acc{&a0, &a1, &a2, &a3};
    for (int b = 0; b < lanes; ++b) w[i0 + b] = *acc[static_cast<size_t>(b)];
  }
}

double GridKernel::correction(double nu) const {
  // The PSWF is (up to scale) its own finite Fourier transform:
  // int K(t) exp(-2 pi i t nu) dt = K^(0) psi(nu / alpha) / psi(0).
  return transform_at_zero_ * pswf_.evaluate(nu / alpha_);
}

}  // namespace iotest::degrid
