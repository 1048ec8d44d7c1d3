// The GPU path (src/iotest/device/). On the host, in every build: the
// per-visibility arithmetic the CUDA kernels share (tap_math.hpp) against
// Degridder::degrid and the direct Fourier transform, and its tap sum and
// spread as an adjoint pair; the probe and the refusal without a GPU. In
// CUDA builds: GpuDegridder against the CPU Degridder and the DFT, and its
// gridding as its degridding's adjoint, skipped with the probe's reason
// where no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <numeric>
#include <random>
#include <string_view>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/device/device.hpp"
#ifdef IOTEST_HAVE_CUDA
#include "iotest/device/cufft_library.hpp"
#endif
#include "degrid_fixture.hpp"
#include "iotest/device/gpu_degridder.hpp"
#include "iotest/device/tap_math.hpp"
#include "iotest/job/job.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::device {
namespace {

using degrid::Degridder;

using test::dot;
using test::random_values;

// max |a - b| over RMS |b|.
double max_relative(const std::vector<cplx>& a, const std::vector<cplx>& b) {
  double worst = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    norm += std::norm(b[i]);
  }
  return worst / std::sqrt(norm / static_cast<double>(b.size()));
}

tap::Cplx to_tap(cplx c) {
  return {c.real(), c.imag()};
}
cplx from_tap(tap::Cplx c) {
  return {c.re, c.im};
}

job::Job small_job(const char* rec_set, const char* vis_set) {
  job::JobOptions o;
  o.rec_set = rec_set;
  const bool pole = std::string_view(vis_set).ends_with(telescope::kPoleSuffix);
  o.observation = telescope::ObservationOptions{vis_set, "-1800:1800/12/6", "260e6:300e6/24/12",
                                                pole ? 90.0 : -40.0};
  o.source_count = 10;
  return job::resolve(o);
}

// A visit as the CPU path walks it: its runs, w range and offsets.
struct Visit {
  index_t stack = 0, subgrid = 0;
  std::vector<binning::VisRun> runs;
  double wc_min = 0, wc_max = 0;
  index_t off0 = 0, off1 = 0, visibilities = 0;
};

struct Fixture : test::DegridFixture {
  using DegridFixture::DegridFixture;

  // The visits holding visibilities, busiest first.
  std::vector<Visit> visits() const {
    const auto counts = binner.count_visits(0, job.obs->baseline_count(), 1);
    std::vector<index_t> order;
    for (index_t at = 0; at < static_cast<index_t>(counts.visibilities.size()); ++at)
      if (counts.visibilities[static_cast<size_t>(at)] > 0) order.push_back(at);
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return counts.visibilities[static_cast<size_t>(a)] >
             counts.visibilities[static_cast<size_t>(b)];
    });
    const auto tiles = swiftly::subgrid_tiles(job.p);
    const index_t ns = job.p.subgrids_per_axis;
    const double dw = degridder.planes().dw;
    std::vector<Visit> out;
    for (const index_t at : order) {
      Visit v;
      v.stack = counts.first_stack + at / counts.subgrids;
      v.subgrid = at % counts.subgrids;
      const binning::VisitRuns runs(binner, v.stack, v.subgrid);
      runs.runs(0, runs.pieces().size(), v.runs);
      double lo = 0, hi = 0;
      runs.w_range(lo, hi);
      v.wc_min = lo / dw;
      v.wc_max = hi / dw;
      v.off0 = tiles[static_cast<size_t>(v.subgrid / ns)].offset;
      v.off1 = tiles[static_cast<size_t>(v.subgrid % ns)].offset;
      for (const auto& r : v.runs) v.visibilities += r.count();
      out.push_back(std::move(v));
    }
    return out;
  }

  // The visit's image-space subgrid sum from the sky: every facet
  // corrected for its stack and recombined, as `iotest degrid` does.
  Array2D sky_sum(const Visit& v) const {
    const auto& p = job.p;
    const auto ftiles = swiftly::facet_tiles(p);
    const index_t nf = p.facets_per_axis;
    Array2D facet = rec.make_facet(), prepared = rec.make_prepared_facet(),
            column = rec.make_column(), contribution = rec.make_contribution(),
            sum = rec.make_subgrid_sum();
    swiftly::ColumnWorkspace ws(p);
    for (index_t f = 0; f < p.facet_count(); ++f) {
      const auto& t0 = ftiles[static_cast<size_t>(f / nf)];
      const auto& t1 = ftiles[static_cast<size_t>(f % nf)];
      sky::fill_facet(job.sources, t0, t1, facet.view());
      degridder.correct_facet(t0, t1, v.stack, facet.view());
      rec.prepare_facet(facet.view(), prepared.view());
      rec.prepare_column(prepared.view(), t0.offset, v.off0, ws, column.view());
      rec.extract_contribution(column.view(), t1.offset, v.off1, contribution.view());
      rec.add_contribution(contribution.view(), t0.offset, t1.offset, sum.view());
    }
    return sum;
  }

  // The CPU path: build_tower and degrid.
  std::vector<cplx> cpu_degrid(const Visit& v, CView2D sum, Degridder::Workspace& ws) const {
    degridder.build_tower(sum, v.wc_min, v.wc_max, ws);
    std::vector<cplx> out;
    degridder.degrid(v.runs.data(), v.runs.data() + v.runs.size(), v.off0, v.off1, ws, out);
    return out;
  }
};

// The tower's planes, contiguous (as the GPU holds them).
std::vector<tap::Cplx> contiguous(const Degridder::Workspace& ws, index_t xA) {
  std::vector<tap::Cplx> t;
  for (index_t p = 0; p < ws.plane_count; ++p) {
    const auto& plane = ws.planes[static_cast<size_t>(p)];
    for (index_t i = 0; i < xA * xA; ++i) t.push_back(to_tap(plane.data()[i]));
  }
  return t;
}

// Calls f(i, taps) for every visibility of the visit, with tap_math.hpp's
// positions and weights.
template <class F>
void walk(const TapTables& tt, const Visit& v, index_t first_plane, index_t plane_count, F&& f) {
  index_t i = 0;
  for (const auto& r : v.runs)
    for (int chan = r.chan_begin; chan < r.chan_end; ++chan, ++i) {
      const tap::Run run{r.baseline, r.time, r.chan_begin, r.chan_end, r.w_stack, 0, 0, 0};
      tap::VisTaps taps;
      tap::visibility_taps(tt.tables, run, chan, static_cast<double>(v.off0),
                           static_cast<double>(v.off1), first_plane, plane_count, taps);
      f(i, taps);
    }
}

// tap_math.hpp's visibilities of a visit from the CPU's tower.
std::vector<cplx> tap_degrid(const TapTables& tt, const Visit& v, const Degridder::Workspace& ws,
                             index_t xA) {
  const auto tower = contiguous(ws, xA);
  std::vector<cplx> out;
  walk(tt, v, ws.first_plane, ws.plane_count, [&](index_t, const tap::VisTaps& taps) {
    EXPECT_TRUE(taps.inside);
    if (taps.inside) out.push_back(from_tap(tap::degrid_value(tt.tables, taps, tower.data())));
  });
  return out;
}

TEST(GpuTapMath, MatchesTheCpuDegridderAndTheDirectTransform) {
  const Fixture s(small_job("T05_", "vlaa"));
  ASSERT_FALSE(s.job.w.w_free());
  const TapTables tt(s.degridder);
  const auto visits = s.visits();
  ASSERT_GE(visits.size(), 2u);
  // The busiest visit, and one from the other end: w spans planes, and
  // the screens matter.
  for (const auto* v : {&visits.front(), &visits.back()}) {
    const Array2D sum = s.sky_sum(*v);
    Degridder::Workspace ws(s.job.p);
    const auto cpu = s.cpu_degrid(*v, sum.view(), ws);
    ASSERT_EQ(static_cast<index_t>(cpu.size()), v->visibilities);
    const auto taps = tap_degrid(tt, *v, ws, s.job.p.xA);
    ASSERT_EQ(taps.size(), cpu.size());
    // The same sums in the same order, up to the phase (stepped across
    // channels on the CPU, direct here) and FMA contraction.
    EXPECT_LT(max_relative(taps, cpu), 1e-12) << v->visibilities << " visibilities";
    // Against the direct transform: the CPU path's stated tolerance
    // (test_degrid.cpp: RMSE below 2e-8 on T05_ with vlaa).
    RelativeError dft;
    index_t i = 0;
    for (const auto& r : v->runs)
      for (index_t chan = r.chan_begin; chan < r.chan_end; ++chan, ++i) {
        const cplx want = s.degridder.direct(s.job.sources, r.baseline, r.time, chan);
        dft.error_sq += std::norm(taps[static_cast<size_t>(i)] - want);
        dft.reference_sq += std::norm(want);
      }
    EXPECT_GT(dft.reference_sq, 0);
    EXPECT_LT(dft.value(), 2e-8);
  }
  // Something to degrid: the busiest visit is busy.
  EXPECT_GT(visits.front().visibilities, 1000);
}

// <y, A x> against <A^H y, x>: A the tap sums with the phase, A^H the
// spread with the conjugate phase, over a random tower x and visibilities
// y.
void expect_adjoint(const Fixture& s) {
  const TapTables tt(s.degridder);
  const auto visits = s.visits();
  ASSERT_FALSE(visits.empty());
  const Visit& v = visits.front();
  const auto range = degrid::tower_planes(s.job.w, s.job.kernel.w_support, v.wc_min, v.wc_max);
  const index_t xA = s.job.p.xA, n_tower = range.count * xA * xA;
  std::mt19937_64 rng(5);
  const auto x = random_values(n_tower, rng);
  const auto y = random_values(v.visibilities, rng);
  std::vector<tap::Cplx> tower(static_cast<size_t>(n_tower));
  std::transform(x.begin(), x.end(), tower.begin(), to_tap);
  std::vector<cplx> ax(static_cast<size_t>(v.visibilities));
  std::vector<tap::Cplx> ahy(static_cast<size_t>(n_tower), tap::Cplx{0, 0});
  const auto add = [](double* p, double value) { *p += value; };
  walk(tt, v, range.first, range.count, [&](index_t i, const tap::VisTaps& taps) {
    ASSERT_TRUE(taps.inside);
    ax[static_cast<size_t>(i)] = from_tap(tap::degrid_value(tt.tables, taps, tower.data()));
    tap::grid_value(tt.tables, taps, to_tap(y[static_cast<size_t>(i)]), ahy.data(), add);
  });
  std::vector<cplx> ahy_c(ahy.size());
  std::transform(ahy.begin(), ahy.end(), ahy_c.begin(), from_tap);
  const cplx lhs = dot(y.data(), ax.data(), v.visibilities);
  const cplx rhs = dot(ahy_c.data(), x.data(), n_tower);
  EXPECT_GT(std::abs(lhs), 0);
  EXPECT_LT(std::abs(lhs - rhs), 1e-12 * std::abs(lhs)) << lhs << " vs " << rhs;
}

TEST(GpuTapMath, SpreadIsTheAdjointOfTheTapSum) {
  expect_adjoint(Fixture(small_job("2k-1k-256", "vlaa")));
}

TEST(GpuTapMath, SpreadIsTheAdjointOfTheTapSumWithoutW) {
  const Fixture s(small_job("T05_", "vlaa@pole"));
  ASSERT_TRUE(s.job.w.w_free());
  expect_adjoint(s);
}

// degrid_group (the CUDA kernel's per-thread work, compiled for support
// 12) against degrid_value per visibility: every run cut into groups of
// kGroupChannels channels (the last one short), on the CPU's tower; and
// with the subgrid's offsets moved away, the flag and zeros instead.
void expect_groups_match(const Fixture& s) {
  const TapTables tt(s.degridder);
  ASSERT_EQ(tt.tables.support, 12);
  const auto visits = s.visits();
  ASSERT_FALSE(visits.empty());
  const index_t xA = s.job.p.xA;
  for (const auto* v : {&visits.front(), &visits.back()}) {
    const Array2D sum = s.sky_sum(*v);
    Degridder::Workspace ws(s.job.p);
    s.cpu_degrid(*v, sum.view(), ws);
    const auto tower = contiguous(ws, xA);
    std::vector<cplx> want;
    walk(tt, *v, ws.first_plane, ws.plane_count, [&](index_t, const tap::VisTaps& taps) {
      ASSERT_TRUE(taps.inside);
      want.push_back(from_tap(tap::degrid_value(tt.tables, taps, tower.data())));
    });
    for (const bool moved : {false, true}) {
      const double off0 = static_cast<double>(v->off0 + (moved ? s.job.p.N / 2 : 0));
      std::vector<cplx> got;
      bool any_outside = false;
      for (const auto& r : v->runs) {
        const tap::Run run{r.baseline, r.time, r.chan_begin, r.chan_end, r.w_stack, 0, 0, 0};
        for (int k0 = 0; k0 < r.chan_end - r.chan_begin; k0 += tap::kGroupChannels) {
          tap::ArrayScratch<12, tap::kGroupChannels> sc;
          tap::Cplx out[tap::kGroupChannels];
          bool outside = true;
          const int n = tap::degrid_group<12, tap::kGroupChannels>(
              tt.tables, run, k0, off0, static_cast<double>(v->off1), ws.first_plane,
              ws.plane_count, tower.data(), sc, out, outside);
          ASSERT_EQ(n, std::min<int>(tap::kGroupChannels, r.chan_end - r.chan_begin - k0));
          any_outside = any_outside || outside;
          for (int k = 0; k < n; ++k) got.push_back(from_tap(out[k]));
        }
      }
      ASSERT_EQ(got.size(), want.size());
      if (!moved) {
        EXPECT_FALSE(any_outside);
        EXPECT_LT(max_relative(got, want), 1e-12) << v->visibilities << " visibilities";
      } else {
        EXPECT_TRUE(any_outside);
      }
    }
  }
}

TEST(GpuTapMath, ChannelGroupsMatchTheTapSums) {
  const Fixture s(small_job("T05_", "vlaa"));
  ASSERT_FALSE(s.job.w.w_free());
  expect_groups_match(s);
}

TEST(GpuTapMath, ChannelGroupsMatchTheTapSumsWithoutW) {
  const Fixture s(small_job("T05_", "vlaa@pole"));
  ASSERT_TRUE(s.job.w.w_free());
  expect_groups_match(s);
}

// grid_group (the CUDA gridding kernel's per-thread work, compiled for
// support 12) over every run of the busiest and the sparsest visit, cut
// into groups as expect_groups_match cuts them, with random visibilities
// y: degrid_group's adjoint, <y, D x> = <G y, x> for a random tower x;
// and the same towers as grid_value adds per visibility. The channels
// past a run's end are NaN: grid_group must not read them. With the
// subgrid's offsets moved away, the flag, and only the visibilities whose
// taps lie inside add.
void expect_group_spread(const Fixture& s) {
  constexpr int K = tap::kGroupChannels;
  const TapTables tt(s.degridder);
  ASSERT_EQ(tt.tables.support, 12);
  const auto visits = s.visits();
  ASSERT_FALSE(visits.empty());
  const index_t xA = s.job.p.xA;
  const auto add = [](double* p, double value) { *p += value; };
  std::mt19937_64 rng(11);
  for (const auto* v : {&visits.front(), &visits.back()}) {
    const auto range = degrid::tower_planes(s.job.w, s.job.kernel.w_support, v->wc_min, v->wc_max);
    const index_t n_tower = range.count * xA * xA;
    const auto x = random_values(n_tower, rng);
    const auto y = random_values(v->visibilities, rng);
    std::vector<tap::Cplx> tower(static_cast<size_t>(n_tower));
    std::transform(x.begin(), x.end(), tower.begin(), to_tap);
    for (const bool moved : {false, true}) {
      Visit at_v = *v;
      if (moved) at_v.off0 += s.job.p.N / 2;
      const double off0 = static_cast<double>(at_v.off0), off1 = static_cast<double>(at_v.off1);
      // grid_value per visibility whose taps lie inside.
      std::vector<tap::Cplx> want(static_cast<size_t>(n_tower), tap::Cplx{0, 0});
      walk(tt, at_v, range.first, range.count, [&](index_t i, const tap::VisTaps& taps) {
        if (taps.inside)
          tap::grid_value(tt.tables, taps, to_tap(y[static_cast<size_t>(i)]), want.data(), add);
      });
      std::vector<tap::Cplx> got(static_cast<size_t>(n_tower), tap::Cplx{0, 0});
      std::vector<cplx> dx;
      bool any_outside = false;
      index_t i = 0;
      for (const auto& r : v->runs) {
        const tap::Run run{r.baseline, r.time, r.chan_begin, r.chan_end, r.w_stack, 0, 0, 0};
        for (int k0 = 0; k0 < r.chan_end - r.chan_begin; k0 += K) {
          const int n = std::min<int>(K, r.chan_end - r.chan_begin - k0);
          tap::Cplx in[K];
          for (int k = 0; k < K; ++k)
            in[k] = k < n ? to_tap(y[static_cast<size_t>(i + k)]) : tap::Cplx{NAN, NAN};
          tap::ArrayScratch<12, K> sc;
          bool outside = !moved;
          ASSERT_EQ((tap::grid_group<12, K>(tt.tables, run, k0, off0, off1, range.first,
                                            range.count, in, got.data(), sc, add, outside)),
                    n);
          any_outside = any_outside || outside;
          if (!moved) {
            tap::Cplx out[K];
            bool out_outside = true;
            tap::degrid_group<12, K>(tt.tables, run, k0, off0, off1, range.first, range.count,
                                     tower.data(), sc, out, out_outside);
            ASSERT_FALSE(out_outside);
            for (int k = 0; k < n; ++k) dx.push_back(from_tap(out[k]));
          }
          i += n;
        }
      }
      ASSERT_EQ(i, v->visibilities);
      std::vector<cplx> got_c(got.size()), want_c(want.size());
      std::transform(got.begin(), got.end(), got_c.begin(), from_tap);
      std::transform(want.begin(), want.end(), want_c.begin(), from_tap);
      if (!moved) {
        EXPECT_FALSE(any_outside);
        const cplx lhs = dot(y.data(), dx.data(), v->visibilities);
        const cplx rhs = dot(got_c.data(), x.data(), n_tower);
        EXPECT_GT(std::abs(lhs), 0);
        EXPECT_LT(std::abs(lhs - rhs), 1e-12 * std::abs(lhs)) << lhs << " vs " << rhs;
        EXPECT_LT(max_relative(got_c, want_c), 1e-12) << v->visibilities << " visibilities";
      } else {
        EXPECT_TRUE(any_outside);
        // Those inside (if any) as grid_value adds them; nothing else.
        double worst = 0, norm = 0;
        for (size_t c = 0; c < want_c.size(); ++c) {
          worst = std::max(worst, std::abs(got_c[c] - want_c[c]));
          norm += std::norm(want_c[c]);
        }
        EXPECT_LE(worst, 1e-12 * std::sqrt(norm / static_cast<double>(want_c.size())));
      }
    }
  }
}

TEST(GpuTapMath, ChannelGroupsSpreadAsTheAdjointOfTheirTapSums) {
  const Fixture s(small_job("T05_", "vlaa"));
  ASSERT_FALSE(s.job.w.w_free());
  expect_group_spread(s);
}

TEST(GpuTapMath, ChannelGroupsSpreadAsTheAdjointOfTheirTapSumsWithoutW) {
  const Fixture s(small_job("T05_", "vlaa@pole"));
  ASSERT_TRUE(s.job.w.w_free());
  expect_group_spread(s);
}

TEST(GpuTapMath, FlagsTapsOutsideTheTower) {
  const Fixture s(small_job("T05_", "vlaa"));
  const TapTables tt(s.degridder);
  const auto visits = s.visits();
  ASSERT_FALSE(visits.empty());
  Visit v = visits.front();
  const auto range = degrid::tower_planes(s.job.w, s.job.kernel.w_support, v.wc_min, v.wc_max);
  bool all_inside = true, any_outside = false;
  walk(tt, v, range.first, range.count,
       [&](index_t, const tap::VisTaps& t) { all_inside = all_inside && t.inside; });
  // The wrong subgrid: its offsets far from the visit's cells.
  v.off0 += s.job.p.N / 2;
  walk(tt, v, range.first, range.count,
       [&](index_t, const tap::VisTaps& t) { any_outside = any_outside || !t.inside; });
  EXPECT_TRUE(all_inside);
  EXPECT_TRUE(any_outside);
}

TEST(GpuDevice, ProbeIsConsistent) {
  const Probe p = probe();
#ifdef IOTEST_HAVE_CUDA
  EXPECT_TRUE(built_with_cuda());
#else
  EXPECT_FALSE(built_with_cuda());
#endif
  // Either GPUs, or one line saying why none.
  EXPECT_NE(p.gpus.empty(), p.missing.empty()) << p.missing;
  EXPECT_EQ(p.missing.find('\n'), std::string::npos);
  for (const auto& g : p.gpus) {
    EXPECT_GT(g.memory_bytes, 0);
    EXPECT_GT(g.multiprocessors, 0);
    EXPECT_GE(g.compute_capability, 70);
  }
}

TEST(GpuDevice, TheGpuDegridderRefusesWithoutAGpu) {
  const Probe p = probe();
  if (!p.gpus.empty()) GTEST_SKIP() << "a GPU is usable here";
  const Fixture s(small_job("T05_", "vlaa"));
  try {
    GpuDegridder g(s.degridder, 0);
    FAIL() << "constructed without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), p.missing);
  }
}

#ifdef IOTEST_HAVE_CUDA

// cuFFT is loaded on first use, not linked: it loads where the build found
// it (no GPU needed), with every entry point GpuDegridder calls.
TEST(GpuDevice, CufftLoadsOnFirstUse) {
  const CufftLibrary& c = cufft();
  EXPECT_NE(c.plan_many, nullptr);
  EXPECT_NE(c.set_stream, nullptr);
  EXPECT_NE(c.exec_z2z, nullptr);
  EXPECT_NE(c.destroy, nullptr);
  EXPECT_EQ(&cufft(), &c);  // once
}

// The busiest visits and the sparsest: a batch as unequal as a real one.
std::vector<Visit> mixed_visits(const Fixture& s, size_t busy, size_t sparse) {
  auto all = s.visits();
  std::vector<Visit> out;
  for (size_t i = 0; i < std::min(busy, all.size()); ++i) out.push_back(all[i]);
  for (size_t i = std::max(all.size(), busy + sparse) - sparse; i < all.size(); ++i)
    if (i >= busy) out.push_back(all[i]);
  return out;
}

std::vector<GpuVisit> gpu_visits(const std::vector<Visit>& visits) {
  std::vector<GpuVisit> g;
  for (const auto& v : visits)
    g.push_back({v.wc_min, v.wc_max, v.runs.data(), v.runs.data() + v.runs.size(), v.off0, v.off1});
  return g;
}

TEST(GpuDegridder, PredictMatchesTheCpuAndTheDirectTransform) {
  const Probe p = probe();
  if (p.gpus.empty()) GTEST_SKIP() << p.missing;
  const Fixture s(small_job("T05_", "vlaa"));
  const auto visits = mixed_visits(s, 3, 5);
  std::vector<Array2D> sums;
  std::vector<const cplx*> sum_ptrs;
  std::vector<cplx> cpu;
  for (const auto& v : visits) {
    sums.push_back(s.sky_sum(v));
    Degridder::Workspace ws(s.job.p);
    const auto one = s.cpu_degrid(v, sums.back().view(), ws);
    cpu.insert(cpu.end(), one.begin(), one.end());
  }
  for (const auto& a : sums) sum_ptrs.push_back(a.data());
  // Batches of 3: the busy and the sparse share batches, and both lanes
  // (streams) are used.
  GpuDegridder g(s.degridder, 0, 3);
  std::vector<cplx> gpu;
  g.degrid(gpu_visits(visits), sum_ptrs, gpu);
  ASSERT_EQ(gpu.size(), cpu.size());
  EXPECT_LT(max_relative(gpu, cpu), 1e-12);
  RelativeError dft;
  index_t i = 0;
  for (const auto& v : visits)
    for (const auto& r : v.runs)
      for (index_t chan = r.chan_begin; chan < r.chan_end; ++chan, ++i) {
        const cplx want = s.degridder.direct(s.job.sources, r.baseline, r.time, chan);
        dft.error_sq += std::norm(gpu[static_cast<size_t>(i)] - want);
        dft.reference_sq += std::norm(want);
      }
  EXPECT_LT(dft.value(), 2e-8);
  EXPECT_GT(g.timing().kernel_s, 0);
  EXPECT_GT(g.device_bytes(), 0);
}

void expect_gpu_adjoint(const Fixture& s) {
  const auto visits = mixed_visits(s, 2, 3);
  const index_t n_sum = s.job.p.xM * s.job.p.xM;
  std::mt19937_64 rng(9);
  std::vector<std::vector<cplx>> x;
  std::vector<const cplx*> x_ptrs;
  index_t total = 0;
  for (const auto& v : visits) {
    x.push_back(random_values(n_sum, rng));
    total += v.visibilities;
  }
  for (const auto& a : x) x_ptrs.push_back(a.data());
  const auto y = random_values(total, rng);
  GpuDegridder g(s.degridder, 0, 2);
  const auto gv = gpu_visits(visits);
  std::vector<cplx> ax;
  g.degrid(gv, x_ptrs, ax);
  std::vector<std::vector<cplx>> ahy(visits.size(), std::vector<cplx>(static_cast<size_t>(n_sum)));
  std::vector<cplx*> ahy_ptrs;
  for (auto& a : ahy) ahy_ptrs.push_back(a.data());
  g.grid(gv, y.data(), ahy_ptrs);
  const cplx lhs = dot(y.data(), ax.data(), total);
  cplx rhs = 0;
  for (size_t k = 0; k < visits.size(); ++k) rhs += dot(ahy[k].data(), x[k].data(), n_sum);
  EXPECT_GT(std::abs(lhs), 0);
  EXPECT_LT(std::abs(lhs - rhs), 1e-12 * std::abs(lhs)) << lhs << " vs " << rhs;
  // And the same as the CPU's grid + collapse_tower.
  index_t at = 0;
  for (size_t k = 0; k < visits.size(); ++k) {
    const auto& v = visits[k];
    Degridder::Workspace ws(s.job.p);
    s.degridder.begin_tower(v.wc_min, v.wc_max, ws);
    s.degridder.grid(v.runs.data(), v.runs.data() + v.runs.size(), v.off0, v.off1, y.data() + at,
                     ws);
    std::vector<cplx> cpu(static_cast<size_t>(n_sum));
    s.degridder.collapse_tower(ws, MView2D(cpu.data(), s.job.p.xM, s.job.p.xM));
    EXPECT_LT(max_relative(ahy[k], cpu), 1e-12) << "visit " << k;
    at += v.visibilities;
  }
}

TEST(GpuDegridder, GriddingIsTheAdjointOfDegridding) {
  const Probe p = probe();
  if (p.gpus.empty()) GTEST_SKIP() << p.missing;
  expect_gpu_adjoint(Fixture(small_job("2k-1k-256", "vlaa")));
}

TEST(GpuDegridder, GriddingIsTheAdjointOfDegriddingWithoutW) {
  const Probe p = probe();
  if (p.gpus.empty()) GTEST_SKIP() << p.missing;
  expect_gpu_adjoint(Fixture(small_job("T05_", "vlaa@pole")));
}

#endif

}  // namespace
}  // namespace iotest::device
