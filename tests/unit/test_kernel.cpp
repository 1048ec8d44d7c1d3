// The gridding kernel: its fast tap weights against direct evaluation, and
// 1-D degridding of a corrected grid against the direct Fourier transform.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>

#include "iotest/degrid/kernel.hpp"

namespace iotest::degrid {
namespace {

TEST(GridKernel, TapWeightsMatchDirectEvaluation) {
  for (int support : {4, 8, 12, 16}) {
    const GridKernel k(support, 0.375);
    std::array<double, kMaxSupport> w{};
    for (double pos : {0.0, 0.25, 0.5, 3.999, -7.3, 1000.123456}) {
      const index_t first = k.weights(pos, w);
      EXPECT_LE(pos - support / 2.0, static_cast<double>(first));
      EXPECT_GT(pos - support / 2.0 + 1, static_cast<double>(first));
      for (int j = 0; j < support; ++j)
        // Far below the kernel's own error (>= 3e-12 at support 16).
        EXPECT_NEAR(w[j], k.value(pos - static_cast<double>(first + j)), 2e-12)
            << "support " << support << " pos " << pos << " tap " << j;
    }
  }
}

TEST(GridKernel, TapPolynomialsAreTruncated) {
  // The series stops where the dropped terms fall below 1e-13 (the test
  // above holds the weights to 2e-12): degree 11 for support 12 at
  // x0 = 3/8, not the 20 it is interpolated at.
  EXPECT_EQ(GridKernel(12, 0.375).degree(), 11);
  EXPECT_EQ(GridKernel(8, 0.1875).degree(), 13);
}

TEST(GridKernel, BatchWeightsEqualSingleWeights) {
  // The hot path evaluates positions four at a time; a partial group (here
  // 7 = 4 + 3) must give each position exactly its own weights.
  const GridKernel k(12, 0.375);
  const double pos[7] = {0.0, 0.3, -2.7, 11.01, 5.5, -100.25, 0.999};
  Taps batch[7];
  index_t first[7];
  k.weights(pos, 7, batch, first);
  for (int i = 0; i < 7; ++i) {
    Taps one{};
    EXPECT_EQ(first[i], k.weights(pos[i], one)) << "position " << pos[i];
    for (int j = 0; j < k.support(); ++j) {
      EXPECT_EQ(batch[i][static_cast<size_t>(j)], one[static_cast<size_t>(j)]);
      EXPECT_NEAR(one[static_cast<size_t>(j)], k.value(pos[i] - static_cast<double>(first[i] + j)),
                  2e-12);
    }
  }
}

// Relative RMS error of degridding a corrected 1-D grid at random points,
// against the direct transform of random point sources.
double degrid_error_1d(int support, double x0) {
  const GridKernel k(support, x0);
  const index_t N = 256;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<index_t> pos(static_cast<index_t>(-x0 * N),
                                             static_cast<index_t>(x0 * N) - 1);
  std::vector<index_t> sources(12);
  for (auto& s : sources) s = pos(rng);
  std::vector<std::complex<double>> grid(static_cast<size_t>(N));
  for (index_t c = 0; c < N; ++c)
    for (index_t s : sources)
      grid[static_cast<size_t>(c)] +=
          std::polar(1.0 / k.correction(static_cast<double>(s) / N),
                     2 * std::numbers::pi * static_cast<double>(c * s) / N);
  std::uniform_real_distribution<double> u(-N / 2.0, N / 2.0);
  double err = 0, ref = 0;
  std::array<double, kMaxSupport> w{};
  for (int i = 0; i < 200; ++i) {
    const double uc = u(rng);
    const index_t first = k.weights(uc, w);
    std::complex<double> got = 0, want = 0;
    for (int j = 0; j < support; ++j)
      got += w[j] * grid[static_cast<size_t>(((first + j) % N + N) % N)];
    for (index_t s : sources) want += std::polar(1.0, 2 * std::numbers::pi * uc * s / N);
    err += std::norm(got - want);
    ref += std::norm(want);
  }
  return std::sqrt(err / ref);
}

TEST(GridKernel, DegriddingMatchesTheDirectTransform) {
  // Stated tolerances per support at x0 = 0.375 (the used image fraction
  // f = 3/4); the error falls about 5x per extra cell of support.
  const std::pair<int, double> cases[] = {{6, 3e-4},  {8, 1e-5},  {10, 1e-6},
                                          {12, 1e-8}, {14, 1e-9}, {16, 1e-10}};
  double previous = 1;
  for (const auto& [support, tolerance] : cases) {
    const double e = degrid_error_1d(support, 0.375);
    EXPECT_LT(e, tolerance) << "support " << support;
    EXPECT_LT(e, previous) << "support " << support;
    previous = e;
  }
}

}  // namespace
}  // namespace iotest::degrid
