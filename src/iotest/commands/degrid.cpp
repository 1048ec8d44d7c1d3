#include "iotest/commands/degrid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "iotest/commands/chain.hpp"
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
namespace {

// A thread's buffers and figures, allocated before the walk.
struct PredictThread : detail::WalkFigures {
  swiftly::ColumnWorkspace column;
  Array2D contribution, sum, facet;
  degrid::Degridder::Workspace degrid;
  std::vector<binning::VisRun> runs;
  std::vector<cplx> vis;
  chunks::ChunkAssembler chunks;
  std::map<index_t, RelativeError> errors;  // per subgrid
  index_t samples = 0;
  PredictThread(const swiftly::Recombination& rec, const storage::VisibilityLayout& layout)
      : column(rec.params()),
        contribution(rec.make_contribution()),
        sum(rec.make_subgrid_sum()),
        facet(rec.make_facet()),
        degrid(rec.params()),
        chunks(layout) {}
};

// All threads' figures, and the sampled visibilities' errors.
struct PredictFigures : detail::WalkFigures {
  index_t checked = 0;
  ErrorTally errors;
};

// The options checked before the seconds of planning, and the devices and
// storage they name.
struct DegridChecks {
  storage::StorageChoice storage;
  std::vector<device::GpuInfo> gpus;
};
DegridChecks check_degrid_options(const DegridRunOptions& o) {
  if (o.vis_samples < 0) throw UsageError("--vis-samples", "expected a count >= 0");
  DegridChecks c;
  c.storage = storage::resolve_storage(o.storage, o.output);
  c.gpus = job::require_device(o.device);
  if (c.storage.shared)
    throw UsageError("--storage", fmt::format("expected a back-end of one output per writer: {} "
                                              "writes one output that the streamers of `iotest "
                                              "run` share, under mpirun",
                                              c.storage.backend));
  return c;
}

// The predict walk of one process: each w-stack's facets from the sky,
// their columns, each subgrid of a column summed from them, its w-tower
// built and degridded into chunks for the back-end, the sampled
// visibilities checked against the direct transform on the way.
class Predict {
 public:
  Predict(detail::Chain& chain, storage::Backend& backend, const storage::VisibilityLayout& layout,
          const std::vector<index_t>& samples, const std::vector<device::GpuInfo>& gpus)
      : c_(chain),
        samples_(samples),
        // Every large buffer of the chain, allocated and first touched
        // before the clock starts (a user's first run as fast as the tenth).
        prepared_(touched_buffers(chain.facet_count(), chain.job.p.yB, chain.job.p.yN,
                                  chain.shape.threads)),
        column_data_(touched_buffers(chain.facet_count(), chain.job.p.m, chain.job.p.yN,
                                     chain.shape.threads)) {
    for (int t = 0; t < c_.shape.threads; ++t) state_.emplace_back(c_.rec, layout);
    emit_ = [this, &backend](const storage::ChunkKey& key, const cplx* data, index_t count,
                             const storage::PresenceWord* present) {
      // The serial HDF5 library takes one writer at a time.
      const std::lock_guard<std::mutex> hold(backend_lock_);
      backend.write_chunk(key, data, count, present);
    };
    c_.start_gpu(gpus);
  }

  detail::Walked walk() {
    return detail::walk_stacks(c_.counts, c_.job.p,
                               [&](index_t stack, const detail::Columns& columns) {
                                 prepare_facets(stack);
                                 for (const auto& [i0, subgrids] : columns) {
                                   const index_t off0 = c_.tiling.column_offset(i0);
                                   prepare_columns(off0);
                                   if (c_.gpu)
                                     degrid_column_on_gpu(stack, off0, subgrids);
                                   else
                                     degrid_column(stack, off0, subgrids);
                                 }
                               });
  }

  PredictFigures gather() const {
    PredictFigures f;
    for (const auto& st : state_) {
      f.add(st);
      f.checked += st.samples;
      for (const auto& [s, e] : st.errors) f.errors.add(e);
    }
    return f;
  }

 private:
  PredictThread& this_thread() { return state_[static_cast<size_t>(omp_get_thread_num())]; }

  // The stack's facets: the sky's, corrected for the kernels and the
  // stack's w, prepared for their columns.
  void prepare_facets(index_t stack) {
    const auto& t = c_.tiling;
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (index_t f = 0; f < c_.facet_count(); ++f) {
      auto facet = this_thread().facet.view();
      sky::fill_facet(c_.job.sources, t.facet0(f), t.facet1(f), facet);
      c_.degridder.correct_facet(t.facet0(f), t.facet1(f), stack, facet);
      c_.rec.prepare_facet(facet, prepared_[static_cast<size_t>(f)].view());
    }
  }

  void prepare_columns(index_t off0) {
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (index_t f = 0; f < c_.facet_count(); ++f)
      c_.rec.prepare_column(prepared_[static_cast<size_t>(f)].view(), c_.tiling.facet0(f).offset,
                            off0, this_thread().column,
                            column_data_[static_cast<size_t>(f)].view());
  }

  // Every facet's contribution to a subgrid of the column, added to `sum`.
  void add_facets(PredictThread& st, index_t off1, MView2D sum) {
    detail::add_facet_contributions(c_.rec, c_.tiling.facets, column_data_, off1, st.contribution,
                                    sum);
  }

  void degrid_column(index_t stack, index_t off0, const std::vector<index_t>& subgrids) {
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (size_t k = 0; k < subgrids.size(); ++k)
      c_.failures.capture([&] { degrid_subgrid(stack, off0, subgrids[k]); });
    c_.failures.rethrow();
  }

  // A subgrid's tower, built from its sum, degridded in tasks of up to
  // --bls-per-task baselines' time chunks: idle threads take them, so a
  // subgrid holding most of the visibilities (the centre) does not leave
  // the others waiting.
  void degrid_subgrid(index_t stack, index_t off0, index_t s) {
    auto& st = this_thread();
    const index_t off1 = c_.tiling.subgrid_offset1(s);
    add_facets(st, off1, st.sum.view());
    // The visit's track pieces, made now and dropped with it.
    const binning::VisitRuns visit(c_.binner, stack, s);
    double w_lo = 0, w_hi = 0;
    visit.w_range(w_lo, w_hi);
    st.planes += c_.degridder.build_tower(st.sum.view(), w_lo / c_.dw(), w_hi / c_.dw(), st.degrid,
                                          visit, off1);
    std::fill(st.sum.data(), st.sum.data() + st.sum.size(), cplx{});
    const auto* tower = &st.degrid;
    const auto* pieces = &visit;
    for (const auto& [first, last] :
         visit.tasks(c_.shape.bls_per_task, degrid::kTaskVisibilities)) {
#pragma omp task default(shared) firstprivate(first, last, s, off0, off1, tower, pieces)
      c_.failures.capture([&] { degrid_task(*pieces, first, last, off0, off1, *tower, s); });
    }
    // The tower and the pieces live here: keep them until the tasks are
    // done (this thread works on tasks meanwhile).
#pragma omp taskwait
  }

  void degrid_task(const binning::VisitRuns& pieces, size_t first, size_t last, index_t off0,
                   index_t off1, const degrid::Degridder::Workspace& tower, index_t s) {
    auto& ts = this_thread();
    pieces.runs(first, last, ts.runs);
    const auto* begin = ts.runs.data();
    const auto* end = begin + ts.runs.size();
    degrid::degrid_to_chunks(c_.degridder, begin, end, off0, off1, tower, ts.vis, ts.chunks, emit_);
    ts.visibilities += static_cast<index_t>(ts.vis.size());
    // Untimed: the sampled visibilities of this task.
    const auto tc = Clock::now();
    ts.samples += degrid::check_samples(c_.degridder, c_.job.sources, samples_, begin, end,
                                        ts.vis.data(), ts.errors[s]);
    ts.check_s += seconds_since(tc);
  }

  // The GPU path of a column's subgrids, in groups of a batch: their sums
  // on the CPU threads, their tasks on the GPU. Tasks bound the host's
  // visibility buffer however busy a subgrid is.
  void degrid_column_on_gpu(index_t stack, index_t off0, const std::vector<index_t>& subgrids) {
    const size_t group = static_cast<size_t>(device::kDefaultBatchSubgrids);
    for (size_t g0 = 0; g0 < subgrids.size(); g0 += group) {
      c_.take_group(stack, off0, subgrids.data() + g0, std::min(group, subgrids.size() - g0),
                    [&](index_t off1, MView2D sum) { add_facets(this_thread(), off1, sum); });
      for (const auto& batch : c_.gpu_group.batches(device::kMaxBatchVisibilities))
        degrid_batch(batch);
    }
  }

  // A batch of tasks degridded on the GPU, then on the CPU threads their
  // values into chunks and the sampled checks.
  void degrid_batch(const detail::GpuGroup::Batch& batch) {
    auto& out = c_.gpu_group.out;
    // Grown, never cleared: the GPU writes every value.
    if (out.size() < static_cast<size_t>(batch.visibilities))
      out.resize(static_cast<size_t>(batch.visibilities));
    c_.gpu->degrid(batch.visits, batch.const_sums(), out.data());
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (size_t t = 0; t < batch.visits.size(); ++t)
      c_.failures.capture([&] {
        auto& ts = this_thread();
        const auto& task = batch.visits[t];
        const cplx* values = out.data() + batch.first[t];
        degrid::runs_to_chunks(c_.job.obs->time.steps, task.begin, task.end, values, ts.chunks,
                               emit_);
        ts.add_task(c_.job, task);
        const auto tc = Clock::now();  // untimed, as on the CPU
        ts.samples += degrid::check_samples(c_.degridder, c_.job.sources, samples_, task.begin,
                                            task.end, values, ts.errors[batch.subgrid[t]]);
        ts.check_s += seconds_since(tc);
      });
    c_.failures.rethrow();
  }

  detail::Chain& c_;
  const std::vector<index_t>& samples_;
  std::vector<Array2D> prepared_, column_data_;  // per facet
  std::vector<PredictThread> state_;
  std::mutex backend_lock_;
  chunks::ChunkAssembler::Emit emit_;
};

std::unique_ptr<storage::OutputClaim> claim_visibility_output(const storage::StorageChoice& storage,
                                                              const std::string& output,
                                                              std::uint32_t nonce) {
  if (!storage.store()) return nullptr;  // null: nothing kept
  auto claim = storage.store()->claim(output, nonce, "OUTPUT");
  claim->go_ahead();  // its one claim
  return claim;
}

// The back-end of the output, open, and the layout it was opened with.
std::unique_ptr<storage::Backend> open_visibility_output(const DegridRunOptions& o,
                                                         const storage::StorageChoice& storage,
                                                         const storage::OutputClaim* claim,
                                                         const job::Job& job, std::uint32_t nonce,
                                                         storage::VisibilityLayout& layout) {
  auto backend = storage.make();
  layout = storage::layout_of(*job.obs);
  layout.provenance = job::provenance(job, o.rec_set, o.seed, false, nonce);
  backend->open(claim ? claim->partial() : std::string(), layout);
  return backend;
}

// The sampled visibilities against the direct transform.
void report_sampled_visibilities(report::Report& r, report::Timing& timing, const PredictFigures& f,
                                 index_t samples) {
  r.settings->vis_samples = samples;
  report::Accuracy accuracy;
  accuracy.vis_rmse = f.errors.pooled.value();
  accuracy.vis_rmse_max = f.errors.worst;
  accuracy.vis_samples = f.checked;
  r.accuracy = accuracy;
  timing.check_s = f.check_s;
}

// What the back-end wrote, in how long, and how fast.
void report_written(report::Report& r, report::Timing& timing, const storage::Backend& backend,
                    const storage::StorageChoice& storage, std::uint32_t nonce,
                    const std::string& output) {
  const auto& stats = backend.stats();
  timing.write_s = stats.seconds;
  timing.sync_s = stats.sync_s;
  r.counts.bytes_written = stats.bytes;
  r.counts.chunks_written = stats.chunks_written;
  r.counts.chunks_rewritten = stats.chunks_rewritten;
  r.counts.visibilities_written = stats.visibilities;
  r.settings->backend = std::string(backend.name());
  r.settings->durability = backend.durability();
  r.settings->value_bytes = backend.stored_value_bytes();
  r.settings->nonce = nonce;
  r.settings->output = output;
  r.settings->store = storage.describe(output);
  const double bytes = static_cast<double>(stats.bytes);
  r.rates->write_bytes_per_s =
      timing.write_s + timing.sync_s > 0 ? bytes / (timing.write_s + timing.sync_s) : 0;
  r.rates->raw_write_bytes_per_s = timing.write_s > 0 ? bytes / timing.write_s : 0;
}

}  // namespace

report::Report degrid(const DegridRunOptions& o) {
  const auto t_wall = Clock::now();
  const auto checked = check_degrid_options(o);
  const std::uint32_t nonce = storage::draw_nonce();
  // The output claimed before the work, held until it is published.
  auto claim = claim_visibility_output(checked.storage, o.output, nonce);
  auto job = job::resolve(job::job_options(o));
  report::Report r;
  r.mode = "degrid";
  r.rec = job.p;
  const detail::ChainShape shape{threads_or_all("--threads", o.threads), o.bls_per_task, o.device};

  report::Timing timing;
  auto t0 = Clock::now();
  // The memory checked before the large allocations; with --target-err
  // once the tower height is measured.
  detail::Visits visits;
  const auto count_and_check = [&] {
    r.memory = detail::count_and_check(visits, job, shape, !o.output.empty(), 0, checked.gpus);
  };
  if (!o.target_err) count_and_check();
  const swiftly::Recombination rec(job.p);
  std::optional<degrid::TowerCalibration> calibration;
  if (o.target_err) {
    calibration = job::calibrate_w_layout(job, rec);
    count_and_check();
  }
  const degrid::Degridder degridder(rec, *job.geometry, *job.obs, job.kernel, job.w);
  storage::VisibilityLayout layout;
  auto backend = open_visibility_output(o, checked.storage, claim.get(), job, nonce, layout);
  const auto samples = degrid::pick_samples(*job.obs, o.vis_samples, o.seed);
  const auto distribution = binning::summarise(visits.counts);
  timing.planning_s = seconds_since(t0);

  detail::Chain chain(job, shape, visits, rec, degridder);
  Predict predict(chain, *backend, layout, samples, checked.gpus);
  // Timed: the whole predict chain, one w-stacking plane after another.
  t0 = Clock::now();
  const auto walked = predict.walk();
  backend->complete();
  if (claim) storage::publish(*claim);
  double degrid_s = seconds_since(t0);
  const auto figures = predict.gather();
  // Checks ran inside the parallel loop: take the slowest thread's share off.
  degrid_s -= figures.check_s;
  detail::require_every_visibility("degridded", figures.visibilities, *visits.binner);

  detail::describe_walk(r, chain, {o.source_count, o.seed, "predict", calibration}, walked,
                        distribution, checked.gpus);
  report_sampled_visibilities(r, timing, figures, static_cast<index_t>(samples.size()));
  timing.degrid_s = degrid_s;
  r.rates = detail::walk_rates(figures, degrid_s, shape.threads);
  report_written(r, timing, *backend, checked.storage, nonce, o.output);
  r.memory.peak_rss_bytes = peak_rss_bytes();
  timing.wall_s = seconds_since(t_wall);
  r.timing = timing;
  return r;
}

}  // namespace iotest::commands
