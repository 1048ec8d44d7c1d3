#include "iotest/commands/degrid.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "iotest/commands/layout.hpp"
#include "iotest/commands/plan.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/storage/backend.hpp"

namespace iotest::commands {

degrid::WLayout check_degrid_options(const config::RecombinationParams& p0,
                                     const telescope::Observation& obs,
                                     const binning::GridGeometry& g,
                                     const degrid::DegridOptions& kernel,
                                     std::optional<index_t> margin,
                                     std::optional<double> target_err) {
  if (kernel.support < 2 || kernel.support > degrid::kMaxSupport || kernel.support % 2)
    throw UsageError("--support", fmt::format("expected an even kernel width from 2 to {}, got {}",
                                              degrid::kMaxSupport, kernel.support));
  if (kernel.w_support < 2 || kernel.w_support > degrid::kMaxSupport || kernel.w_support % 2)
    throw UsageError("--w-support",
                     fmt::format("expected an even w kernel width from 2 to {}, got {}",
                                 degrid::kMaxSupport, kernel.w_support));
  auto w = degrid::w_layout(g, obs, p0.xA, kernel, margin);
  if (target_err && kernel.w_step)
    throw UsageError("--target-err", "give either --target-err or --wstep, not both");
  if (w.margin >= p0.xA - p0.subgrid_granularity)
    throw UsageError(margin          ? "--margin"
                     : kernel.w_step ? "--wstep"
                                     : "--rec-set",
                     fmt::format("{} with {}: the subgrids ({} cells) cannot hold the kernel and "
                                 "the w-tower spread (margin {} cells); use larger subgrids",
                                 p0.canonical, obs.vis_set, p0.xA, w.margin));
  return w;
}

degrid::TowerCalibration calibrate_w_layout(const swiftly::Recombination& rec,
                                            const binning::GridGeometry& g,
                                            const telescope::Observation& obs,
                                            const degrid::DegridOptions& kernel, double target,
                                            degrid::WLayout& w) {
  // Measure the tower height this margin allows instead of bounding it.
  auto single = w;
  single.stack_step = 0;
  const double w_max = obs.layout.max_baseline_m() * obs.freq.end / telescope::kSpeedOfLight;
  const auto calibration =
      degrid::calibrate_tower_height(degrid::Degridder(rec, g, obs, kernel, single), w_max, target);
  w.tower_half_height = calibration.height;
  w.stack_step = calibration.height >= w_max ? 0 : 2 * calibration.height;
  return calibration;
}

void describe_degridding(report::RunSettings& s, const degrid::DegridOptions& kernel,
                         const degrid::Degridder& d, const degrid::WLayout& w, index_t w_stacks,
                         const std::optional<degrid::TowerCalibration>& calibration) {
  s.support = kernel.support;
  s.w_support = kernel.w_support;
  s.w_step = d.planes().dw;
  s.w_stack_step = w.stack_step;
  s.w_stacks = w_stacks;
  s.tower_half_height = w.tower_half_height;
  if (calibration) {
    s.target_err = calibration->target;
    s.tower_error_at_zero = calibration->error_at_zero;
  }
}

std::optional<report::Sky> sky_of(const std::vector<sky::PointSource>& sources, double pixel_lm) {
  if (sources.size() > 10000) return std::nullopt;
  report::Sky sky{pixel_lm, {}};
  for (const auto& src : sources) sky.sources.push_back({src.y0, src.y1});
  return sky;
}

report::Report degrid(const DegridRunOptions& o) {
  const auto t_wall = Clock::now();
  const auto obs = telescope::make_observation(o.observation);
  const auto p0 = config::resolve_rec_set(o.rec_set);
  const auto g = binning::grid_geometry(p0, obs);
  auto w = check_degrid_options(p0, obs, g, o.kernel, o.margin, o.target_err);
  require_source_count(p0, o.source_count);
  if (o.vis_samples < 0) throw UsageError("--vis-samples", "expected a count >= 0");
  report::Report r;
  r.mode = "degrid";
  r.rec = config::resolve_rec_set(o.rec_set, {std::nullopt, w.margin});
  const auto& p = r.rec;
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  r.memory = estimate_memory(p, threads);
  // The work list holds a run per baseline, time and frequency chunk at
  // least (more where tracks cross tiles): this process keeps all of it.
  const index_t run_bytes = obs.baseline_count() * obs.time.steps * obs.freq.chunks() *
                            static_cast<index_t>(sizeof(binning::VisRun)) * 5 / 4;
  // Each thread's degrid task buffer: up to kTaskVisibilities (and a row chunk).
  const index_t task_bytes =
      threads * degrid::kTaskVisibilities * static_cast<index_t>(sizeof(cplx));
  r.memory.single_process_bytes += run_bytes + task_bytes;
  const index_t available = available_memory_bytes();
  if (available > 0 && run_bytes > available / 2)
    throw UsageError("--time", fmt::format("{} visibilities are too many for one process here: "
                                           "their work list alone needs about {:.1f} GiB; "
                                           "use fewer time steps or channels",
                                           obs.visibility_count(), run_bytes / 1073741824.0));
  require_memory(p, r.memory.single_process_bytes);

  report::Timing timing;
  auto t0 = Clock::now();
  const swiftly::Recombination rec(p);
  std::optional<degrid::TowerCalibration> calibration;
  if (o.target_err) calibration = calibrate_w_layout(rec, g, obs, o.kernel, *o.target_err, w);
  const degrid::Degridder degridder(rec, g, obs, o.kernel, w);
  auto backend = storage::make_backend(o.output.empty() ? "null" : "hdf5");
  auto layout = storage::layout_of(obs);
  layout.provenance = storage::Provenance{o.rec_set, g.pixel_lm, o.source_count, o.seed};
  backend->open(o.output, layout);
  std::mutex backend_lock;      // the serial HDF5 library takes one writer at a time
  ExceptionCollector failures;  // errors inside the parallel work, rethrown after it
  const auto sources = sky::random_sources(o.source_count, p.used_size, o.seed);
  const auto samples = degrid::pick_samples(obs, o.vis_samples, o.seed);
  // Which visibilities each subgrid degrids, per w-stacking plane.
  // The same pass gives the distribution of visibilities over subgrids.
  std::map<index_t, std::vector<std::vector<binning::VisRun>>> stacks;
  std::vector<index_t> per_subgrid(static_cast<size_t>(p.subgrid_count()), 0);
  binning::for_each_run(p, obs, g, 0, obs.time.steps,
                        [&](index_t subgrid, const binning::VisRun& run) {
                          auto& runs = stacks[run.w_stack];
                          if (runs.empty()) runs.resize(static_cast<size_t>(p.subgrid_count()));
                          runs[static_cast<size_t>(subgrid)].push_back(run);
                          per_subgrid[static_cast<size_t>(subgrid)] += run.count();
                        },
                        {true, w.stack_step});
  for (auto& [stack, runs] : stacks)
    for (auto& subgrid_runs : runs) degrid::sort_for_storage(subgrid_runs);
  const auto distribution = binning::summarise(std::move(per_subgrid));
  timing.planning_s = seconds_since(t0);

  const auto tiles = swiftly::subgrid_tiles(p);
  const index_t ns = p.subgrids_per_axis;

  const auto facet_tiles = swiftly::facet_tiles(p);
  const index_t nf = p.facets_per_axis, F = p.facet_count();
  const auto ftile0 = [&](index_t f) { return facet_tiles[static_cast<size_t>(f / nf)]; };
  const auto ftile1 = [&](index_t f) { return facet_tiles[static_cast<size_t>(f % nf)]; };

  // Timed: the whole predict chain, one w-stacking plane after another.
  t0 = Clock::now();
  double check_s = 0;
  std::vector<Array2D> prepared;
  for (index_t f = 0; f < F; ++f) prepared.emplace_back(p.yB, p.yN, false);
  std::vector<Array2D> column_data;
  for (index_t f = 0; f < F; ++f) column_data.push_back(rec.make_column());
  struct ThreadState {
    swiftly::ColumnWorkspace column;
    Array2D contribution, sum, facet;
    degrid::Degridder::Workspace degrid;
    std::vector<cplx> vis;
    storage::ChunkAssembler chunks;
    std::map<index_t, RelativeError> errors;  // per subgrid
    index_t planes = 0, visibilities = 0, samples = 0;
    double check_s = 0;
    ThreadState(const swiftly::Recombination& rec, const storage::VisibilityLayout& layout)
        : column(rec.params()),
          contribution(rec.make_contribution()),
          sum(rec.make_subgrid_sum()),
          facet(rec.make_facet()),
          degrid(rec.params()),
          chunks(layout) {}
  };
  std::vector<ThreadState> state;
  for (int t = 0; t < threads; ++t) state.emplace_back(rec, layout);
  const index_t nt = obs.time.steps;
  index_t columns_walked = 0;

  for (const auto& [stack, runs] : stacks) {
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < F; ++f) {
      auto facet = state[static_cast<size_t>(omp_get_thread_num())].facet.view();
      sky::fill_facet(sources, ftile0(f), ftile1(f), facet);
      degridder.correct_facet(ftile0(f), ftile1(f), stack, facet);
      rec.prepare_facet(facet, prepared[static_cast<size_t>(f)].view());
    }
    // The subgrids of this stack that hold visibilities, column by column.
    std::map<index_t, std::vector<index_t>> columns;  // tile0 -> subgrid indices
    for (index_t s = 0; s < p.subgrid_count(); ++s)
      if (!runs[static_cast<size_t>(s)].empty()) columns[s / ns].push_back(s);
    columns_walked += static_cast<index_t>(columns.size());
    for (const auto& [i0, subgrids] : columns) {
      const index_t off0 = tiles[static_cast<size_t>(i0)].offset;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (index_t f = 0; f < F; ++f)
        rec.prepare_column(prepared[static_cast<size_t>(f)].view(), ftile0(f).offset, off0,
                           state[static_cast<size_t>(omp_get_thread_num())].column,
                           column_data[static_cast<size_t>(f)].view());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (size_t k = 0; k < subgrids.size(); ++k) {
        failures.capture([&] {
          auto& st = state[static_cast<size_t>(omp_get_thread_num())];
          const index_t s = subgrids[k];
          const index_t off1 = tiles[static_cast<size_t>(s % ns)].offset;
          for (index_t f = 0; f < F; ++f) {
            rec.extract_contribution(column_data[static_cast<size_t>(f)].view(), ftile1(f).offset,
                                     off1, st.contribution.view());
            rec.add_contribution(st.contribution.view(), ftile0(f).offset, ftile1(f).offset,
                                 st.sum.view());
          }
          const auto& subgrid_runs = runs[static_cast<size_t>(s)];
          st.planes += degridder.build_tower(st.sum.view(), subgrid_runs, st.degrid);
          std::fill(st.sum.data(), st.sum.data() + st.sum.size(), cplx{});
          // Tasks of up to --bls-per-task baselines' time chunks: idle
          // threads take them, so a subgrid holding most of the
          // visibilities (the centre) does not leave the others waiting.
          const auto* tower = &st.degrid;
          for (const auto& [first, last] :
               degrid::cut_tasks(subgrid_runs, nt, obs.time.chunk, o.bls_per_task)) {
#pragma omp task default(shared) firstprivate(first, last, s, off0, off1, tower)
            failures.capture([&] {
              auto& ts = state[static_cast<size_t>(omp_get_thread_num())];
              const auto* begin = subgrid_runs.data() + first;
              const auto* end = subgrid_runs.data() + last;
              degrid::degrid_to_chunks(
                  degridder, begin, end, off0, off1, *tower, ts.vis, ts.chunks,
                  [&](const storage::ChunkKey& key, const cplx* data, index_t count) {
                    const std::lock_guard<std::mutex> hold(backend_lock);
                    backend->write_chunk(key, data, count);
                  });
              ts.visibilities += static_cast<index_t>(ts.vis.size());
              // Untimed: the sampled visibilities of this task.
              const auto tc = Clock::now();
              ts.samples += degrid::check_samples(degridder, sources, samples, begin, end, ts.vis,
                                                  ts.errors[s]);
              ts.check_s += seconds_since(tc);
            });
          }
          // The tower lives in this thread's workspace: keep it until its
          // tasks are done (this thread works on tasks meanwhile).
#pragma omp taskwait
        });
      }
      failures.rethrow();
    }
  }
  backend->close();
  double degrid_s = seconds_since(t0);

  // Gather.
  ErrorTally tally;
  index_t planes = 0, visibilities = 0, checked = 0;
  for (const auto& st : state) {
    planes += st.planes;
    checked += st.samples;
    visibilities += st.visibilities;
    check_s = std::max(check_s, st.check_s);
    for (const auto& [s, e] : st.errors) tally.add(e);
  }
  // Checks ran inside the parallel loop: take the slowest thread's share off.
  degrid_s -= check_s;
  if (visibilities != obs.visibility_count())
    throw std::logic_error(
        fmt::format("degridded {} visibilities of {}", visibilities, obs.visibility_count()));

  const index_t used = distribution.subgrids_used;
  r.settings = report::RunSettings{};
  r.settings->source_count = o.source_count;
  r.settings->seed = o.seed;
  r.settings->direction = "predict";
  r.settings->subgrids = used;
  r.settings->threads = threads;
  describe_degridding(*r.settings, o.kernel, degridder, w, static_cast<index_t>(stacks.size()),
                      calibration);
  r.settings->vis_samples = static_cast<index_t>(samples.size());
  r.counts.facets = p.facet_count();
  r.counts.subgrids = p.subgrid_count();
  r.counts.subgrids_processed = used;
  r.counts.subgrid_columns = columns_walked;
  add_observation(r, obs, g, distribution);
  report::Accuracy accuracy;
  accuracy.vis_rmse = tally.pooled.value();
  accuracy.vis_rmse_max = tally.worst;
  accuracy.vis_samples = checked;
  r.accuracy = accuracy;
  timing.degrid_s = degrid_s;
  timing.write_s = backend->stats().seconds;
  r.counts.bytes_written = backend->stats().bytes;
  r.counts.chunks_written = backend->stats().chunks_written;
  r.counts.chunks_rewritten = backend->stats().chunks_rewritten;
  r.counts.visibilities_written = backend->stats().visibilities;
  r.settings->backend = std::string(backend->name());
  r.settings->output = o.output;
  timing.check_s = check_s;
  report::Rates rates;
  rates.vis_per_s = static_cast<double>(visibilities) / degrid_s;
  rates.vis_per_s_per_thread = rates.vis_per_s / threads;
  rates.w_planes_per_s = static_cast<double>(planes) / degrid_s;
  rates.write_bytes_per_s =
      timing.write_s > 0 ? static_cast<double>(backend->stats().bytes) / timing.write_s : 0;
  r.rates = rates;
  r.sky = sky_of(sources, g.pixel_lm);
  r.memory.peak_rss_bytes = peak_rss_bytes();
  timing.wall_s = seconds_since(t_wall);
  r.timing = timing;
  return r;
}

}  // namespace iotest::commands
