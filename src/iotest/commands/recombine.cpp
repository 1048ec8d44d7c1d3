#include "iotest/commands/recombine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

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
  std::vector<swiftly::Tile> facets;  // per axis; facet (j0, j1) is index j0 * nf + j1
  std::vector<SubgridColumn> columns;
  std::vector<std::vector<bool>> checked;  // per column, per subgrid
  index_t subgrids = 0;
  index_t facet_count() const { return p.facet_count(); }
  const swiftly::Tile& t0(index_t f) const {
    return facets[static_cast<size_t>(f / p.facets_per_axis)];
  }
  const swiftly::Tile& t1(index_t f) const {
    return facets[static_cast<size_t>(f % p.facets_per_axis)];
  }
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

DirectionResult run_predict(const swiftly::Recombination& rec, const Walk& walk,
                            const std::vector<sky::PointSource>& sources,
                            const sky::UnitRoots& roots, int threads) {
  const auto& p = rec.params();
  const index_t F = walk.facet_count();
  DirectionResult res;
  auto thread_buffers = make_thread_buffers(rec, threads);
  Array2D reference = rec.make_subgrid();
  // Every large buffer of the timed work, allocated and first touched
  // before the clock starts (a user's first run as fast as the tenth).
  std::vector<Array2D> subgrids = touched_buffers(walk.max_column(), p.xA, p.xA, threads);
  std::vector<Array2D> prepared = touched_buffers(F, p.yB, p.yN, threads);
  std::vector<Array2D> facet_scratch = touched_buffers(threads, p.yB, p.yB, threads);
  std::vector<Array2D> columns = touched_buffers(F, p.m, p.yN, threads);

  auto t_start = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t f = 0; f < F; ++f) {
    auto facet = facet_scratch[static_cast<size_t>(omp_get_thread_num())].view();
    sky::fill_facet(sources, walk.t0(f), walk.t1(f), facet);
    rec.prepare_facet(facet, prepared[static_cast<size_t>(f)].view());
  }
  res.timed_s += seconds_since(t_start);

  for (size_t c = 0; c < walk.columns.size(); ++c) {
    const auto& col = walk.columns[c];
    const index_t count = static_cast<index_t>(col.t1.size());
    t_start = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < F; ++f)
      rec.prepare_column(prepared[static_cast<size_t>(f)].view(), walk.t0(f).offset, col.t0.offset,
                         thread_buffers[static_cast<size_t>(omp_get_thread_num())].column,
                         columns[static_cast<size_t>(f)].view());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t s = 0; s < count; ++s) {
      auto& tb = thread_buffers[static_cast<size_t>(omp_get_thread_num())];
      const index_t off1 = col.t1[static_cast<size_t>(s)].offset;
      for (index_t f = 0; f < F; ++f) {
        rec.extract_contribution(columns[static_cast<size_t>(f)].view(), walk.t1(f).offset, off1,
                                 tb.contribution.view());
        rec.add_contribution(tb.contribution.view(), walk.t0(f).offset, walk.t1(f).offset,
                             tb.subgrid_sum.view());
      }
      rec.finish_subgrid(tb.subgrid_sum.view(), subgrids[static_cast<size_t>(s)].view());
    }
    res.timed_s += seconds_since(t_start);

    // Untimed: compare the checked subgrids with the direct transform.
    t_start = Clock::now();
    for (index_t s = 0; s < count; ++s) {
      if (!walk.checked[c][static_cast<size_t>(s)]) continue;
      sky::dft_subgrid(sources, roots, col.t0.offset, col.t1[static_cast<size_t>(s)].offset,
                       reference.view());
      RelativeError e;
      e.add(subgrids[static_cast<size_t>(s)].view(), reference.view());
      res.errors.add(e);
    }
    res.check_s += seconds_since(t_start);
  }
  res.flops = walk.flops(rec);
  return res;
}

DirectionResult run_image(const swiftly::Recombination& rec, const Walk& walk,
                          const std::vector<sky::PointSource>& sources, const sky::UnitRoots& roots,
                          int threads) {
  const auto& p = rec.params();
  const index_t F = walk.facet_count();
  DirectionResult res;
  auto thread_buffers = make_thread_buffers(rec, threads);
  const index_t max_column = walk.max_column();
  // Every large buffer of the timed work, allocated and first touched
  // (zeroed: the sums start at zero) before the clock starts.
  std::vector<Array2D> inputs = touched_buffers(max_column, p.xA, p.xA, threads);
  std::vector<Array2D> sums = touched_buffers(max_column, p.xM, p.xM, threads);
  std::vector<Array2D> facet_sums = touched_buffers(F, p.yB, p.yN, threads);
  std::vector<Array2D> column_sums = touched_buffers(F, p.m, p.yN, threads);
  std::vector<Array2D> facets = touched_buffers(F, p.yB, p.yB, threads);
  auto t_start = Clock::now();

  for (const auto& col : walk.columns) {
    const index_t count = static_cast<index_t>(col.t1.size());
    // Untimed: the exact subgrids (direct transform), masked so that the
    // subgrids tile the grid exactly once.
    t_start = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t s = 0; s < count; ++s) {
      const auto& t1 = col.t1[static_cast<size_t>(s)];
      auto view = inputs[static_cast<size_t>(s)].view();
      sky::dft_subgrid(sources, roots, col.t0.offset, t1.offset, view);
      sky::apply_subgrid_mask(col.t0, t1, view);
    }
    res.check_s += seconds_since(t_start);

    t_start = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t s = 0; s < count; ++s)
      rec.prepare_subgrid(inputs[static_cast<size_t>(s)].view(),
                          sums[static_cast<size_t>(s)].view());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < F; ++f) {
      auto& tb = thread_buffers[static_cast<size_t>(omp_get_thread_num())];
      auto column_sum = column_sums[static_cast<size_t>(f)].view();
      for (index_t s = 0; s < count; ++s) {
        rec.extract_from_subgrid(sums[static_cast<size_t>(s)].view(), walk.t0(f).offset,
                                 walk.t1(f).offset, tb.contribution.view());
        rec.add_to_column(tb.contribution.view(), walk.t1(f).offset,
                          col.t1[static_cast<size_t>(s)].offset, column_sum);
      }
      rec.finish_column(column_sum, walk.t0(f).offset, col.t0.offset, tb.column,
                        facet_sums[static_cast<size_t>(f)].view());
    }
    res.timed_s += seconds_since(t_start);
  }

  // Finish every facet, releasing its sum as soon as it is done.
  t_start = Clock::now();
  ExceptionCollector failures;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (index_t f = 0; f < F; ++f)
    failures.capture([&] {
      rec.finish_facet(facet_sums[static_cast<size_t>(f)].view(),
                       facets[static_cast<size_t>(f)].view());
      facet_sums[static_cast<size_t>(f)] = Array2D();
    });
  failures.rethrow();
  res.timed_s += seconds_since(t_start);

  res.flops = walk.flops(rec);
  // Facets are complete only when every subgrid of the grid contributed.
  if (walk.subgrids < p.subgrid_count()) return res;
  t_start = Clock::now();
  Array2D reference = rec.make_facet();
  for (index_t f = 0; f < F; ++f) {
    sky::fill_facet(sources, walk.t0(f), walk.t1(f), reference.view());
    RelativeError e;
    e.add(facets[static_cast<size_t>(f)].view(), reference.view());
    res.errors.add(e);
  }
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
  Walk walk{p, swiftly::facet_tiles(p), plan_walk(p, size.count), {}, size.count};
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
