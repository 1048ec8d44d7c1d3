#include "iotest/commands/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "iotest/commands/gpu_group.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/storage/chunk_gatherer.hpp"
#include "iotest/storage/image_file.hpp"
#include "iotest/storage/output_set.hpp"

namespace iotest::commands {
namespace {

// The job of the input files: what their provenance records of the run
// that wrote them. Its binning need not be theirs (gridding reads whatever
// chunks a visit's runs lie in), only its observation and sky.
job::JobOptions job_of_files(const storage::Reader& first, const std::string& path,
                             const GridRunOptions& o) {
  const auto& ob = o.observation;
  for (const auto& [given, option] :
       {std::pair{!o.rec_set.empty(), "--rec-set"}, std::pair{!ob.vis_set.empty(), "--vis-set"},
        std::pair{ob.time.has_value(), "--time"}, std::pair{ob.freq.has_value(), "--freq"},
        std::pair{ob.dec_deg.has_value(), "--dec"}})
    if (given)
      throw UsageError(option, "expected none with input files: their provenance gives it");
  const auto& pv = storage::provenance_of(first, path);
  job::JobOptions j;
  j.rec_set = pv.rec_set;
  j.kernel = o.kernel;
  j.margin = o.margin;
  job::use_files_observation(j, pv, path);
  return j;
}

}  // namespace

report::Report grid(const GridRunOptions& o) {
  const auto t_wall = Clock::now();
  if (o.pixel_samples < 0) throw UsageError("--pixel-samples", "expected a count >= 0");
  if (o.bls_per_task < 1) throw UsageError("--bls-per-task", "expected at least 1");
  const auto gpus = job::require_device(o.device);
  // Claimed before the work, held until the image is written.
  std::optional<storage::OutputClaim> image_claim;
  if (!o.image.empty()) image_claim.emplace(storage::claim_image_path(o.image));

  // The input: files (their provenance gives the job) or the sky.
  std::vector<std::unique_ptr<storage::Reader>> files;
  job::JobOptions jo;
  if (!o.inputs.empty()) {
    files = storage::open_output_set(o.inputs, o.storage);
    jo = job_of_files(*files[0], o.inputs[0], o);
  } else {
    jo.rec_set = o.rec_set.empty() ? "T05_" : o.rec_set;
    jo.observation = o.observation;
    if (jo.observation->vis_set.empty()) jo.observation->vis_set = "vlaa";
    jo.kernel = o.kernel;
    jo.margin = o.margin;
    jo.source_count = o.source_count;
    jo.seed = o.seed;
  }
  auto job = job::resolve(jo);
  const auto& obs = *job.obs;
  const auto& g = *job.geometry;
  if (!files.empty()) storage::require_whole_observation(files, o.inputs, obs);
  report::Report r;
  r.mode = "grid";
  r.rec = job.p;
  const auto& p = r.rec;
  check_threads("--threads", o.threads);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();

  report::Timing timing;
  auto t0 = Clock::now();
  const binning::Binner binner(p, obs, g, job.split());
  const auto counts = binner.count_visits(0, obs.baseline_count(), threads);
  {
    job::RunShape shape;
    shape.threads = threads;
    shape.bls_per_task = o.bls_per_task;
    shape.device = o.device;
    r.memory = job::estimate_memory(job, shape, &counts);
    // Gridding holds what degridding does, plus the image's facets.
    r.memory.single_process_bytes =
        job::estimate_single_process(job, threads, &counts, false) +
        p.facet_count() * p.yB * p.yB * static_cast<index_t>(sizeof(cplx)) +
        (o.image.empty() ? 0 : storage::image_writer_bytes(storage::is_fits_path(o.image), p.yB));
    if (o.device == device::Kind::cuda)
      r.memory.single_process_bytes += job::gpu_host_bytes(job, counts, o.bls_per_task);
    job::require_memory(p, r.memory.single_process_bytes);
    if (o.device == device::Kind::cuda) {
      job::require_gpu_memory(r.memory.streamer_gpu_bytes, 1, gpus);
    }
  }
  const swiftly::Recombination rec(p);
  const degrid::Degridder degridder(rec, g, obs, job.kernel, job.w);
  const auto distribution = binning::summarise(counts);
  timing.planning_s = seconds_since(t0);

  const auto tiles = swiftly::subgrid_tiles(p);
  const index_t ns = p.subgrids_per_axis;
  const auto facet_tiles = swiftly::facet_tiles(p);
  const index_t nf = p.facets_per_axis, F = p.facet_count();
  const auto ftile0 = [&](index_t f) { return facet_tiles[static_cast<size_t>(f / nf)]; };
  const auto ftile1 = [&](index_t f) { return facet_tiles[static_cast<size_t>(f % nf)]; };

  // The dirty image's pixels to check, where sources may lie (the used
  // field, where the recombination is accurate).
  const auto pixels = sky::random_sources(o.pixel_samples, p.used_size, o.seed ^ 0x1ace);

  std::vector<const storage::Reader*> readers;
  for (const auto& f : files) readers.push_back(f.get());
  std::mutex read_lock;  // a Reader takes one thread at a time
  struct ThreadState {
    swiftly::ColumnWorkspace column;
    Array2D contribution, facet;
    degrid::Degridder::Workspace tower;
    std::vector<binning::VisRun> runs;
    std::vector<cplx> vis;
    std::unique_ptr<storage::ChunkGatherer> gatherer;
    degrid::DirtyPixels dirty;
    index_t planes = 0, visibilities = 0;
    double check_s = 0, input_s = 0;
    ThreadState(const swiftly::Recombination& rec, const std::vector<sky::PointSource>& pixels)
        : column(rec.params()),
          contribution(rec.make_contribution()),
          facet(rec.make_facet()),
          tower(rec.params()),
          dirty(pixels) {}
  };
  std::vector<ThreadState> state;
  for (int t = 0; t < threads; ++t) {
    state.emplace_back(rec, pixels);
    if (!readers.empty())
      state.back().gatherer = std::make_unique<storage::ChunkGatherer>(readers, read_lock);
  }
  ExceptionCollector failures;

  // Timed: the whole imaging chain, one w-stacking plane after another.
  t0 = Clock::now();
  std::vector<Array2D> image;  // the dirty image's facets
  std::vector<Array2D> facet_sums, column_sums;
  for (index_t f = 0; f < F; ++f) {
    image.push_back(rec.make_facet());
    facet_sums.push_back(rec.make_prepared_facet());
    column_sums.push_back(rec.make_column());
  }
  std::vector<Array2D> sums;  // the subgrid sums of one column
  // --device=cuda: one process, the first GPU (docs/gpu.md).
  std::optional<device::GpuDegridder> gpu;
  if (o.device == device::Kind::cuda) gpu.emplace(degridder, gpus.front().index);
  detail::GpuGroup gpu_group;  // with a GPU, the column's sums

  // The GPU path of one column: its visits cut into the CPU path's tasks,
  // their visibilities read (or made by direct transform) and added to the
  // sampled pixels on the CPU threads a batch at a time, then gridded and
  // collapsed into the visits' sums on the GPU.
  const auto grid_column_on_gpu = [&](index_t stack, index_t off0,
                                      const std::vector<index_t>& subgrids) {
    gpu_group.resize(rec, subgrids.size());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (size_t k = 0; k < subgrids.size(); ++k)
      failures.capture([&] {
        auto& v = gpu_group.visits[k];
        const index_t s = subgrids[k];
        std::fill(v.sum.data(), v.sum.data() + v.sum.size(), cplx{});
        v.take(binner, stack, s, off0, tiles[static_cast<size_t>(s % ns)].offset, o.bls_per_task,
               degridder.planes().dw);
      });
    failures.rethrow();
    for (auto& batch : gpu_group.batches(device::kMaxBatchVisibilities)) {
      gpu_group.out.resize(static_cast<size_t>(batch.visibilities));
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (size_t t = 0; t < batch.visits.size(); ++t)
        failures.capture([&] {
          auto& st = state[static_cast<size_t>(omp_get_thread_num())];
          const auto& task = batch.visits[t];
          cplx* values = gpu_group.out.data() + batch.first[t];
          const auto ti = Clock::now();
          if (st.gatherer) {
            degrid::gather_runs(*st.gatherer, obs.time.steps, task.begin, task.end, values);
          } else {
            degrid::predict_direct(degridder, job.sources, task.begin, task.end, st.vis);
            std::copy(st.vis.begin(), st.vis.end(), values);
          }
          st.input_s += seconds_since(ti);
          st.visibilities += task.visibilities();
          st.planes +=
              degrid::tower_planes(job.w, job.kernel.w_support, task.wc_min, task.wc_max).count;
          const auto tc = Clock::now();  // untimed, as on the CPU
          st.dirty.add(degridder, task.begin, task.end, values);
          st.check_s += seconds_since(tc);
        });
      failures.rethrow();
      gpu->grid(batch.visits, gpu_group.out.data(), batch.sums);
    }
  };
  index_t columns_walked = 0, stacks_walked = 0;
  for (index_t si = 0; si < counts.stacks; ++si) {
    const index_t stack = counts.first_stack + si;
    std::map<index_t, std::vector<index_t>> columns;  // tile0 -> subgrid indices
    for (index_t s = 0; s < p.subgrid_count(); ++s)
      if (counts.visibilities[static_cast<size_t>(counts.at(stack, s))] > 0)
        columns[s / ns].push_back(s);
    if (columns.empty()) continue;
    ++stacks_walked;
    columns_walked += static_cast<index_t>(columns.size());
    for (const auto& [i0, subgrids] : columns) {
      const index_t off0 = tiles[static_cast<size_t>(i0)].offset;
      if (gpu) {
        grid_column_on_gpu(stack, off0, subgrids);
      } else {
        while (sums.size() < subgrids.size()) sums.push_back(rec.make_subgrid_sum());
          // Each subgrid of the column: its visibilities onto its tower, the
          // tower collapsed into the subgrid's image-space sum.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
        for (size_t k = 0; k < subgrids.size(); ++k)
          failures.capture([&] {
            auto& st = state[static_cast<size_t>(omp_get_thread_num())];
            const index_t s = subgrids[k];
            const index_t off1 = tiles[static_cast<size_t>(s % ns)].offset;
            const binning::VisitRuns visit(binner, stack, s);
            double w_lo = 0, w_hi = 0;
            visit.w_range(w_lo, w_hi);
            st.planes += degridder.begin_tower(w_lo / degridder.planes().dw,
                                               w_hi / degridder.planes().dw, st.tower);
            // One thread per tower: tasks of a visit add to the same planes.
            for (const auto& [first, last] :
                 visit.tasks(o.bls_per_task, degrid::kTaskVisibilities)) {
              visit.runs(first, last, st.runs);
              const auto* begin = st.runs.data();
              const auto* end = begin + st.runs.size();
              index_t n = 0;
              for (const auto* run = begin; run != end; ++run) n += run->count();
              const auto ti = Clock::now();
              if (st.gatherer) {
                st.vis.resize(static_cast<size_t>(n));
                degrid::gather_runs(*st.gatherer, obs.time.steps, begin, end, st.vis.data());
              } else {
                degrid::predict_direct(degridder, job.sources, begin, end, st.vis);
              }
              st.input_s += seconds_since(ti);
              degridder.grid(begin, end, off0, off1, st.vis.data(), st.tower);
              st.visibilities += n;
              // Untimed: the same visibilities into the sampled pixels.
              const auto tc = Clock::now();
              st.dirty.add(degridder, begin, end, st.vis.data());
              st.check_s += seconds_since(tc);
            }
            auto sum = sums[k].view();
            std::fill(sum.data, sum.data + p.xM * p.xM, cplx{});
            degridder.collapse_tower(st.tower, sum);
          });
        failures.rethrow();
      }
      // Each facet takes the column's subgrids, as `iotest recombine`'s
      // image direction does.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (index_t f = 0; f < F; ++f) {
        auto& st = state[static_cast<size_t>(omp_get_thread_num())];
        auto column_sum = column_sums[static_cast<size_t>(f)].view();
        for (size_t k = 0; k < subgrids.size(); ++k) {
          rec.extract_from_subgrid((gpu ? gpu_group.visits[k].sum : sums[k]).view(),
                                   ftile0(f).offset, ftile1(f).offset, st.contribution.view());
          rec.add_to_column(st.contribution.view(), ftile1(f).offset,
                            tiles[static_cast<size_t>(subgrids[k] % ns)].offset, column_sum);
        }
        rec.finish_column(column_sum, ftile0(f).offset, off0, st.column,
                          facet_sums[static_cast<size_t>(f)].view());
      }
    }
    // The stack's facets, corrected for the kernels and the stack's w,
    // into the image; the sums start again from zero for the next stack.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < F; ++f) {
      auto& st = state[static_cast<size_t>(omp_get_thread_num())];
      auto& facet_sum = facet_sums[static_cast<size_t>(f)];
      rec.finish_facet(facet_sum.view(), st.facet.view());
      std::fill(facet_sum.data(), facet_sum.data() + facet_sum.size(), cplx{});
      degridder.correct_facet_adjoint(ftile0(f), ftile1(f), stack, st.facet.view());
      auto& out = image[static_cast<size_t>(f)];
      for (index_t i = 0; i < out.size(); ++i) out.data()[i] += st.facet.data()[i];
    }
  }
  double grid_s = seconds_since(t0);

  // Gather.
  degrid::DirtyPixels dirty(pixels);
  storage::ReadTally tally;
  index_t planes = 0, visibilities = 0;
  double check_s = 0, input_s = 0;
  for (const auto& st : state) {
    planes += st.planes;
    visibilities += st.visibilities;
    check_s = std::max(check_s, st.check_s);
    input_s = std::max(input_s, st.input_s);
    dirty.merge(st.dirty);
    if (st.gatherer) tally.add(st.gatherer->tally());
  }
  // Checks ran inside the parallel loop: take the slowest thread's share
  // off, and that of predicting visibilities in memory (reading files is
  // part of imaging).
  grid_s -= check_s;
  if (files.empty()) {
    grid_s -= input_s;
    timing.input_s = input_s;
  }
  if (visibilities != obs.visibility_count())
    throw std::logic_error(
        fmt::format("gridded {} visibilities of {}", visibilities, obs.visibility_count()));
  // In Jy/beam: the image and its reference over the sum of the weights
  // (natural weighting, every weight 1), untimed as the image file is.
  const double scale = degrid::dirty_image_scale(visibilities);
  for (auto& facet : image)
    for (index_t i = 0; i < facet.size(); ++i) facet.data()[i] *= scale;
  dirty.normalise(visibilities);

  // Sampled pixels against the direct adjoint transform.
  RelativeError error;
  for (size_t i = 0; i < pixels.size(); ++i) {
    const auto at = swiftly::locate_pixel(facet_tiles, p.yB, pixels[i].y0, pixels[i].y1);
    if (at.facet < 0) throw std::logic_error("a sampled pixel outside every facet");
    const cplx got = image[static_cast<size_t>(at.facet)](at.a, at.b);
    error.add(CView2D(&got, 1, 1), CView2D(&dirty.sums[i], 1, 1));
  }

  r.settings = report::RunSettings{};
  r.settings->source_count = job.sources.size();
  r.settings->seed = jo.seed;
  r.settings->direction = "image";
  r.settings->subgrids = distribution.subgrids_used;
  r.settings->threads = threads;
  r.device = job::device_section(o.device, gpus);
  if (gpu) {
    r.device->kernel_s = gpu->timing().kernel_s;
    r.device->transfer_s = gpu->timing().transfer_s;
    r.device->host_wait_s = gpu->timing().host_wait_s;
  }
  job::describe_degridding(*r.settings, job, degridder, stacks_walked, std::nullopt);
  r.counts.facets = F;
  r.counts.subgrids = p.subgrid_count();
  r.counts.subgrids_processed = distribution.subgrids_used;
  r.counts.subgrid_columns = columns_walked;
  job::add_observation(r, obs, g, distribution);
  report::Accuracy accuracy;
  accuracy.facet_rmse = error.value();
  accuracy.pixel_samples = static_cast<index_t>(pixels.size());
  r.accuracy = accuracy;
  if (!files.empty()) {
    report::Reading reading;
    reading.files = o.inputs;
    reading.backend = std::string(files[0]->backend());
    reading.ranks = 1;
    reading.direct = files[0]->direct();
    reading.chunks = tally.chunks;
    reading.bytes = tally.bytes;
    reading.read_s = tally.seconds;
    reading.wall_s = input_s;
    reading.bytes_per_s = input_s > 0 ? static_cast<double>(tally.bytes) / input_s : 0;
    r.reading = reading;
  }
  timing.image_s = grid_s;
  timing.check_s = check_s;
  report::Rates rates;
  rates.vis_per_s = static_cast<double>(visibilities) / grid_s;
  rates.vis_per_s_per_thread = rates.vis_per_s / threads;
  rates.w_planes_per_s = static_cast<double>(planes) / grid_s;
  r.rates = rates;
  r.sky = job::sky_of(job.sources, g.pixel_lm);
  if (image_claim) {
    // Facet by facet, as the pipeline's image writer takes them; untimed.
    const auto tw = Clock::now();
    storage::ImageWriter writer(*image_claim,
                                storage::describe_image(jo.rec_set, p.used_size, g.pixel_lm, obs));
    for (index_t f = 0; f < F; ++f)
      writer.write_facet(image[static_cast<size_t>(f)], ftile0(f), ftile1(f), p.yB);
    writer.finish();
    storage::publish(*image_claim);
    r.image = report::ImageFile{.path = o.image,
                                .format = writer.fits() ? "fits" : "hdf5",
                                .used_size = p.used_size,
                                .bytes = writer.bytes(),
                                .write_s = writer.write_s(),
                                .wall_s = seconds_since(tw)};
  }
  r.memory.peak_rss_bytes = peak_rss_bytes();
  timing.wall_s = seconds_since(t_wall);
  r.timing = timing;
  return r;
}

}  // namespace iotest::commands
