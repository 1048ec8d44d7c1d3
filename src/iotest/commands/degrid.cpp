#include "iotest/commands/degrid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "iotest/commands/gpu_group.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/device/gpu_degridder.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/storage/backend.hpp"

namespace iotest::commands {

report::Report degrid(const DegridRunOptions& o) {
  const auto t_wall = Clock::now();
  if (o.vis_samples < 0) throw UsageError("--vis-samples", "expected a count >= 0");
  // Checked before the seconds of planning.
  const auto storage = storage::resolve_storage(o.storage, o.output);
  const auto gpus = job::require_device(o.device);
  if (storage.shared)
    throw UsageError("--storage", fmt::format("expected a back-end of one output per writer: {} "
                                              "shares one file between the streamers of `iotest "
                                              "run` under mpirun",
                                              storage.backend));
  // The output claimed before the work, held until it is published.
  const std::uint32_t nonce = storage::draw_nonce();
  std::optional<storage::OutputClaim> claim;
  if (storage.writes_files) claim.emplace(o.output, nonce, "OUTPUT", storage.folder);
  auto job = job::resolve(job::job_options(o));
  const auto& obs = *job.obs;
  const auto& g = *job.geometry;
  report::Report r;
  r.mode = "degrid";
  r.rec = job.p;
  const auto& p = r.rec;
  check_threads("--threads", o.threads);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();

  report::Timing timing;
  auto t0 = Clock::now();
  // Counted and checked against this machine's memory before the large
  // allocations; with --target-err once the tower height is measured.
  std::optional<binning::Binner> binner;  // with the final w-stacking step
  std::optional<binning::VisitCounts> counts;
  const auto count_and_check = [&] {
    binner.emplace(p, obs, g, job.split());
    counts = binner->count_visits(0, obs.baseline_count(), threads);
    job::RunShape shape;
    shape.threads = threads;
    shape.bls_per_task = o.bls_per_task;
    shape.device = o.device;
    r.memory = job::estimate_memory(job, shape, &*counts);
    r.memory.single_process_bytes =
        job::estimate_single_process(job, threads, &*counts, !o.output.empty());
    if (o.device == device::Kind::cuda)
      r.memory.single_process_bytes += job::gpu_host_bytes(job, *counts, o.bls_per_task);
    job::require_memory(p, r.memory.single_process_bytes);
    if (o.device == device::Kind::cuda)
      job::require_gpu_memory(r.memory.streamer_gpu_bytes, 1, gpus);
  };
  if (!o.target_err) count_and_check();
  const swiftly::Recombination rec(p);
  std::optional<degrid::TowerCalibration> calibration;
  if (o.target_err) {
    calibration = job::calibrate_w_layout(job, rec);
    count_and_check();
  }
  const degrid::Degridder degridder(rec, g, obs, job.kernel, job.w);
  auto backend = storage::make_backend(o.storage, o.output);
  auto layout = storage::layout_of(obs);
  layout.provenance = job::provenance(job, o.rec_set, o.seed, false, nonce);
  backend->open(o.output, layout);
  std::mutex backend_lock;      // the serial HDF5 library takes one writer at a time
  ExceptionCollector failures;  // errors inside the parallel work, rethrown after it
  const auto& sources = job.sources;
  const auto samples = degrid::pick_samples(obs, o.vis_samples, o.seed);
  const auto distribution = binning::summarise(*counts);
  timing.planning_s = seconds_since(t0);

  const auto tiles = swiftly::subgrid_tiles(p);
  const index_t ns = p.subgrids_per_axis;

  const auto facet_tiles = swiftly::facet_tiles(p);
  const index_t nf = p.facets_per_axis, F = p.facet_count();
  const auto ftile0 = [&](index_t f) { return facet_tiles[static_cast<size_t>(f / nf)]; };
  const auto ftile1 = [&](index_t f) { return facet_tiles[static_cast<size_t>(f % nf)]; };

  // Every large buffer of the chain, allocated and first touched before
  // the clock starts (a user's first run as fast as the tenth).
  std::vector<Array2D> prepared = touched_buffers(F, p.yB, p.yN, threads);
  std::vector<Array2D> column_data = touched_buffers(F, p.m, p.yN, threads);
  struct ThreadState {
    swiftly::ColumnWorkspace column;
    Array2D contribution, sum, facet;
    degrid::Degridder::Workspace degrid;
    std::vector<binning::VisRun> runs;
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
  const auto emit = [&](const storage::ChunkKey& key, const cplx* data, index_t count,
                        const storage::PresenceWord* present) {
    const std::lock_guard<std::mutex> hold(backend_lock);
    backend->write_chunk(key, data, count, present);
  };
  // --device=cuda: one process, the first GPU (docs/gpu.md).
  std::optional<device::GpuDegridder> gpu;
  if (o.device == device::Kind::cuda) gpu.emplace(degridder, gpus.front().index);
  detail::GpuGroup gpu_group;

  // The GPU path of one column's subgrids, in groups of a batch: their sums
  // on the CPU threads (SwiFTly, as below), then every task of their visits
  // (the CPU path's tasks, each with its visit's sum and w range) on the
  // GPU, a batch of visibilities at a time, then chunks and the sampled
  // checks on the CPU threads. Tasks bound the host's visibility buffer
  // however busy a subgrid is.
  const auto degrid_column_on_gpu = [&](index_t stack, index_t off0,
                                        const std::vector<index_t>& subgrids) {
    const size_t group = static_cast<size_t>(device::kDefaultBatchSubgrids);
    for (size_t g0 = 0; g0 < subgrids.size(); g0 += group) {
      const size_t n = std::min(group, subgrids.size() - g0);
      gpu_group.resize(rec, n);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (size_t k = 0; k < n; ++k)
        failures.capture([&] {
          auto& st = state[static_cast<size_t>(omp_get_thread_num())];
          auto& v = gpu_group.visits[k];
          const index_t s = subgrids[g0 + k];
          const index_t off1 = tiles[static_cast<size_t>(s % ns)].offset;
          std::fill(v.sum.data(), v.sum.data() + v.sum.size(), cplx{});
          for (index_t f = 0; f < F; ++f) {
            rec.extract_contribution(column_data[static_cast<size_t>(f)].view(), ftile1(f).offset,
                                     off1, st.contribution.view());
            rec.add_contribution(st.contribution.view(), ftile0(f).offset, ftile1(f).offset,
                                 v.sum.view());
          }
          v.take(*binner, stack, s, off0, off1, o.bls_per_task, degridder.planes().dw);
        });
      failures.rethrow();
      for (const auto& batch : gpu_group.batches(device::kMaxBatchVisibilities)) {
        // Grown, never cleared: the GPU writes every value.
        if (gpu_group.out.size() < static_cast<size_t>(batch.visibilities))
          gpu_group.out.resize(static_cast<size_t>(batch.visibilities));
        gpu->degrid(batch.visits, batch.const_sums(), gpu_group.out.data());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
        for (size_t t = 0; t < batch.visits.size(); ++t)
          failures.capture([&] {
            auto& ts = state[static_cast<size_t>(omp_get_thread_num())];
            const auto& task = batch.visits[t];
            const cplx* values = gpu_group.out.data() + batch.first[t];
            degrid::runs_to_chunks(obs.time.steps, task.begin, task.end, values, ts.chunks, emit);
            ts.visibilities += task.visibilities();
            ts.planes +=
                degrid::tower_planes(job.w, job.kernel.w_support, task.wc_min, task.wc_max).count;
            const auto tc = Clock::now();  // untimed, as on the CPU
            ts.samples += degrid::check_samples(degridder, sources, samples, task.begin, task.end,
                                                values, ts.errors[batch.subgrid[t]]);
            ts.check_s += seconds_since(tc);
          });
        failures.rethrow();
      }
    }
  };

  // Timed: the whole predict chain, one w-stacking plane after another.
  t0 = Clock::now();
  double check_s = 0;
  index_t columns_walked = 0;

  index_t stacks_walked = 0;
  for (index_t si = 0; si < counts->stacks; ++si) {
    const index_t stack = counts->first_stack + si;
    // The subgrids of this stack that hold visibilities, column by column.
    std::map<index_t, std::vector<index_t>> columns;  // tile0 -> subgrid indices
    for (index_t s = 0; s < p.subgrid_count(); ++s)
      if (counts->visibilities[static_cast<size_t>(counts->at(stack, s))] > 0)
        columns[s / ns].push_back(s);
    if (columns.empty()) continue;
    ++stacks_walked;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < F; ++f) {
      auto facet = state[static_cast<size_t>(omp_get_thread_num())].facet.view();
      sky::fill_facet(sources, ftile0(f), ftile1(f), facet);
      degridder.correct_facet(ftile0(f), ftile1(f), stack, facet);
      rec.prepare_facet(facet, prepared[static_cast<size_t>(f)].view());
    }
    columns_walked += static_cast<index_t>(columns.size());
    for (const auto& [i0, subgrids] : columns) {
      const index_t off0 = tiles[static_cast<size_t>(i0)].offset;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (index_t f = 0; f < F; ++f)
        rec.prepare_column(prepared[static_cast<size_t>(f)].view(), ftile0(f).offset, off0,
                           state[static_cast<size_t>(omp_get_thread_num())].column,
                           column_data[static_cast<size_t>(f)].view());
      if (gpu) {
        degrid_column_on_gpu(stack, off0, subgrids);
        continue;
      }
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
          // The visit's track pieces, made now and dropped with it.
          const binning::VisitRuns visit(*binner, stack, s);
          double w_lo = 0, w_hi = 0;
          visit.w_range(w_lo, w_hi);
          st.planes += degridder.build_tower(st.sum.view(), w_lo / degridder.planes().dw,
                                             w_hi / degridder.planes().dw, st.degrid);
          std::fill(st.sum.data(), st.sum.data() + st.sum.size(), cplx{});
          // Tasks of up to --bls-per-task baselines' time chunks: idle
          // threads take them, so a subgrid holding most of the
          // visibilities (the centre) does not leave the others waiting.
          const auto* tower = &st.degrid;
          const auto* pieces = &visit;
          for (const auto& [first, last] : visit.tasks(o.bls_per_task, degrid::kTaskVisibilities)) {
#pragma omp task default(shared) firstprivate(first, last, s, off0, off1, tower, pieces)
            failures.capture([&] {
              auto& ts = state[static_cast<size_t>(omp_get_thread_num())];
              pieces->runs(first, last, ts.runs);
              const auto* begin = ts.runs.data();
              const auto* end = begin + ts.runs.size();
              degrid::degrid_to_chunks(degridder, begin, end, off0, off1, *tower, ts.vis, ts.chunks,
                                       emit);
              ts.visibilities += static_cast<index_t>(ts.vis.size());
              // Untimed: the sampled visibilities of this task.
              const auto tc = Clock::now();
              ts.samples += degrid::check_samples(degridder, sources, samples, begin, end,
                                                  ts.vis.data(), ts.errors[s]);
              ts.check_s += seconds_since(tc);
            });
          }
          // The tower and the pieces live here: keep them until the tasks
          // are done (this thread works on tasks meanwhile).
#pragma omp taskwait
        });
      }
      failures.rethrow();
    }
  }
  backend->complete();
  if (claim) storage::publish(*claim);
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
  job::describe_degridding(*r.settings, job, degridder, stacks_walked, calibration);
  r.settings->vis_samples = static_cast<index_t>(samples.size());
  r.device = job::device_section(o.device, gpus);
  if (gpu) {
    r.device->kernel_s = gpu->timing().kernel_s;
    r.device->transfer_s = gpu->timing().transfer_s;
    r.device->host_wait_s = gpu->timing().host_wait_s;
  }
  r.counts.facets = p.facet_count();
  r.counts.subgrids = p.subgrid_count();
  r.counts.subgrids_processed = used;
  r.counts.subgrid_columns = columns_walked;
  job::add_observation(r, obs, g, distribution);
  report::Accuracy accuracy;
  accuracy.vis_rmse = tally.pooled.value();
  accuracy.vis_rmse_max = tally.worst;
  accuracy.vis_samples = checked;
  r.accuracy = accuracy;
  timing.degrid_s = degrid_s;
  timing.write_s = backend->stats().seconds;
  timing.sync_s = backend->stats().sync_s;
  r.counts.bytes_written = backend->stats().bytes;
  r.counts.chunks_written = backend->stats().chunks_written;
  r.counts.chunks_rewritten = backend->stats().chunks_rewritten;
  r.counts.visibilities_written = backend->stats().visibilities;
  r.settings->backend = std::string(backend->name());
  r.settings->durability = backend->durability();
  r.settings->value_bytes = backend->stored_value_bytes();
  r.settings->nonce = layout.provenance->nonce;
  r.settings->output = o.output;
  timing.check_s = check_s;
  report::Rates rates;
  rates.vis_per_s = static_cast<double>(visibilities) / degrid_s;
  rates.vis_per_s_per_thread = rates.vis_per_s / threads;
  rates.w_planes_per_s = static_cast<double>(planes) / degrid_s;
  const double bytes = static_cast<double>(backend->stats().bytes);
  rates.write_bytes_per_s =
      timing.write_s + timing.sync_s > 0 ? bytes / (timing.write_s + timing.sync_s) : 0;
  rates.raw_write_bytes_per_s = timing.write_s > 0 ? bytes / timing.write_s : 0;
  r.rates = rates;
  r.sky = job::sky_of(sources, g.pixel_lm);
  r.memory.peak_rss_bytes = peak_rss_bytes();
  timing.wall_s = seconds_since(t_wall);
  r.timing = timing;
  return r;
}

}  // namespace iotest::commands
