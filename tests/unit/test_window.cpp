// The PSWF window against scipy's pro_ang1 and against its defining
// integral equation.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>

#include "iotest/swiftly/window.hpp"

namespace iotest::swiftly {
namespace {

TEST(Window, MatchesScipyProAng1) {
  // scipy.special.pro_ang1(0, 0, c, x)[0] / pro_ang1(0, 0, c, 0)[0], c = W pi / 2.
  struct Case {
    double W, x, value;
  };
  const Case cases[] = {
      {9.25, 0.25, 0.6461113498294315},    {9.25, 0.5, 0.159153136694899},
      {9.25, 0.75, 0.009922506033340668},  {9.25, 0.9, 0.0005011086807723211},
      {20.0, 0.25, 0.37785432053376683},   {20.0, 0.5, 0.01654939795690591},
      {20.0, 0.75, 3.251367371499756e-05}, {20.0, 0.9, 3.6206469517601235e-08},
  };
  for (const auto& c : cases) {
    const Pswf pswf(c.W * std::numbers::pi / 2);
    // scipy's specfun loses digits as c grows (the integral-equation test
    // below holds ours to 1e-12), so agreement is asked to 1e-8.
    EXPECT_NEAR(pswf(c.x) / c.value, 1.0, 1e-8) << "W=" << c.W << " x=" << c.x;
    EXPECT_DOUBLE_EQ(pswf(-c.x), pswf(c.x));
  }
}

TEST(Window, SatisfiesItsIntegralEquation) {
  // int_{-1}^{1} exp(i c x t) psi(t) dt = lambda psi(x); composite Simpson.
  for (double c : {5.0, 14.5, 31.4}) {
    const Pswf psi(c);
    const int n = 20000;
    const double h = 2.0 / n;
    auto transform = [&](double x) {
      std::complex<double> sum = 0;
      for (int k = 0; k <= n; ++k) {
        const double t = -1 + k * h;
        const double w = (k == 0 || k == n) ? 1 : (k % 2 ? 4 : 2);
        sum += w * std::exp(std::complex<double>(0, c * x * t)) * psi.evaluate(t);
      }
      return sum * h / 3.0;
    };
    const double lambda = transform(0).real();
    for (double x : {0.2, 0.5, 0.8, 0.95}) {
      const auto lhs = transform(x);
      EXPECT_NEAR(lhs.real() / lambda, psi(x), 1e-12) << "c=" << c << " x=" << x;
      EXPECT_NEAR(lhs.imag() / lambda, 0, 1e-12);
    }
  }
}

TEST(Window, SampledWindowPeaksAtTheCentre) {
  const auto w = sample_window(20.0, 64);
  ASSERT_EQ(w.size(), 64u);
  EXPECT_DOUBLE_EQ(w[32], 1.0);
  EXPECT_EQ(w[0], 0.0);  // x = -1 lies outside the open support
  for (size_t i = 1; i < 32; ++i) {
    EXPECT_DOUBLE_EQ(w[32 - i], w[32 + i]);
    EXPECT_LT(w[32 - i], w[33 - i]);
  }
}

}  // namespace
}  // namespace iotest::swiftly
