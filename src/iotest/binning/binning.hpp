// Work binning: which visibilities each subgrid degrids. The grid is laid
// over the uv plane (cell size from the image's pixel size), every
// visibility belongs to the subgrid whose tile holds its nearest grid cell
// (and to the w-stacking plane nearest its w), so each visibility is
// degridded from exactly one visit, and subgrids that hold none are skipped.
//
// Nothing here holds the runs of a whole observation (at SKA scale that is
// ~400 GB): the work plan needs only visibilities per visit (count_visits,
// over a share of the baselines per rank), and whoever degrids a visit
// makes its runs when it starts it (VisitRuns), from the antenna tracks.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "iotest/config/rec_set.hpp"
#include "iotest/swiftly/tiling.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::binning {

// How the image and grid sit on the sky and the uv plane.
struct GridGeometry {
  double max_uv = 0;    // bound on |(u, v)| in wavelengths: longest baseline at the top frequency
  double pixel_lm = 0;  // image pixel in direction cosines: 1 / (2 max_uv), Nyquist
  double cell_uv = 0;   // grid cell in wavelengths: 1 / (N pixel_lm)
  double field_lm = 0;  // the used field f N pixel_lm
};
// Throws UsageError("--vis-set") when the used field would reach past the
// horizon (l^2 + m^2 >= 1 at its corners).
GridGeometry grid_geometry(const config::RecombinationParams& p, const telescope::Observation& obs);

// A run of consecutive channels of one baseline at one time step that falls
// into one subgrid and one frequency chunk: the unit the degridder works on.
struct VisRun {
  std::int32_t baseline = 0;
  std::int32_t time = 0;
  std::int32_t chan_begin = 0, chan_end = 0;  // [begin, end)
  std::int32_t w_stack = 0;                   // w-stacking plane: nearest w / stack step
  index_t count() const { return chan_end - chan_begin; }
};

// Subgrid index i0 * subgrids_per_axis + i1 of tiles (i0, i1).
class SubgridLocator {
 public:
  explicit SubgridLocator(const config::RecombinationParams& p);
  // Tile owning grid cell c (any integer, periodic).
  index_t tile_of(index_t cell) const { return owner_[static_cast<size_t>(wrap(cell))]; }
  index_t per_axis() const { return static_cast<index_t>(tiles_.size()); }
  index_t size() const { return N_; }  // cells per axis
  // First and one-past-last cell of `tile` in the unwrapped neighbourhood of `cell`.
  std::pair<index_t, index_t> tile_span(index_t tile, index_t cell) const;
  // Whether `tile` holds any of the cells [lo, hi] (periodic).
  bool tile_meets(index_t tile, index_t lo, index_t hi) const;

 private:
  index_t wrap(index_t c) const { return ((c % N_) + N_) % N_; }
  index_t N_;
  std::vector<swiftly::Tile> tiles_;
  std::vector<std::int32_t> owner_;
};

// Grid cell of a position in cells (round half up; one rule for binning
// and degridding alike).
inline index_t nearest_cell(double position) {
  return static_cast<index_t>(std::floor(position + 0.5));
}

// How runs are cut, and which rows make them.
struct RunSplit {
  bool chunks = true;       // at frequency chunk borders (false: for counting only)
  double w_stack_step = 0;  // at w-stacking plane borders, planes this far apart (0: none)
  // Rows whose two antennas are the same (autocorrelations) make runs.
  // false: the imaging direction's default, as WSClean and CASA leave
  // them out of the dirty image (docs/imaging.md, "Autocorrelations");
  // predict writes every row.
  bool autocorrelations = true;
};

// A piece of one baseline's track: its time steps [t_begin, t_end) inside
// one storage row chunk (rows are baseline * times + time, row chunks
// time_chunk rows). Sorted by (baseline, t_begin), pieces are in storage
// order; work is cut between pieces of different row chunks only.
struct TrackPiece {
  std::int32_t baseline = 0, t_begin = 0, t_end = 0;
};

// Visibilities per visit (w-stacking plane, subgrid), dense over the
// stacks the observation can reach.
struct VisitCounts {
  index_t first_stack = 0, stacks = 1, subgrids = 0;
  std::vector<index_t> visibilities;  // [(stack - first_stack) * subgrids + subgrid]
  std::vector<index_t> pieces;        // track pieces holding visibilities of the visit
  // w of its visibilities in wavelengths from the stack (its tower's height)
  std::vector<double> w_lo, w_hi;
  index_t at(index_t stack, index_t subgrid) const {
    return (stack - first_stack) * subgrids + subgrid;
  }
};

// Makes the runs of an observation's tracks, and bounds where they go.
class Binner {
 public:
  Binner(const config::RecombinationParams& p, const telescope::Observation& obs,
         const GridGeometry& g, const RunSplit& split);

  // Calls visit(subgrid, run) for every run of baseline b at time steps
  // [t_begin, t_end), time by time, channel by channel (storage order).
  // Runs never straddle a subgrid tile, nor what the split asks for.
  template <class Visit>
  void runs(index_t b, index_t t_begin, index_t t_end, Visit&& visit) const {
    runs_cut(b, t_begin, t_end, split_.chunks ? chunk_ : channels_, visit);
  }
  // Calls visit(run) for the runs of visit (stack, subgrid) alone, cut at
  // frequency chunks if `chunks`: channels that cannot reach it are not
  // looked at.
  template <class Visit>
  void visit_runs(index_t b, index_t t_begin, index_t t_end, index_t stack, index_t subgrid,
                  bool chunks, Visit&& visit) const {
    runs_cut(
        b, t_begin, t_end, chunks ? chunk_ : channels_,
        [&](index_t sg, const VisRun& run) {
          if (sg == subgrid && run.w_stack == stack) visit(run);
        },
        Only{true, stack, subgrid / locate_.per_axis(), subgrid % locate_.per_axis()});
  }

  // Visibilities (and non-empty track pieces) per visit of baselines
  // [b_begin, b_end), on `threads` threads: one rank's share of the
  // counting, summed over the ranks afterwards.
  VisitCounts count_visits(index_t b_begin, index_t b_end, int threads) const;
  // An empty VisitCounts of the right shape (to sum into).
  VisitCounts empty_counts() const;

  // Track pieces that may hold runs of visit (stack, subgrid), in storage
  // order: a superset, from bounds on the tracks (a baseline's uvw turns
  // with the sky, so between two time steps it strays from the chord by at
  // most |B| (omega dt)^2 / 8).
  std::vector<TrackPiece> candidate_pieces(index_t stack, index_t subgrid) const;
  // The pieces of baseline b, in time order.
  std::vector<TrackPiece> pieces_of(index_t b) const;
  index_t row_chunk(const TrackPiece& piece) const {
    return (index_t{piece.baseline} * times_ + piece.t_begin) / time_chunk_;
  }

  // Visibilities the runs hold over the whole observation: every row's,
  // less the autocorrelations' where the split leaves them out. The
  // imaging direction's sum of the weights (degrid::dirty_image_scale).
  index_t visibility_count() const;
  // Whether baseline b makes no runs (an autocorrelation left out).
  bool leaves_out(index_t b) const {
    const auto [a1, a2] = baselines_[static_cast<size_t>(b)];
    return a1 == a2 && !split_.autocorrelations;
  }

  // Baseline b's w in metres at time step t.
  double baseline_w(index_t b, index_t t) const {
    const auto [a1, a2] = baselines_[static_cast<size_t>(b)];
    return antenna(t, a2).w - antenna(t, a1).w;
  }
  double stack_step() const { return split_.w_stack_step; }
  // Widens [lo, hi] by the run's w (wavelengths from its stack) at its
  // first and last channel: the w-tower it needs.
  void widen_w_range(const VisRun& run, double& lo, double& hi) const;
  const telescope::Observation& observation() const { return obs_; }
  const SubgridLocator& locator() const { return locate_; }
  index_t first_stack() const { return first_stack_; }
  index_t stacks() const { return stacks_; }

 private:
  struct Box {  // grid cells (u, v) and w-stacks a piece or track may reach, inclusive
    index_t u_lo, u_hi, v_lo, v_hi, s_lo, s_hi;
  };
  // Runs cut at multiples of `chunk` channels; with `only` set, only over
  // the channels that can reach that visit's tiles and stack.
  struct Only {
    bool set = false;
    index_t stack = 0, tile0 = 0, tile1 = 0;
  };
  template <class Visit>
  void runs_cut(index_t b, index_t t_begin, index_t t_end, index_t chunk, Visit&& visit,
                const Only& only = {}) const;
  // Channels [first, last) whose positions A + B k can reach cells of
  // `tile` (periodic; k in [0, last)), narrowed from [first, last).
  void narrow(double A, double B, index_t tile, index_t& first, index_t& last) const;
  Box piece_box(index_t b, index_t t_begin, index_t t_end) const;
  bool box_meets(const Box& box, index_t stack, index_t tile0, index_t tile1) const;
  const telescope::Uvw& antenna(index_t t, index_t a) const {
    return uvw_[static_cast<size_t>(t * antennas_ + a)];
  }

  const telescope::Observation& obs_;
  SubgridLocator locate_;
  RunSplit split_;
  index_t times_, time_chunk_, channels_, chunk_, antennas_;
  double per_metre_, per_stack_, f0_, df_;
  index_t first_stack_ = 0, stacks_ = 1;
  std::vector<std::pair<int, int>> baselines_;
  std::vector<telescope::Uvw> uvw_;  // [time][antenna], metres
  std::vector<Box> track_boxes_;     // per baseline, over the whole observation
};

// Visibilities per subgrid over the whole observation.
struct Distribution {
  index_t subgrids_used = 0;
  index_t visibilities = 0;
  index_t min = 0, max = 0;  // over used subgrids
  double mean = 0;
  std::vector<index_t> per_subgrid;  // index i0 * per_axis + i1
};
// The figures of a distribution from its counts per subgrid.
Distribution summarise(std::vector<index_t> per_subgrid);
// The same from counts per visit (summed over the stacks).
Distribution summarise(const VisitCounts& counts);

// The visibilities of one visit (or of one of its parts) as pieces with
// their counts, made when the visit starts and dropped when it is done:
// memory is a few words per piece of the visit, never per visibility.
class VisitRuns {
 public:
  // 16 bytes: a busy visit of a long observation holds a million pieces
  // (its row chunk follows from the piece, its w only matters per part).
  struct Piece {
    TrackPiece piece;
    std::int32_t visibilities = 0;  // of this visit (at most a row chunk's)
  };
  // Part `part` of `parts` of visit (stack, subgrid): the visit's pieces
  // cut at row chunks into parts of about equal visibilities.
  VisitRuns(const Binner& binner, index_t stack, index_t subgrid, index_t part = 0,
            index_t parts = 1);
  const std::vector<Piece>& pieces() const { return pieces_; }
  // The storage row chunk piece i lies in.
  index_t row_chunk(size_t i) const { return binner_.row_chunk(pieces_[i].piece); }
  index_t visibilities() const { return visibilities_; }
  // Relative w (wavelengths from the stack) the runs reach; false if none.
  bool w_range(double& lo, double& hi) const;
  // Cuts the pieces into tasks [first, last) of up to `row_chunks_per_task`
  // row chunks and about `max_visibilities`, never splitting a row chunk.
  std::vector<std::pair<size_t, size_t>> tasks(index_t row_chunks_per_task,
                                               index_t max_visibilities) const;
  // The runs of pieces [first, last) in this visit, in storage order.
  void runs(size_t first, size_t last, std::vector<VisRun>& out) const;
  // Calls visit(run) for every run of the part in storage order, holding
  // none of them (a busy part of a long observation has millions).
  template <class Visit>
  void for_each_run(Visit&& visit) const {
    for (const auto& p : pieces_)
      binner_.visit_runs(p.piece.baseline, p.piece.t_begin, p.piece.t_end, stack_, subgrid_, true,
                         visit);
  }
  index_t stack() const { return stack_; }
  index_t subgrid() const { return subgrid_; }

 private:
  const Binner& binner_;
  index_t stack_, subgrid_;
  std::vector<Piece> pieces_;
  index_t visibilities_ = 0;
  double w_lo_ = HUGE_VAL, w_hi_ = -HUGE_VAL;  // over the part's runs, from the stack
};

// Cuts items [0, n) in storage order into tasks [first, last) of up to
// `row_chunks_per_task` row chunks and about `max_visibilities` (a task
// stops once it holds that many), never splitting a row chunk, so no two
// tasks of one visit share a storage chunk.
template <class RowChunk, class Count>
std::vector<std::pair<size_t, size_t>> cut_at_row_chunks(size_t n, RowChunk&& row_chunk,
                                                         Count&& count, index_t row_chunks_per_task,
                                                         index_t max_visibilities) {
  std::vector<std::pair<size_t, size_t>> tasks;
  for (size_t first = 0; first < n;) {
    size_t last = first + 1;
    index_t visibilities = count(first);
    for (index_t chunks = 1; last < n; ++last) {
      if (row_chunk(last) != row_chunk(last - 1) &&
          (++chunks > row_chunks_per_task || visibilities >= max_visibilities))
        break;
      visibilities += count(last);
    }
    tasks.emplace_back(first, last);
    first = last;
  }
  return tasks;
}

// ---- implementation of the template -----------------------------------------

template <class Visit>
void Binner::runs_cut(index_t b, index_t t_begin, index_t t_end, index_t chunk, Visit&& visit,
                      const Only& only) const {
  if (leaves_out(b)) return;
  const index_t steps = channels_;
  const auto [a1, a2] = baselines_[static_cast<size_t>(b)];
  for (index_t t = t_begin; t < t_end; ++t) {
    const auto& p1 = antenna(t, a1);
    const auto& p2 = antenna(t, a2);
    const double um = (p2.u - p1.u) * per_metre_, vm = (p2.v - p1.v) * per_metre_,
                 wm = (p2.w - p1.w) * per_stack_;
    const double Au = um * f0_, Bu = um * df_, Av = vm * f0_, Bv = vm * df_, Aw = wm * f0_,
                 Bw = wm * df_;
    index_t k_first = 0, k_last = steps;
    if (only.set) {
      narrow(Au, Bu, only.tile0, k_first, k_last);
      narrow(Av, Bv, only.tile1, k_first, k_last);
      // w-stacks: positions within a stack and a half of it.
      if (Bw != 0) {
        const double x0 = (static_cast<double>(only.stack) - 1.5 - Aw) / Bw,
                     x1 = (static_cast<double>(only.stack) + 1.5 - Aw) / Bw;
        k_first = std::max(k_first, static_cast<index_t>(std::floor(std::min(x0, x1))));
        k_last = std::min(k_last, static_cast<index_t>(std::ceil(std::max(x0, x1))) + 1);
      } else if (std::abs(Aw - static_cast<double>(only.stack)) > 1.5) {
        k_last = k_first;
      }
      if (k_first >= k_last) continue;
    }
    for (index_t k = k_first; k < k_last;) {
      const index_t chunk_end = std::min(steps, (k / chunk + 1) * chunk);
      const double x = static_cast<double>(k);
      const index_t cu = nearest_cell(Au + Bu * x), cv = nearest_cell(Av + Bv * x);
      const index_t tu = locate_.tile_of(cu), tv = locate_.tile_of(cv);
      const auto su = locate_.tile_span(tu, cu), sv = locate_.tile_span(tv, cv);
      const index_t stack = nearest_cell(Aw + Bw * x);
      const std::pair<index_t, index_t> sw{stack, stack + 1};
      const auto inside = [&](index_t kk) {
        const double y = static_cast<double>(kk);
        const index_t cu2 = nearest_cell(Au + Bu * y), cv2 = nearest_cell(Av + Bv * y);
        return cu2 >= su.first && cu2 < su.second && cv2 >= sv.first && cv2 < sv.second &&
               nearest_cell(Aw + Bw * y) == stack;
      };
      // The channel where the track leaves the tile, from the linear
      // track, then corrected against the exact rounding rule.
      double limit = static_cast<double>(chunk_end);
      const auto leave = [&](double A, double B, std::pair<index_t, index_t> span) {
        if (B > 0) limit = std::min(limit, std::ceil((span.second - 0.5 - A) / B));
        if (B < 0) limit = std::min(limit, std::floor((span.first - 0.5 - A) / B) + 1);
      };
      leave(Au, Bu, su);
      leave(Av, Bv, sv);
      leave(Aw, Bw, sw);
      index_t end = std::clamp(static_cast<index_t>(limit), k + 1, chunk_end);
      while (end > k + 1 && !inside(end - 1)) --end;
      while (end < chunk_end && inside(end)) ++end;
      visit(tu * locate_.per_axis() + tv,
            VisRun{static_cast<std::int32_t>(b), static_cast<std::int32_t>(t),
                   static_cast<std::int32_t>(k), static_cast<std::int32_t>(end),
                   static_cast<std::int32_t>(stack)});
      k = end;
    }
  }
}

}  // namespace iotest::binning
