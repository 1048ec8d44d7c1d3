// Visibilities from subgrids: a separable PSWF kernel in u and v, and
// w-towers: from one subgrid's image-space sum, planes at w = p * dw are
// made by a phase screen and an FFT each, and every visibility is
// interpolated from the w_support planes around its w with a PSWF kernel in
// w. Both kernels' transforms are divided out on the facet side
// (correct_facet), so the chain stays exact up to the kernels' accuracy.
//
// Units: the facet correction also carries N^2, the inverse of the
// recombination's 1/N^2 (SwiFTly's DFT, which `iotest recombine` checks as
// it is), so that a source of S Jy gives visibilities of amplitude S. It
// lives here, at the boundary between the sky and the recombination, so the
// SwiFTly layer and recombination-only runs keep their own scale, and every
// check of this chain (direct, facet_correction's amplitudes for
// sky::dft_subgrid) takes it from one place.
//
// Gridding (the imaging direction) is the exact adjoint of each step, with
// the same kernels, tap weights and tower layout: visibilities are spread
// onto the tower's planes (grid), the planes are transformed back and
// summed under the conjugate screens (collapse_tower), and the facet side
// multiplies by the conjugate correction (correct_facet_adjoint).
#pragma once

#include <complex>
#include <cstdint>
#include <numbers>
#include <optional>
#include <span>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/degrid/kernel.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::degrid {

inline constexpr double kTwoPi = 2 * std::numbers::pi;

struct DegridOptions {
  int support = 12;   // u, v kernel width in cells
  int w_support = 8;  // w kernel width in planes
  // Tower planes between w-stacking planes (nothing: from the margin).
  std::optional<index_t> w_step;
};

// The w kernel's used fraction: planes close enough that dw |n - 1 - c0|
// stays below 3/16. Unlike u and v (whose x0 = f/2 is fixed by the image),
// w can be oversampled freely: 8 taps give ~1e-8 here. Closer planes (1/8:
// ~1e-9) cost a third more planes, the towers' main cost, for accuracy
// below what u, v and the towers' edges allow (visibility RMSE ~1e-8);
// wider ones (1/4: ~4e-8 per axis) bring T05_ to ~1e-7, the original's
// accuracy, and no further.
inline constexpr double kWKernelX0 = 0.1875;

// The w-plane layout of an observation on a grid: plane spacing and the
// centring constant that makes the w kernel's argument symmetric.
struct WPlanes {
  double dw = 0;      // wavelengths between planes
  double centre = 0;  // c0: planes carry exp(2 pi i p dw (n - 1 - c0))
  double n_min = 1;   // n at the corners of the used field
};
WPlanes w_planes(const binning::GridGeometry& g, double x0);

// How w is covered: towers of planes dw apart around w-stacking planes
// stack_step apart, and the subgrid margin that keeps every visibility's
// kernel and its tower's spread inside the subgrid. A tower plane p moves
// grid values by up to |p dw| l / (n du) cells (the phase screen's
// gradient), so the margin bounds the tower height; beyond it, w-stacking
// regenerates the subgrids from facets with the stack's w applied.
struct WLayout {
  WPlanes planes;
  double w_max = 0;  // the observation's largest |w| (at its top frequency), wavelengths
  // Every w of the observation is 0 (an array flat at the pole, observed at
  // dec 90): a tower is the one plane w = 0 and there is no w kernel, so
  // degridding is exact in w and costs S x S taps, not S x S x Sw.
  bool w_free() const { return w_max == 0; }
  index_t margin = 0;            // cells
  double stack_step = 0;         // wavelengths between stacking planes (0: one stack)
  double tower_half_height = 0;  // wavelengths of w covered either side of a stack
};

// The default tower's most planes (the margin and w-stacking follow).
inline constexpr index_t kMaxTowerPlanes = 64;

// `margin`: nothing for the default (the single-stack margin if it is at
// most a quarter of xA, else a quarter of xA and w-stacking; towers over
// kMaxTowerPlanes are w-stacked as with a w_step); with o.w_step the tower
// height is given and the margin follows from it.
WLayout w_layout(const binning::GridGeometry& g, const telescope::Observation& obs, index_t xA,
                 const DegridOptions& o, std::optional<index_t> margin);

// The planes a tower needs for w / dw in [wc_min, wc_max]: the w kernel's
// taps around every w in the range, or the one plane w = 0 when w is free.
struct PlaneRange {
  index_t first = 0, count = 0;
};
PlaneRange tower_planes(const WLayout& w, int w_support, double wc_min, double wc_max);

// The tap sum of one visibility for one u, v support (see degridder.cpp).
using SumTaps = cplx (*)(const double* wu, const double* wv, const double* ww, int w_support,
                         const Array2D* planes, index_t first_u, index_t first_v);
// The tap sums of two visibilities whose taps start at the same cells and
// planes, wu[0], wu[1] their u weights (and so on): into out[0], out[1].
using SumTapsPair = void (*)(const Taps* wu, const Taps* wv, const Taps* ww, int w_support,
                             const Array2D* planes, index_t first_u, index_t first_v, cplx* out);
// Its adjoint: adds `value` times the same taps onto the planes.
using SpreadTaps = void (*)(const double* wu, const double* wv, const double* ww, int w_support,
                            Array2D* planes, index_t first_u, index_t first_v, cplx value);
// A support's pair sums (degridder.cpp's sum_taps_pair): over the same
// taps, and over windows one row taller or one cell wider (null where the
// support leaves Taps no room).
struct PairSums {
  SumTapsPair same = nullptr, taller = nullptr, wider = nullptr;
};

class Degridder {
 public:
  Degridder(const swiftly::Recombination& rec, const binning::GridGeometry& g,
            const telescope::Observation& obs, const DegridOptions& o, const WLayout& w);

  // Divides the facet's non-zero pixels by the kernels' transforms,
  // multiplies them by N^2 (the flux scale: visibilities in Jy) and
  // applies the w-stacking plane `stack` (w = stack * stack_step).
  void correct_facet(const swiftly::Tile& t0, const swiftly::Tile& t1, index_t stack,
                     MView2D facet) const;
  // The factor correct_facet applies at pixel (y0, y1): what a point source
  // of 1 there becomes, so corrected subgrids can be checked by direct
  // transform (sky::dft_subgrid's amplitudes).
  cplx facet_correction(double y0, double y1, index_t stack) const;
  // The imaging direction's facet correction: the conjugate factor over
  // N^2, i.e. correct_facet's adjoint divided by N^2. SwiFTly's image
  // direction is N^2 times its predict's adjoint (it inverts predict), so
  // with this the chain is the exact adjoint of the predict chain in Jy:
  // the unnormalised dirty image sum V exp(-2 pi i (u l + v m + w (n - 1))).
  void correct_facet_adjoint(const swiftly::Tile& t0, const swiftly::Tile& t1, index_t stack,
                             MView2D facet) const;

  // A subgrid's w-tower: its planes, kept for the batches of its runs.
  struct Workspace {
    Array2D screened, scratch;
    std::vector<Array2D> planes;
    index_t first_plane = 0, plane_count = 0;
    std::vector<std::uint8_t> tap_columns;  // of the visit part the tower is for
    explicit Workspace(const config::RecombinationParams& p);
  };
  // Builds the tower of planes a visit's visibilities need, w / dw
  // (relative to its stack) in [wc_min, wc_max] (binning::VisitRuns::w_range
  // over dw), from `subgrid_sum`, the subgrid's image-space sum. Returns the
  // number of planes made. With `columns` (tap_columns of the visit's runs)
  // only those columns of each plane are made exact (the others are never
  // read); empty: all.
  index_t build_tower(CView2D subgrid_sum, double wc_min, double wc_max, Workspace& ws,
                      std::span<const std::uint8_t> columns = {}) const;
  // The same for a visit part (its subgrid at column offset off1): only the
  // columns its runs' taps read are made exact (tap_columns, into ws).
  index_t build_tower(CView2D subgrid_sum, double wc_min, double wc_max, Workspace& ws,
                      const binning::VisitRuns& visit, index_t off1) const;
  // The tower columns (xA flags) that the taps of the visit part's runs
  // read (walked, not held).
  void tap_columns(const binning::VisitRuns& visit, index_t off1,
                   std::vector<std::uint8_t>& columns) const;
  // The imaging direction. Zeroes the planes build_tower would make for the
  // same range, for grid() to add to. Returns their number.
  index_t begin_tower(double wc_min, double wc_max, Workspace& ws) const;
  // degrid()'s adjoint: adds the visibilities `vis` of runs [begin, end)
  // (run after run, channel after channel) onto the tower's planes.
  void grid(const binning::VisRun* begin, const binning::VisRun* end, index_t off0, index_t off1,
            const cplx* vis, Workspace& ws) const;
  // build_tower's adjoint: adds the planes, transformed back to the subgrid
  // image and multiplied by their conjugate screens, to `subgrid_sum`
  // (xM x xM, image space, FFT order). Overwrites the planes.
  void collapse_tower(Workspace& ws, MView2D subgrid_sum) const;

  // One visibility at (uc, vc) cells from the subgrid's centre, w_rel
  // wavelengths from its stacking plane (w in all).
  cplx degrid_point(double uc, double vc, double w_rel, double w, const Workspace& ws) const;
  // Appends the visibilities of runs [begin, end) (of those given to
  // build_tower) to `out`, run after run, channel after channel.
  void degrid(const binning::VisRun* begin, const binning::VisRun* end, index_t off0, index_t off1,
              const Workspace& ws, std::vector<cplx>& out) const;

  // The exact visibility by direct Fourier transform of the sources, in Jy
  // (sky::direct_visibility).
  cplx direct(const std::vector<sky::PointSource>& sources, index_t baseline, index_t time,
              index_t chan) const;
  // The same at (u, v, w) in wavelengths.
  cplx direct_at(const std::vector<sky::PointSource>& sources, double u, double v, double w) const;
  const binning::GridGeometry& geometry() const { return g_; }
  const swiftly::Recombination& recombination() const { return rec_; }
  const telescope::Observation& observation() const { return obs_; }

  const WPlanes& planes() const { return planes_; }
  // A baseline's (u, v, w) in metres at a time step.
  telescope::Uvw baseline_uvw(index_t baseline, index_t time) const;

  // What the GPU path copies to the device (src/iotest/device/): the
  // kernels, the tower's screen step, the antennas' (u, v, w) per time step
  // and the baselines, and the layout. Read-only views of this object.
  struct DeviceTables {
    const GridKernel* uv_kernel = nullptr;
    const GridKernel* w_kernel = nullptr;  // unused where w is free
    const WLayout* layout = nullptr;
    int w_taps = 1;                                               // planes a visibility spans
    const std::vector<cplx>* screen_step = nullptr;               // xM x xM, FFT order
    const std::vector<std::pair<int, int>>* baselines = nullptr;  // antenna pairs
    const std::vector<std::vector<telescope::Uvw>>* antenna_uvw = nullptr;  // [time][antenna], m
  };
  DeviceTables device_tables() const {
    return {&uv_kernel_, &w_kernel_, &layout_, w_taps(), &screen_step_, &baselines_, &antenna_uvw_};
  }

 private:
  static SumTaps pick_sum_taps(int support);
  static PairSums pick_pair_sums(int support);
  // Sums visibilities i and i + 1 of a block of taps (TapBlock, in
  // degridder.cpp) together into out[0], out[1] where their taps start at
  // the same cells and plane, or one row or column apart; false otherwise.
  template <class Block>
  bool sum_pair(const Block& b, size_t i, const Workspace& ws, cplx* out) const;
  static SpreadTaps pick_spread_taps(int support);
  // Calls f(visibility, taps u, v, w, first u, v, w, uc, vc, w, phase) for
  // every visibility of runs [begin, end) in order: the kernel positions
  // and weights both directions use, and phase = exp(2 pi i w c0), the
  // factor the planes lack. Defined in degridder.cpp, its only user.
  template <class Visit>
  void walk_runs(const binning::VisRun* begin, const binning::VisRun* end, index_t off0,
                 index_t off1, Visit&& visit) const;
  // The same a block of up to 16 channels of one run at a time: calls
  // f(index of the block's first visibility, block) (TapBlock, in
  // degridder.cpp).
  template <class VisitBlock>
  void walk_blocks(const binning::VisRun* begin, const binning::VisRun* end, index_t off0,
                   index_t off1, VisitBlock&& visit) const;
  // The planes a tower needs for w / dw in [wc_min, wc_max]: sets ws's range
  // and allocates missing planes.
  void size_tower(double wc_min, double wc_max, Workspace& ws) const;
  // The w kernel's weights at n positions (in planes), or the one plane
  // with weight 1 when w is free.
  void w_weights(const double* pos, int n, Taps* w, index_t* first) const;
  // Planes a visibility's taps span: the w kernel's support, 1 when w is free.
  int w_taps() const { return layout_.w_free() ? 1 : w_kernel_.support(); }
  // A baseline coordinate (metres) at channel `chan` in cells from the
  // subgrid offset `off`, wrapped into [-N/2, N/2): where walk_blocks puts
  // a visibility and tap_columns bounds its taps.
  double cells_from(double metres, index_t chan, index_t off) const;
  // Where a visibility's taps land, checked (as sum_point explains).
  void check_taps(index_t fu, index_t fv, index_t fw, double uc, double vc, double w,
                  const Workspace& ws) const;
  // The tap sum at the given weights, after checking that the taps lie in
  // the tower (the result still lacks the factor exp(2 pi i w c0)).
  cplx sum_point(const Taps& wu, const Taps& wv, const Taps& ww, index_t first_u, index_t first_v,
                 index_t first_w, double uc, double vc, double w, const Workspace& ws) const;

  const swiftly::Recombination& rec_;
  const config::RecombinationParams& p_;
  binning::GridGeometry g_;
  const telescope::Observation& obs_;
  GridKernel uv_kernel_;
  SumTaps sum_taps_;
  PairSums pair_sums_;
  SpreadTaps spread_taps_;
  GridKernel w_kernel_;
  WLayout layout_;
  WPlanes planes_;
  std::vector<std::pair<int, int>> baselines_;
  std::vector<std::vector<telescope::Uvw>> antenna_uvw_;  // [time][antenna], metres
  std::vector<cplx> screen_step_;  // exp(2 pi i dw (n - 1 - c0)) over the subgrid image, FFT order
  // The w kernel's correction at dw (n - 1 - c0), which varies per pixel:
  // a Chebyshev series over the field's range (evaluating the PSWF per
  // pixel of every facet cost imaging half its time).
  std::vector<double> w_correction_cheb_;
  double w_correction_lo_ = 0, w_correction_hi_ = 0;
  double w_correction(double nu) const;
};

// Tower height from a target error (DESIGN.md section 8): worst-case
// sources at the used field's corners and edges, visibilities at the edges
// of the central subgrid's tile and at growing |w|, compared with the direct
// transform; the height doubles, then bisects, until the error reaches
// `target` (<= 0: twice the error at w = 0). Uses d's margin; towers stop at
// 256 planes.
struct TowerCalibration {
  double height = 0;         // wavelengths either side of a stacking plane
  double error_at_zero = 0;  // relative RMSE of the samples at w = 0
  double target = 0;
  int trials = 0;
};
TowerCalibration calibrate_tower_height(const Degridder& d, double w_max, double target);

}  // namespace iotest::degrid
