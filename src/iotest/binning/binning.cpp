#include "iotest/binning/binning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"

namespace iotest::binning {

GridGeometry grid_geometry(const config::RecombinationParams& p,
                           const telescope::Observation& obs) {
  GridGeometry g;
  g.max_uv = obs.layout.max_baseline_m() * obs.freq.end / telescope::kSpeedOfLight;
  g.pixel_lm = 1.0 / (2.0 * g.max_uv);
  g.cell_uv = 1.0 / (static_cast<double>(p.N) * g.pixel_lm);
  g.field_lm = p.f * static_cast<double>(p.N) * g.pixel_lm;
  // The corners of the used field must stay above the horizon.
  if (g.field_lm / 2 * std::sqrt(2.0) >= 1.0)
    throw UsageError("--vis-set",
                     fmt::format("{} with {} would image a field of {:.2f} in direction cosines, "
                                 "beyond the horizon; use a smaller image or a shorter array",
                                 obs.vis_set, p.canonical, g.field_lm));
  return g;
}

SubgridLocator::SubgridLocator(const config::RecombinationParams& p)
    : N_(p.N), tiles_(swiftly::subgrid_tiles(p)), owner_(static_cast<size_t>(p.N), -1) {
  for (size_t i = 0; i < tiles_.size(); ++i)
    for (index_t c = tiles_[i].offset + tiles_[i].lo; c < tiles_[i].offset + tiles_[i].hi; ++c)
      owner_[static_cast<size_t>(wrap(c))] = static_cast<std::int32_t>(i);
}

std::pair<index_t, index_t> SubgridLocator::tile_span(index_t tile, index_t cell) const {
  const auto& t = tiles_[static_cast<size_t>(tile)];
  const index_t into = wrap(cell - (t.offset + t.lo));  // cells from the tile's first
  return {cell - into, cell - into + (t.hi - t.lo)};
}

bool SubgridLocator::tile_meets(index_t tile, index_t lo, index_t hi) const {
  if (hi - lo + 1 >= N_) return true;
  const auto& t = tiles_[static_cast<size_t>(tile)];
  const index_t first = t.offset + t.lo, length = t.hi - t.lo;
  // The tile starts inside [lo, hi], or [lo, hi] starts inside the tile.
  return wrap(first - lo) <= hi - lo || wrap(lo - first) < length;
}

Binner::Binner(const config::RecombinationParams& p, const telescope::Observation& obs,
               const GridGeometry& g, const RunSplit& split)
    : obs_(obs),
      locate_(p),
      split_(split),
      times_(obs.time.steps),
      time_chunk_(obs.time.chunk),
      channels_(obs.freq.steps),
      chunk_(obs.freq.chunk),
      antennas_(obs.antenna_count()),
      per_metre_(1.0 / (telescope::kSpeedOfLight * g.cell_uv)),
      per_stack_(split.w_stack_step > 0 ? 1.0 / (telescope::kSpeedOfLight * split.w_stack_step)
                                        : 0.0),
      f0_(obs.freq.start),
      df_(obs.freq.step()),
      baselines_(obs.baselines()) {
  uvw_.reserve(static_cast<size_t>(times_ * antennas_));
  for (index_t t = 0; t < times_; ++t)
    for (const auto& a : obs.antenna_uvw(t)) uvw_.push_back(a);
  // Each baseline's bounds over the whole observation, and the stacks.
  track_boxes_.resize(baselines_.size());
  index_t s_lo = 0, s_hi = 0;
  for (size_t b = 0; b < baselines_.size(); ++b) {
    Box all{0, -1, 0, -1, 0, -1};
    for (const auto& piece : pieces_of(static_cast<index_t>(b))) {
      const Box box = piece_box(static_cast<index_t>(b), piece.t_begin, piece.t_end);
      if (all.u_hi < all.u_lo) {
        all = box;
        continue;
      }
      all = {std::min(all.u_lo, box.u_lo), std::max(all.u_hi, box.u_hi),
             std::min(all.v_lo, box.v_lo), std::max(all.v_hi, box.v_hi),
             std::min(all.s_lo, box.s_lo), std::max(all.s_hi, box.s_hi)};
    }
    track_boxes_[b] = all;
    s_lo = std::min(s_lo, all.s_lo);
    s_hi = std::max(s_hi, all.s_hi);
  }
  first_stack_ = s_lo;
  stacks_ = s_hi - s_lo + 1;
}

index_t Binner::visibility_count() const {
  index_t rows = 0;
  for (index_t b = 0; b < static_cast<index_t>(baselines_.size()); ++b) rows += !leaves_out(b);
  return rows * times_ * channels_;
}

void Binner::widen_w_range(const VisRun& run, double& lo, double& hi) const {
  // As the degridder computes it, so the tower holds every visibility.
  const double w_m = baseline_w(run.baseline, run.time), inv_c = 1.0 / telescope::kSpeedOfLight;
  const double w_stack = static_cast<double>(run.w_stack) * split_.w_stack_step;
  for (const index_t k : {index_t{run.chan_begin}, index_t{run.chan_end - 1}}) {
    const double w = w_m * obs_.freq.at(k) * inv_c - w_stack;
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
}

std::vector<TrackPiece> Binner::pieces_of(index_t b) const {
  std::vector<TrackPiece> out;
  for (index_t t = 0; t < times_;) {
    const index_t row = b * times_ + t;
    const index_t end = std::min(times_, (row / time_chunk_ + 1) * time_chunk_ - b * times_);
    out.push_back({static_cast<std::int32_t>(b), static_cast<std::int32_t>(t),
                   static_cast<std::int32_t>(end)});
    t = end;
  }
  return out;
}

Binner::Box Binner::piece_box(index_t b, index_t t_begin, index_t t_end) const {
  const auto [a1, a2] = baselines_[static_cast<size_t>(b)];
  const auto at = [&](index_t t) {
    const auto& p1 = antenna(t, a1);
    const auto& p2 = antenna(t, a2);
    return telescope::Uvw{p2.u - p1.u, p2.v - p1.v, p2.w - p1.w};
  };
  const auto first = at(t_begin), last = at(t_end - 1);
  const double length = std::sqrt(first.u * first.u + first.v * first.v + first.w * first.w);
  const double turn = telescope::kRadiansPerHourAngleSecond * std::abs(obs_.time.step()) *
                      static_cast<double>(t_end - 1 - t_begin);
  const double stray = length * turn * turn / 8 * (1 + 1e-9) + 1e-9 * length;
  const double f_lo = std::min(obs_.freq.start, obs_.freq.at(channels_ - 1)),
               f_hi = std::max(obs_.freq.start, obs_.freq.at(channels_ - 1));
  // Cells (or stacks) reached by x * f for x in [a - stray, b + stray] and
  // f in [f_lo, f_hi], one cell of slack for rounding.
  const auto range = [&](double a, double c, double scale, index_t& lo, index_t& hi) {
    const double x_lo = (std::min(a, c) - stray) * scale, x_hi = (std::max(a, c) + stray) * scale;
    lo = nearest_cell(std::min(x_lo * f_lo, x_lo * f_hi)) - 1;
    hi = nearest_cell(std::max(x_hi * f_lo, x_hi * f_hi)) + 1;
  };
  Box box{};
  range(first.u, last.u, per_metre_, box.u_lo, box.u_hi);
  range(first.v, last.v, per_metre_, box.v_lo, box.v_hi);
  if (per_stack_ > 0) {
    range(first.w, last.w, per_stack_, box.s_lo, box.s_hi);
  } else {
    box.s_lo = box.s_hi = 0;
  }
  return box;
}

bool Binner::box_meets(const Box& box, index_t stack, index_t tile0, index_t tile1) const {
  return stack >= box.s_lo && stack <= box.s_hi && locate_.tile_meets(tile0, box.u_lo, box.u_hi) &&
         locate_.tile_meets(tile1, box.v_lo, box.v_hi);
}

void Binner::narrow(double A, double B, index_t tile, index_t& first, index_t& last) const {
  if (first >= last) return;
  const double N = static_cast<double>(locate_.size());
  const auto span = locate_.tile_span(tile, 0);  // one occurrence; the others N apart
  const double lo = static_cast<double>(span.first) - 1.5,
               hi = static_cast<double>(span.second) + 0.5;  // cells [first, second), slack
  if (B == 0) {
    const double into = A - N * std::floor((A - lo) / N);  // A shifted to [lo, lo + N)
    if (into > hi) last = first;
    return;
  }
  const double p0 = A + B * static_cast<double>(first), p1 = A + B * static_cast<double>(last - 1);
  const double p_lo = std::min(p0, p1), p_hi = std::max(p0, p1);
  index_t k_lo = last, k_hi = first;  // the hull of the channels in any occurrence
  for (double j = std::floor((p_lo - hi) / N); j <= std::ceil((p_hi - lo) / N); j += 1) {
    const double x0 = (lo + j * N - A) / B, x1 = (hi + j * N - A) / B;
    const index_t a = std::max(first, static_cast<index_t>(std::floor(std::min(x0, x1))));
    const index_t b = std::min(last, static_cast<index_t>(std::ceil(std::max(x0, x1))) + 1);
    if (a < b) {
      k_lo = std::min(k_lo, a);
      k_hi = std::max(k_hi, b);
    }
  }
  first = k_lo;
  last = std::max(k_lo, k_hi);
}

VisitCounts Binner::empty_counts() const {
  VisitCounts c;
  c.first_stack = first_stack_;
  c.stacks = stacks_;
  c.subgrids = locate_.per_axis() * locate_.per_axis();
  c.visibilities.assign(static_cast<size_t>(c.stacks * c.subgrids), 0);
  c.pieces = c.visibilities;
  c.w_lo.assign(c.visibilities.size(), HUGE_VAL);
  c.w_hi.assign(c.visibilities.size(), -HUGE_VAL);
  return c;
}

VisitCounts Binner::count_visits(index_t b_begin, index_t b_end, int threads) const {
  VisitCounts total = empty_counts();
  const size_t n = total.visibilities.size();
  const index_t nb = static_cast<index_t>(baselines_.size());
  b_begin = std::clamp<index_t>(b_begin, 0, nb);
  b_end = std::clamp<index_t>(b_end, b_begin, nb);
#pragma omp parallel num_threads(std::max(1, threads))
  {
    std::vector<index_t> vis(n, 0), pieces(n, 0), last(n, -1);
    std::vector<double> w_lo(n, HUGE_VAL), w_hi(n, -HUGE_VAL);
#pragma omp for schedule(dynamic, 16)
    for (index_t b = b_begin; b < b_end; ++b)
      for (const auto& piece : pieces_of(b)) {
        const index_t id = b * (times_ + 1) + piece.t_begin;
        // Counting needs no cut at frequency chunks: fewer, longer runs.
        runs_cut(b, piece.t_begin, piece.t_end, channels_, [&](index_t subgrid, const VisRun& run) {
          const size_t i = static_cast<size_t>(total.at(run.w_stack, subgrid));
          vis[i] += run.count();
          widen_w_range(run, w_lo[i], w_hi[i]);
          if (last[i] != id) {
            last[i] = id;
            ++pieces[i];
          }
        });
      }
#pragma omp critical
    for (size_t i = 0; i < n; ++i) {
      total.visibilities[i] += vis[i];
      total.pieces[i] += pieces[i];
      total.w_lo[i] = std::min(total.w_lo[i], w_lo[i]);
      total.w_hi[i] = std::max(total.w_hi[i], w_hi[i]);
    }
  }
  return total;
}

std::vector<TrackPiece> Binner::candidate_pieces(index_t stack, index_t subgrid) const {
  const index_t tile0 = subgrid / locate_.per_axis(), tile1 = subgrid % locate_.per_axis();
  std::vector<TrackPiece> out;
  for (size_t b = 0; b < baselines_.size(); ++b) {
    if (leaves_out(static_cast<index_t>(b)) ||
        !box_meets(track_boxes_[b], stack, tile0, tile1))
      continue;
    for (const auto& piece : pieces_of(static_cast<index_t>(b)))
      if (box_meets(piece_box(static_cast<index_t>(b), piece.t_begin, piece.t_end), stack, tile0,
                    tile1))
        out.push_back(piece);
  }
  return out;
}

Distribution summarise(std::vector<index_t> per_subgrid) {
  Distribution d;
  d.per_subgrid = std::move(per_subgrid);
  d.min = -1;
  for (const index_t n : d.per_subgrid) {
    if (n == 0) continue;
    ++d.subgrids_used;
    d.visibilities += n;
    d.min = d.min < 0 ? n : std::min(d.min, n);
    d.max = std::max(d.max, n);
  }
  d.min = std::max<index_t>(d.min, 0);
  d.mean = d.subgrids_used
               ? static_cast<double>(d.visibilities) / static_cast<double>(d.subgrids_used)
               : 0;
  return d;
}

Distribution summarise(const VisitCounts& counts) {
  std::vector<index_t> per_subgrid(static_cast<size_t>(counts.subgrids), 0);
  for (index_t s = 0; s < counts.stacks; ++s)
    for (index_t g = 0; g < counts.subgrids; ++g)
      per_subgrid[static_cast<size_t>(g)] +=
          counts.visibilities[static_cast<size_t>(s * counts.subgrids + g)];
  return summarise(std::move(per_subgrid));
}

VisitRuns::VisitRuns(const Binner& binner, index_t stack, index_t subgrid, index_t part,
                     index_t parts)
    : binner_(binner), stack_(stack), subgrid_(subgrid) {
  std::vector<Piece> all;
  for (const auto& piece : binner.candidate_pieces(stack, subgrid)) {
    Piece p{piece, 0};
    binner.visit_runs(
        piece.baseline, piece.t_begin, piece.t_end, stack, subgrid, false,
        [&](const VisRun& run) { p.visibilities += static_cast<std::int32_t>(run.count()); });
    if (p.visibilities > 0) all.push_back(p);
  }
  const auto row_chunk = [&](size_t i) { return binner.row_chunk(all[i].piece); };
  index_t total = 0;
  for (const auto& p : all) total += p.visibilities;
  // Part i starts at the first row chunk border at or after i / parts of
  // the visibilities.
  const auto start = [&](index_t i) -> size_t {
    if (i <= 0) return 0;
    if (i >= parts) return all.size();
    const index_t target = total * i / parts;
    index_t seen = 0;
    size_t at = 0;
    while (at < all.size() && seen < target) seen += all[at++].visibilities;
    while (at > 0 && at < all.size() && row_chunk(at) == row_chunk(at - 1)) ++at;
    return at;
  };
  const size_t first = start(part), last = start(part + 1);
  if (first == 0 && last == all.size())
    pieces_ = std::move(all);
  else
    pieces_.assign(all.begin() + static_cast<std::ptrdiff_t>(first),
                   all.begin() + static_cast<std::ptrdiff_t>(last));
  // The part's w range from its runs (a second walk of its pieces: cheaper
  // than 16 bytes more per piece of every visit in flight).
  for (const auto& p : pieces_) {
    visibilities_ += p.visibilities;
    binner.visit_runs(p.piece.baseline, p.piece.t_begin, p.piece.t_end, stack, subgrid, false,
                      [&](const VisRun& run) { binner.widen_w_range(run, w_lo_, w_hi_); });
  }
}

bool VisitRuns::w_range(double& lo, double& hi) const {
  lo = w_lo_;
  hi = w_hi_;
  return !pieces_.empty();
}

std::vector<std::pair<size_t, size_t>> VisitRuns::tasks(index_t row_chunks_per_task,
                                                        index_t max_visibilities) const {
  return cut_at_row_chunks(
      pieces_.size(), [&](size_t i) { return row_chunk(i); },
      [&](size_t i) { return pieces_[i].visibilities; }, row_chunks_per_task, max_visibilities);
}

void VisitRuns::runs(size_t first, size_t last, std::vector<VisRun>& out) const {
  out.clear();
  for (size_t i = first; i < last; ++i) {
    const auto& piece = pieces_[i].piece;
    binner_.visit_runs(piece.baseline, piece.t_begin, piece.t_end, stack_, subgrid_, true,
                       [&](const VisRun& run) { out.push_back(run); });
  }
}

}  // namespace iotest::binning
