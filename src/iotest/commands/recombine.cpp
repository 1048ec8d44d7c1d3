#include "iotest/commands/recombine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>

#include "iotest/commands/facets.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/swiftly/core.hpp"

namespace iotest::commands {
namespace {

// Checks at most this many subgrids by default: the direct transform costs
// sources x xA^2 per subgrid, so checking everything would dominate big runs.
constexpr index_t kDefaultCheckedSubgrids = 64;

struct DirectionResult {
  double timed_s = 0, check_s = 0, flops = 0;
  ErrorTally errors;
};

// Per-thread buffers, allocated once before the walk.
struct ThreadBuffers {
  swiftly::ColumnWorkspace column;
  Array2D contribution, subgrid_sum;
  explicit ThreadBuffers(const swiftly::Recombination& rec)
      : column(rec.params()),
        contribution(rec.make_contribution()),
        subgrid_sum(rec.make_subgrid_sum()) {}
};

struct Walk {
  const config::RecombinationParams& p;
  detail::FacetTiles facets;
  std::vector<SubgridColumn> columns;
  std::vector<std::vector<bool>> checked;  // per column, per subgrid
  index_t subgrids = 0;
  index_t facet_count() const { return p.facet_count(); }
  const swiftly::Tile& t0(index_t f) const { return facets.t0(f); }
  const swiftly::Tile& t1(index_t f) const { return facets.t1(f); }
  double flops(const swiftly::Recombination& rec) const {
    return rec.flops().walk(static_cast<double>(facet_count()), static_cast<double>(columns.size()),
                            static_cast<double>(subgrids));
  }
  index_t max_column() const {
    size_t n = 0;
    for (const auto& c : columns) n = std::max(n, c.t1.size());
    return static_cast<index_t>(n);
  }
};

std::vector<ThreadBuffers> make_thread_buffers(const swiftly::Recombination& rec, int threads) {
  std::vector<ThreadBuffers> v;
  v.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) v.emplace_back(rec);
  return v;
}

// The predict direction's buffers: every large one of the timed work,
// allocated and first touched before the clock starts (a user's first run
// as fast as the tenth).
struct PredictBuffers {
  std::vector<ThreadBuffers> threads;
  Array2D reference;
  std::vector<Array2D> subgrids, prepared, facet_scratch, columns;
  PredictBuffers(const swiftly::Recombination& rec, const Walk& walk, int n)
      : threads(make_thread_buffers(rec, n)),
        reference(rec.make_subgrid()),
        subgrids(touched_buffers(walk.max_column(), walk.p.xA, walk.p.xA, n)),
        prepared(touched_buffers(walk.facet_count(), walk.p.yB, walk.p.yN, n)),
        facet_scratch(touched_buffers(n, walk.p.yB, walk.p.yB, n)),
        columns(touched_buffers(walk.facet_count(), walk.p.m, walk.p.yN, n)) {}
  ThreadBuffers& this_thread() { return threads[static_cast<size_t>(omp_get_thread_num())]; }
};

// Every facet, the sky's, prepared for the columns.
void prepare_facets_of_sky(const swiftly::Recombination& rec, const Walk& walk,
                           const std::vector<sky::PointSource>& sources, PredictBuffers& b,
                           int threads) {
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t f = 0; f < walk.facet_count(); ++f) {
    auto facet = b.facet_scratch[static_cast<size_t>(omp_get_thread_num())].view();
    sky::fill_facet(sources, walk.t0(f), walk.t1(f), facet);
    rec.prepare_facet(facet, b.prepared[static_cast<size_t>(f)].view());
  }
}

// A column's subgrids: the facets prepared for the column, each subgrid
// summed from them and finished.
void predict_column(const swiftly::Recombination& rec, const Walk& walk, const SubgridColumn& col,
                    PredictBuffers& b, int threads) {
  const index_t count = static_cast<index_t>(col.t1.size());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t f = 0; f < walk.facet_count(); ++f)
    rec.prepare_column(b.prepared[static_cast<size_t>(f)].view(), walk.t0(f).offset, col.t0.offset,
                       b.this_thread().column, b.columns[static_cast<size_t>(f)].view());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t s = 0; s < count; ++s) {
    auto& tb = b.this_thread();
    detail::add_facet_contributions(rec, walk.facets, b.columns,
                                    col.t1[static_cast<size_t>(s)].offset, tb.contribution,
                                    tb.subgrid_sum.view());
    rec.finish_subgrid(tb.subgrid_sum.view(), b.subgrids[static_cast<size_t>(s)].view());
  }
}

// The column's checked subgrids against the direct transform.
void check_predicted_column(const Walk& walk, size_t c,
                            const std::vector<sky::PointSource>& sources,
                            const sky::UnitRoots& roots, PredictBuffers& b, ErrorTally& errors) {
  const auto& col = walk.columns[c];
  for (index_t s = 0; s < static_cast<index_t>(col.t1.size()); ++s) {
    if (!walk.checked[c][static_cast<size_t>(s)]) continue;
    sky::dft_subgrid(sources, roots, col.t0.offset, col.t1[static_cast<size_t>(s)].offset,
                     b.reference.view());
    RelativeError e;
    e.add(b.subgrids[static_cast<size_t>(s)].view(), b.reference.view());
    errors.add(e);
  }
}

DirectionResult run_predict(const swiftly::Recombination& rec, const Walk& walk,
                            const std::vector<sky::PointSource>& sources,
                            const sky::UnitRoots& roots, int threads) {
  DirectionResult res;
  PredictBuffers b(rec, walk, threads);
  auto t_start = Clock::now();
  prepare_facets_of_sky(rec, walk, sources, b, threads);
  res.timed_s += seconds_since(t_start);
  for (size_t c = 0; c < walk.columns.size(); ++c) {
    t_start = Clock::now();
    predict_column(rec, walk, walk.columns[c], b, threads);
    res.timed_s += seconds_since(t_start);
    // Untimed: compare the checked subgrids with the direct transform.
    t_start = Clock::now();
    check_predicted_column(walk, c, sources, roots, b, res.errors);
    res.check_s += seconds_since(t_start);
  }
  res.flops = walk.flops(rec);
  return res;
}

// The image direction's buffers: every large one of the timed work,
// allocated and first touched (zeroed: the sums start at zero) before the
// clock starts.
struct ImageBuffers {
  std::vector<ThreadBuffers> threads;
  std::vector<Array2D> inputs, sums, facet_sums, column_sums, facets;
  ImageBuffers(const swiftly::Recombination& rec, const Walk& walk, int n)
      : threads(make_thread_buffers(rec, n)),
        inputs(touched_buffers(walk.max_column(), walk.p.xA, walk.p.xA, n)),
        sums(touched_buffers(walk.max_column(), walk.p.xM, walk.p.xM, n)),
        facet_sums(touched_buffers(walk.facet_count(), walk.p.yB, walk.p.yN, n)),
        column_sums(touched_buffers(walk.facet_count(), walk.p.m, walk.p.yN, n)),
        facets(touched_buffers(walk.facet_count(), walk.p.yB, walk.p.yB, n)) {}
};

// The column's exact subgrids (direct transform), masked so that the
// subgrids tile the grid exactly once: the image direction's input.
void exact_subgrids(const SubgridColumn& col, const std::vector<sky::PointSource>& sources,
                    const sky::UnitRoots& roots, ImageBuffers& b, int threads) {
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t s = 0; s < static_cast<index_t>(col.t1.size()); ++s) {
    const auto& t1 = col.t1[static_cast<size_t>(s)];
    auto view = b.inputs[static_cast<size_t>(s)].view();
    sky::dft_subgrid(sources, roots, col.t0.offset, t1.offset, view);
    sky::apply_subgrid_mask(col.t0, t1, view);
  }
}

// The column's subgrids prepared, and added to every facet's sum.
void image_column(const swiftly::Recombination& rec, const Walk& walk, const SubgridColumn& col,
                  ImageBuffers& b, int threads) {
  const index_t count = static_cast<index_t>(col.t1.size());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t s = 0; s < count; ++s)
    rec.prepare_subgrid(b.inputs[static_cast<size_t>(s)].view(),
                        b.sums[static_cast<size_t>(s)].view());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t f = 0; f < walk.facet_count(); ++f) {
    auto& tb = b.threads[static_cast<size_t>(omp_get_thread_num())];
    detail::add_column_to_facet(
        rec, walk.facets, f, col.t0.offset, col.t1.size(),
        [&](size_t k) { return std::as_const(b.sums[k]).view(); },
        [&](size_t k) { return col.t1[k].offset; }, tb.column, tb.contribution,
        b.column_sums[static_cast<size_t>(f)].view(), b.facet_sums[static_cast<size_t>(f)].view());
  }
}

// Every facet finished, its sum released as soon as it is done.
void finish_facets(const swiftly::Recombination& rec, const Walk& walk, ImageBuffers& b,
                   int threads) {
  ExceptionCollector failures;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t f = 0; f < walk.facet_count(); ++f)
    failures.capture([&] {
      rec.finish_facet(b.facet_sums[static_cast<size_t>(f)].view(),
                       b.facets[static_cast<size_t>(f)].view());
      b.facet_sums[static_cast<size_t>(f)] = Array2D();
    });
  failures.rethrow();
}

// Every facet against the sky's.
void check_facets(const swiftly::Recombination& rec, const Walk& walk,
                  const std::vector<sky::PointSource>& sources, const ImageBuffers& b,
                  ErrorTally& errors) {
  Array2D reference = rec.make_facet();
  for (index_t f = 0; f < walk.facet_count(); ++f) {
    sky::fill_facet(sources, walk.t0(f), walk.t1(f), reference.view());
    RelativeError e;
    e.add(b.facets[static_cast<size_t>(f)].view(), std::as_const(reference).view());
    errors.add(e);
  }
}

DirectionResult run_image(const swiftly::Recombination& rec, const Walk& walk,
                          const std::vector<sky::PointSource>& sources, const sky::UnitRoots& roots,
                          int threads) {
  DirectionResult res;
  ImageBuffers b(rec, walk, threads);
  for (const auto& col : walk.columns) {
    // Untimed: the input, made by the direct transform.
    auto t_start = Clock::now();
    exact_subgrids(col, sources, roots, b, threads);
    res.check_s += seconds_since(t_start);
    t_start = Clock::now();
    image_column(rec, walk, col, b, threads);
    res.timed_s += seconds_since(t_start);
  }
  auto t_start = Clock::now();
  finish_facets(rec, walk, b, threads);
  res.timed_s += seconds_since(t_start);
  res.flops = walk.flops(rec);
  // Facets are complete only when every subgrid of the grid contributed.
  if (walk.subgrids < walk.p.subgrid_count()) return res;
  t_start = Clock::now();
  check_facets(rec, walk, sources, b, res.errors);
  res.check_s += seconds_since(t_start);
  return res;
}

}  // namespace

std::vector<SubgridColumn> plan_walk(const config::RecombinationParams& p, index_t count) {
  const auto tiles = swiftly::subgrid_tiles(p);
  std::vector<SubgridPosition> all;
  for (const auto& t0 : tiles)
    for (const auto& t1 : tiles) all.push_back({t0, t1});
  // Nearest the centre first (where baselines concentrate); ties broken by
  // position so the walk is the same everywhere.
  const auto key = [](const SubgridPosition& s) {
    return std::tuple(s.t0.offset * s.t0.offset + s.t1.offset * s.t1.offset, s.t0.offset,
                      s.t1.offset);
  };
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  all.resize(static_cast<size_t>(count));
  std::map<index_t, SubgridColumn> columns;
  for (const auto& s : all) {
    auto& col = columns[s.t0.offset];
    col.t0 = s.t0;
    col.t1.push_back(s.t1);
  }
  std::vector<SubgridColumn> walk;
  for (auto& [offset, col] : columns) {
    std::sort(col.t1.begin(), col.t1.end(),
              [](const auto& a, const auto& b) { return a.offset < b.offset; });
    walk.push_back(std::move(col));
  }
  return walk;
}

namespace {

// How many subgrids the walk takes, and how many of those it checks.
struct WalkSize {
  index_t count = 0, check = 0;
};
WalkSize walk_size(const Options& o, const config::RecombinationParams& p) {
  const index_t total = p.subgrid_count();
  const index_t count = o.subgrids.value_or(total);
  if (count < 1 || count > total)
    throw UsageError("--subgrids", fmt::format("expected 1..{} or 'all' for {}, got {}", total,
                                               p.canonical, count));
  job::require_source_count(p, o.source_count);
  const index_t check =
      o.check_all ? count : o.check.value_or(std::min(count, kDefaultCheckedSubgrids));
  if (check < 0 || check > count)
    throw UsageError("--check",
                     fmt::format("expected 0..{} (the subgrids processed), got {}", count, check));
  return {count, check};
}

report::Memory check_recombine_memory(const config::RecombinationParams& p, int threads) {
  job::Job job;
  job.p = p;
  job::RunShape shape;
  shape.threads = threads;
  auto memory = job::estimate_memory(job, shape, nullptr);
  job::require_memory(p, memory.single_process_bytes);
  return memory;
}

// The walk, its checks spread evenly over it.
Walk checked_walk(const config::RecombinationParams& p, const WalkSize& size) {
  Walk walk{p, detail::FacetTiles(p), plan_walk(p, size.count), {}, size.count};
  const index_t count = size.count, check = size.check;
  index_t seen = 0;
  for (const auto& col : walk.columns) {
    std::vector<bool> flags;
    for (size_t s = 0; s < col.t1.size(); ++s, ++seen)
      flags.push_back(check > 0 && (seen * check) / count != ((seen + 1) * check) / count);
    walk.checked.push_back(std::move(flags));
  }
  return walk;
}

void report_predict_direction(const DirectionResult& res, index_t count, report::Report& r,
                              report::Timing& timing, report::Rates& rates,
                              report::Accuracy& accuracy) {
  timing.predict_s = res.timed_s;
  timing.check_s += res.check_s;
  rates.predict_subgrids_per_s = static_cast<double>(count) / res.timed_s;
  rates.predict_gflops = res.flops / res.timed_s * 1e-9;
  accuracy.subgrid_rmse = res.errors.pooled.value();
  accuracy.subgrid_rmse_max = res.errors.worst;
  r.counts.subgrids_checked = res.errors.items;
  rates.gflops += res.flops;
}

void report_image_direction(const DirectionResult& res, index_t count, report::Report& r,
                            report::Timing& timing, report::Rates& rates,
                            report::Accuracy& accuracy) {
  timing.image_s = res.timed_s;
  timing.check_s += res.check_s;
  rates.image_subgrids_per_s = static_cast<double>(count) / res.timed_s;
  rates.image_gflops = res.flops / res.timed_s * 1e-9;
  accuracy.facet_rmse = res.errors.pooled.value();
  accuracy.facet_rmse_max = res.errors.worst;
  r.counts.facets_checked = res.errors.items;
  rates.gflops += res.flops;
}

void describe_recombine(report::Report& r, const Options& o, const WalkSize& size, int threads,
                        const Walk& walk) {
  r.settings = report::RunSettings{};
  r.settings->source_count = o.source_count;
  r.settings->seed = o.seed;
  r.settings->direction = to_string(o.direction);
  r.settings->subgrids = size.count;
  r.settings->check = size.check;
  r.settings->threads = threads;
  r.counts.facets = r.rec.facet_count();
  r.counts.subgrids = r.rec.subgrid_count();
  r.counts.subgrids_processed = size.count;
  r.counts.subgrid_columns = static_cast<index_t>(walk.columns.size());
}

}  // namespace

report::Report run(const Options& o) {
  const auto t_wall = Clock::now();
  report::Report r;
  r.mode = "recombine";
  r.rec = config::resolve_rec_set(o.rec_set, {o.window_width, 0});
  const auto& p = r.rec;
  const auto size = walk_size(o, p);
  const int threads = threads_or_all("--threads", o.threads);
  r.memory = check_recombine_memory(p, threads);
  const auto walk = checked_walk(p, size);

  report::Timing timing;
  auto t0 = Clock::now();
  const swiftly::Recombination rec(p);
  const sky::UnitRoots roots(p.N);
  const auto sources = sky::random_sources(o.source_count, p.used_size, o.seed);
  timing.planning_s = seconds_since(t0);

  report::Rates rates;
  report::Accuracy accuracy;
  if (o.direction != Direction::image)
    report_predict_direction(run_predict(rec, walk, sources, roots, threads), size.count, r, timing,
                             rates, accuracy);
  if (o.direction != Direction::predict)
    report_image_direction(run_image(rec, walk, sources, roots, threads), size.count, r, timing,
                           rates, accuracy);
  rates.gflops = rates.gflops / (timing.predict_s + timing.image_s) * 1e-9;

  describe_recombine(r, o, size, threads, walk);
  r.accuracy = accuracy;
  r.rates = rates;
  r.memory.peak_rss_bytes = peak_rss_bytes();
  timing.wall_s = seconds_since(t_wall);
  r.timing = timing;
  return r;
}

}  // namespace iotest::commands
