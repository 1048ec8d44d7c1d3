#include "iotest/swiftly/core.hpp"

#include <cassert>
#include <cmath>
#include <numbers>

#include "iotest/swiftly/window.hpp"

namespace iotest::swiftly {
namespace {

// Position of FFT-order index i of a length-n array, in [-n/2, n/2).
inline index_t centred(index_t i, index_t n) {
  return i < n / 2 ? i : i - n;
}
inline index_t wrap(index_t i, index_t n) {
  i %= n;
  return i < 0 ? i + n : i;
}

// dst[t] = scale * src[(start + t) mod len] for t in [0, count): a cyclic
// extraction done as at most two straight runs.
void gather_cyclic(const cplx* src, index_t len, index_t start, cplx* dst, index_t count,
                   cplx scale) {
  start = wrap(start, len);
  for (index_t done = 0; done < count;) {
    const index_t run = std::min(count - done, len - start);
    for (index_t t = 0; t < run; ++t) dst[done + t] = scale * src[start + t];
    done += run;
    start = 0;
  }
}

// dst[(start + t) mod len] += scale * src[t]: the adjoint of gather_cyclic.
void scatter_add_cyclic(const cplx* src, index_t count, cplx* dst, index_t len, index_t start,
                        cplx scale) {
  start = wrap(start, len);
  for (index_t done = 0; done < count;) {
    const index_t run = std::min(count - done, len - start);
    for (index_t t = 0; t < run; ++t) dst[start + t] += scale * src[done + t];
    done += run;
    start = 0;
  }
}

// Scratch arrays for planning only (FFTW_MEASURE writes into them); the
// plans then run on other buffers of the same layout and alignment.
struct PlanningArray {
  cplx* data;
  explicit PlanningArray(index_t count)
      : data(static_cast<cplx*>(fftw_malloc(sizeof(cplx) * static_cast<size_t>(count)))) {
    if (!data) throw std::bad_alloc();
  }
  ~PlanningArray() { fftw_free(data); }
  PlanningArray(const PlanningArray&) = delete;
  PlanningArray& operator=(const PlanningArray&) = delete;
};

fftw_complex* fc(cplx* p) {
  return reinterpret_cast<fftw_complex*>(p);
}

// dst[(b - yB/2) mod yN][i] = src[b][i]: a cache-blocked transpose from the
// yB x m column rows into the zero-padded m x yN layout (and back, below).
constexpr index_t kTile = 16;
void transpose_to_padded(CView2D src, MView2D dst, index_t yN) {
  const index_t yB = src.rows, m = src.cols, half = yB / 2;
  for (index_t b0 = 0; b0 < yB; b0 += kTile)
    for (index_t i0 = 0; i0 < m; i0 += kTile)
      for (index_t i = i0; i < std::min(i0 + kTile, m); ++i) {
        cplx* out = dst.row(i);
        for (index_t b = b0; b < std::min(b0 + kTile, yB); ++b) out[wrap(b - half, yN)] = src(b, i);
      }
}
void transpose_from_padded(CView2D src, MView2D dst, index_t yN) {
  const index_t yB = dst.rows, m = dst.cols, half = yB / 2;
  for (index_t b0 = 0; b0 < yB; b0 += kTile)
    for (index_t i0 = 0; i0 < m; i0 += kTile)
      for (index_t b = b0; b < std::min(b0 + kTile, yB); ++b) {
        cplx* out = dst.row(b);
        const index_t k = wrap(b - half, yN);
        for (index_t i = i0; i < std::min(i0 + kTile, m); ++i) out[i] = src(i, k);
      }
}

}  // namespace

double fft_flops(double n) {
  return n > 1 ? 5.0 * n * std::log2(n) : 0.0;
}

ColumnWorkspace::ColumnWorkspace(const config::RecombinationParams& p)
    : rows(p.yB, p.m), padded(p.m, p.yN) {}

Recombination::Recombination(const config::RecombinationParams& p, unsigned fft_flags,
                             Direction direction)
    : p_(p) {
  const Pswf window(p.W * std::numbers::pi / 2);
  const double yN = static_cast<double>(p.yN), m = static_cast<double>(p.m),
               N = static_cast<double>(p.N);
  Fb_.resize(static_cast<size_t>(p.yB));
  for (index_t a = 0; a < p.yB; ++a)
    Fb_[static_cast<size_t>(a)] = 1.0 / window(2.0 * static_cast<double>(a - p.yB / 2) / yN);
  // The window at subgrid-image resolution (every N/xM pixels): x = 2 z / m.
  Fn_.resize(static_cast<size_t>(p.m));
  Fn_image_.resize(static_cast<size_t>(p.m));
  for (index_t i = 0; i < p.m; ++i) {
    const double w = window(2.0 * static_cast<double>(centred(i, p.m)) / m);
    Fn_[static_cast<size_t>(i)] = w / (m * N);
    Fn_image_[static_cast<size_t>(i)] = w / m;
  }
  plan_transforms(fft_flags, direction);

  flops_.facet = static_cast<double>(p.yB) * fft_flops(yN);
  flops_.column = static_cast<double>(p.yB) * fft_flops(m) + m * fft_flops(yN);
  flops_.contribution = m * fft_flops(m);
  flops_.subgrid = 2 * static_cast<double>(p.xM) * fft_flops(static_cast<double>(p.xM));
}

// Each transform and its adjoint, planned together on the same scratch
// array; only those of the directions asked for. Predict runs facet ->
// subgrid (inverse along the facet's axis 0, forward along the column's
// rows, inverse along its padded axis 1 and the subgrid's axes), image the
// adjoints.
void Recombination::plan_transforms(unsigned fft_flags, Direction direction) {
  const bool predict = direction != Direction::image, image = direction != Direction::predict;
  const int yNi = static_cast<int>(p_.yN), yBi = static_cast<int>(p_.yB),
            mi = static_cast<int>(p_.m), xMi = static_cast<int>(p_.xM);
  {
    PlanningArray line(p_.yN);
    const auto facet_axis0 = [&](int sign) {
      return plan_many(yNi, 1, line.data, 1, yNi, line.data, 1, yNi, sign, fft_flags);
    };
    if (predict) facet_axis0_inv_ = facet_axis0(FFTW_BACKWARD);
    if (image) facet_axis0_fwd_ = facet_axis0(FFTW_FORWARD);
  }
  {
    PlanningArray rows(p_.yB * p_.m), padded(p_.m * p_.yN), column(p_.m * p_.yN);
    const auto column_axis0 = [&](int sign) {
      return plan_many(mi, yBi, rows.data, 1, mi, rows.data, 1, mi, sign, fft_flags);
    };
    if (predict) {
      column_axis0_fwd_ = column_axis0(FFTW_FORWARD);
      column_axis1_inv_ =
          plan_many(yNi, mi, padded.data, 1, yNi, column.data, 1, yNi, FFTW_BACKWARD, fft_flags);
    }
    if (image) {
      column_axis0_inv_ = column_axis0(FFTW_BACKWARD);
      column_axis1_fwd_ =
          plan_many(yNi, mi, column.data, 1, yNi, column.data, 1, yNi, FFTW_FORWARD, fft_flags);
    }
  }
  {
    PlanningArray contribution(p_.m * p_.m);
    const auto contribution_plan = [&](int sign) {
      return plan_many(mi, mi, contribution.data, 1, mi, contribution.data, 1, mi, sign,
                       fft_flags);
    };
    if (predict) contribution_fwd_ = contribution_plan(FFTW_FORWARD);
    if (image) contribution_inv_ = contribution_plan(FFTW_BACKWARD);
  }
  PlanningArray sum(p_.xM * p_.xM);
  const auto subgrid_plan = [&](int sign) {
    return FftPlan(fftw_plan_dft_2d(xMi, xMi, fc(sum.data), fc(sum.data), sign, fft_flags));
  };
  if (image) subgrid_fwd_ = subgrid_plan(FFTW_FORWARD);
  if (!predict) return;
  subgrid_inv_ = subgrid_plan(FFTW_BACKWARD);
  if (p_.xM % kColumnBlock == 0) {
    subgrid_rows_inv_ =
        plan_many(xMi, xMi, sum.data, 1, xMi, sum.data, 1, xMi, FFTW_BACKWARD, fft_flags);
    subgrid_column_block_inv_ = plan_many(xMi, static_cast<int>(kColumnBlock), sum.data, xMi, 1,
                                          sum.data, xMi, 1, FFTW_BACKWARD, fft_flags);
  }
}

index_t Recombination::k_row(index_t subgrid_off) const {
  assert(subgrid_off % p_.subgrid_granularity == 0);
  return wrap(subgrid_off * p_.yN / p_.N, p_.yN);
}

index_t Recombination::z_row(index_t facet_off) const {
  assert(facet_off % p_.facet_granularity == 0);
  return facet_off * p_.xM / p_.N;
}

cplx Recombination::phase(index_t subgrid_off, index_t facet_off) const {
  // exp(2 pi i x y / N) with x y reduced exactly modulo N first.
  const index_t r = wrap(wrap(subgrid_off, p_.N) * wrap(facet_off, p_.N) % p_.N, p_.N);
  const double angle = 2 * std::numbers::pi * static_cast<double>(r) / static_cast<double>(p_.N);
  return {std::cos(angle), std::sin(angle)};
}

// ---- predict ------------------------------------------------------------

void Recombination::prepare_facet(CView2D facet, MView2D prepared, int threads) const {
  // Prepared facets are stored transposed (row b = facet column b along
  // axis 0), so every transform here and in prepare_column is contiguous.
  const index_t yB = p_.yB, yN = p_.yN, half = yB / 2;
  assert(facet.rows == yB && facet.cols == yB && prepared.rows == yB && prepared.cols == yN);
  // Window correction and padding, a block of columns at a time so that
  // reads and writes both stay in cache; each block's rows are then
  // transformed by the thread that wrote them.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t b0 = 0; b0 < yB; b0 += kTile) {
    const index_t nb = std::min(kTile, yB - b0);
    for (index_t b = b0; b < b0 + nb; ++b)
      std::fill(prepared.row(b) + half, prepared.row(b) + yN - half, cplx{});
    for (index_t a = 0; a < yB; ++a) {
      const cplx* in = facet.row(a) + b0;
      const index_t k = wrap(a - half, yN);
      const double fa = Fb_[static_cast<size_t>(a)];
      for (index_t j = 0; j < nb; ++j)
        prepared(b0 + j, k) = fa * Fb_[static_cast<size_t>(b0 + j)] * in[j];
    }
    for (index_t b = b0; b < b0 + nb; ++b) facet_axis0_inv_.execute(prepared.row(b));
  }
}

void Recombination::prepare_column(CView2D prepared, index_t facet_off0, index_t subgrid_off0,
                                   ColumnWorkspace& ws, MView2D column) const {
  const index_t m = p_.m, yN = p_.yN, yB = p_.yB, k0 = k_row(subgrid_off0);
  const cplx ph = phase(subgrid_off0, facet_off0);
  MView2D rows = ws.rows.view();
  // The m samples around k0 of every facet column, in FFT order.
  for (index_t b = 0; b < yB; ++b) {
    gather_cyclic(prepared.row(b), yN, k0, rows.row(b), m / 2, ph);
    gather_cyclic(prepared.row(b), yN, k0 - m / 2, rows.row(b) + m / 2, m / 2, ph);
  }
  column_axis0_fwd_.execute(rows.data);
  // Padding columns of ws.padded stay zero: only the data columns are written.
  transpose_to_padded(rows, ws.padded.view(), yN);
  column_axis1_inv_.execute(ws.padded.data(), column.data);
}

void Recombination::extract_contribution(CView2D column, index_t facet_off1, index_t subgrid_off1,
                                         MView2D contribution) const {
  const index_t m = p_.m, yN = p_.yN, k1 = k_row(subgrid_off1);
  const cplx ph = phase(subgrid_off1, facet_off1);
  for (index_t i = 0; i < m; ++i) {
    // FFT order along axis 1: [k1, k1 + m/2) then [k1 - m/2, k1).
    gather_cyclic(column.row(i), yN, k1, contribution.row(i), m / 2, ph);
    gather_cyclic(column.row(i), yN, k1 - m / 2, contribution.row(i) + m / 2, m / 2, ph);
  }
  contribution_fwd_.execute(contribution.data);
}

void Recombination::add_contribution(CView2D contribution, index_t facet_off0, index_t facet_off1,
                                     MView2D subgrid_sum) const {
  const index_t m = p_.m, xM = p_.xM, o0 = z_row(facet_off0), o1 = z_row(facet_off1);
  for (index_t i = 0; i < m; ++i) {
    cplx* out = subgrid_sum.row(wrap(centred(i, m) + o0, xM));
    const cplx* in = contribution.row(i);
    const double w0 = Fn_[static_cast<size_t>(i)];
    index_t col = wrap(o1 - m / 2, xM);
    // Walk z1 = -m/2 .. m/2-1 (input index j = z1 mod m), output cyclic.
    for (index_t z1 = -m / 2; z1 < m / 2; ++z1) {
      const index_t j = z1 < 0 ? z1 + m : z1;
      out[col] += (w0 * Fn_[static_cast<size_t>(j)]) * in[j];
      if (++col == xM) col = 0;
    }
  }
}

void Recombination::finish_subgrid_in(MView2D scratch, MView2D subgrid,
                                      std::span<const std::uint8_t> columns) const {
  const index_t xA = p_.xA, xM = p_.xM;
  if (columns.empty() || xM % kColumnBlock != 0) {
    subgrid_inv_.execute(scratch.data);
  } else {
    // Subgrid column b is scratch column (b - xA / 2) mod xM.
    std::vector<std::uint8_t> blocks(static_cast<size_t>(xM / kColumnBlock), 0);
    for (index_t b = 0; b < xA; ++b)
      if (columns[static_cast<size_t>(b)])
        blocks[static_cast<size_t>(wrap(b - xA / 2, xM) / kColumnBlock)] = 1;
    subgrid_rows_inv_.execute(scratch.data);
    for (index_t k = 0; k < xM / kColumnBlock; ++k)
      if (blocks[static_cast<size_t>(k)])
        subgrid_column_block_inv_.execute(scratch.data + k * kColumnBlock);
  }
  for (index_t a = 0; a < xA; ++a)
    gather_cyclic(scratch.row(wrap(a - xA / 2, xM)), xM, -xA / 2, subgrid.row(a), xA, 1.0);
}

void Recombination::finish_subgrid(MView2D subgrid_sum, MView2D subgrid) const {
  finish_subgrid_in(subgrid_sum, subgrid);
  std::fill(subgrid_sum.data, subgrid_sum.data + p_.xM * p_.xM, cplx{});
}

void Recombination::finish_subgrid_copy(CView2D subgrid_sum, MView2D scratch,
                                        MView2D subgrid) const {
  std::copy(subgrid_sum.data, subgrid_sum.data + p_.xM * p_.xM, scratch.data);
  finish_subgrid_in(scratch, subgrid);
}

// ---- image (adjoint) ------------------------------------------------------

void Recombination::prepare_subgrid(CView2D subgrid, MView2D subgrid_sum) const {
  const index_t xA = p_.xA, xM = p_.xM;
  std::fill(subgrid_sum.data, subgrid_sum.data + xM * xM, cplx{});
  for (index_t a = 0; a < xA; ++a)
    scatter_add_cyclic(subgrid.row(a), xA, subgrid_sum.row(wrap(a - xA / 2, xM)), xM, -xA / 2, 1.0);
  subgrid_fwd_.execute(subgrid_sum.data);
}

void Recombination::extract_from_subgrid(CView2D subgrid_sum, index_t facet_off0,
                                         index_t facet_off1, MView2D contribution) const {
  const index_t m = p_.m, xM = p_.xM, o0 = z_row(facet_off0), o1 = z_row(facet_off1);
  for (index_t i = 0; i < m; ++i) {
    const cplx* in = subgrid_sum.row(wrap(centred(i, m) + o0, xM));
    cplx* out = contribution.row(i);
    const double w0 = Fn_image_[static_cast<size_t>(i)];
    index_t col = wrap(o1 - m / 2, xM);
    for (index_t z1 = -m / 2; z1 < m / 2; ++z1) {
      const index_t j = z1 < 0 ? z1 + m : z1;
      out[j] = (w0 * Fn_image_[static_cast<size_t>(j)]) * in[col];
      if (++col == xM) col = 0;
    }
  }
}

void Recombination::add_to_column(MView2D contribution, index_t facet_off1, index_t subgrid_off1,
                                  MView2D column_sum) const {
  const index_t m = p_.m, yN = p_.yN, k1 = k_row(subgrid_off1);
  const cplx ph = std::conj(phase(subgrid_off1, facet_off1));
  contribution_inv_.execute(contribution.data);
  for (index_t i = 0; i < m; ++i) {
    scatter_add_cyclic(contribution.row(i), m / 2, column_sum.row(i), yN, k1, ph);
    scatter_add_cyclic(contribution.row(i) + m / 2, m / 2, column_sum.row(i), yN, k1 - m / 2, ph);
  }
}

void Recombination::finish_column(MView2D column_sum, index_t facet_off0, index_t subgrid_off0,
                                  ColumnWorkspace& ws, MView2D facet_sum) const {
  const index_t m = p_.m, yN = p_.yN, yB = p_.yB, k0 = k_row(subgrid_off0);
  const cplx ph = std::conj(phase(subgrid_off0, facet_off0));
  column_axis1_fwd_.execute(column_sum.data);
  MView2D rows = ws.rows.view();
  transpose_from_padded(column_sum, rows, yN);
  column_axis0_inv_.execute(rows.data);
  for (index_t b = 0; b < yB; ++b) {
    scatter_add_cyclic(rows.row(b), m / 2, facet_sum.row(b), yN, k0, ph);
    scatter_add_cyclic(rows.row(b) + m / 2, m / 2, facet_sum.row(b), yN, k0 - m / 2, ph);
  }
  std::fill(column_sum.data, column_sum.data + m * yN, cplx{});
}

void Recombination::finish_facet(MView2D facet_sum, MView2D facet) const {
  // The adjoint of prepare_facet.
  const index_t yB = p_.yB, yN = p_.yN, half = yB / 2;
  for (index_t b = 0; b < yB; ++b) facet_axis0_fwd_.execute(facet_sum.row(b));
  for (index_t b0 = 0; b0 < yB; b0 += kTile) {
    const index_t nb = std::min(kTile, yB - b0);
    for (index_t a = 0; a < yB; ++a) {
      cplx* out = facet.row(a) + b0;
      const index_t k = wrap(a - half, yN);
      const double fa = Fb_[static_cast<size_t>(a)];
      for (index_t j = 0; j < nb; ++j)
        out[j] = fa * Fb_[static_cast<size_t>(b0 + j)] * facet_sum(b0 + j, k);
    }
  }
}

}  // namespace iotest::swiftly
