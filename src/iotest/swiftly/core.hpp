// SwiFTly recombination for one set of parameters: the steps of DESIGN.md
// section 7 in the cheap 2-D order (per facet, per subgrid column, per
// subgrid), and their exact adjoint for the image direction. No MPI: the
// pipeline decides where each step runs; here every step is a pure function
// of its inputs.
//
// Layouts (row = axis 0, column = axis 1; all row-major):
//   facet           yB x yB   natural order, pixel (y0, y1) at (y0 + yB/2, y1 + yB/2)
//   prepared facet  yB x yN   transposed: row b is facet column b, padded and
//                             transformed along axis 0 (FFT order)
//   column          m  x yN   one facet's data for one subgrid column
//   contribution    m  x m    one facet's part of one subgrid (the message)
//   subgrid sum     xM x xM   FFT order, contributions summed
//   subgrid         xA x xA   natural order, cell (u0, u1) at (u0 + xA/2, u1 + xA/2)
// Offsets are in image pixels (facets) and grid cells (subgrids), centred.
#pragma once

#include <fftw3.h>

#include <cstdint>
#include <span>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/config/rec_set.hpp"
#include "iotest/swiftly/direction.hpp"
#include "iotest/swiftly/fft.hpp"

namespace iotest::swiftly {

// Per-thread scratch for the column steps; preallocated, reused for every
// column so the walk allocates nothing.
struct ColumnWorkspace {
  Array2D rows;    // yB x m: the m samples of every facet column around the subgrid column
  Array2D padded;  // m x yN: axis 1 zero-padded (padding is never written)
  explicit ColumnWorkspace(const config::RecombinationParams& p);
};

// Transform work of each step, for the GFLOP/s figure (5 n log2 n per FFT).
// The image direction runs the adjoint of every step, so both directions
// cost the same.
struct FlopModel {
  double facet = 0, column = 0, contribution = 0, subgrid = 0;
  // One direction over `facets` facets and a walk of `columns` columns
  // holding `subgrids` subgrids.
  double walk(double facets, double columns, double subgrids) const {
    return facets * (facet + columns * column + subgrids * contribution) + subgrids * subgrid;
  }
};

class Recombination {
 public:
  // fft_flags: FFTW_MEASURE (default) tunes the plans; FFTW_ESTIMATE plans
  // at once (tests). Only `direction`'s transforms are planned: measuring
  // the other half took a predict run's planning rank about 1 s of its 2.
  explicit Recombination(const config::RecombinationParams& p, unsigned fft_flags = FFTW_MEASURE,
                         Direction direction = Direction::both);

  const config::RecombinationParams& params() const { return p_; }
  const FlopModel& flops() const { return flops_; }

  // Buffers of the right shape, zeroed and aligned as the plans expect.
  Array2D make_facet() const { return {p_.yB, p_.yB}; }
  Array2D make_prepared_facet() const { return {p_.yB, p_.yN}; }
  Array2D make_column() const { return {p_.m, p_.yN}; }
  Array2D make_contribution() const { return {p_.m, p_.m}; }
  Array2D make_subgrid_sum() const { return {p_.xM, p_.xM}; }
  Array2D make_subgrid() const { return {p_.xA, p_.xA}; }

  // ---- predict: facet -> subgrid --------------------------------------
  // Once per facet: divide by the window (Fb), pad axis 0 to yN, inverse FFT.
  // `threads` share the facet's columns (inside an active parallel region
  // OpenMP runs them on one).
  void prepare_facet(CView2D facet, MView2D prepared, int threads = 1) const;
  // Once per facet and subgrid column: extract the m rows around the column,
  // FFT them, pad axis 1 to yN and inverse FFT it.
  void prepare_column(CView2D prepared, index_t facet_off0, index_t subgrid_off0,
                      ColumnWorkspace& ws, MView2D column) const;
  // Once per facet and subgrid: the m x m contribution sent to the subgrid.
  void extract_contribution(CView2D column, index_t facet_off1, index_t subgrid_off1,
                            MView2D contribution) const;
  // Streamer side: weight by the window (Fn) and add at the facet's place.
  void add_contribution(CView2D contribution, index_t facet_off0, index_t facet_off1,
                        MView2D subgrid_sum) const;
  // Inverse FFT and cut out the central xA x xA; leaves subgrid_sum zeroed.
  void finish_subgrid(MView2D subgrid_sum, MView2D subgrid) const;
  // The same, leaving `scratch` (the sum on entry) transformed: for callers
  // that refill it anyway. With `columns` (xA flags, one per subgrid column;
  // empty: all), only the marked columns of `subgrid` are exact; the others
  // hold values that are not the subgrid's. The transform runs along axis 1
  // for every row, then along axis 0 only for the blocks of columns that
  // hold a marked one: a w-tower's taps read about half of a plane's
  // columns, and axis 0 (strided) is the larger half of the transform.
  void finish_subgrid_in(MView2D scratch, MView2D subgrid,
                         std::span<const std::uint8_t> columns = {}) const;
  // The same from a copy in `scratch` (xM x xM), keeping subgrid_sum: for
  // several w-planes made from one subgrid.
  void finish_subgrid_copy(CView2D subgrid_sum, MView2D scratch, MView2D subgrid) const;

  // ---- image: subgrid -> facet (the adjoint, scaled so that image
  // inverts predict) ---------------------------------------------------
  void prepare_subgrid(CView2D subgrid, MView2D subgrid_sum) const;
  void extract_from_subgrid(CView2D subgrid_sum, index_t facet_off0, index_t facet_off1,
                            MView2D contribution) const;
  // Transforms `contribution` in place, then adds it to the column sum.
  void add_to_column(MView2D contribution, index_t facet_off1, index_t subgrid_off1,
                     MView2D column_sum) const;
  // Adds the column sum to the facet sum; leaves column_sum zeroed.
  void finish_column(MView2D column_sum, index_t facet_off0, index_t subgrid_off0,
                     ColumnWorkspace& ws, MView2D facet_sum) const;
  // Transforms facet_sum in place and writes the facet (window corrected).
  void finish_facet(MView2D facet_sum, MView2D facet) const;

 private:
  void plan_transforms(unsigned fft_flags, Direction direction);

  config::RecombinationParams p_;
  std::vector<double> Fb_;        // 1/window on the yB facet pixels
  std::vector<double> Fn_;        // window at subgrid resolution, m values, FFT order,
                                  // scaled 1/(m N) for predict
  std::vector<double> Fn_image_;  // the same scaled 1/m for the image direction
  FlopModel flops_;

  FftPlan facet_axis0_inv_, facet_axis0_fwd_;    // one yN transform (a facet column)
  FftPlan column_axis0_fwd_, column_axis0_inv_;  // yB transforms of length m
  FftPlan column_axis1_inv_, column_axis1_fwd_;  // yN along axis 1 of m x yN
  FftPlan contribution_fwd_, contribution_inv_;  // m along axis 1 of m x m
  FftPlan subgrid_inv_, subgrid_fwd_;            // xM x xM
  // finish_subgrid_in's transform in two passes: xM rows along axis 1, then
  // kColumnBlock columns along axis 0 at a time.
  static constexpr index_t kColumnBlock = 16;
  FftPlan subgrid_rows_inv_, subgrid_column_block_inv_;

  index_t k_row(index_t subgrid_off) const;  // subgrid offset at facet-grid resolution
  index_t z_row(index_t facet_off) const;    // facet offset at subgrid-image resolution
  cplx phase(index_t subgrid_off, index_t facet_off) const;
};

}  // namespace iotest::swiftly
