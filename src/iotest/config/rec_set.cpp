#include "iotest/config/rec_set.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "iotest/common/errors.hpp"

namespace iotest::config {
namespace {

constexpr std::string_view kOption = "--rec-set";

// The published families: facets per axis for each (N/yN as p/q, xM), read
// off the 420 published sets (tests/data/rec-sets.csv). Within a family the
// count does not depend on N.
struct Family {
  index_t ratio_num, ratio_den, xM, facets_per_axis;
};
constexpr Family kFamilies[] = {
    {1, 1, 256, 2},     {4, 3, 256, 3},    {2, 1, 256, 3},    {2, 1, 512, 3},    {8, 3, 256, 4},
    {8, 3, 512, 4},     {3, 1, 768, 6},    {4, 1, 256, 6},    {4, 1, 512, 8},    {4, 1, 768, 6},
    {4, 1, 1024, 6},    {16, 3, 256, 12},  {16, 3, 512, 8},   {16, 3, 1024, 8},  {6, 1, 768, 9},
    {6, 1, 1536, 9},    {8, 1, 512, 12},   {8, 1, 768, 16},   {8, 1, 1024, 16},  {8, 1, 1536, 12},
    {8, 1, 2048, 12},   {32, 3, 512, 24},  {32, 3, 1024, 16}, {32, 3, 2048, 16}, {12, 1, 768, 18},
    {12, 1, 1536, 24},  {16, 1, 768, 36},  {16, 1, 1024, 24}, {16, 1, 1536, 32}, {16, 1, 2048, 32},
    {64, 3, 1024, 48},  {64, 3, 2048, 32}, {24, 1, 1536, 36}, {32, 1, 1536, 72}, {32, 1, 2048, 48},
    {128, 3, 2048, 96},
};

index_t ceil_div(index_t a, index_t b) {
  return (a + b - 1) / b;
}
index_t round_up(index_t a, index_t step) {
  return ceil_div(a, step) * step;
}

[[noreturn]] void reject(std::string_view name, const std::string& why) {
  throw UsageError(std::string(kOption), "'" + std::string(name) + "': " + why);
}

std::string expected_names() {
  std::string s = "expected image-facet-subgrid such as 16k-8k-512 (k = 1024), or one of";
  for (const auto& a : aliases()) s += " " + std::string(a.name);
  return s;
}

}  // namespace

const std::vector<Alias>& aliases() {
  // T05_ is published as 512-216-256, which breaks the constraints (a 256
  // subgrid of a 512 grid, yN = 216 off the grid); we keep its spirit: a
  // 512-pixel image in 3x3 facets and 36 subgrids of 88 pixels.
  static const std::vector<Alias> list = {
      {"T05_", "512-256-128"},       {"tiny", "8k-2k-512"},    {"small", "16k-8k-512"},
      {"smallish", "32k-8k-1k"},     {"medium", "64k-16k-1k"}, {"large", "96k-12k-1k"},
      {"tremendous", "128k-32k-2k"}, {"huge", "256k-32k-2k"},
  };
  return list;
}

std::optional<index_t> parse_size(std::string_view text) {
  index_t scale = 1;
  if (!text.empty() && (text.back() == 'k' || text.back() == 'K')) {
    scale = 1024;
    text.remove_suffix(1);
  }
  index_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value <= 0 ||
      value > (index_t{1} << 40) / scale)
    return std::nullopt;
  return value * scale;
}

std::string format_size(index_t size) {
  return size % 1024 == 0 ? std::to_string(size / 1024) + "k" : std::to_string(size);
}

std::optional<index_t> published_facets_per_axis(index_t N, index_t yN, index_t xM) {
  const index_t g = std::gcd(N, yN);
  for (const auto& fam : kFamilies)
    if (fam.xM == xM && fam.ratio_num == N / g && fam.ratio_den == yN / g)
      return fam.facets_per_axis;
  return std::nullopt;
}

index_t default_facets_per_axis(index_t N, index_t yN) {
  // ceil(f * N / yB) with yB = yN/2 and f = 3/4: ceil(3N / (2 yN)).
  return ceil_div(3 * N, 2 * yN);
}

double window_width_for(double facet_fill) {
  // Calibrated with tools/window_calibration.py (docs/recombination-sets.md):
  // W = 18 (yB/yN = 1/3), 18.5 (3/8), 20 (1/2) give errors of 2e-13..5e-13.
  return std::ceil(2.0 * (14.0 + 12.0 * facet_fill)) / 2.0;
}

double RecombinationParams::wire_efficiency_per_axis() const {
  return static_cast<double>(xA) * f / static_cast<double>(facets_per_axis * m);
}

RecombinationParams derive_params(std::string_view name, index_t N, index_t yN, index_t xM,
                                  index_t facets_per_axis, const Overrides& overrides) {
  RecombinationParams p;
  p.name = std::string(name);
  p.canonical = format_size(N) + "-" + format_size(yN) + "-" + format_size(xM);
  p.N = N;
  p.yN = yN;
  p.xM = xM;
  p.facets_per_axis = facets_per_axis;

  if (N % 8 != 0) reject(name, "image size " + std::to_string(N) + " must be a multiple of 8");
  if (yN > N || yN % 2 != 0)
    reject(name, "facet size " + std::to_string(yN) + " must be even and at most the image size");
  if (xM > N || N % xM != 0)
    reject(name, "subgrid size " + std::to_string(xM) + " must divide the image size " +
                     std::to_string(N));
  if ((xM * yN) % N != 0 || ((xM * yN) / N) % 2 != 0)
    reject(name, "contribution size xM*yN/N = " + std::to_string(xM) + "*" + std::to_string(yN) +
                     "/" + std::to_string(N) + " must be an even integer");
  p.m = xM * yN / N;
  p.facet_granularity = N / std::gcd(N, xM);
  p.subgrid_granularity = N / std::gcd(N, yN);

  // Facets: the smallest facet step (hence yB) that covers f*N with the
  // family's count. Offsets (j - (nf-1)/2) * step must be multiples of the
  // facet granularity, and even so that facet borders fall on pixels.
  p.f = static_cast<double>(kUsedFractionNum) / kUsedFractionDen;
  p.used_size = N * kUsedFractionNum / kUsedFractionDen;
  const index_t nf = facets_per_axis;
  const index_t step_unit =
      nf % 2 == 0 ? 2 * p.facet_granularity : std::lcm(p.facet_granularity, index_t{2});
  p.facet_step = round_up(ceil_div(p.used_size, nf), step_unit);
  p.yB = p.facet_step;
  if (ceil_div(p.used_size, p.yB) != nf)
    reject(name, "no facet size on the facet grid (multiples of " + std::to_string(step_unit) +
                     ") gives " + std::to_string(nf) + " facets per axis");
  if (p.yB >= yN)
    reject(name, std::to_string(nf) + " facets per axis need yB = " + std::to_string(p.yB) +
                     ", which does not fit in the padded facet size " + std::to_string(yN));

  // Window: as wide as accuracy can use; it costs usable subgrid width.
  p.W = overrides.window_width.value_or(
      window_width_for(static_cast<double>(p.yB) / static_cast<double>(yN)));
  if (!(p.W > 0) || p.W >= static_cast<double>(p.m))
    throw UsageError("--window-width", "expected 0 < W < m = " + std::to_string(p.m) + ", got " +
                                           std::to_string(p.W));
  const double margin = p.W * static_cast<double>(N) / static_cast<double>(yN);
  p.xA = static_cast<index_t>(std::floor(static_cast<double>(xM) - margin)) / 2 * 2;
  if (p.xA < std::max<index_t>(2, p.subgrid_granularity))
    reject(name, "the window (W = " + std::to_string(p.W) +
                     ") leaves no usable subgrid: xA <= xM - W*N/yN = " + std::to_string(p.xA));

  // Subgrids: a regular step that is a multiple of the subgrid granularity,
  // no larger than xA, tiling the periodic grid.
  p.margin = overrides.margin;
  const index_t max_step = (p.xA - p.margin) / p.subgrid_granularity * p.subgrid_granularity;
  if (p.margin < 0 || max_step < p.subgrid_granularity)
    throw UsageError("--margin", "expected 0 <= margin <= xA - " +
                                     std::to_string(p.subgrid_granularity) + " = " +
                                     std::to_string(p.xA - p.subgrid_granularity) + " for " +
                                     p.canonical + ", got " + std::to_string(p.margin));
  p.subgrids_per_axis = ceil_div(N, max_step);
  p.subgrid_step = round_up(ceil_div(N, p.subgrids_per_axis), p.subgrid_granularity);
  return p;
}

RecombinationParams resolve_rec_set(std::string_view name, const Overrides& overrides) {
  std::string_view canonical = name;
  for (const auto& a : aliases())
    if (a.name == name) canonical = a.canonical;

  // Split image-facet-subgrid into exactly three sizes.
  std::vector<std::string_view> parts;
  for (std::string_view rest = canonical;;) {
    const auto dash = rest.find('-');
    parts.push_back(rest.substr(0, dash));
    if (dash == std::string_view::npos) break;
    rest.remove_prefix(dash + 1);
  }
  if (parts.size() != 3)
    throw UsageError(std::string(kOption), "unknown recombination set '" + std::string(name) +
                                               "' (" + expected_names() + ")");
  const auto N = parse_size(parts[0]);
  const auto yN = parse_size(parts[1]);
  const auto xM = parse_size(parts[2]);
  if (!N || !yN || !xM)
    throw UsageError(std::string(kOption), "unknown recombination set '" + std::string(name) +
                                               "' (" + expected_names() + ")");
  const index_t nf =
      published_facets_per_axis(*N, *yN, *xM).value_or(default_facets_per_axis(*N, *yN));
  return derive_params(name, *N, *yN, *xM, nf, overrides);
}

}  // namespace iotest::config
