#include "iotest/degrid/kernel.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "iotest/common/vec4.hpp"

namespace iotest::degrid {
namespace {
// Horner's rule on the monomial coefficients `coeffs` (per power, then
// tap) for four positions at once: a vector per tap holds the four
// positions' chains, so a step is S independent multiply-adds by the
// positions' x, with the coefficient broadcast. S, the support, is a
// compile-time constant so that the S vectors stay in registers. Every
// lane takes the same operations (a x + c, fused where the target has FMA
// and the compiler contracts), so a position's weights do not depend on
// its place in its group.
template <int S>
void horner_taps(const std::vector<Taps>& coeffs, int degree, int support, const double* pos, int n,
                 Taps* w, index_t* first) {
  constexpr int kLanes = 4;  // positions a group
  for (int i0 = 0; i0 < n; i0 += kLanes) {
    const int lanes = std::min(kLanes, n - i0);
    Vec4 x = {};
    for (int b = 0; b < lanes; ++b) {
      const double left = pos[i0 + b] - support / 2.0;
      const double f = std::ceil(left);
      x[b] = 2 * (f - left) - 1;
      first[i0 + b] = static_cast<index_t>(f);
    }
    Vec4 acc[S];
    const Taps& top = coeffs[static_cast<size_t>(degree)];
    for (int j = 0; j < S; ++j) acc[j] = Vec4{} + top[static_cast<size_t>(j)];
    for (int k = degree - 1; k >= 0; --k) {
      const Taps& c = coeffs[static_cast<size_t>(k)];
      for (int j = 0; j < S; ++j) acc[j] = acc[j] * x + c[static_cast<size_t>(j)];
    }
    for (int b = 0; b < lanes; ++b)
      for (int j = 0; j < S; ++j) w[i0 + b][static_cast<size_t>(j)] = acc[j][b];
  }
}

// The Horner loop for every even support the constructor allows: 2, 4,
// ..., kMaxSupport.
template <int... H>
GridKernel::HornerTaps horner_for(int support, std::integer_sequence<int, H...>) {
  GridKernel::HornerTaps f = nullptr;
  ((support == 2 * (H + 1) ? (f = &horner_taps<2 * (H + 1)>, 0) : 0), ...);
  return f;
}
}  // namespace

GridKernel::GridKernel(int support, double x0)
    : support_(support), x0_(x0), alpha_(1 - x0), pswf_(std::numbers::pi * support * (1 - x0)) {
  if (support < 2 || support > kMaxSupport || support % 2 != 0)
    throw std::invalid_argument("kernel support must be even, from 2 to 16");
  horner_ = horner_for(support, std::make_integer_sequence<int, kMaxSupport / 2>{});
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
  // a Chebyshev series in x = 2d - 1, evaluated for all taps at once,
  // interpolated at support + 9 nodes (accurate to ~1e-14).
  const int nodes = support_ + 9;
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
  // Truncated where the dropped terms (|T_k| <= 1) add up to at most
  // kFitError, far below the kernels' own errors (>= 1e-10): the Horner
  // loop, the hot path's second cost, then runs degree 11 instead of 20 for
  // support 12 at x0 = 3/8 (13 instead of 16 for the w kernel).
  constexpr double kFitError = 1e-13;
  double dropped = 0;
  degree_ = nodes - 1;
  while (degree_ > 1) {
    double largest = 0;
    for (int j = 0; j < support_; ++j)
      largest = std::max(largest,
                         std::abs(coeffs_[static_cast<size_t>(degree_)][static_cast<size_t>(j)]));
    if (dropped + largest > kFitError) break;
    dropped += largest;
    --degree_;
  }
  coeffs_.resize(static_cast<size_t>(degree_ + 1));
  const int terms = degree_ + 1;
  // To monomials in x: T_k(x) expanded with the recurrence
  // T_{k+1} = 2x T_k - T_{k-1}. The series converges fast (|a_k| falls
  // far below the growth of T_k's monomial coefficients), so this stays
  // accurate to ~1e-14 at these degrees (tests/unit/test_kernel.cpp).
  std::vector<std::vector<double>> T{{1.0}, {0.0, 1.0}};
  for (int k = 2; k < terms; ++k) {
    std::vector<double> next(static_cast<size_t>(k + 1), 0.0);
    for (int i = 0; i < k; ++i)
      next[static_cast<size_t>(i + 1)] += 2 * T[static_cast<size_t>(k - 1)][static_cast<size_t>(i)];
    for (int i = 0; i < k - 1; ++i)
      next[static_cast<size_t>(i)] -= T[static_cast<size_t>(k - 2)][static_cast<size_t>(i)];
    T.push_back(std::move(next));
  }
  std::vector<Taps> monomial(static_cast<size_t>(terms));
  for (int k = 0; k < terms; ++k)
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
  horner_(coeffs_, degree_, support_, pos, n, w, first);
}

double GridKernel::correction(double nu) const {
  // The PSWF is (up to scale) its own finite Fourier transform:
  // int K(t) exp(-2 pi i t nu) dt = K^(0) psi(nu / alpha) / psi(0).
  return transform_at_zero_ * pswf_.evaluate(nu / alpha_);
}

}  // namespace iotest::degrid
