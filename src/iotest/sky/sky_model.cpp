#include "iotest/sky/sky_model.hpp"

#include <cmath>
#include <numbers>
#include <random>
#include <set>
#include <utility>

namespace iotest::sky {

std::vector<PointSource> random_sources(index_t count, index_t used_size, std::uint64_t seed) {
  // mt19937_64 is specified exactly by the standard; the modulo keeps the
  // mapping platform-independent (its bias is below 1e-13 for these sizes).
  std::mt19937_64 rng(seed);
  const auto draw = [&] {
    return static_cast<index_t>(rng() % static_cast<std::uint64_t>(used_size)) - used_size / 2;
  };
  std::set<std::pair<index_t, index_t>> taken;
  std::vector<PointSource> sources;
  while (static_cast<index_t>(sources.size()) < count) {
    const PointSource s{draw(), draw()};
    if (taken.insert({s.y0, s.y1}).second) sources.push_back(s);
  }
  return sources;
}

void fill_facet(const std::vector<PointSource>& sources, const swiftly::Tile& t0,
                const swiftly::Tile& t1, MView2D facet) {
  for (index_t r = 0; r < facet.rows; ++r)
    std::fill(facet.row(r), facet.row(r) + facet.cols, cplx{});
  const index_t half = facet.rows / 2;
  for (const auto& s : sources) {
    const index_t a = s.y0 - t0.offset, b = s.y1 - t1.offset;
    if (a >= t0.lo && a < t0.hi && b >= t1.lo && b < t1.hi)
      facet(a + half, b + half) += kSourceFluxJy;
  }
}

UnitRoots::UnitRoots(index_t N) : N_(N), table_(static_cast<size_t>(N)) {
  for (index_t k = 0; k < N; ++k) {
    const double angle = 2 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(N);
    table_[static_cast<size_t>(k)] = {std::cos(angle), std::sin(angle)};
  }
}

void dft_subgrid(const std::vector<PointSource>& sources, const UnitRoots& roots,
                 index_t subgrid_off0, index_t subgrid_off1, MView2D subgrid,
                 std::span<const cplx> amplitudes) {
  const index_t xA = subgrid.rows, N = roots.N();
  const double norm = 1.0 / (static_cast<double>(N) * static_cast<double>(N));
  for (index_t r = 0; r < xA; ++r) std::fill(subgrid.row(r), subgrid.row(r) + xA, cplx{});
  // Separable per source: an outer product of two phase vectors.
  std::vector<cplx> a(static_cast<size_t>(xA)), b(static_cast<size_t>(xA));
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    const cplx scale = norm * (amplitudes.empty() ? cplx(kSourceFluxJy) : amplitudes[i]);
    for (index_t u = 0; u < xA; ++u) {
      a[static_cast<size_t>(u)] = scale * roots((subgrid_off0 + u - xA / 2) * s.y0);
      b[static_cast<size_t>(u)] = roots((subgrid_off1 + u - xA / 2) * s.y1);
    }
    for (index_t r = 0; r < xA; ++r) {
      const cplx ar = a[static_cast<size_t>(r)];
      cplx* row = subgrid.row(r);
      for (index_t c = 0; c < xA; ++c) row[c] += ar * b[static_cast<size_t>(c)];
    }
  }
}

cplx direct_visibility(const std::vector<PointSource>& sources, double pixel_lm, double u, double v,
                       double w) {
  cplx sum = 0;
  for (const auto& s : sources) {
    const double l = static_cast<double>(s.y0) * pixel_lm, m = static_cast<double>(s.y1) * pixel_lm;
    const double n = std::sqrt(1 - l * l - m * m);
    sum += std::polar(1.0, 2 * std::numbers::pi * (u * l + v * m + w * (n - 1)));
  }
  return kSourceFluxJy * sum;
}

void apply_subgrid_mask(const swiftly::Tile& t0, const swiftly::Tile& t1, MView2D subgrid) {
  const index_t half = subgrid.rows / 2;
  for (index_t r = 0; r < subgrid.rows; ++r)
    for (index_t c = 0; c < subgrid.cols; ++c) {
      const index_t u0 = r - half, u1 = c - half;
      if (u0 < t0.lo || u0 >= t0.hi || u1 < t1.lo || u1 >= t1.hi) subgrid(r, c) = 0;
    }
}

}  // namespace iotest::sky
