#include "iotest/commands/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "iotest/chunks/chunk_gatherer.hpp"
#include "iotest/commands/chain.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/image/image_file.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
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

using Files = std::vector<std::unique_ptr<storage::Reader>>;

// The options checked before any work; the GPUs --device names.
std::vector<device::GpuInfo> check_grid_options(const GridRunOptions& o) {
  if (o.pixel_samples < 0) throw UsageError("--pixel-samples", "expected a count >= 0");
  if (o.bls_per_task < 1) throw UsageError("--bls-per-task", "expected at least 1");
  return job::require_device(o.device);
}

std::optional<storage::FileClaim> claim_image(const std::string& path) {
  std::optional<storage::FileClaim> claim;
  if (!path.empty()) claim.emplace(image::claim_image_path(path));
  if (claim) claim->go_ahead();  // its one claim
  return claim;
}

std::vector<const storage::Reader*> readers_of(const Files& files) {
  std::vector<const storage::Reader*> readers;
  for (const auto& f : files) readers.push_back(f.get());
  return readers;
}

// The job: the input files' (their provenance gives it) or, without
// files, the options'.
job::JobOptions job_to_image(const GridRunOptions& o, const Files& files) {
  if (!files.empty()) return job_of_files(*files[0], o.inputs[0], o);
  job::JobOptions jo;
  jo.rec_set = o.rec_set.empty() ? "T05_" : o.rec_set;
  jo.observation = o.observation;
  if (jo.observation->vis_set.empty()) jo.observation->vis_set = "vlaa";
  jo.kernel = o.kernel;
  jo.margin = o.margin;
  jo.source_count = o.source_count;
  jo.seed = o.seed;
  return jo;
}

// The input: the files (their provenance gives the job) or the sky.
struct Input {
  Files files;
  job::JobOptions options;
  job::Job job;
};
Input open_input(const GridRunOptions& o) {
  Input in;
  if (!o.inputs.empty()) in.files = storage::open_output_set(o.inputs, o.storage);
  in.options = job_to_image(o, in.files);
  // The image leaves the autocorrelations out unless asked, as imagers do
  // (docs/imaging.md, "Autocorrelations"): the binning makes no runs of them.
  in.options.bin_autocorrelations = o.image_autocorrelations;
  in.job = job::resolve(in.options);
  if (!in.files.empty()) storage::require_whole_observation(in.files, o.inputs, *in.job.obs);
  return in;
}

// What gridding holds besides what degridding does: the image's facets,
// and the image writer's buffers.
index_t image_held_bytes(const GridRunOptions& o, const config::RecombinationParams& p) {
  return p.facet_count() * p.yB * p.yB * static_cast<index_t>(sizeof(cplx)) +
         (o.image.empty() ? 0 : image::image_writer_bytes(image::is_fits_path(o.image), p.yB));
}

// A thread's buffers and figures, allocated before the walk.
struct ImagingThread : detail::WalkFigures {
  swiftly::ColumnWorkspace column;
  Array2D contribution, facet;
  degrid::Degridder::Workspace tower;
  std::vector<binning::VisRun> runs;
  std::vector<cplx> vis;
  std::unique_ptr<chunks::ChunkGatherer> gatherer;
  degrid::DirtyPixels dirty;
  double input_s = 0;
  ImagingThread(const swiftly::Recombination& rec, const std::vector<sky::PointSource>& pixels)
      : column(rec.params()),
        contribution(rec.make_contribution()),
        facet(rec.make_facet()),
        tower(rec.params()),
        dirty(pixels) {}
};

// All threads' figures: the reads, and the sampled pixels' sums.
struct ImagingFigures : detail::WalkFigures {
  double input_s = 0;  // the slowest thread's
  chunks::ReadTally tally;
  degrid::DirtyPixels dirty;
};

// The imaging walk of one process: each subgrid's visibilities, read or
// made by direct transform, gridded onto its w-tower and collapsed into
// its sum; each column's sums into the facets, each w-stack's facets into
// the dirty image; the visibilities added to the sampled pixels on the way.
class Imaging {
 public:
  // The image's buffers allocated and first touched, and with
  // --device=cuda the GPU started, before the clock (as degrid's Predict):
  // setup, not the timed imaging.
  Imaging(detail::Chain& chain, const Files& files, const std::vector<sky::PointSource>& pixels,
          const std::vector<device::GpuInfo>& gpus)
      : c_(chain),
        pixels_(pixels),
        readers_(readers_of(files)),
        state_(make_threads()),
        image_(touched_buffers(chain.facet_count(), chain.job.p.yB, chain.job.p.yB,
                               chain.shape.threads)),
        facet_sums_(touched_buffers(chain.facet_count(), chain.job.p.yB, chain.job.p.yN,
                                    chain.shape.threads)),
        column_sums_(touched_buffers(chain.facet_count(), chain.job.p.m, chain.job.p.yN,
                                     chain.shape.threads)) {
    c_.start_gpu(gpus);
  }

  detail::Walked walk() {
    return detail::walk_stacks(c_.counts, c_.job.p,
                               [&](index_t stack, const detail::Columns& columns) {
                                 for (const auto& [i0, subgrids] : columns) {
                                   const index_t off0 = c_.tiling.column_offset(i0);
                                   if (c_.gpu)
                                     grid_column_on_gpu(stack, off0, subgrids);
                                   else
                                     grid_column(stack, off0, subgrids);
                                   add_to_facets(off0, subgrids);
                                 }
                                 add_to_image(stack);
                               });
  }

  ImagingFigures gather() const {
    ImagingFigures f;
    f.dirty = degrid::DirtyPixels(pixels_);
    for (const auto& st : state_) {
      f.add(st);
      f.input_s = std::max(f.input_s, st.input_s);
      f.dirty.merge(st.dirty);
      if (st.gatherer) f.tally.add(st.gatherer->tally());
    }
    return f;
  }

  // In Jy/beam: the image and its reference over the sum of the weights
  // (natural weighting, every weight 1), untimed as the image file is.
  void normalise(ImagingFigures& f) {
    const double scale = degrid::dirty_image_scale(f.visibilities);
    for (auto& facet : image_)
      for (index_t i = 0; i < facet.size(); ++i) facet.data()[i] *= scale;
    f.dirty.normalise(f.visibilities);
  }

  // The sampled pixels against the direct adjoint transform.
  RelativeError compare(const degrid::DirtyPixels& dirty) const {
    RelativeError error;
    for (size_t i = 0; i < pixels_.size(); ++i) {
      const auto at =
          swiftly::locate_pixel(c_.tiling.facets.tiles, c_.job.p.yB, pixels_[i].y0, pixels_[i].y1);
      if (at.facet < 0) throw std::logic_error("a sampled pixel outside every facet");
      const cplx got = image_[static_cast<size_t>(at.facet)](at.a, at.b);
      error.add(CView2D(&got, 1, 1), CView2D(&dirty.sums[i], 1, 1));
    }
    return error;
  }

  // Facet by facet, as the pipeline's image writer takes them; untimed.
  report::ImageFile write(storage::FileClaim& claim, const std::string& path,
                          const std::string& rec_set) const {
    const auto& p = c_.job.p;
    const auto tw = Clock::now();
    image::ImageWriter writer(
        claim, image::describe_image(rec_set, p.used_size, c_.job.geometry->pixel_lm, *c_.job.obs,
                                     c_.binner.visibility_count()));
    for (index_t f = 0; f < c_.facet_count(); ++f)
      writer.write_facet(image_[static_cast<size_t>(f)], c_.tiling.facet0(f), c_.tiling.facet1(f),
                         p.yB);
    writer.finish();
    storage::publish(claim);
    return report::ImageFile{.path = path,
                             .format = writer.fits() ? "fits" : "hdf5",
                             .used_size = p.used_size,
                             .bytes = writer.bytes(),
                             .write_s = writer.write_s(),
                             .wall_s = seconds_since(tw)};
  }

 private:
  std::vector<ImagingThread> make_threads() {
    std::vector<ImagingThread> state;
    for (int t = 0; t < c_.shape.threads; ++t) {
      state.emplace_back(c_.rec, pixels_);
      if (!readers_.empty())
        state.back().gatherer = std::make_unique<chunks::ChunkGatherer>(readers_, read_lock_);
    }
    return state;
  }

  ImagingThread& this_thread() { return state_[static_cast<size_t>(omp_get_thread_num())]; }

  // Each subgrid of the column: its visibilities onto its tower, the
  // tower collapsed into the subgrid's image-space sum.
  void grid_column(index_t stack, index_t off0, const std::vector<index_t>& subgrids) {
    while (sums_.size() < subgrids.size()) sums_.push_back(c_.rec.make_subgrid_sum());
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (size_t k = 0; k < subgrids.size(); ++k)
      c_.failures.capture([&] { grid_subgrid(stack, off0, subgrids[k], sums_[k]); });
    c_.failures.rethrow();
  }

  void grid_subgrid(index_t stack, index_t off0, index_t s, Array2D& sum) {
    auto& st = this_thread();
    const index_t off1 = c_.tiling.subgrid_offset1(s);
    const binning::VisitRuns visit(c_.binner, stack, s);
    double w_lo = 0, w_hi = 0;
    visit.w_range(w_lo, w_hi);
    st.planes += c_.degridder.begin_tower(w_lo / c_.dw(), w_hi / c_.dw(), st.tower);
    // One thread per tower: tasks of a visit add to the same planes.
    for (const auto& [first, last] :
         visit.tasks(c_.shape.bls_per_task, degrid::kTaskVisibilities)) {
      visit.runs(first, last, st.runs);
      grid_runs(st, off0, off1);
    }
    const auto& p = c_.job.p;
    std::fill(sum.data(), sum.data() + p.xM * p.xM, cplx{});
    c_.degridder.collapse_tower(st.tower, sum.view());
  }

  // A task's runs (in st.runs): their visibilities read, or made by
  // direct transform, onto the thread's tower.
  void grid_runs(ImagingThread& st, index_t off0, index_t off1) {
    const auto* begin = st.runs.data();
    const auto* end = begin + st.runs.size();
    index_t n = 0;
    for (const auto* run = begin; run != end; ++run) n += run->count();
    const auto ti = Clock::now();
    if (st.gatherer) {
      st.vis.resize(static_cast<size_t>(n));
      degrid::gather_runs(*st.gatherer, c_.job.obs->time.steps, begin, end, st.vis.data());
    } else {
      degrid::predict_direct(c_.degridder, c_.job.sources, begin, end, st.vis);
    }
    st.input_s += seconds_since(ti);
    c_.degridder.grid(begin, end, off0, off1, st.vis.data(), st.tower);
    st.visibilities += n;
    // Untimed: the same visibilities into the sampled pixels.
    const auto tc = Clock::now();
    st.dirty.add(c_.degridder, begin, end, st.vis.data());
    st.check_s += seconds_since(tc);
  }

  // The GPU path of one column: its visits cut into the CPU path's tasks,
  // their visibilities read (or made by direct transform) and added to the
  // sampled pixels on the CPU threads a batch at a time, then gridded and
  // collapsed into the visits' sums on the GPU.
  void grid_column_on_gpu(index_t stack, index_t off0, const std::vector<index_t>& subgrids) {
    c_.take_group(stack, off0, subgrids.data(), subgrids.size(), [](index_t, MView2D) {});
    for (auto& batch : c_.gpu_group.batches(device::kMaxBatchVisibilities)) {
      c_.gpu_group.out.resize(static_cast<size_t>(batch.visibilities));
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
      for (size_t t = 0; t < batch.visits.size(); ++t)
        c_.failures.capture(
            [&] { take_task(batch.visits[t], c_.gpu_group.out.data() + batch.first[t]); });
      c_.failures.rethrow();
      c_.gpu->grid(batch.visits, c_.gpu_group.out.data(), batch.sums);
    }
  }

  // A GPU task's visibilities into `values`, and into the sampled pixels.
  void take_task(const device::GpuVisit& task, cplx* values) {
    auto& st = this_thread();
    const auto ti = Clock::now();
    if (st.gatherer) {
      degrid::gather_runs(*st.gatherer, c_.job.obs->time.steps, task.begin, task.end, values);
    } else {
      degrid::predict_direct(c_.degridder, c_.job.sources, task.begin, task.end, st.vis);
      std::copy(st.vis.begin(), st.vis.end(), values);
    }
    st.input_s += seconds_since(ti);
    st.add_task(c_.job, task);
    const auto tc = Clock::now();  // untimed, as on the CPU
    st.dirty.add(c_.degridder, task.begin, task.end, values);
    st.check_s += seconds_since(tc);
  }

  // Each facet takes the column's subgrids, as `iotest recombine`'s image
  // direction does.
  void add_to_facets(index_t off0, const std::vector<index_t>& subgrids) {
    const auto& t = c_.tiling;
    const auto sum = [&](size_t k) {
      return std::as_const(c_.gpu ? c_.gpu_group.visits[k].sum : sums_[k]).view();
    };
    const auto off1 = [&](size_t k) { return t.subgrid_offset1(subgrids[k]); };
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (index_t f = 0; f < c_.facet_count(); ++f) {
      auto& st = this_thread();
      detail::add_column_to_facet(c_.rec, t.facets, f, off0, subgrids.size(), sum, off1, st.column,
                                  st.contribution, column_sums_[static_cast<size_t>(f)].view(),
                                  facet_sums_[static_cast<size_t>(f)].view());
    }
  }

  // The stack's facets, corrected for the kernels and the stack's w, into
  // the image; the sums start again from zero for the next stack.
  void add_to_image(index_t stack) {
#pragma omp parallel for schedule(dynamic) num_threads(c_.shape.threads)
    for (index_t f = 0; f < c_.facet_count(); ++f) {
      auto& st = this_thread();
      auto& facet_sum = facet_sums_[static_cast<size_t>(f)];
      c_.rec.finish_facet(facet_sum.view(), st.facet.view());
      std::fill(facet_sum.data(), facet_sum.data() + facet_sum.size(), cplx{});
      c_.degridder.correct_facet_adjoint(c_.tiling.facet0(f), c_.tiling.facet1(f), stack,
                                         st.facet.view());
      auto& out = image_[static_cast<size_t>(f)];
      for (index_t i = 0; i < out.size(); ++i) out.data()[i] += st.facet.data()[i];
    }
  }

  detail::Chain& c_;
  const std::vector<sky::PointSource>& pixels_;
  std::vector<const storage::Reader*> readers_;
  std::mutex read_lock_;  // a Reader takes one thread at a time
  std::vector<ImagingThread> state_;
  std::vector<Array2D> image_;  // the dirty image's facets
  std::vector<Array2D> facet_sums_, column_sums_;
  std::vector<Array2D> sums_;  // the subgrid sums of one column
};

report::Accuracy pixel_accuracy(const RelativeError& error, index_t pixels) {
  report::Accuracy accuracy;
  accuracy.facet_rmse = error.value();
  accuracy.pixel_samples = pixels;
  return accuracy;
}

report::Reading reading_report(const std::vector<std::string>& inputs, const storage::Reader& first,
                               const ImagingFigures& f) {
  report::Reading reading;
  reading.files = inputs;
  reading.backend = std::string(first.backend());
  reading.ranks = 1;
  reading.direct = first.direct();
  reading.chunks = f.tally.chunks;
  reading.bytes = f.tally.bytes;
  reading.read_s = f.tally.seconds;
  reading.wall_s = f.input_s;
  reading.bytes_per_s = f.input_s > 0 ? static_cast<double>(f.tally.bytes) / f.input_s : 0;
  return reading;
}

}  // namespace

report::Report grid(const GridRunOptions& o) {
  const auto t_wall = Clock::now();
  const auto gpus = check_grid_options(o);
  // Claimed before the work, held until the image is written.
  auto image_claim = claim_image(o.image);
  const auto input = open_input(o);
  const auto& [files, jo, job] = input;
  report::Report r;
  r.mode = "grid";
  r.rec = job.p;
  const auto& p = r.rec;
  const detail::ChainShape shape{threads_or_all("--threads", o.threads), o.bls_per_task, o.device};

  report::Timing timing;
  auto t0 = Clock::now();
  detail::Visits visits;
  r.memory = detail::count_and_check(visits, job, shape, false, image_held_bytes(o, p), gpus);
  const swiftly::Recombination rec(p);
  const degrid::Degridder degridder(rec, *job.geometry, *job.obs, job.kernel, job.w);
  const auto distribution = binning::summarise(visits.counts);
  timing.planning_s = seconds_since(t0);

  detail::Chain chain(job, shape, visits, rec, degridder);
  // The dirty image's pixels to check, where sources may lie (the used
  // field, where the recombination is accurate).
  const auto pixels = sky::random_sources(o.pixel_samples, p.used_size, o.seed ^ 0x1ace);
  Imaging imaging(chain, files, pixels, gpus);
  // Timed: the whole imaging chain, one w-stacking plane after another.
  t0 = Clock::now();
  const auto walked = imaging.walk();
  double grid_s = seconds_since(t0);
  auto figures = imaging.gather();
  // Checks ran inside the parallel loop: take the slowest thread's share
  // off, and that of predicting visibilities in memory (reading files is
  // part of imaging).
  grid_s -= figures.check_s;
  if (files.empty()) {
    grid_s -= figures.input_s;
    timing.input_s = figures.input_s;
  }
  detail::require_every_visibility("gridded", figures.visibilities, *visits.binner);
  imaging.normalise(figures);
  const auto error = imaging.compare(figures.dirty);

  detail::describe_walk(r, chain,
                        {static_cast<index_t>(job.sources.size()), jo.seed, "image", std::nullopt},
                        walked, distribution, gpus);
  job::add_imaging_rule(r, job, *visits.binner);
  r.accuracy = pixel_accuracy(error, static_cast<index_t>(pixels.size()));
  if (!files.empty()) r.reading = reading_report(o.inputs, *files[0], figures);
  timing.image_s = grid_s;
  timing.check_s = figures.check_s;
  r.rates = detail::walk_rates(figures, grid_s, shape.threads);
  if (image_claim) r.image = imaging.write(*image_claim, o.image, jo.rec_set);
  r.memory.peak_rss_bytes = peak_rss_bytes();
  timing.wall_s = seconds_since(t_wall);
  r.timing = timing;
  return r;
}

}  // namespace iotest::commands
